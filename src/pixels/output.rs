//! The bytes of a served sample: binary PPM or numpy `.npy`, with sizes known before encoding.
//!
//! [`encoded_len`] gives a file's exact size from its pixel dimensions alone, so `stat` answers
//! without decoding anything; [`encode`] writes exactly that many bytes. [`served`] builds the
//! shared buffer a reader is served from in one allocation: the header, then the pixels written
//! by the caller straight into place (8-bit formats), with no copy between. [`served_to`] makes
//! them in memory or, for passthrough, in an output file ([`Dest`]).

use std::cell::RefCell;
use std::sync::Arc;

use crate::config::{Dtype, Format, OutputConfig};
use crate::served::{OutputFiles, ServedBytes};
use crate::shared::{Rgb, Size2};

/// Where served bytes are made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dest<'a> {
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
    }
}

/// The exact size of the file holding an image of `size` pixels.
pub(crate) fn encoded_len(output: &OutputConfig, size: Size2) -> u64 {
    let bytes_per_value = match (output.format, output.dtype) {
        (Format::Npy, Dtype::Float32) => 4,
        _ => 1,
    };
    header(output, size).len() as u64 + size.area() * 3 * bytes_per_value
}

/// Serialises an RGB image in the configured format.
pub fn encode(output: &OutputConfig, image: &Rgb) -> Vec<u8> {
    let size = Size2::new(image.width, image.height);
    let mut bytes = header(output, size);
    let head = bytes.len();
    bytes.resize(head + (encoded_len(output, size) as usize - head), 0);
    write_pixels(output, &image.pixels, &mut bytes[head..]);
    bytes
}

/// The served bytes of an image of `size` pixels in one shared buffer, allocated once: the
/// header, then the packed RGB rows that `fill` writes (`size` * 3 bytes, handed over zeroed).
/// For 8-bit formats `fill` writes straight into the served buffer; for float32 npy into a
/// per-thread scratch buffer that is then normalised into place.
pub(crate) fn served<E>(
    output: &OutputConfig,
    size: Size2,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<Arc<[u8]>, E> {
    let head = header(output, size);
    let total = encoded_len(output, size) as usize;
    let pixels = size.area() as usize * 3;
    let mut shared: Arc<[u8]> = crate::alloc::zeroed_shared(total);
    let Some(bytes) = Arc::get_mut(&mut shared) else {
        // A fresh Arc has no other owner; kept total rather than assumed.
        let mut bytes = vec![0u8; total];
        write_served(output, &head, pixels, &mut bytes, fill)?;
        return Ok(bytes.into());
    };
    write_served(output, &head, pixels, bytes, fill)?;
    Ok(shared)
}

/// [`served`]'s bytes made where `dest` says.
pub(crate) fn served_to<E>(
    output: &OutputConfig,
    size: Size2,
    dest: Dest<'_>,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<ServedBytes, E> {
    let files = match dest {
        Dest::Memory => return served(output, size, fill).map(ServedBytes::Memory),
        Dest::File(files) => files,
    };
    SEAL_SCRATCH.with(|cell| {
        let mut bytes = cell.borrow_mut();
        bytes.clear();
        bytes.resize(encoded_len(output, size) as usize, 0);
        write_served(output, &header(output, size), size.area() as usize * 3, &mut bytes, fill)?;
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
    /// Float32 output's pixels before normalising: one per thread, reused.
    static FLOAT_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Served bytes on their way into a memory file: one per thread, reused.
    static SEAL_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn write_served<E>(
    output: &OutputConfig,
    head: &[u8],
    pixels: usize,
    bytes: &mut [u8],
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let (h, body) = bytes.split_at_mut(head.len());
    h.copy_from_slice(head);
    if body.len() == pixels {
        return fill(body);
    }
    FLOAT_SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        scratch.clear();
        scratch.resize(pixels, 0);
        fill(&mut scratch)?;
        write_pixels(output, &scratch, body);
        // A huge image's scratch is not kept for the thread's lifetime.
        if scratch.capacity() > KEEP_SCRATCH_BYTES {
            *scratch = Vec::new();
        }
        Ok(())
    })
}

/// Per-thread scratch buffers larger than this are freed after use rather than kept.
pub(crate) const KEEP_SCRATCH_BYTES: usize = 4 << 20;

/// Writes packed RGB `pixels` as the format's body into `body` (exactly its length).
fn write_pixels(output: &OutputConfig, pixels: &[u8], body: &mut [u8]) {
    match (output.format, output.dtype) {
        (Format::Npy, Dtype::Float32) => {
            // ToTensor then Normalize: (x / 255 - mean) / std, channels first.
            let plane = pixels.len() / 3;
            if plane == 0 {
                return;
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
        let bytes = encode(&out, &image());
        assert!(bytes.starts_with(b"P6\n3 2\n255\n"));
        assert_eq!(bytes.len() as u64, encoded_len(&out, Size2::new(3, 2)));
        assert_eq!(&bytes[bytes.len() - 18..], image().pixels.as_slice());
    }

    #[test]
    fn npy_headers_are_aligned_and_sized() {
        for dtype in [Dtype::Uint8, Dtype::Float32] {
            let out = OutputConfig { format: Format::Npy, dtype, ..OutputConfig::default() };
            let bytes = encode(&out, &image());
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
        };
        let bytes = encode(&out, &image());
        let data = &bytes[bytes.len() - 3 * 6 * 4..];
        let value = |i: usize| f32::from_le_bytes(data[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        // Red plane first: pixel 0 red = 0 -> (0 - 0.5) / 0.5 = -1.
        assert!((value(0) + 1.0).abs() < 1e-6);
        // Green plane, pixel 0: 10 / 255.
        assert!((value(6) - 10.0 / 255.0).abs() < 1e-6);
    }

    #[test]
    fn served_bytes_are_encodes_in_every_format() {
        let files = OutputFiles::new();
        for (format, dtype) in [(Format::Ppm, Dtype::Uint8), (Format::Npy, Dtype::Uint8), (Format::Npy, Dtype::Float32)] {
            let out = OutputConfig { format, dtype, mean: [0.4, 0.5, 0.6], std: [0.2, 0.3, 0.25] };
            let img = image();
            let served = served(&out, Size2::new(3, 2), |px| {
                assert!(px.iter().all(|&v| v == 0), "handed over zeroed");
                px.copy_from_slice(&img.pixels);
                Ok::<(), ()>(())
            })
            .expect("served");
            assert_eq!(&served[..], encode(&out, &img).as_slice(), "{format:?} {dtype:?}");
            let sealed = served_to(&out, Size2::new(3, 2), Dest::File(&files), |px| {
                px.copy_from_slice(&img.pixels);
                Ok::<(), ()>(())
            })
            .expect("sealed");
            assert!(matches!(sealed, ServedBytes::File(_)), "made in an output file");
            assert_eq!(sealed.to_vec().expect("read back"), encode(&out, &img), "{format:?} {dtype:?} sealed");
        }
        let refused = served(&OutputConfig::default(), Size2::new(3, 2), |_| Err("no"));
        assert_eq!(refused, Err("no"));
    }
}
