//! timm's RandAugment, beside torchvision's: `rand_augment: { timm: "rand-m9-mstd0.5-inc1" }`.
//! Owns the config string's parse (timm's `rand_augment_transform`: `m` magnitude, `n` ops per
//! image, `p` each op's probability, `mstd` magnitude noise (gaussian; over 100: uniform in
//! [0, m]), `mmax` the magnitude's upper clip, `inc1` the increasing ops), the per-sample draw
//! (`RandAugment.__call__`: `n` ops chosen with replacement, each `AugmentOp` applied with its
//! probability, its magnitude noised and clipped to [0, mmax], its level turned into the op's
//! argument by timm's `LEVEL_TO_ARG`), and applying the drawn ops as timm's PIL code does:
//! affine warps through `pil_warp` with the fill colour (timm's `img_mean`, (124, 116, 104) for
//! ImageNet's mean) and a bilinear or bicubic filter drawn per op, the enhancers of `color`, the
//! lookup ops of `tone`.

use std::collections::BTreeMap;

use rand::Rng;
use serde_norway::Value;

use crate::op_args::{Args, OpError};
use crate::color;
use crate::interpolation::{Filter, Interpolation};
use crate::normal::standard_normal;
use crate::pil_warp;
use crate::tone;
use crate::rgb::Size2;

/// timm's `_LEVEL_DENOM`: magnitudes are tenths of an op's full range.
const LEVEL_DENOM: f64 = 10.0;

/// timm's `img_mean` for ImageNet's mean, `round(255 * mean)`: the affine ops' fill.
pub(crate) const IMAGENET_FILL: [u8; 3] = [124, 116, 104];

/// timm's RandAugment as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct TimmRandAugment {
    /// The config string as written (the summary writes it back).
    pub config: String,
    pub magnitude: f64,
    pub(crate) num_layers: u32,
    pub(crate) prob: f64,
    /// 0: no noise; infinite: uniform in [0, magnitude].
    pub(crate) magnitude_std: f64,
    pub(crate) magnitude_max: f64,
    /// `inc1`: `_RAND_INCREASING_TRANSFORMS`.
    pub increasing: bool,
    pub interpolation: Interpolation,
    pub fill: [u8; 3],
}

/// The ops of timm's `_RAND_TRANSFORMS` (with `inc1`, posterize, solarize and the four
/// enhancers are their increasing versions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimmOp {
    AutoContrast,
    Equalize,
    Invert,
    Rotate,
    Posterize,
    Solarize,
    SolarizeAdd,
    Color,
    Contrast,
    Brightness,
    Sharpness,
    ShearX,
    ShearY,
    TranslateXRel,
    TranslateYRel,
}

const OPS: [TimmOp; 15] = [
    TimmOp::AutoContrast,
    TimmOp::Equalize,
    TimmOp::Invert,
    TimmOp::Rotate,
    TimmOp::Posterize,
    TimmOp::Solarize,
    TimmOp::SolarizeAdd,
    TimmOp::Color,
    TimmOp::Contrast,
    TimmOp::Brightness,
    TimmOp::Sharpness,
    TimmOp::ShearX,
    TimmOp::ShearY,
    TimmOp::TranslateXRel,
    TimmOp::TranslateYRel,
];

/// One op as drawn: its argument (degrees, bits, threshold, factor, shear, share of the side)
/// and, for the warps, the filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimmStep {
    pub op: TimmOp,
    pub arg: f64,
    pub filter: Filter,
}

/// One sample's draw: the ops applied, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct TimmDraw {
    pub steps: Vec<TimmStep>,
    pub fill: [u8; 3],
}

impl TimmRandAugment {
    /// `rand_augment: { timm: CONFIG, interpolation, fill }`.
    pub(crate) fn from_args(args: &Args<'_>) -> Result<TimmRandAugment, OpError> {
        args.only(&["timm", "interpolation", "fill"])?;
        let config = args.get("timm").and_then(Value::as_str).ok_or_else(|| {
            args.bad("timm", "be timm's RandAugment config string, like \"rand-m9-mstd0.5-inc1\"")
        })?;
        let mut ra = parse(config).map_err(|why| args.bad("timm", why))?;
        ra.interpolation = match args.get("interpolation") {
            None => Interpolation::Random,
            Some(v) => v
                .as_str()
                .and_then(Interpolation::parse)
                .ok_or_else(|| args.bad("interpolation", "be bilinear, bicubic or random (timm's default)"))?,
        };
        ra.fill = match args.get("fill") {
            None => IMAGENET_FILL,
            Some(v) => fill(v).ok_or_else(|| args.bad("fill", "be a whole number from 0 to 255, or three (one per channel)"))?,
        };
        Ok(ra)
    }

    pub fn args(&self, out: &mut BTreeMap<&str, serde_json::Value>) {
        use serde_json::json;
        out.insert("timm", json!(self.config));
        out.insert("interpolation", json!(self.interpolation.name()));
        out.insert("fill", json!(self.fill));
    }

    /// `RandAugment.__call__`'s draws for one sample.
    pub fn draw(&self, rng: &mut impl Rng) -> TimmDraw {
        let mut steps = Vec::new();
        for _ in 0..self.num_layers {
            let op = OPS[rng.gen_range(0..OPS.len())];
            if self.prob < 1.0 && rng.gen::<f64>() > self.prob {
                continue;
            }
            let mut m = self.magnitude;
            if self.magnitude_std == f64::INFINITY {
                m = if m > 0.0 { rng.gen_range(0.0..m) } else { 0.0 };
            } else if self.magnitude_std > 0.0 {
                m += self.magnitude_std * standard_normal(rng);
            }
            let m = m.min(self.magnitude_max).max(0.0);
            let arg = self.level_to_arg(op, m, rng);
            let filter = if op.warps() { self.interpolation.draw(rng) } else { Filter::Bilinear };
            steps.push(TimmStep { op, arg, filter });
        }
        TimmDraw { steps, fill: self.fill }
    }

    /// timm's `LEVEL_TO_ARG` of `op` at magnitude `m`.
    fn level_to_arg(&self, op: TimmOp, m: f64, rng: &mut impl Rng) -> f64 {
        let level = m / LEVEL_DENOM;
        let mut negate = |v: f64| if rng.gen::<f64>() > 0.5 { -v } else { v };
        match op {
            TimmOp::AutoContrast | TimmOp::Equalize | TimmOp::Invert => 0.0,
            TimmOp::Rotate => negate(level * 30.0),
            TimmOp::Posterize => {
                let bits = (level * 4.0).trunc();
                if self.increasing {
                    4.0 - bits
                } else {
                    bits
                }
            }
            TimmOp::Solarize => {
                let threshold = (level * 256.0).trunc().min(256.0);
                if self.increasing {
                    256.0 - threshold
                } else {
                    threshold
                }
            }
            TimmOp::SolarizeAdd => (level * 110.0).trunc().min(128.0),
            TimmOp::Color | TimmOp::Contrast | TimmOp::Brightness | TimmOp::Sharpness => {
                if self.increasing {
                    (1.0 + negate(level * 0.9)).max(0.1)
                } else {
                    level * 1.8 + 0.1
                }
            }
            TimmOp::ShearX | TimmOp::ShearY => negate(level * 0.3),
            TimmOp::TranslateXRel | TimmOp::TranslateYRel => negate(level * 0.45),
        }
    }
}

impl TimmOp {
    /// The ops that resample through an affine matrix (and draw a filter).
    fn warps(self) -> bool {
        matches!(self, TimmOp::Rotate | TimmOp::ShearX | TimmOp::ShearY | TimmOp::TranslateXRel | TimmOp::TranslateYRel)
    }
}

impl TimmDraw {
    /// timm's op functions on packed RGB `pixels` of `size`.
    pub fn apply(&self, pixels: &mut [u8], size: Size2) {
        let (w, h) = (f64::from(size.width), f64::from(size.height));
        for step in &self.steps {
            let a = step.arg;
            let warp = |pixels: &mut [u8], m: [f64; 6]| pil_warp::transform(pixels, size, &m, step.filter, self.fill);
            match step.op {
                TimmOp::AutoContrast => tone::autocontrast(pixels),
                TimmOp::Equalize => tone::equalize(pixels),
                TimmOp::Invert => tone::invert(pixels),
                TimmOp::Rotate => warp(pixels, pil_warp::rotation(size, a)),
                // timm leaves 8 bits or more alone; PIL keeps nothing of fewer than 1.
                TimmOp::Posterize if a >= 8.0 => {}
                TimmOp::Posterize => tone::posterize(pixels, a.max(0.0) as u32),
                TimmOp::Solarize => tone::solarize(pixels, a),
                TimmOp::SolarizeAdd => tone::solarize_add(pixels, a as u32, 128),
                TimmOp::Color => color::pil_color(pixels, a as f32),
                TimmOp::Contrast => color::pil_contrast(pixels, a as f32),
                TimmOp::Brightness => color::brightness(pixels, a as f32),
                TimmOp::Sharpness => tone::sharpness(pixels, size, 1.0 - a as f32),
                TimmOp::ShearX => warp(pixels, [1.0, a, 0.0, 0.0, 1.0, 0.0]),
                TimmOp::ShearY => warp(pixels, [1.0, 0.0, 0.0, a, 1.0, 0.0]),
                TimmOp::TranslateXRel => warp(pixels, [1.0, 0.0, a * w, 0.0, 1.0, 0.0]),
                TimmOp::TranslateYRel => warp(pixels, [1.0, 0.0, 0.0, 0.0, 1.0, a * h]),
            }
        }
    }
}

/// `fill`: one whole number 0-255 for all three channels, or three.
fn fill(v: &Value) -> Option<[u8; 3]> {
    let one = |v: &Value| v.as_u64().filter(|n| *n <= 255).map(|n| n as u8);
    match v {
        Value::Number(_) => one(v).map(|n| [n; 3]),
        Value::Sequence(s) if s.len() == 3 => Some([one(&s[0])?, one(&s[1])?, one(&s[2])?]),
        _ => None,
    }
}

/// timm's `rand_augment_transform` config string; the error says what is wrong with it.
fn parse(config: &str) -> Result<TimmRandAugment, String> {
    let mut sections = config.split('-');
    if sections.next() != Some("rand") {
        return Err(format!("start with `rand-` (timm's RandAugment config string, like \"rand-m9-mstd0.5-inc1\"), got \"{config}\""));
    }
    let mut ra = TimmRandAugment {
        config: config.to_string(),
        magnitude: LEVEL_DENOM,
        num_layers: 2,
        prob: 0.5,
        magnitude_std: 0.0,
        magnitude_max: LEVEL_DENOM,
        increasing: false,
        interpolation: Interpolation::Random,
        fill: IMAGENET_FILL,
    };
    let mut seen = Vec::new();
    for section in sections {
        let split = section.find(|c: char| c.is_ascii_digit()).unwrap_or(section.len());
        let (key, val) = section.split_at(split);
        if key.starts_with('t') {
            return Err(format!("name no transform set (`{section}`): prepfs serves timm's default ops (and inc1's)"));
        }
        if val.is_empty() {
            return Err(format!("give each section a number, like m9 or mstd0.5; `{section}` has none (in \"{config}\")"));
        }
        if seen.contains(&key) {
            return Err(format!("give `{key}` once (in \"{config}\")"));
        }
        seen.push(key);
        let whole = |lo: u32, hi: u32| -> Result<u32, String> {
            val.parse::<u32>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| format!("have `{key}` a whole number from {lo} to {hi}, got `{section}`"))
        };
        match key {
            "m" => ra.magnitude = f64::from(whole(0, 100)?),
            "n" => ra.num_layers = whole(0, 16)?,
            "mmax" => ra.magnitude_max = f64::from(whole(1, 100)?),
            "p" => {
                ra.prob = val
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| format!("have `p` a probability in [0, 1], got `{section}`"))?
            }
            "mstd" => {
                let std = val
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| format!("have `mstd` a non-negative number, got `{section}`"))?;
                ra.magnitude_std = if std > 100.0 { f64::INFINITY } else { std };
            }
            "inc" => match val {
                "1" => ra.increasing = true,
                _ => {
                    return Err(format!(
                        "write `inc1` or leave it out: timm reads any `inc` section, `{section}` too, as inc1"
                    ))
                }
            },
            _ => return Err(format!("use timm's sections m, n, p, mstd, mmax, inc; `{section}` is none of them")),
        }
    }
    Ok(ra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::tests::parse_one;
    use crate::augment::AugmentOp;
    use crate::pixel_ops::PixelOp;
    use crate::draw::draw_rng;

    fn timm(config: &str) -> TimmRandAugment {
        match parse_one(&format!("rand_augment: {{timm: \"{config}\"}}")).expect("op") {
            AugmentOp::Pixel(PixelOp::TimmRandAugment(ra)) => ra,
            other => panic!("not timm's: {other:?}"),
        }
    }

    #[test]
    fn timms_documented_config_strings_parse_to_their_settings() {
        let ra = timm("rand-m9-mstd0.5-inc1");
        assert_eq!((ra.magnitude, ra.num_layers, ra.prob, ra.magnitude_std, ra.magnitude_max), (9.0, 2, 0.5, 0.5, 10.0));
        assert!(ra.increasing);
        assert_eq!((ra.interpolation, ra.fill), (Interpolation::Random, [124, 116, 104]));
        let ra = timm("rand-m9-mstd0.5");
        assert!(!ra.increasing);
        let ra = timm("rand-m7-mstd0.5-inc1");
        assert_eq!(ra.magnitude, 7.0);
        let ra = timm("rand-m9-n3-mstd0.5");
        assert_eq!(ra.num_layers, 3);
        let ra = timm("rand-m15-mmax20-p0.8-mstd101");
        assert_eq!((ra.magnitude, ra.magnitude_max, ra.prob, ra.magnitude_std), (15.0, 20.0, 0.8, f64::INFINITY));
        let ra = timm("rand");
        assert_eq!((ra.magnitude, ra.num_layers), (10.0, 2), "timm's defaults: m10, n2");
    }

    #[test]
    fn bad_config_strings_are_refused_naming_the_section() {
        let err = |config: &str| parse_one(&format!("rand_augment: {{timm: \"{config}\"}}")).unwrap_err();
        assert!(err("augmix-m5").contains("start with `rand-`"), "{}", err("augmix-m5"));
        assert!(err("rand-m9-x3").contains("`x3` is none of them"), "{}", err("rand-m9-x3"));
        assert!(err("rand-m9.5").contains("`m9.5`"), "{}", err("rand-m9.5"));
        assert!(err("rand-mstd").contains("`mstd` has none"), "{}", err("rand-mstd"));
        assert!(err("rand-inc0").contains("as inc1"), "{}", err("rand-inc0"));
        assert!(err("rand-p1.5").contains("probability"), "{}", err("rand-p1.5"));
        assert!(err("rand-tweights").contains("transform set"), "{}", err("rand-tweights"));
        assert!(err("rand-m9-m8").contains("`m` once"), "{}", err("rand-m9-m8"));
        assert!(err("rand-m9.5").starts_with("rand_augment: `timm` must"), "{}", err("rand-m9.5"));
        let other = parse_one("rand_augment: {timm: rand-m9, num_ops: 3}").unwrap_err();
        assert!(other.contains("unknown argument `num_ops`"), "{other}");
        let fill = parse_one("rand_augment: {timm: rand-m9, fill: [1, 2]}").unwrap_err();
        assert!(fill.contains("`fill`"), "{fill}");
    }

    #[test]
    fn each_op_is_applied_with_probability_p_and_ops_are_chosen_with_replacement() {
        let ra = timm("rand-m9-n2");
        let mut rng = draw_rng(21, 0, 0, 0);
        let (mut applied, mut same, mut seen) = (0usize, 0usize, std::collections::HashSet::new());
        let runs = 4000;
        for _ in 0..runs {
            let draw = TimmRandAugment { prob: 1.0, ..ra.clone() }.draw(&mut rng);
            if draw.steps[0].op == draw.steps[1].op {
                same += 1;
            }
            seen.extend(draw.steps.iter().map(|s| s.op as u8));
            applied += ra.draw(&mut rng).steps.len();
        }
        assert_eq!(seen.len(), 15);
        // Half of 2 ops a sample; a repeated op 1 time in 15.
        let mean = applied as f64 / runs as f64;
        assert!((mean - 1.0).abs() < 0.05, "{mean}");
        let repeat = same as f64 / runs as f64;
        assert!((repeat - 1.0 / 15.0).abs() < 0.015, "{repeat}");
    }

    #[test]
    fn magnitude_noise_is_gaussian_clipped_at_mmax_and_signed_half_the_time() {
        let ra = TimmRandAugment { prob: 1.0, num_layers: 1, ..timm("rand-m9-mstd0.5") };
        let mut rng = draw_rng(22, 0, 0, 0);
        let mut rotations = Vec::new();
        while rotations.len() < 3000 {
            let d = ra.draw(&mut rng);
            if d.steps[0].op == TimmOp::Rotate {
                rotations.push(d.steps[0].arg);
            }
        }
        // |degrees| = 3 * m, m ~ N(9, 0.5) clipped at 10: mean 27, sd 1.5, never past 30.
        let abs: Vec<f64> = rotations.iter().map(|d| d.abs()).collect();
        let mean = abs.iter().sum::<f64>() / abs.len() as f64;
        assert!((mean - 27.0).abs() < 0.15, "{mean}");
        assert!(abs.iter().all(|&d| d <= 30.0));
        let at_cap = abs.iter().filter(|&&d| d == 30.0).count() as f64 / abs.len() as f64;
        assert!((0.01..0.05).contains(&at_cap), "P(m > 10) = 2.3%: {at_cap}");
        let negative = rotations.iter().filter(|&&d| d < 0.0).count() as f64 / rotations.len() as f64;
        assert!((negative - 0.5).abs() < 0.04, "{negative}");
        // mstd over 100: uniform in [0, m].
        let uniform = TimmRandAugment { magnitude_std: f64::INFINITY, ..ra.clone() };
        let mut levels = Vec::new();
        while levels.len() < 2000 {
            let d = uniform.draw(&mut rng);
            if d.steps[0].op == TimmOp::ShearX {
                levels.push(d.steps[0].arg.abs() / 0.3 * 10.0);
            }
        }
        let mean = levels.iter().sum::<f64>() / levels.len() as f64;
        assert!((mean - 4.5).abs() < 0.15 && levels.iter().all(|&m| m <= 9.0), "{mean}");
    }

    #[test]
    fn increasing_ops_grow_stronger_with_the_magnitude() {
        let mut rng = draw_rng(23, 0, 0, 0);
        let at = |config: &str, op: TimmOp, m: f64, rng: &mut rand_pcg::Pcg64Mcg| timm(config).level_to_arg(op, m, rng);
        assert_eq!(at("rand", TimmOp::Posterize, 9.0, &mut rng), 3.0);
        assert_eq!(at("rand-inc1", TimmOp::Posterize, 9.0, &mut rng), 1.0);
        assert_eq!(at("rand", TimmOp::Solarize, 9.0, &mut rng), 230.0);
        assert_eq!(at("rand-inc1", TimmOp::Solarize, 9.0, &mut rng), 26.0);
        assert_eq!(at("rand", TimmOp::SolarizeAdd, 9.0, &mut rng), 99.0);
        assert!((at("rand", TimmOp::Contrast, 9.0, &mut rng) - 1.72).abs() < 1e-9);
        let inc = at("rand-inc1", TimmOp::Contrast, 9.0, &mut rng);
        assert!((inc - 1.81).abs() < 1e-9 || (inc - 0.19).abs() < 1e-9, "{inc}");
        assert!((at("rand", TimmOp::TranslateXRel, 10.0, &mut rng).abs() - 0.45).abs() < 1e-12);
    }

    #[test]
    fn applied_ops_keep_the_size_and_warps_fill_with_the_mean_colour() {
        let size = Size2::new(24, 16);
        let orig: Vec<u8> = (0..24 * 16 * 3).map(|i| (i * 7 % 200 + 20) as u8).collect();
        for op in OPS {
            let mut px = orig.clone();
            let arg = match op {
                TimmOp::Posterize => 2.0,
                TimmOp::Solarize => 100.0,
                TimmOp::SolarizeAdd => 60.0,
                TimmOp::Color | TimmOp::Contrast | TimmOp::Brightness | TimmOp::Sharpness => 1.7,
                TimmOp::Rotate => 25.0,
                _ => 0.3,
            };
            let draw = TimmDraw { steps: vec![TimmStep { op, arg, filter: Filter::Bicubic }], fill: [124, 116, 104] };
            draw.apply(&mut px, size);
            assert_eq!(px.len(), orig.len());
            assert_ne!(px, orig, "{op:?} changed nothing");
        }
        let mut px = orig.clone();
        let shift = TimmDraw {
            steps: vec![TimmStep { op: TimmOp::TranslateXRel, arg: 0.25, filter: Filter::Bilinear }],
            fill: [124, 116, 104],
        };
        shift.apply(&mut px, size);
        // A quarter of the width (6 pixels) sampled from the right: the last 6 columns filled.
        assert_eq!(&px[18 * 3..21 * 3], &[124, 116, 104].repeat(3)[..]);
        assert_eq!(&px[..3], &orig[6 * 3..7 * 3]);
    }

    /// Pillow's bytes (`Image.transform`, `Image.rotate`, `ImageEnhance`) for a 6x5 image, made
    /// once with Pillow 13 and kept here: timm's ops call exactly these.
    #[rustfmt::skip]
    mod pil {
        pub(super) const PIL_SHEAR_X_BICUBIC: [u8; 90] = [4, 7, 199, 45, 73, 196, 82, 132, 193, 119, 195, 190, 157, 215, 187, 189, 34, 184, 121, 132, 180, 0, 226, 177, 62, 150, 174, 99, 44, 171, 140, 142, 168, 161, 175, 166, 250, 81, 162, 66, 71, 159, 28, 141, 156, 77, 234, 153, 119, 87, 149, 124, 116, 104, 205, 163, 142, 228, 209, 139, 16, 28, 136, 64, 98, 133, 99, 154, 130, 124, 116, 104, 187, 18, 123, 244, 112, 120, 173, 190, 117, 13, 151, 114, 74, 0, 112, 124, 116, 104];
        pub(super) const PIL_ROTATE_BILINEAR: [u8; 90] = [124, 116, 104, 73, 117, 194, 107, 170, 191, 128, 173, 181, 150, 142, 171, 124, 116, 104, 26, 42, 197, 44, 144, 187, 65, 145, 176, 87, 105, 166, 108, 157, 156, 122, 55, 146, 162, 120, 182, 81, 133, 171, 23, 130, 161, 47, 134, 151, 66, 131, 141, 87, 134, 130, 197, 209, 166, 211, 107, 156, 185, 159, 146, 136, 119, 136, 100, 120, 125, 45, 142, 115, 124, 116, 104, 169, 122, 141, 191, 91, 131, 212, 94, 121, 242, 147, 118, 124, 116, 104];
        pub(super) const PIL_TRANSLATE_BILINEAR: [u8; 90] = [99, 159, 191, 136, 218, 188, 173, 108, 185, 124, 116, 104, 124, 116, 104, 124, 116, 104, 70, 103, 173, 107, 90, 170, 144, 149, 167, 124, 116, 104, 124, 116, 104, 124, 116, 104, 41, 144, 155, 78, 203, 152, 115, 93, 149, 124, 116, 104, 124, 116, 104, 124, 116, 104, 88, 88, 137, 49, 75, 134, 86, 134, 131, 124, 116, 104, 124, 116, 104, 124, 116, 104, 234, 129, 119, 96, 188, 116, 57, 78, 113, 124, 116, 104, 124, 116, 104, 124, 116, 104];
        pub(super) const PIL_ROTATE_BICUBIC: [u8; 90] = [211, 67, 187, 50, 81, 191, 33, 126, 192, 91, 143, 193, 130, 247, 192, 124, 116, 104, 215, 241, 170, 158, 122, 171, 17, 224, 171, 74, 103, 177, 118, 111, 180, 166, 139, 181, 180, 123, 152, 246, 88, 152, 41, 110, 153, 57, 154, 159, 99, 176, 160, 141, 141, 160, 151, 125, 131, 229, 153, 132, 195, 161, 135, 0, 38, 141, 93, 149, 141, 122, 33, 142, 124, 116, 104, 183, 17, 120, 255, 121, 119, 96, 163, 120, 52, 124, 121, 94, 148, 125];
        pub(super) const PIL_CONTRAST: [u8; 90] = [0, 0, 253, 0, 10, 248, 36, 112, 242, 100, 213, 237, 163, 255, 232, 227, 2, 227, 255, 103, 222, 0, 205, 217, 0, 255, 212, 50, 0, 206, 113, 95, 201, 177, 196, 196, 241, 255, 191, 255, 0, 186, 0, 86, 181, 0, 187, 175, 64, 255, 170, 127, 0, 165, 191, 77, 160, 255, 179, 155, 255, 255, 150, 0, 0, 144, 14, 69, 139, 77, 170, 134, 141, 255, 129, 205, 0, 124, 255, 60, 119, 255, 162, 113, 0, 255, 108, 27, 0, 103];
        pub(super) const PIL_COLOR: [u8; 90] = [16, 16, 76, 58, 65, 106, 102, 115, 138, 144, 164, 168, 187, 213, 199, 131, 91, 131, 173, 141, 161, 89, 138, 140, 131, 187, 171, 75, 65, 103, 118, 115, 133, 161, 164, 164, 204, 214, 195, 148, 92, 127, 62, 89, 105, 106, 138, 136, 148, 188, 167, 92, 66, 99, 135, 115, 129, 178, 165, 161, 221, 214, 191, 37, 40, 71, 79, 89, 101, 122, 138, 132, 165, 188, 163, 109, 66, 95, 152, 116, 126, 194, 165, 156, 110, 162, 135, 54, 40, 67];
        pub(super) const PIL_SHARPNESS: [u8; 90] = [0, 0, 200, 37, 59, 197, 74, 118, 194, 111, 177, 191, 148, 236, 188, 185, 54, 185, 222, 113, 182, 0, 205, 179, 27, 255, 176, 82, 0, 173, 119, 90, 170, 156, 167, 167, 193, 226, 164, 255, 0, 161, 0, 85, 158, 35, 179, 155, 90, 255, 152, 127, 39, 149, 164, 98, 146, 218, 174, 143, 255, 255, 140, 0, 0, 137, 43, 75, 134, 98, 152, 131, 135, 211, 128, 172, 29, 125, 209, 88, 122, 246, 147, 119, 32, 206, 116, 69, 24, 113];
    }

    #[test]
    fn warps_and_enhancers_give_pillows_bytes() {
        let size = Size2::new(6, 5);
        let src: Vec<u8> = (0..30u32).flat_map(|i| [(i * 37 % 251) as u8, (i * 59 % 241) as u8, (200 - i * 3) as u8]).collect();
        let step = |op, arg, filter| TimmDraw { steps: vec![TimmStep { op, arg, filter }], fill: [124, 116, 104] };
        let cases: [(&str, TimmDraw, &[u8; 90]); 7] = [
            ("shear_x bicubic", step(TimmOp::ShearX, 0.3, Filter::Bicubic), &pil::PIL_SHEAR_X_BICUBIC),
            ("rotate bilinear", step(TimmOp::Rotate, 25.0, Filter::Bilinear), &pil::PIL_ROTATE_BILINEAR),
            ("translate bilinear", step(TimmOp::TranslateXRel, 0.45, Filter::Bilinear), &pil::PIL_TRANSLATE_BILINEAR),
            ("rotate bicubic", step(TimmOp::Rotate, -17.0, Filter::Bicubic), &pil::PIL_ROTATE_BICUBIC),
            ("contrast", step(TimmOp::Contrast, 1.72, Filter::Bilinear), &pil::PIL_CONTRAST),
            ("color", step(TimmOp::Color, 0.3, Filter::Bilinear), &pil::PIL_COLOR),
            ("sharpness", step(TimmOp::Sharpness, 1.9, Filter::Bilinear), &pil::PIL_SHARPNESS),
        ];
        for (name, draw, want) in cases {
            let mut px = src.clone();
            draw.apply(&mut px, size);
            let off: Vec<(usize, u8, u8)> = px.iter().zip(want).enumerate().filter(|(_, (a, b))| a != b).map(|(i, (a, b))| (i, *a, *b)).collect();
            // float32 blends against Pillow's: a value may land one step apart, rarely.
            assert!(off.len() <= 2 && off.iter().all(|(_, a, b)| a.abs_diff(*b) <= 1), "{name}: {off:?}");
        }
    }
}
