//! torchvision v2's automatic augmentation policies: `trivial_augment_wide`, `rand_augment`
//! (num_ops, magnitude, num_magnitude_bins) and `auto_augment` (policy: imagenet), with
//! torchvision's op lists, magnitude tables (`_AUGMENTATION_SPACE`), signed magnitudes (negated
//! half the time), and fill 0 for the geometric ops, warped nearest as torchvision does a
//! tensor (its default) or bilinear as it does a PIL image (torchvision's reference recipe:
//! `TrivialAugmentWide(interpolation=BILINEAR)` before `PILToTensor`). [`AutoAugment::draw`]
//! draws one sample's ops and magnitudes; [`AutoDraw::apply`] runs them.

use std::collections::BTreeMap;

use rand::Rng;
use serde_norway::Value;

use crate::affine;
use crate::op_args::{Args, OpError};
use crate::color;
use crate::interpolation::Filter;
use crate::pil_warp;
use crate::tone;
use crate::rgb::Size2;

/// One policy as configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AutoAugment {
    TrivialAugmentWide { num_magnitude_bins: u32 },
    RandAugment { num_ops: u32, magnitude: u32, num_magnitude_bins: u32 },
    /// `AutoAugment(AutoAugmentPolicy.IMAGENET)`.
    ImageNet,
}

/// How a policy's geometric ops resample: `rotation.rs`'s, where a turn is warped.
pub use crate::rotation::Warp;

/// An op of the policies' spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Identity,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Brightness,
    Color,
    Contrast,
    Sharpness,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
    Invert,
}

/// One sample's ops with their (signed) magnitudes, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoDraw {
    pub ops: Vec<(Op, f64)>,
    pub(crate) warp: Warp,
}

/// The ops of RandAugment's and TrivialAugmentWide's spaces, in torchvision's order.
const SPACE: [Op; 14] = [
    Op::Identity,
    Op::ShearX,
    Op::ShearY,
    Op::TranslateX,
    Op::TranslateY,
    Op::Rotate,
    Op::Brightness,
    Op::Color,
    Op::Contrast,
    Op::Sharpness,
    Op::Posterize,
    Op::Solarize,
    Op::AutoContrast,
    Op::Equalize,
];

/// Which policy's magnitude table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    /// RandAugment's and AutoAugment's.
    Standard,
    /// TrivialAugmentWide's wider ranges.
    Wide,
}

/// `torch.linspace(lo, hi, bins)[i]`.
fn linspace(lo: f64, hi: f64, bins: u32, i: u32) -> f64 {
    if bins <= 1 {
        return lo;
    }
    lo + (hi - lo) * f64::from(i) / f64::from(bins - 1)
}

/// The magnitude of `op` at bin `i` of `bins`, and whether it is signed; `None` for ops without
/// one (their magnitude is 0).
fn magnitude(table: Table, op: Op, bins: u32, i: u32, size: Size2) -> Option<(f64, bool)> {
    let wide = table == Table::Wide;
    let posterize_div = if wide { 6.0 } else { 4.0 };
    Some(match op {
        Op::Identity | Op::AutoContrast | Op::Equalize | Op::Invert => return None,
        Op::ShearX | Op::ShearY => (linspace(0.0, if wide { 0.99 } else { 0.3 }, bins, i), true),
        Op::TranslateX => (linspace(0.0, if wide { 32.0 } else { 150.0 / 331.0 * f64::from(size.width) }, bins, i), true),
        Op::TranslateY => (linspace(0.0, if wide { 32.0 } else { 150.0 / 331.0 * f64::from(size.height) }, bins, i), true),
        Op::Rotate => (linspace(0.0, if wide { 135.0 } else { 30.0 }, bins, i), true),
        Op::Brightness | Op::Color | Op::Contrast | Op::Sharpness => {
            (linspace(0.0, if wide { 0.99 } else { 0.9 }, bins, i), true)
        }
        Op::Posterize => {
            let step = f64::from(bins.max(2) - 1) / posterize_div;
            ((8.0 - f64::from(i) / step).round_ties_even(), false)
        }
        Op::Solarize => (linspace(1.0, 0.0, bins, i), false),
    })
}

/// AutoAugment's ImageNet policy: 25 pairs of (op, probability, magnitude bin of 10).
#[rustfmt::skip]
const IMAGENET: [[(Op, f64, u32); 2]; 25] = {
    use Op::*;
    [
        [(Posterize, 0.4, 8), (Rotate, 0.6, 9)],
        [(Solarize, 0.6, 5), (AutoContrast, 0.6, 0)],
        [(Equalize, 0.8, 0), (Equalize, 0.6, 0)],
        [(Posterize, 0.6, 7), (Posterize, 0.6, 6)],
        [(Equalize, 0.4, 0), (Solarize, 0.2, 4)],
        [(Equalize, 0.4, 0), (Rotate, 0.8, 8)],
        [(Solarize, 0.6, 3), (Equalize, 0.6, 0)],
        [(Posterize, 0.8, 5), (Equalize, 1.0, 0)],
        [(Rotate, 0.2, 3), (Solarize, 0.6, 8)],
        [(Equalize, 0.6, 0), (Posterize, 0.4, 6)],
        [(Rotate, 0.8, 8), (Color, 0.4, 0)],
        [(Rotate, 0.4, 9), (Equalize, 0.6, 0)],
        [(Equalize, 0.0, 0), (Equalize, 0.8, 0)],
        [(Invert, 0.6, 0), (Equalize, 1.0, 0)],
        [(Color, 0.6, 4), (Contrast, 1.0, 8)],
        [(Rotate, 0.8, 8), (Color, 1.0, 2)],
        [(Color, 0.8, 8), (Solarize, 0.8, 7)],
        [(Sharpness, 0.4, 7), (Invert, 0.6, 0)],
        [(ShearX, 0.6, 5), (Equalize, 1.0, 0)],
        [(Color, 0.4, 0), (Equalize, 0.6, 0)],
        [(Equalize, 0.4, 0), (Solarize, 0.2, 4)],
        [(Solarize, 0.6, 5), (AutoContrast, 0.6, 0)],
        [(Invert, 0.6, 0), (Equalize, 1.0, 0)],
        [(Color, 0.6, 4), (Contrast, 1.0, 8)],
        [(Equalize, 0.8, 0), (Equalize, 0.6, 0)],
    ]
};

impl AutoAugment {
    pub fn name(&self) -> &'static str {
        match self {
            AutoAugment::TrivialAugmentWide { .. } => "trivial_augment_wide",
            AutoAugment::RandAugment { .. } => "rand_augment",
            AutoAugment::ImageNet => "auto_augment",
        }
    }

    /// Parses a policy by its name, with its warp; `None` for another name.
    pub(crate) fn from_args(name: &str, args: &Args<'_>) -> Result<Option<(AutoAugment, Warp)>, OpError> {
        let whole = |key: &str, default: u32, lo: u32, hi: u32| -> Result<u32, OpError> {
            match args.get(key) {
                None => Ok(default),
                Some(v) => v
                    .as_u64()
                    .filter(|n| (u64::from(lo)..=u64::from(hi)).contains(n))
                    .map(|n| n as u32)
                    .ok_or_else(|| args.bad(key, format!("be a whole number from {lo} to {hi}"))),
            }
        };
        let unsupported = |setting| OpError::Unsupported { op: args.op().to_string(), setting };
        // The geometric ops' interpolation (nearest or bilinear) and fill (0).
        let warp_and_fill = |args: &Args<'_>| -> Result<Warp, OpError> {
            let warp = match args.get("interpolation").map(|v| v.as_str()) {
                None | Some(Some("nearest")) => Warp::Nearest,
                Some(Some("bilinear")) => Warp::Bilinear,
                Some(_) => return Err(unsupported("interpolation: nearest or bilinear")),
            };
            if args.get("fill").is_some_and(|v| v.as_f64() != Some(0.0) && !matches!(v, Value::Null)) {
                return Err(unsupported("fill: 0"));
            }
            Ok(warp)
        };
        let warp;
        let policy = match name {
            "trivial_augment_wide" => {
                args.only(&["num_magnitude_bins", "interpolation", "fill"])?;
                warp = warp_and_fill(args)?;
                AutoAugment::TrivialAugmentWide { num_magnitude_bins: whole("num_magnitude_bins", 31, 2, 1000)? }
            }
            "rand_augment" => {
                args.only(&["num_ops", "magnitude", "num_magnitude_bins", "interpolation", "fill"])?;
                warp = warp_and_fill(args)?;
                let bins = whole("num_magnitude_bins", 31, 2, 1000)?;
                AutoAugment::RandAugment {
                    num_ops: whole("num_ops", 2, 0, 16)?,
                    magnitude: whole("magnitude", 9, 0, bins - 1)?,
                    num_magnitude_bins: bins,
                }
            }
            "auto_augment" => {
                args.only(&["policy", "interpolation", "fill"])?;
                warp = warp_and_fill(args)?;
                if args.get("policy").is_some_and(|v| v.as_str() != Some("imagenet")) {
                    return Err(unsupported("policy: imagenet"));
                }
                AutoAugment::ImageNet
            }
            _ => return Ok(None),
        };
        Ok(Some((policy, warp)))
    }

    pub fn args(&self, warp: Warp, out: &mut BTreeMap<&str, serde_json::Value>) {
        use serde_json::json;
        if warp == Warp::Bilinear {
            out.insert("interpolation", json!("bilinear"));
        }
        match self {
            AutoAugment::TrivialAugmentWide { num_magnitude_bins } => {
                out.insert("num_magnitude_bins", json!(num_magnitude_bins));
            }
            AutoAugment::RandAugment { num_ops, magnitude, num_magnitude_bins } => {
                out.insert("num_ops", json!(num_ops));
                out.insert("magnitude", json!(magnitude));
                out.insert("num_magnitude_bins", json!(num_magnitude_bins));
            }
            AutoAugment::ImageNet => {
                out.insert("policy", json!("imagenet"));
            }
        }
    }

    /// torchvision's `forward` draws for an image of `size`, to be warped by `warp`.
    pub fn draw(&self, warp: Warp, size: Size2, rng: &mut impl Rng) -> AutoDraw {
        let signed = |rng: &mut dyn rand::RngCore, (m, signed): (f64, bool)| {
            if signed && rng.gen::<f64>() <= 0.5 {
                -m
            } else {
                m
            }
        };
        let mut ops = Vec::new();
        match *self {
            AutoAugment::TrivialAugmentWide { num_magnitude_bins: bins } => {
                let op = SPACE[rng.gen_range(0..SPACE.len())];
                let bin = rng.gen_range(0..bins);
                let m = magnitude(Table::Wide, op, bins, bin, size).map_or(0.0, |m| signed(rng, m));
                ops.push((op, m));
            }
            AutoAugment::RandAugment { num_ops, magnitude: bin, num_magnitude_bins: bins } => {
                for _ in 0..num_ops {
                    let op = SPACE[rng.gen_range(0..SPACE.len())];
                    let m = magnitude(Table::Standard, op, bins, bin, size).map_or(0.0, |m| signed(rng, m));
                    ops.push((op, m));
                }
            }
            AutoAugment::ImageNet => {
                let policy = &IMAGENET[rng.gen_range(0..IMAGENET.len())];
                let probs: [f64; 2] = [rng.gen(), rng.gen()];
                let negate: [bool; 2] = [rng.gen(), rng.gen()];
                for ((op, p, bin), (prob, neg)) in policy.iter().zip(probs.into_iter().zip(negate)) {
                    if prob <= *p {
                        let m = match magnitude(Table::Standard, *op, 10, *bin, size) {
                            Some((m, true)) if neg => -m,
                            Some((m, _)) => m,
                            None => 0.0,
                        };
                        ops.push((*op, m));
                    }
                }
            }
        }
        AutoDraw { ops, warp }
    }
}

impl AutoDraw {
    /// `F.affine(angle=0, translate, scale=1, shear)` about the top-left corner (`corner`, the
    /// shears) or the centre, warped as the policy says: on a PIL image torchvision passes the
    /// centre in pixels to `_get_inverse_affine_matrix` and PIL's transform that matrix.
    fn affine(&self, pixels: &mut [u8], size: Size2, translate: (f64, f64), shear: (f64, f64), corner: bool) {
        match self.warp {
            Warp::Nearest => affine::affine(pixels, size, translate, shear, corner),
            Warp::Bilinear => {
                let center = if corner { (0.0, 0.0) } else { (f64::from(size.width) * 0.5, f64::from(size.height) * 0.5) };
                let matrix = affine::inverse_matrix(center, 0.0, translate, shear);
                pil_warp::transform(pixels, size, &matrix, Filter::Bilinear, [0; 3]);
            }
        }
    }

    /// `F.rotate(angle)` about the centre, fill 0, warped as the policy says (on a PIL image,
    /// PIL's `Image.rotate`).
    fn rotate(&self, pixels: &mut [u8], size: Size2, degrees: f64) {
        crate::rotation::rotate(pixels, size, degrees, self.warp);
    }

    /// torchvision's `_apply_image_or_video_transform` for each op, on packed RGB `pixels`.
    pub fn apply(&self, pixels: &mut [u8], size: Size2) {
        for &(op, m) in &self.ops {
            let factor = (1.0 + m) as f32;
            match op {
                Op::Identity => {}
                Op::ShearX => self.affine(pixels, size, (0.0, 0.0), (m.atan().to_degrees(), 0.0), true),
                Op::ShearY => self.affine(pixels, size, (0.0, 0.0), (0.0, m.atan().to_degrees()), true),
                Op::TranslateX => self.affine(pixels, size, (m.trunc(), 0.0), (0.0, 0.0), false),
                Op::TranslateY => self.affine(pixels, size, (0.0, m.trunc()), (0.0, 0.0), false),
                Op::Rotate => self.rotate(pixels, size, m),
                Op::Brightness => color::brightness(pixels, factor),
                Op::Color => color::saturation(pixels, factor),
                Op::Contrast => color::contrast(pixels, factor),
                // torch's `add_(..., alpha=1.0 - factor)`: the double rounded to f32 once.
                Op::Sharpness => tone::sharpness(pixels, size, (1.0 - (1.0 + m)) as f32),
                Op::Posterize => tone::posterize(pixels, m as u32),
                Op::Solarize => tone::solarize(pixels, 255.0 * m),
                Op::AutoContrast => tone::autocontrast(pixels),
                Op::Equalize => tone::equalize(pixels),
                Op::Invert => tone::invert(pixels),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draw::draw_rng;

    #[test]
    fn magnitude_tables_are_torchvisions() {
        let s = Size2::new(331, 100);
        let at = |t, op, bins, i| magnitude(t, op, bins, i, s).map(|(m, signed)| ((m * 1e6).round() / 1e6, signed));
        assert_eq!(at(Table::Standard, Op::ShearX, 31, 9), Some((0.09, true)));
        assert_eq!(at(Table::Standard, Op::TranslateX, 31, 30), Some((150.0, true)));
        assert_eq!(at(Table::Standard, Op::Rotate, 31, 9), Some((9.0, true)));
        assert_eq!(at(Table::Standard, Op::Brightness, 31, 9), Some((0.27, true)));
        assert_eq!(at(Table::Standard, Op::Posterize, 31, 9), Some((7.0, false)));
        assert_eq!(at(Table::Standard, Op::Posterize, 10, 8), Some((4.0, false)));
        assert_eq!(at(Table::Wide, Op::Posterize, 31, 30), Some((2.0, false)));
        assert_eq!(at(Table::Wide, Op::Rotate, 31, 30), Some((135.0, true)));
        assert_eq!(at(Table::Wide, Op::TranslateY, 31, 15), Some((16.0, true)));
        assert_eq!(at(Table::Standard, Op::Solarize, 10, 9), Some((0.0, false)));
        assert_eq!(at(Table::Standard, Op::Equalize, 10, 9), None);
    }

    #[test]
    fn trivial_augment_draws_every_op_with_both_signs() {
        let policy = AutoAugment::TrivialAugmentWide { num_magnitude_bins: 31 };
        let mut rng = draw_rng(6, 0, 0, 0);
        let (mut seen, mut negative) = (std::collections::HashSet::new(), 0);
        for _ in 0..3000 {
            let d = policy.draw(Warp::Nearest, Size2::new(32, 32), &mut rng);
            assert_eq!(d.ops.len(), 1);
            let (op, m) = d.ops[0];
            seen.insert(op as u8);
            negative += usize::from(m < 0.0);
            assert!(m.abs() <= 135.0);
        }
        assert_eq!(seen.len(), 14);
        assert!(negative > 300, "{negative}");
    }

    #[test]
    fn rand_augment_draws_num_ops_at_the_fixed_magnitude() {
        let policy = AutoAugment::RandAugment { num_ops: 2, magnitude: 9, num_magnitude_bins: 31 };
        let mut rng = draw_rng(7, 0, 0, 0);
        for _ in 0..200 {
            let d = policy.draw(Warp::Nearest, Size2::new(224, 224), &mut rng);
            assert_eq!(d.ops.len(), 2);
            for (op, m) in d.ops {
                if op == Op::Rotate {
                    assert_eq!(m.abs(), 9.0);
                }
            }
        }
    }

    #[test]
    fn auto_augment_applies_each_half_of_a_sub_policy_with_its_probability() {
        let mut rng = draw_rng(8, 0, 0, 0);
        let counts: Vec<usize> = (0..2000).map(|_| AutoAugment::ImageNet.draw(Warp::Nearest, Size2::new(64, 64), &mut rng).ops.len()).collect();
        let mean = counts.iter().sum::<usize>() as f64 / counts.len() as f64;
        // The policy's probabilities average (sum of 50 p) / 25 = 1.2 ops a sample.
        let expected: f64 = IMAGENET.iter().flatten().map(|(_, p, _)| p).sum::<f64>() / 25.0;
        assert!((mean - expected).abs() < 0.06, "{mean} against {expected}");
    }

    /// torchvision's `_apply_image_or_video_transform` on edge values, as torchvision 0.29 gives
    /// them: AutoAugment's Solarize at bin 3 of 10 (threshold 255 * 2/3, which torch compares in
    /// float32, so 170 itself is inverted) and its Sharpness at bin 7 (factor 1.7, torch's
    /// `alpha = 1 - factor` rounded to f32 once: -0.69999999, which keeps the centre at 3 where
    /// 1 - f32(1.7) = -0.70000005 truncated it to 2).
    #[test]
    fn solarize_and_sharpness_round_their_magnitudes_as_torch_does() {
        let size = Size2::new(3, 1);
        let m = magnitude(Table::Standard, Op::Solarize, 10, 3, size).expect("solarize").0;
        let mut px: Vec<u8> = [169u8, 170, 171].iter().flat_map(|&v| [v; 3]).collect();
        AutoDraw { ops: vec![(Op::Solarize, m)], warp: Warp::Nearest }.apply(&mut px, size);
        assert_eq!(px, [169u8, 85, 84].iter().flat_map(|&v| [v; 3]).collect::<Vec<u8>>());

        let size = Size2::new(3, 3);
        let m = magnitude(Table::Standard, Op::Sharpness, 10, 7, size).expect("sharpness").0;
        let grey = [26u8, 26, 26, 26, 10, 26, 26, 27, 27];
        let mut px: Vec<u8> = grey.iter().flat_map(|&v| [v; 3]).collect();
        AutoDraw { ops: vec![(Op::Sharpness, m)], warp: Warp::Nearest }.apply(&mut px, size);
        let mut want = grey;
        want[4] = 3;
        assert_eq!(px, want.iter().flat_map(|&v| [v; 3]).collect::<Vec<u8>>());
    }

    #[test]
    fn applied_policies_keep_the_image_size_and_change_pixels() {
        let size = Size2::new(24, 16);
        let orig: Vec<u8> = (0..24 * 16 * 3).map(|i| (i * 7 % 200 + 20) as u8).collect();
        for op in SPACE.into_iter().skip(1) {
            let mut px = orig.clone();
            let m = magnitude(Table::Standard, op, 31, 20, size).map_or(0.0, |(m, _)| m);
            AutoDraw { ops: vec![(op, m)], warp: Warp::Nearest }.apply(&mut px, size);
            assert_eq!(px.len(), orig.len());
            assert_ne!(px, orig, "{op:?} changed nothing");
        }
    }

    #[test]
    fn a_bilinear_policy_warps_as_pil_does_and_its_translations_move_whole_pixels_alike() {
        let size = Size2::new(24, 16);
        let orig: Vec<u8> = (0..24 * 16 * 3).map(|i| (i * 7 % 200 + 20) as u8).collect();
        let run = |op, m, warp| {
            let mut px = orig.clone();
            AutoDraw { ops: vec![(op, m)], warp }.apply(&mut px, size);
            px
        };
        // A whole-pixel translation samples pixel centres: bilinear and nearest agree.
        assert_eq!(run(Op::TranslateX, 3.0, Warp::Bilinear), run(Op::TranslateX, 3.0, Warp::Nearest));
        // A shear blends neighbours where nearest picks one: they differ, and bilinear is PIL's
        // transform of torchvision's matrix about the top-left corner.
        let sheared = run(Op::ShearX, 0.3, Warp::Bilinear);
        assert_ne!(sheared, run(Op::ShearX, 0.3, Warp::Nearest));
        let mut by_hand = orig.clone();
        let matrix = affine::inverse_matrix((0.0, 0.0), 0.0, (0.0, 0.0), (0.3f64.atan().to_degrees(), 0.0));
        pil_warp::transform(&mut by_hand, size, &matrix, Filter::Bilinear, [0; 3]);
        assert_eq!(sheared, by_hand);
        // A rotation is PIL's `Image.rotate`, filled with 0 at the corners.
        let turned = run(Op::Rotate, 30.0, Warp::Bilinear);
        assert_eq!(&turned[..3], &[0, 0, 0]);
        assert_ne!(turned, orig);
    }
}
