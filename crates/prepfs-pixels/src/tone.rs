//! The auto-augment policies' tone ops on uint8 RGB, as torchvision v2 computes them:
//! posterize, solarize, invert, autocontrast, equalize (PIL's algorithm, which torchvision's
//! follows) and sharpness; these are PIL's `ImageOps` and `ImageEnhance.Sharpness` too, so
//! timm's ops use them as they are, with timm's `solarize_add`.

use crate::rgb::Size2;

/// `posterize(bits)`: keeps the top `bits` bits.
pub(crate) fn posterize(pixels: &mut [u8], bits: u32) {
    let mask = if bits == 0 { 0 } else { 0xFFu8 << (8 - bits.min(8)) };
    pixels.iter_mut().for_each(|v| *v &= mask);
}

/// `solarize(threshold)`: values at or above it inverted. torch compares a uint8 tensor with a
/// Python float in float32 (the scalar takes the default float dtype), so the threshold is
/// rounded to f32 first: 255 times the policies' `linspace` magnitude lands a hair off a whole
/// value (170.00000000000003 for 2/3 in f64) and rounds back onto it, which is then inverted.
pub(crate) fn solarize(pixels: &mut [u8], threshold: f64) {
    let threshold = threshold as f32;
    pixels.iter_mut().filter(|v| f32::from(**v) >= threshold).for_each(|v| *v = 255 - *v);
}

/// timm's `solarize_add(add, thresh=128)`: values below `threshold` raised by `add`, capped at
/// 255.
pub(crate) fn solarize_add(pixels: &mut [u8], add: u32, threshold: u32) {
    for v in pixels.iter_mut().filter(|v| u32::from(**v) < threshold) {
        *v = (u32::from(*v) + add).min(255) as u8;
    }
}

/// `invert`.
pub(crate) fn invert(pixels: &mut [u8]) {
    pixels.iter_mut().for_each(|v| *v = 255 - *v);
}

/// `autocontrast`: each channel stretched from its min..max to 0..255 (truncated).
pub(crate) fn autocontrast(pixels: &mut [u8]) {
    for c in 0..3 {
        let channel = || pixels.iter().skip(c).step_by(3);
        let (lo, hi) = (channel().copied().min().unwrap_or(0), channel().copied().max().unwrap_or(0));
        if lo == hi {
            continue;
        }
        let scale = 255.0 / f32::from(hi - lo);
        for v in pixels.iter_mut().skip(c).step_by(3) {
            *v = (f32::from(*v - lo) * scale).clamp(0.0, 255.0) as u8;
        }
    }
}

/// `equalize`: PIL's per-channel histogram equalisation.
pub(crate) fn equalize(pixels: &mut [u8]) {
    for c in 0..3 {
        let mut hist = [0u64; 256];
        pixels.iter().skip(c).step_by(3).for_each(|&v| hist[usize::from(v)] += 1);
        let Some(last) = hist.iter().rposition(|&n| n > 0) else { continue };
        let step = (hist.iter().sum::<u64>() - hist[last]) / 255;
        if step == 0 {
            continue;
        }
        let mut lut = [0u8; 256];
        let mut n = step / 2;
        for (i, out) in lut.iter_mut().enumerate() {
            *out = (n / step).min(255) as u8;
            n += hist[i];
        }
        pixels.iter_mut().skip(c).step_by(3).for_each(|v| *v = lut[usize::from(*v)]);
    }
}

/// `adjust_sharpness(factor)`: a blend with the 3x3 smoothed image (1s around a 5, over 13,
/// rounded), `toward` (1 - factor) of the way to it, the border kept; images 2 pixels or less
/// across are left as they are. The caller rounds 1 - factor to f32 as its library does.
pub(crate) fn sharpness(pixels: &mut [u8], size: Size2, toward: f32) {
    let (w, h) = (size.width as usize, size.height as usize);
    if w <= 2 || h <= 2 {
        return;
    }
    let src = pixels.to_vec();
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            for c in 0..3 {
                let at = |dx: usize, dy: usize| f32::from(src[((y + dy - 1) * w + x + dx - 1) * 3 + c]);
                let mut sum = 0.0;
                for dy in 0..3 {
                    for dx in 0..3 {
                        sum += at(dx, dy);
                    }
                }
                let smooth = ((sum + 4.0 * at(1, 1)) / 13.0).round();
                let v = at(1, 1);
                pixels[(y * w + x) * 3 + c] = (v + toward * (smooth - v)).clamp(0.0, 255.0) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posterize_solarize_and_invert_follow_torchvision() {
        let mut px = vec![0b1011_0111, 200, 3];
        posterize(&mut px, 3);
        assert_eq!(px, vec![0b1010_0000, 192, 0]);
        let mut px = vec![10, 128, 250];
        solarize(&mut px, 128.0);
        assert_eq!(px, vec![10, 127, 5]);
        invert(&mut px);
        assert_eq!(px, vec![245, 128, 250]);
    }

    #[test]
    fn solarize_add_raises_only_the_values_below_the_threshold() {
        let mut px = vec![0, 100, 127, 128, 250];
        solarize_add(&mut px, 110, 128);
        assert_eq!(px, vec![110, 210, 237, 128, 250]);
        let mut px = vec![200];
        solarize_add(&mut px, 110, 256);
        assert_eq!(px, vec![255]);
    }

    #[test]
    fn autocontrast_stretches_each_channel_to_the_full_range() {
        let mut px = vec![50, 9, 0, 100, 9, 255, 75, 9, 128];
        autocontrast(&mut px);
        assert_eq!(px, vec![0, 9, 0, 255, 9, 255, 127, 9, 128]);
    }

    #[test]
    fn equalize_spreads_a_narrow_histogram() {
        let mut px: Vec<u8> = (0..300).flat_map(|i| [100 + (i % 10) as u8; 3]).collect();
        equalize(&mut px);
        let (lo, hi) = (px.iter().min().copied(), px.iter().max().copied());
        assert_eq!(lo, Some(0));
        assert!(hi >= Some(220), "{hi:?}");
    }

    #[test]
    fn sharpness_of_factor_one_is_the_identity_and_keeps_the_border() {
        let size = Size2::new(4, 4);
        let orig: Vec<u8> = (0..48).map(|i| (i * 37 % 256) as u8).collect();
        let mut px = orig.clone();
        sharpness(&mut px, size, 0.0);
        assert_eq!(px, orig);
        sharpness(&mut px, size, 1.0);
        assert_eq!(&px[..12], &orig[..12]);
        assert_ne!(px, orig);
    }
}
