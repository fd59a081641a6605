//! torchvision v2's `random_erasing`: with probability `p`, a rectangle of area `scale` of the
//! image and aspect ratio `ratio` (log-uniform), ten tries at one that fits, filled with `value`.
//! The output applies it last: on float32 output after normalising (where torchvision's
//! recipes place it, so `value: 0` is the mean colour); on uint8 output on the 0-255 values.
//! `value: random` is torchvision's `value="random"`: a fresh N(0, 1) draw for every erased
//! value (each channel of each pixel); on float32 output that is noise around the mean colour,
//! on uint8 output it is what torchvision's assignment of those floats into a uint8 tensor
//! gives: each draw truncated toward zero and wrapped modulo 256 (0 for |x| < 1, -1 as 255).

use rand::Rng;

use crate::normal::standard_normal;
use crate::draw::draw_rng;
use crate::rgb::Size2;

/// `random_erasing`'s arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomErasing {
    pub p: f64,
    pub scale: (f64, f64),
    pub ratio: (f64, f64),
    pub value: EraseValue,
}

/// What the rectangle is filled with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EraseValue {
    /// Per channel (one number is all three).
    Fixed([f32; 3]),
    /// `value: random`: N(0, 1) per value.
    Random,
}

/// One sample's erased rectangle, in output pixels, and its fill.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Erase {
    pub top: u32,
    pub left: u32,
    pub height: u32,
    pub width: u32,
    pub fill: EraseFill,
}

/// The drawn fill: fixed values, or the seed of the sample's noise (drawn with the rectangle,
/// so a sample's draw stays a pure function of its seed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EraseFill {
    Value([f32; 3]),
    Noise(u64),
}

impl RandomErasing {
    /// torchvision's `RandomErasing`: applied when `rand < p`; then `get_params`' ten tries (an
    /// area uniform in `scale`, a log-uniform aspect ratio, rounded sides strictly inside the
    /// image, a uniform position); `None` when not applied or no try fits.
    pub fn draw(&self, size: Size2, rng: &mut impl Rng) -> Option<Erase> {
        if rng.gen::<f64>() >= self.p {
            return None;
        }
        let area = f64::from(size.width) * f64::from(size.height);
        let (log_lo, log_hi) = (self.ratio.0.ln(), self.ratio.1.ln());
        let uniform = |rng: &mut dyn rand::RngCore, lo: f64, hi: f64| if hi > lo { rng.gen_range(lo..hi) } else { lo };
        for _ in 0..10 {
            let erase_area = area * uniform(rng, self.scale.0, self.scale.1);
            let aspect = uniform(rng, log_lo, log_hi).exp();
            let h = (erase_area * aspect).sqrt().round_ties_even();
            let w = (erase_area / aspect).sqrt().round_ties_even();
            if !(h < f64::from(size.height) && w < f64::from(size.width)) {
                continue;
            }
            let (h, w) = (h as u32, w as u32);
            let top = rng.gen_range(0..=size.height - h);
            let left = rng.gen_range(0..=size.width - w);
            let fill = match self.value {
                EraseValue::Fixed(v) => EraseFill::Value(v),
                EraseValue::Random => EraseFill::Noise(rng.gen()),
            };
            return Some(Erase { top, left, height: h, width: w, fill });
        }
        None
    }
}

impl Erase {
    /// The rectangle's values, channel by channel, each row left to right (torchvision's
    /// `[C, h, w]` order): the fixed value, or this sample's noise.
    fn values(&self) -> impl FnMut(usize) -> f32 {
        let mut noise = match self.fill {
            EraseFill::Noise(seed) => Some(draw_rng(seed, 0, 0, 0)),
            EraseFill::Value(_) => None,
        };
        let fill = self.fill;
        move |c| match (fill, noise.as_mut()) {
            (EraseFill::Value(v), _) => v[c],
            (EraseFill::Noise(_), Some(rng)) => standard_normal(rng) as f32,
            (EraseFill::Noise(_), None) => 0.0,
        }
    }

    /// Fills the rectangle of packed RGB uint8 `pixels` (`width` wide): a fixed value clamped
    /// to 0-255 and rounded; noise as torchvision's float-to-uint8 assignment casts it.
    pub(crate) fn apply_u8(&self, pixels: &mut [u8], width: u32) {
        let mut values = self.values();
        let random = matches!(self.fill, EraseFill::Noise(_));
        for c in 0..3 {
            for y in self.top..self.top + self.height {
                let start = (y as usize * width as usize + self.left as usize) * 3;
                for px in pixels[start..start + self.width as usize * 3].chunks_exact_mut(3) {
                    let v = values(c);
                    px[c] = if random { v.trunc() as i32 as u8 } else { v.round().clamp(0.0, 255.0) as u8 };
                }
            }
        }
    }

    /// Fills the rectangle of channels-first float32 little-endian `body` (`size`).
    pub(crate) fn apply_f32(&self, body: &mut [u8], size: Size2) {
        let plane = size.area() as usize * 4;
        let mut values = self.values();
        for (c, out) in body.chunks_exact_mut(plane).enumerate().take(3) {
            for y in self.top..self.top + self.height {
                let start = (y as usize * size.width as usize + self.left as usize) * 4;
                for v in out[start..start + self.width as usize * 4].chunks_exact_mut(4) {
                    v.copy_from_slice(&values(c).to_le_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draw::draw_rng;

    fn erasing(p: f64) -> RandomErasing {
        RandomErasing { p, scale: (0.02, 0.33), ratio: (0.3, 3.3), value: EraseValue::Fixed([0.0; 3]) }
    }

    #[test]
    fn erasing_comes_with_probability_p_and_stays_inside() {
        let size = Size2::new(64, 48);
        let mut rng = draw_rng(1, 0, 0, 0);
        let mut hits = 0;
        for _ in 0..2000 {
            if let Some(e) = erasing(0.25).draw(size, &mut rng) {
                hits += 1;
                assert!(e.top + e.height <= 48 && e.left + e.width <= 64 && e.height < 48 && e.width < 64);
                let share = f64::from(e.height * e.width) / size.area() as f64;
                assert!((0.005..0.45).contains(&share), "{share}");
            }
        }
        assert!((400..600).contains(&hits), "{hits}");
    }

    #[test]
    fn erased_values_replace_the_rectangle_only() {
        let e = Erase { top: 1, left: 1, height: 1, width: 2, fill: EraseFill::Value([9.0, 8.0, 300.0]) };
        let mut px = vec![1u8; 4 * 3 * 3];
        e.apply_u8(&mut px, 4);
        assert_eq!(&px[12..15], &[1, 1, 1]);
        assert_eq!(&px[15..21], &[9, 8, 255, 9, 8, 255]);
        assert_eq!(&px[21..24], &[1, 1, 1]);
        let size = Size2::new(3, 2);
        let mut body = vec![0u8; 6 * 4 * 3];
        let e = Erase { top: 0, left: 2, height: 2, width: 1, fill: EraseFill::Value([-1.5, 0.0, 2.0]) };
        e.apply_f32(&mut body, size);
        let at = |c: usize, i: usize| f32::from_le_bytes(body[(c * 6 + i) * 4..][..4].try_into().expect("4 bytes"));
        assert_eq!((at(0, 2), at(0, 5), at(0, 4), at(2, 2)), (-1.5, -1.5, 0.0, 2.0));
    }

    #[test]
    fn random_value_erases_with_standard_normal_noise_fixed_by_the_draw() {
        let size = Size2::new(64, 64);
        let random = RandomErasing { value: EraseValue::Random, ..erasing(1.0) };
        let mut rng = draw_rng(3, 0, 0, 0);
        let e = random.draw(size, &mut rng).expect("p = 1 erases");
        assert!(matches!(e.fill, EraseFill::Noise(_)));
        let mut body = vec![0u8; 64 * 64 * 4 * 3];
        e.apply_f32(&mut body, size);
        let floats: Vec<f32> = body.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        let erased: Vec<f64> = floats.iter().filter(|&&v| v != 0.0).map(|&v| f64::from(v)).collect();
        assert_eq!(erased.len(), 3 * (e.height * e.width) as usize, "every value of the rectangle, in every channel");
        let mean = erased.iter().sum::<f64>() / erased.len() as f64;
        let var = erased.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / erased.len() as f64;
        let tolerance = 5.0 / (erased.len() as f64).sqrt();
        assert!(mean.abs() < tolerance && (var - 1.0).abs() < 2.0 * tolerance + 0.05, "{mean} {var}");
        // The same draw fills the same noise (a sample's bytes are a function of its seed).
        let mut again = vec![0u8; body.len()];
        e.apply_f32(&mut again, size);
        assert_eq!(again, body);
        // uint8: truncated toward zero and wrapped, as torchvision's cast: 0 where |x| < 1, and
        // only values near 0 or near 255.
        let mut px = vec![77u8; 64 * 64 * 3];
        e.apply_u8(&mut px, 64);
        let changed: Vec<u8> = px.iter().copied().filter(|&v| v != 77).collect();
        assert_eq!(changed.len(), erased.len());
        let zeros = changed.iter().filter(|&&v| v == 0).count() as f64 / changed.len() as f64;
        assert!((zeros - 0.683).abs() < 0.05, "P(|x| < 1) = 0.683: {zeros}");
        assert!(changed.iter().all(|&v| v <= 6 || v >= 250), "{changed:?}");
    }
}
