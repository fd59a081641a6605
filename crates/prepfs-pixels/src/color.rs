//! torchvision v2's colour adjustments on uint8 RGB, as its tensor kernels compute them:
//! brightness, contrast, saturation, hue, grayscale, and `color_jitter`'s draw (the four factors
//! uniform in their ranges, applied in an order drawn per sample).
//!
//! Pixels are packed RGB rows (3 bytes a pixel). Blends are torchvision's `_blend`:
//! `ratio * a + (1 - ratio) * b`, clamped to [0, 255] and truncated to uint8, which is also
//! PIL's `Image.blend` that `ImageEnhance` uses; PIL's enhancers differ only in their grey (its
//! `convert("L")` rounds where torchvision floors), so timm's ops use [`pil_contrast`] and
//! [`pil_color`] with the same blend.

use rand::seq::SliceRandom;
use rand::Rng;

/// ITU-R 601 luma as torchvision's `rgb_to_grayscale` weighs it, before any rounding.
pub fn luma(px: &[u8]) -> f32 {
    f32::from(px[0]) * 0.2989 + f32::from(px[1]) * 0.587 + f32::from(px[2]) * 0.114
}

/// PIL's `convert("L")`: ITU-R 601-2 luma in 16-bit fixed point, rounded.
pub(crate) fn pil_luma(px: &[u8]) -> u8 {
    ((u32::from(px[0]) * 19595 + u32::from(px[1]) * 38470 + u32::from(px[2]) * 7471 + 0x8000) >> 16) as u8
}

/// torchvision's `_blend` of one value with `other`, `ratio` of the first.
fn blend(value: u8, other: f32, ratio: f32) -> u8 {
    (ratio * f32::from(value) + (1.0 - ratio) * other).clamp(0.0, 255.0) as u8
}

/// `adjust_brightness`: every value times `factor`.
pub fn brightness(pixels: &mut [u8], factor: f32) {
    for v in pixels {
        *v = (f32::from(*v) * factor).clamp(0.0, 255.0) as u8;
    }
}

/// `adjust_contrast`: a blend with the mean of the (floored) grayscale image.
pub fn contrast(pixels: &mut [u8], factor: f32) {
    let n = (pixels.len() / 3).max(1);
    let sum: f64 = pixels.chunks_exact(3).map(|px| f64::from(luma(px).floor())).sum();
    let mean = (sum / n as f64) as f32;
    blend_toward(pixels, mean, factor);
}

/// PIL's `ImageEnhance.Contrast(img).enhance(factor)`: a blend with the mean of the L image,
/// rounded to a whole grey.
pub(crate) fn pil_contrast(pixels: &mut [u8], factor: f32) {
    let n = (pixels.len() / 3).max(1);
    let sum: u64 = pixels.chunks_exact(3).map(|px| u64::from(pil_luma(px))).sum();
    let mean = (sum as f64 / n as f64 + 0.5).floor() as f32;
    blend_toward(pixels, mean, factor);
}

/// Every value blended with one grey.
fn blend_toward(pixels: &mut [u8], grey: f32, factor: f32) {
    for v in pixels {
        *v = blend(*v, grey, factor);
    }
}

/// `adjust_saturation`: each pixel blended with its own (floored) grayscale value.
pub fn saturation(pixels: &mut [u8], factor: f32) {
    saturation_with(pixels, factor, |px| luma(px).floor());
}

/// PIL's `ImageEnhance.Color(img).enhance(factor)`: each pixel blended with its L value.
pub(crate) fn pil_color(pixels: &mut [u8], factor: f32) {
    saturation_with(pixels, factor, |px| f32::from(pil_luma(px)));
}

/// Each pixel blended with its own grey, `gray` of it.
fn saturation_with(pixels: &mut [u8], factor: f32, gray: impl Fn(&[u8]) -> f32) {
    for px in pixels.chunks_exact_mut(3) {
        let gray = gray(px);
        for v in px {
            *v = blend(*v, gray, factor);
        }
    }
}

/// `rgb_to_grayscale(num_output_channels=3)` on uint8: the luma truncated, in all three channels.
pub fn grayscale(pixels: &mut [u8]) {
    for px in pixels.chunks_exact_mut(3) {
        let gray = luma(px) as u8;
        px.fill(gray);
    }
}

/// `adjust_hue`: to float in [0, 1], to HSV, the hue shifted by `shift` (in turns, within
/// [-0.5, 0.5]) modulo 1, back to RGB, and to uint8 as torchvision's `to_dtype` scales
/// (times 255.999, truncated).
pub fn hue(pixels: &mut [u8], shift: f32) {
    for px in pixels.chunks_exact_mut(3) {
        let [r, g, b] = [px[0], px[1], px[2]].map(|v| f32::from(v) / 255.0);
        let (h, s, v) = rgb_to_hsv(r, g, b);
        let h = (h + shift).rem_euclid(1.0);
        let rgb = hsv_to_rgb(h, s, v);
        for (o, c) in px.iter_mut().zip(rgb) {
            *o = (c * (255.0 + 1.0 - 1e-3)).clamp(0.0, 255.0) as u8;
        }
    }
}

/// torchvision's `_rgb_to_hsv`: hue in [0, 1).
fn rgb_to_hsv(r: f32, g: f32, b: f32) -> (f32, f32, f32) {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let range = maxc - minc;
    if range == 0.0 {
        return (0.0, 0.0, maxc);
    }
    let s = range / maxc;
    let (rc, gc, bc) = ((maxc - r) / range, (maxc - g) / range, (maxc - b) / range);
    let h = if maxc == r {
        bc - gc
    } else if maxc == g {
        2.0 + rc - bc
    } else {
        4.0 + gc - rc
    };
    ((h / 6.0 + 1.0) % 1.0, s, maxc)
}

/// torchvision's `_hsv_to_rgb`.
fn hsv_to_rgb(h: f32, s: f32, v: f32) -> [f32; 3] {
    let h6 = h * 6.0;
    let i = h6.floor();
    let f = h6 - i;
    let p = (v * (1.0 - s)).clamp(0.0, 1.0);
    let q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
    let t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0);
    match (i as i32).rem_euclid(6) {
        0 => [v, t, p],
        1 => [q, v, p],
        2 => [p, v, t],
        3 => [p, q, v],
        4 => [t, p, v],
        _ => [v, p, q],
    }
}

/// `color_jitter`'s ranges, torchvision's `ColorJitter` after `_check_input`: each factor's
/// [low, high], `None` where the adjustment is off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColorJitter {
    pub brightness: Option<(f64, f64)>,
    pub contrast: Option<(f64, f64)>,
    pub saturation: Option<(f64, f64)>,
    pub hue: Option<(f64, f64)>,
}

/// One sample's jitter: the four adjustments in the drawn order, each with its factor.
#[derive(Debug, Clone, PartialEq)]
pub struct JitterDraw {
    pub steps: Vec<(Adjust, f32)>,
}

/// One of `color_jitter`'s adjustments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjust {
    Brightness,
    Contrast,
    Saturation,
    Hue,
}

impl ColorJitter {
    /// torchvision's `get_params`: a random order of the four, and each factor that is on
    /// drawn uniformly from its range.
    pub fn draw(&self, rng: &mut impl Rng) -> JitterDraw {
        let mut order = [Adjust::Brightness, Adjust::Contrast, Adjust::Saturation, Adjust::Hue];
        order.shuffle(rng);
        let mut steps = Vec::with_capacity(4);
        for adjust in order {
            let range = match adjust {
                Adjust::Brightness => self.brightness,
                Adjust::Contrast => self.contrast,
                Adjust::Saturation => self.saturation,
                Adjust::Hue => self.hue,
            };
            if let Some((lo, hi)) = range {
                let factor = if hi > lo { rng.gen_range(lo..hi) } else { lo };
                steps.push((adjust, factor as f32));
            }
        }
        JitterDraw { steps }
    }
}

impl JitterDraw {
    pub fn apply(&self, pixels: &mut [u8]) {
        for &(adjust, factor) in &self.steps {
            match adjust {
                Adjust::Brightness => brightness(pixels, factor),
                Adjust::Contrast => contrast(pixels, factor),
                Adjust::Saturation => saturation(pixels, factor),
                Adjust::Hue => hue(pixels, factor),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draw::draw_rng;

    #[test]
    fn brightness_scales_and_clamps() {
        let mut px = vec![10, 100, 200];
        brightness(&mut px, 1.5);
        assert_eq!(px, vec![15, 150, 255]);
    }

    #[test]
    fn contrast_zero_gives_the_grayscale_mean_everywhere() {
        let mut px = vec![255, 0, 0, 0, 0, 255];
        contrast(&mut px, 0.0);
        // floor(76.2) = 76 and floor(29.07) = 29: the mean 52.5, truncated to 52.
        assert_eq!(px, vec![52; 6]);
    }

    #[test]
    fn saturation_zero_is_grayscale_and_one_is_the_identity() {
        let mut px = vec![200, 100, 50];
        saturation(&mut px, 1.0);
        assert_eq!(px, vec![200, 100, 50]);
        saturation(&mut px, 0.0);
        assert_eq!(px, vec![124, 124, 124]);
        let mut g = vec![200, 100, 50];
        grayscale(&mut g);
        assert_eq!(g, px);
    }

    #[test]
    fn pil_enhancers_blend_with_the_rounded_luma() {
        // L of (200, 100, 50) is 124.09 rounded to 124; of (0, 0, 255) 29.07 to 29.
        assert_eq!(pil_luma(&[200, 100, 50]), 124);
        let mut px = vec![200, 100, 50];
        pil_color(&mut px, 0.0);
        assert_eq!(px, vec![124, 124, 124]);
        let mut px = vec![255, 0, 0, 0, 0, 255];
        // L: 76 and 29, mean 52.5 rounded up to 53 (torchvision's floors give 52).
        pil_contrast(&mut px, 0.0);
        assert_eq!(px, vec![53; 6]);
        let mut px = vec![255, 0, 0, 0, 0, 255];
        pil_contrast(&mut px, 1.0);
        assert_eq!(px, vec![255, 0, 0, 0, 0, 255]);
    }

    #[test]
    fn hue_shift_of_a_third_turns_red_into_green() {
        let mut px = vec![255, 0, 0, 30, 60, 90];
        hue(&mut px, 1.0 / 3.0);
        assert_eq!(&px[..3], &[0, 255, 0]);
        let mut same = vec![30, 60, 90];
        hue(&mut same, 0.0);
        assert_eq!(same, vec![30, 60, 90]);
    }

    #[test]
    fn jitter_draws_every_order_and_factors_inside_their_ranges() {
        let jitter = ColorJitter {
            brightness: Some((0.6, 1.4)),
            contrast: Some((0.6, 1.4)),
            saturation: None,
            hue: Some((-0.1, 0.1)),
        };
        let mut rng = draw_rng(2, 0, 0, 0);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..200 {
            let d = jitter.draw(&mut rng);
            assert_eq!(d.steps.len(), 3);
            firsts.insert(d.steps[0].0 as u8);
            for (a, f) in d.steps {
                let (lo, hi) = if a == Adjust::Hue { (-0.1, 0.1) } else { (0.6, 1.4) };
                assert!((lo..=hi).contains(&f), "{a:?} {f}");
            }
        }
        assert_eq!(firsts.len(), 3, "each adjustment comes first some of the time");
    }
}
