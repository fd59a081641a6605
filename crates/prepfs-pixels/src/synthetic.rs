//! Images made for tests, benchmarks and fuzz seeds: photo-like, so the decoders and the
//! resamplers take their real paths (smooth gradients, texture, edges), from a few numbers.

/// A photo-like test image: smooth gradients plus texture and edges.
pub fn photo_jpeg(width: usize, height: usize, subsamp: turbojpeg::Subsamp) -> Vec<u8> {
    let mut pixels = vec![0u8; width * height * 3];
    for y in 0..height {
        for x in 0..width {
            let i = (y * width + x) * 3;
            let fx = x as f64 / width as f64;
            let fy = y as f64 / height as f64;
            let ripple = ((x as f64 * 0.21).sin() * (y as f64 * 0.13).cos() * 40.0) as i32;
            let disc = if (fx - 0.6).powi(2) + (fy - 0.4).powi(2) < 0.05 { 90 } else { 0 };
            pixels[i] = (fx * 200.0) as i32 as u8 + (disc as u8 / 2);
            pixels[i + 1] = ((fy * 180.0) as i32 + ripple).clamp(0, 255) as u8;
            pixels[i + 2] = (((1.0 - fx) * 150.0) as i32 + disc).clamp(0, 255) as u8;
        }
    }
    compress_rgb(&pixels, width, height, subsamp, false)
}

/// RGB `pixels` (rows packed) compressed at quality 90, as the tests' JPEGs.
pub(crate) fn compress_rgb(pixels: &[u8], width: usize, height: usize, subsamp: turbojpeg::Subsamp, progressive: bool) -> Vec<u8> {
    let image = turbojpeg::Image { pixels, width, pitch: width * 3, height, format: turbojpeg::PixelFormat::RGB };
    let mut c = turbojpeg::Compressor::new().expect("compressor");
    c.set_quality(90).expect("quality");
    c.set_subsamp(subsamp).expect("subsamp");
    c.set_progressive(progressive).expect("progressive");
    c.compress_to_owned(image).expect("compress").to_vec()
}
