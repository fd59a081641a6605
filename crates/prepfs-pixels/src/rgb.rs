//! An image's size and its decoded pixels, as every layer above passes them.

/// A width and a height in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Size2 {
    pub width: u32,
    pub height: u32,
}

impl Size2 {
    pub fn new(width: u32, height: u32) -> Self {
        Size2 { width, height }
    }
    /// Pixels in the image.
    pub fn area(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// A decoded RGB image, 3 bytes a pixel, rows packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

/// Borrowed RGB pixels: packed rows, 3 bytes a pixel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RgbRef<'a> {
    pub width: u32,
    pub height: u32,
    pub pixels: &'a [u8],
}

impl<'a> RgbRef<'a> {
    pub fn of(image: &'a Rgb) -> RgbRef<'a> {
        RgbRef { width: image.width, height: image.height, pixels: &image.pixels }
    }
}
