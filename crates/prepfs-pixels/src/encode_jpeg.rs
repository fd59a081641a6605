//! JPEG output of an exact size known before encoding: baseline, 4:2:0, padded with comments.
//!
//! A JPEG's size depends on its content, but `stat` must answer before anything is encoded.
//! So the file's size is a budget fixed by the image's size and the quality asked for
//! ([`budget`]): an allowance for the headers plus `(10 + quality) / 160` bytes per pixel of the
//! image rounded up to whole 16x16 blocks (5 bits a pixel at quality 90; a real photograph at
//! 224x224 and quality 90 takes 1.2 to 4.3). [`write`] encodes at the quality asked; if that
//! does not fit, at qualities 10 lower, down to 1, until one does (uniform noise, the worst
//! case, fits at quality 10 into quality 10's budget). The encoding is then padded to exactly
//! the budget with COM (comment) segments after the JFIF header, which every decoder skips.

use std::cell::RefCell;

use crate::rgb::Size2;

/// Bytes allowed for the markers, tables and headers (a 4:2:0 baseline JPEG from TurboJPEG
/// has about 620).
const HEADER_ALLOWANCE: u64 = 1024;
/// A COM segment's marker and length field; its length counts itself (2) and its text.
const COM_OVERHEAD: usize = 4;
const COM_TEXT_MAX: usize = 65_535 - 2;

/// Why no JPEG could be made. `EIO` to a reader.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EncodeError {
    /// TurboJPEG refused the image at every quality down to 1, or no encoding fitted the budget;
    /// its last words.
    #[error("JPEG output: no encoding fits {budget} bytes at quality {quality} or below ({why})")]
    NoFit { budget: u64, quality: u8, why: String },
}

/// The exact size of the JPEG output of an image of `size` pixels at `quality` (1 to 100).
pub fn budget(size: Size2, quality: u8) -> u64 {
    let blocks = u64::from(size.width.div_ceil(16)) * u64::from(size.height.div_ceil(16));
    HEADER_ALLOWANCE + (blocks * 256 * (10 + u64::from(quality))).div_ceil(160)
}

thread_local! {
    /// A TurboJPEG compressor per encoding thread, made on first use.
    static COMPRESSOR: RefCell<Option<turbojpeg::Compressor>> = const { RefCell::new(None) };
}

/// Encodes packed RGB `pixels` (`size`) into `out`, exactly [`budget`]`(size, quality)` bytes.
/// Returns the quality used (`quality`, or lower where that did not fit).
pub fn write(pixels: &[u8], size: Size2, quality: u8, out: &mut [u8]) -> Result<u8, EncodeError> {
    let total = out.len();
    let no_fit = |why: String| EncodeError::NoFit { budget: total as u64, quality, why };
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(new_compressor().map_err(|e| no_fit(e.to_string()))?);
        }
        let Some(compressor) = slot.as_mut() else {
            return Err(no_fit("no compressor".into()));
        };
        let image = turbojpeg::Image {
            pixels,
            width: size.width as usize,
            pitch: size.width as usize * 3,
            height: size.height as usize,
            format: turbojpeg::PixelFormat::RGB,
        };
        let mut why = String::from("it did not fit");
        for q in qualities(quality) {
            if let Err(e) = compressor.set_quality(i32::from(q)) {
                why = e.to_string();
                continue;
            }
            // Into `out` itself: TurboJPEG fails, rather than grow the buffer, when it is full.
            match compressor.compress_to_slice(image, out) {
                Ok(n) if pad(out, n) => return Ok(q),
                Ok(_) => {}
                Err(e) => why = e.to_string(),
            }
        }
        Err(no_fit(why))
    })
}

fn new_compressor() -> turbojpeg::Result<turbojpeg::Compressor> {
    let mut c = turbojpeg::Compressor::new()?;
    c.set_subsamp(turbojpeg::Subsamp::Sub2x2)?;
    Ok(c)
}

/// `quality`, then 10 lower each time, down to 1.
fn qualities(quality: u8) -> impl Iterator<Item = u8> {
    let mut next = Some(quality.clamp(1, 100));
    std::iter::from_fn(move || {
        let q = next?;
        next = (q > 1).then(|| q.saturating_sub(10).max(1));
        Some(q)
    })
}

/// Pads the `n`-byte JPEG at the start of `out` to all of `out` with COM segments placed after
/// SOI and the JFIF APP0 segment. False when it cannot: a gap of 1 to 3 bytes is too small for
/// a segment.
fn pad(out: &mut [u8], n: usize) -> bool {
    let gap = out.len() - n;
    if gap == 0 {
        return true;
    }
    if gap < COM_OVERHEAD || n < 4 {
        return false;
    }
    // After SOI, and after the JFIF APP0 segment where there is one (readers expect it first).
    let mut at = 2;
    if out[2..4] == [0xFF, 0xE0] && n >= 6 {
        at = 4 + usize::from(u16::from_be_bytes([out[4], out[5]]));
    }
    if at > n {
        return false;
    }
    out.copy_within(at..n, at + gap);
    let mut left = gap;
    while left > 0 {
        // A whole segment each time; the last takes what remains (never under COM_OVERHEAD:
        // a remainder too small is split off the one before).
        let mut text = (left - COM_OVERHEAD).min(COM_TEXT_MAX);
        let rest = left - COM_OVERHEAD - text;
        if rest > 0 && rest < COM_OVERHEAD {
            text -= COM_OVERHEAD - rest;
        }
        out[at] = 0xFF;
        out[at + 1] = 0xFE;
        out[at + 2..at + 4].copy_from_slice(&((text + 2) as u16).to_be_bytes());
        out[at + 4..at + 4 + text].fill(b' ');
        at += COM_OVERHEAD + text;
        left -= COM_OVERHEAD + text;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(jpeg: &[u8]) -> (u32, u32, Vec<u8>) {
        let img = image::load_from_memory_with_format(jpeg, image::ImageFormat::Jpeg).expect("decodes").into_rgb8();
        (img.width(), img.height(), img.into_raw())
    }

    fn noise(size: Size2, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..size.area() * 3)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect()
    }

    fn psnr(a: &[u8], b: &[u8]) -> f64 {
        let mse = a.iter().zip(b).map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2)).sum::<f64>() / a.len() as f64;
        10.0 * (255.0f64 * 255.0 / mse.max(1e-9)).log10()
    }

    #[test]
    fn a_photo_is_encoded_at_the_quality_asked_and_padded_to_its_budget() {
        let jpeg = crate::synthetic::photo_jpeg(224, 224, turbojpeg::Subsamp::Sub2x2);
        let (w, h, px) = decode(&jpeg);
        let size = Size2::new(w, h);
        let mut out = vec![0u8; budget(size, 90) as usize];
        assert_eq!(write(&px, size, 90, &mut out).expect("fits"), 90);
        assert_eq!(&out[..4], &[0xFF, 0xD8, 0xFF, 0xE0], "SOI then JFIF first");
        let (dw, dh, back) = decode(&out);
        assert_eq!((dw, dh), (w, h));
        assert!(psnr(&px, &back) > 30.0, "psnr {}", psnr(&px, &back));
    }

    #[test]
    fn noise_steps_the_quality_down_until_it_fits_at_every_quality_and_size() {
        for (w, h) in [(224, 224), (1, 1), (17, 33), (500, 375)] {
            let size = Size2::new(w, h);
            let px = noise(size, u64::from(w));
            for quality in [100, 95, 90, 75, 50, 10, 1] {
                let mut out = vec![0u8; budget(size, quality) as usize];
                let used = write(&px, size, quality, &mut out).unwrap_or_else(|e| panic!("{w}x{h} q{quality}: {e}"));
                assert!(used <= quality);
                assert_eq!(decode(&out).0, w, "{w}x{h} q{quality} decodes");
            }
        }
    }

    #[test]
    fn padding_fills_every_gap_of_four_bytes_or_more_and_refuses_smaller() {
        let size = Size2::new(64, 48);
        let px = noise(size, 3);
        let plain = turbojpeg::compress(
            turbojpeg::Image { pixels: &px[..], width: 64, pitch: 192, height: 48, format: turbojpeg::PixelFormat::RGB },
            90,
            turbojpeg::Subsamp::Sub2x2,
        )
        .expect("encodes")
        .to_vec();
        let n = plain.len();
        for gap in [0, 4, 5, 7, 8, 65_537, 65_539, 65_540, 131_080] {
            let mut out = plain.clone();
            out.resize(n + gap, 0);
            assert!(pad(&mut out, n), "gap {gap}");
            assert_eq!(decode(&out).2, decode(&plain).2, "gap {gap}: same pixels");
        }
        for gap in 1..4 {
            let mut out = plain.clone();
            out.resize(n + gap, 0);
            assert!(!pad(&mut out, n), "gap {gap}");
        }
    }

    #[test]
    fn qualities_step_down_by_ten_to_one() {
        assert_eq!(qualities(35).collect::<Vec<_>>(), [35, 25, 15, 5, 1]);
        assert_eq!(qualities(1).collect::<Vec<_>>(), [1]);
    }
}
