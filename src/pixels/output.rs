//! The bytes of a served sample: binary PPM or numpy `.npy`, with sizes known before encoding.
//!
//! [`encoded_len`] gives a file's exact size from its pixel dimensions alone, so `stat` answers
//! without decoding anything; [`encode`] writes exactly that many bytes.

use crate::shared::Size2;
use crate::config::{Dtype, Format, OutputConfig};
use crate::shared::Rgb;

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
    match (output.format, output.dtype) {
        (Format::Npy, Dtype::Float32) => {
            // ToTensor then Normalize: (x / 255 - mean) / std, channels first.
            let plane = size.area() as usize;
            bytes.reserve(plane * 12);
            for c in 0..3 {
                let lut: Vec<f32> = (0..256)
                    .map(|v| (v as f32 / 255.0 - output.mean[c]) / output.std[c])
                    .collect();
                for px in image.pixels.chunks_exact(3) {
                    bytes.extend_from_slice(&lut[usize::from(px[c])].to_le_bytes());
                }
            }
        }
        _ => bytes.extend_from_slice(&image.pixels),
    }
    bytes
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
}
