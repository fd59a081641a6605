//! The bytes of a served sample: binary PPM, numpy `.npy`, PNG or JPEG, with sizes known
//! before encoding.
//!
//! [`encoded_len`] gives a file's exact size from its pixel dimensions alone, so `stat` answers
//! without decoding anything; [`encode`] writes exactly that many bytes. [`served`] builds the
//! shared buffer a reader is served from in one allocation: the header, then the pixels written
//! by the caller straight into place (8-bit formats), with no copy between. [`served_to`] makes
//! them in memory or, for passthrough, in an output file ([`Dest`]). PNG and JPEG have no
//! separate header: their whole file is encoded from the pixels (`encode_png`, `encode_jpeg`).

use std::cell::RefCell;
use std::sync::Arc;

use crate::output_config::{Dtype, Format, OutputConfig};
use crate::encode_jpeg::{self, EncodeError};
use crate::encode_png;
use crate::erasing::Erase;
use crate::served::{OutputFiles, ServedBytes};
use crate::rgb::Rgb;
use crate::rgb::Size2;

/// Where served bytes are made.
#[derive(Debug, Clone, Copy)]
pub enum Dest<'a> {
    /// A shared buffer in memory.
    Memory,
    /// A file of the mount's output files (kernel passthrough), written from a per-thread
    /// buffer; in memory when no file can be made (said in the log).
    File(&'a Arc<OutputFiles>),
}

/// Numpy's format alignment: magic, version and header length padded to 64 bytes.
const NPY_ALIGN: usize = 64;

fn ppm_header(size: Size2) -> String {
    format!("P6\n{} {}\n255\n", size.width, size.height)
}

fn npy_header(output: &OutputConfig, size: Size2) -> Vec<u8> {
    let (descr, shape) = match output.dtype {
        Dtype::Uint8 => ("|u1", format!("({}, {}, 3)", size.height, size.width)),
        Dtype::Float32 => ("<f4", format!("(3, {}, {})", size.height, size.width)),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // magic (6) + version (2) + header length (2) + dict + padding + '\n'
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(NPY_ALIGN) - unpadded));
    dict.push('\n');
    let mut header = Vec::with_capacity(10 + dict.len());
    header.extend_from_slice(b"\x93NUMPY\x01\x00");
    header.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    header.extend_from_slice(dict.as_bytes());
    header
}

fn header(output: &OutputConfig, size: Size2) -> Vec<u8> {
    match output.format {
        Format::Ppm => ppm_header(size).into_bytes(),
        Format::Npy => npy_header(output, size),
        Format::Png | Format::Jpeg => Vec::new(),
    }
}

/// The exact size of the file holding an image of `size` pixels.
pub fn encoded_len(output: &OutputConfig, size: Size2) -> u64 {
    let bytes_per_value = match (output.format, output.dtype) {
        (Format::Png, _) => return encode_png::len(size),
        (Format::Jpeg, _) => return encode_jpeg::budget(size, output.jpeg_quality()),
        (Format::Npy, Dtype::Float32) => 4,
        _ => 1,
    };
    header(output, size).len() as u64 + size.area() * 3 * bytes_per_value
}

/// Serialises an RGB image in the configured format.
pub fn encode(output: &OutputConfig, image: &Rgb) -> Result<Vec<u8>, EncodeError> {
    let size = Size2::new(image.width, image.height);
    let mut bytes = header(output, size);
    let head = bytes.len();
    bytes.resize(head + (encoded_len(output, size) as usize - head), 0);
    write_pixels(output, size, &image.pixels, &mut bytes[head..])?;
    Ok(bytes)
}

/// The served bytes of an image of `size` pixels in one shared buffer, allocated once: the
/// header, then the packed RGB rows that `fill` writes (`size` * 3 bytes, handed over zeroed).
/// For PPM and uint8 npy `fill` writes straight into the served buffer; for float32 npy, PNG and
/// JPEG into a per-thread scratch buffer that is then normalised or encoded into place.
pub fn served<E: From<EncodeError>>(
    output: &OutputConfig,
    size: Size2,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Arc<[u8]>, E> {
    let head = header(output, size);
    let total = encoded_len(output, size) as usize;
    let mut shared: Arc<[u8]> = prepfs_base::alloc::zeroed_shared(total);
    let Some(bytes) = Arc::get_mut(&mut shared) else {
        // A fresh Arc has no other owner; kept total rather than assumed.
        let mut bytes = vec![0u8; total];
        write_served(output, size, &head, &mut bytes, None, fill)?;
        return Ok(bytes.into());
    };
    write_served(output, size, &head, bytes, None, fill)?;
    Ok(shared)
}

/// [`served`]'s bytes made where `dest` says.
pub fn served_to<E: From<EncodeError>>(
    output: &OutputConfig,
    size: Size2,
    dest: Dest<'_>,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<ServedBytes, E> {
    served_erased(output, size, dest, None, fill)
}

/// [`served_to`] with `random_erasing`'s rectangle, if drawn, erased last: on the pixels for
/// 8-bit formats, on the normalised values for float32 npy (where torchvision erases).
pub(crate) fn served_erased<E: From<EncodeError>>(
    output: &OutputConfig,
    size: Size2,
    dest: Dest<'_>,
    erase: Option<&Erase>,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<ServedBytes, E> {
    let files = match dest {
        Dest::Memory if erase.is_none() => return served(output, size, fill).map(ServedBytes::Memory),
        Dest::Memory => {
            let mut bytes = vec![0u8; encoded_len(output, size) as usize];
            write_served(output, size, &header(output, size), &mut bytes, erase, fill)?;
            return Ok(ServedBytes::Memory(bytes.into()));
        }
        Dest::File(files) => files,
    };
    SEAL_SCRATCH.with(|cell| {
        let mut bytes = cell.borrow_mut();
        bytes.clear();
        bytes.resize(encoded_len(output, size) as usize, 0);
        write_served(output, size, &header(output, size), &mut bytes, erase, fill)?;
        let made = match files.try_make(&bytes) {
            Some(file) => ServedBytes::File(Arc::new(file)),
            None => ServedBytes::Memory(Arc::from(&bytes[..])),
        };
        if bytes.capacity() > KEEP_SCRATCH_BYTES {
            *bytes = Vec::new();
        }
        Ok(made)
    })
}

thread_local! {
    /// Float32, PNG and JPEG output's pixels before normalising or encoding: one per thread,
    /// reused.
    static PIXEL_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Served bytes on their way into a memory file: one per thread, reused.
    static SEAL_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn write_served<E: From<EncodeError>>(
    output: &OutputConfig,
    size: Size2,
    head: &[u8],
    bytes: &mut [u8],
    erase: Option<&Erase>,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let pixels = size.area() as usize * 3;
    let (h, body) = bytes.split_at_mut(head.len());
    h.copy_from_slice(head);
    let float = (output.format, output.dtype) == (Format::Npy, Dtype::Float32);
    if pixels_in_place(output) {
        fill(body)?;
        if let Some(e) = erase {
            e.apply_u8(body, size.width);
        }
        return Ok(());
    }
    PIXEL_SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        scratch.clear();
        scratch.resize(pixels, 0);
        fill(&mut scratch)?;
        match erase {
            Some(e) if !float => e.apply_u8(&mut scratch, size.width),
            _ => {}
        }
        write_pixels(output, size, &scratch, body)?;
        if let (Some(e), true) = (erase, float) {
            e.apply_f32(body, size);
        }
        // A huge image's scratch is not kept for the thread's lifetime.
        if scratch.capacity() > KEEP_SCRATCH_BYTES {
            *scratch = Vec::new();
        }
        Ok(())
    })
}

/// Per-thread scratch buffers larger than this are freed after use rather than kept.
pub(crate) const KEEP_SCRATCH_BYTES: usize = 4 << 20;

/// The bytes one output of `size` holds while it is made: its served bytes, and the packed
/// pixels they are encoded from where those are not written in place (PNG, JPEG, float32 npy).
/// What the bound on pixel work in flight charges for it (`pixels::budget`).
pub fn making_len(output: &OutputConfig, size: Size2) -> u64 {
    let scratch = if pixels_in_place(output) { 0 } else { size.area() * 3 };
    encoded_len(output, size).saturating_add(scratch)
}

/// Whether the format's body is the packed RGB pixels themselves.
fn pixels_in_place(output: &OutputConfig) -> bool {
    matches!((output.format, output.dtype), (Format::Ppm, _) | (Format::Npy, Dtype::Uint8))
}

/// Writes packed RGB `pixels` (`size`) as the format's body into `body` (exactly its length).
fn write_pixels(output: &OutputConfig, size: Size2, pixels: &[u8], body: &mut [u8]) -> Result<(), EncodeError> {
    match (output.format, output.dtype) {
        (Format::Png, _) => encode_png::write(pixels, size, body),
        (Format::Jpeg, _) => {
            encode_jpeg::write(pixels, size, output.jpeg_quality(), body)?;
        }
        (Format::Npy, Dtype::Float32) => {
            // ToTensor then Normalize: (x / 255 - mean) / std, channels first.
            let plane = pixels.len() / 3;
            if plane == 0 {
                return Ok(());
            }
            for (c, out) in body.chunks_exact_mut(plane * 4).enumerate().take(3) {
                let lut: Vec<[u8; 4]> = (0..256)
                    .map(|v| ((v as f32 / 255.0 - output.mean[c]) / output.std[c]).to_le_bytes())
                    .collect();
                for (px, value) in pixels.chunks_exact(3).zip(out.chunks_exact_mut(4)) {
                    value.copy_from_slice(&lut[usize::from(px[c])]);
                }
            }
        }
        _ => body.copy_from_slice(pixels),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Rgb {
        Rgb { width: 3, height: 2, pixels: (0..18).map(|v| v * 10).collect() }
    }

    #[test]
    fn ppm_is_p6_with_its_exact_length() {
        let out = OutputConfig::default();
        let bytes = encode(&out, &image()).expect("encodes");
        assert!(bytes.starts_with(b"P6\n3 2\n255\n"));
        assert_eq!(bytes.len() as u64, encoded_len(&out, Size2::new(3, 2)));
        assert_eq!(&bytes[bytes.len() - 18..], image().pixels.as_slice());
    }

    #[test]
    fn npy_headers_are_aligned_and_sized() {
        for dtype in [Dtype::Uint8, Dtype::Float32] {
            let out = OutputConfig { format: Format::Npy, dtype, ..OutputConfig::default() };
            let bytes = encode(&out, &image()).expect("encodes");
            assert_eq!(&bytes[..6], b"\x93NUMPY");
            let header_len = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
            assert_eq!((10 + header_len) % NPY_ALIGN, 0);
            assert_eq!(bytes[9 + header_len], b'\n');
            assert_eq!(bytes.len() as u64, encoded_len(&out, Size2::new(3, 2)));
        }
    }

    #[test]
    fn float_output_is_channels_first_and_normalized() {
        let out = OutputConfig {
            format: Format::Npy,
            dtype: Dtype::Float32,
            mean: [0.5, 0.0, 0.0],
            std: [0.5, 1.0, 1.0],
            quality: None,
        };
        let bytes = encode(&out, &image()).expect("encodes");
        let data = &bytes[bytes.len() - 3 * 6 * 4..];
        let value = |i: usize| f32::from_le_bytes(data[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        // Red plane first: pixel 0 red = 0 -> (0 - 0.5) / 0.5 = -1.
        assert!((value(0) + 1.0).abs() < 1e-6);
        // Green plane, pixel 0: 10 / 255.
        assert!((value(6) - 10.0 / 255.0).abs() < 1e-6);
    }

    #[test]
    fn served_bytes_are_encodes_in_every_format() {
        let every = [
            (Format::Ppm, Dtype::Uint8),
            (Format::Npy, Dtype::Uint8),
            (Format::Npy, Dtype::Float32),
            (Format::Png, Dtype::Uint8),
            (Format::Jpeg, Dtype::Uint8),
        ];
        let files = OutputFiles::new();
        for (format, dtype) in every {
            let out = OutputConfig { format, dtype, mean: [0.4, 0.5, 0.6], std: [0.2, 0.3, 0.25], quality: None };
            let img = image();
            let served = served(&out, Size2::new(3, 2), |px| {
                assert!(px.iter().all(|&v| v == 0), "handed over zeroed");
                px.copy_from_slice(&img.pixels);
                Ok::<(), Refused>(())
            })
            .expect("served");
            assert_eq!(&served[..], encode(&out, &img).expect("encodes").as_slice(), "{format:?} {dtype:?}");
            let sealed = served_to(&out, Size2::new(3, 2), Dest::File(&files), |px| {
                px.copy_from_slice(&img.pixels);
                Ok::<(), Refused>(())
            })
            .expect("sealed");
            assert!(matches!(sealed, ServedBytes::File(_)), "made in an output file");
            assert_eq!(sealed.to_vec().expect("read back"), encode(&out, &img).expect("encodes"), "{format:?} {dtype:?} sealed");
        }
        let refused = served(&OutputConfig::default(), Size2::new(3, 2), |_| Err(Refused::Fill));
        assert!(matches!(refused, Err(Refused::Fill)));
    }

    /// The error of a test's `fill`.
    #[derive(Debug)]
    enum Refused {
        Fill,
        #[allow(dead_code)] // only carried
        Encode(EncodeError),
    }

    impl From<EncodeError> for Refused {
        fn from(e: EncodeError) -> Self {
            Refused::Encode(e)
        }
    }

    #[test]
    fn png_and_jpeg_files_are_their_declared_length_and_decode_to_the_pixels() {
        let size = Size2::new(40, 30);
        let px: Vec<u8> = (0..size.area() as usize * 3).map(|i| ((i / 3) % 40 * 6 + i % 3 * 20) as u8).collect();
        let img = Rgb { width: 40, height: 30, pixels: px.clone() };
        for format in [Format::Png, Format::Jpeg] {
            let out = OutputConfig { format, ..OutputConfig::default() };
            let bytes = encode(&out, &img).expect("encodes");
            assert_eq!(bytes.len() as u64, encoded_len(&out, size), "{format:?}");
            let back = image::load_from_memory(&bytes).expect("decodes").into_rgb8().into_raw();
            let mse = back.iter().zip(&px).map(|(&a, &b)| f64::from(a.abs_diff(b)).powi(2)).sum::<f64>() / px.len() as f64;
            let psnr = 10.0 * (255.0f64.powi(2) / mse.max(1e-9)).log10();
            match format {
                Format::Png => assert_eq!(back, px, "png is lossless"),
                _ => assert!(psnr > 30.0, "jpeg close to the pixels: PSNR {psnr:.1} dB"),
            }
        }
    }
}
