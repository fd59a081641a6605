//! The ops that work on the output's pixels, after the geometry: their configuration (names,
//! arguments and defaults as torchvision v2's), their per-sample draws, and applying the drawn
//! steps in order.
//!
//! They run on the small image (after the resize), which keeps torchvision's result because
//! each of them needs the image at its final size and nothing else: so a pixel op must come
//! after the geometry (`random_resized_crop`, `resize`, `center_crop`), as torchvision's recipes
//! place them, and a config that puts one before is refused rather than served with another
//! distribution ([`check_order`]). `random_horizontal_flip` may sit anywhere: every pixel op here
//! is mirror-symmetric in distribution. `random_erasing` comes last (the output applies it, after
//! normalising on float32 output).

use std::collections::BTreeMap;

use rand::Rng;
use serde_norway::Value;

use crate::op_args::{Args, OpError};
use crate::autoaugment::{AutoAugment, AutoDraw, Warp};
use crate::blur::{self, GaussianBlur};
use crate::color::{self, ColorJitter, JitterDraw};
use crate::erasing::{Erase, EraseValue, RandomErasing};
use crate::rotation::{self, RandomRotation};
use crate::timm_rand::{TimmDraw, TimmRandAugment};
use crate::rgb::Size2;

/// The pixel ops' names in configs.
pub(crate) const NAMES: [&str; 8] = [
    "color_jitter",
    "random_rotation",
    "random_grayscale",
    "gaussian_blur",
    "random_erasing",
    "trivial_augment_wide",
    "rand_augment",
    "auto_augment",
];

/// One pixel op as configured.
#[derive(Debug, Clone, PartialEq)]
pub enum PixelOp {
    /// `ColorJitter(brightness, contrast, saturation, hue)`.
    ColorJitter(ColorJitter),
    /// `RandomGrayscale(p)`.
    RandomGrayscale { p: f64 },
    /// `GaussianBlur(kernel_size, sigma)`.
    GaussianBlur(GaussianBlur),
    /// `RandomErasing(p, scale, ratio, value)`.
    RandomErasing(RandomErasing),
    /// `TrivialAugmentWide`, `RandAugment`, `AutoAugment`.
    Auto(AutoAugment, Warp),
    /// timm's RandAugment (`rand_augment: { timm: "rand-m9-mstd0.5-inc1" }`).
    TimmRandAugment(TimmRandAugment),
    /// `RandomRotation(degrees, interpolation)` (`rotation.rs`).
    RandomRotation(RandomRotation),
}

/// One pixel op as drawn for one sample.
#[derive(Debug, Clone, PartialEq)]
pub enum PixelStep {
    Jitter(JitterDraw),
    Grayscale,
    Blur { kernel: (u32, u32), sigma: f32 },
    Auto(AutoDraw),
    Timm(TimmDraw),
    /// A turn by this many degrees, warped so.
    Rotate { degrees: f64, warp: Warp },
}

impl PixelOp {
    pub fn name(&self) -> &'static str {
        match self {
            PixelOp::ColorJitter(_) => "color_jitter",
            PixelOp::RandomGrayscale { .. } => "random_grayscale",
            PixelOp::GaussianBlur(_) => "gaussian_blur",
            PixelOp::RandomErasing(_) => "random_erasing",
            PixelOp::Auto(a, _) => a.name(),
            PixelOp::TimmRandAugment(_) => "rand_augment",
            PixelOp::RandomRotation(_) => "random_rotation",
        }
    }

    /// Parses the op `name` from its arguments; `None` for a name that is no pixel op.
    pub(crate) fn from_args(name: &str, args: &Args<'_>) -> Result<Option<PixelOp>, OpError> {
        let op = match name {
            "color_jitter" => {
                args.only(&["brightness", "contrast", "saturation", "hue"])?;
                PixelOp::ColorJitter(ColorJitter {
                    brightness: jitter_range(args, "brightness", 1.0, (0.0, f64::INFINITY))?,
                    contrast: jitter_range(args, "contrast", 1.0, (0.0, f64::INFINITY))?,
                    saturation: jitter_range(args, "saturation", 1.0, (0.0, f64::INFINITY))?,
                    hue: jitter_range(args, "hue", 0.0, (-0.5, 0.5))?,
                })
            }
            "random_grayscale" => {
                args.only(&["p"])?;
                PixelOp::RandomGrayscale { p: probability(args, 0.1)? }
            }
            "gaussian_blur" => {
                args.only(&["kernel_size", "sigma"])?;
                let kernel = kernel_size(args)?;
                let sigma = match args.get("sigma") {
                    Some(Value::Number(_)) => {
                        let s = args.float("sigma")?.unwrap_or(0.0);
                        (s, s)
                    }
                    _ => args.range("sigma", (0.1, 2.0))?,
                };
                if sigma.0.is_nan() || sigma.0 <= 0.0 {
                    return Err(args.bad("sigma", "be positive"));
                }
                PixelOp::GaussianBlur(GaussianBlur { kernel, sigma })
            }
            "random_erasing" => {
                args.only(&["p", "scale", "ratio", "value"])?;
                let scale = args.range("scale", (0.02, 0.33))?;
                if scale.1 > 1.0 {
                    return Err(args.bad("scale", "lie in (0, 1]"));
                }
                let value = match args.get("value") {
                    None => EraseValue::Fixed([0.0; 3]),
                    Some(Value::Number(_)) => EraseValue::Fixed([args.float("value")?.unwrap_or(0.0) as f32; 3]),
                    // One number in a list is every channel's, as torchvision takes it (v2's
                    // RandomErasing keeps `value=0` as `[0.0]`).
                    Some(Value::Sequence(one)) if one.len() == 1 => match one[0].as_f64() {
                        Some(v) => EraseValue::Fixed([v as f32; 3]),
                        None => return Err(args.bad("value", "be a number, three (one per channel), or random")),
                    },
                    Some(Value::Sequence(_)) => EraseValue::Fixed(args.triple("value")?.unwrap_or([0.0; 3])),
                    Some(Value::String(s)) if s == "random" => EraseValue::Random,
                    Some(_) => return Err(args.bad("value", "be a number, three (one per channel), or random")),
                };
                PixelOp::RandomErasing(RandomErasing {
                    p: probability(args, 0.5)?,
                    scale,
                    ratio: args.range("ratio", (0.3, 3.3))?,
                    value,
                })
            }
            "random_rotation" => PixelOp::RandomRotation(RandomRotation::from_args(args)?),
            "rand_augment" if args.get("timm").is_some() => PixelOp::TimmRandAugment(TimmRandAugment::from_args(args)?),
            other => match AutoAugment::from_args(other, args)? {
                Some((auto, warp)) => PixelOp::Auto(auto, warp),
                None => return Ok(None),
            },
        };
        Ok(Some(op))
    }

    /// The arguments as the configuration's summary writes them.
    pub fn args(&self, out: &mut BTreeMap<&str, serde_json::Value>) {
        use serde_json::json;
        match self {
            PixelOp::ColorJitter(j) => {
                for (key, range) in [("brightness", j.brightness), ("contrast", j.contrast), ("saturation", j.saturation), ("hue", j.hue)] {
                    if let Some((lo, hi)) = range {
                        out.insert(key, json!([lo, hi]));
                    }
                }
            }
            PixelOp::RandomGrayscale { p } => {
                out.insert("p", json!(p));
            }
            PixelOp::GaussianBlur(b) => {
                out.insert("kernel_size", json!([b.kernel.0, b.kernel.1]));
                out.insert("sigma", json!([b.sigma.0, b.sigma.1]));
            }
            PixelOp::RandomErasing(e) => {
                out.insert("p", json!(e.p));
                out.insert("scale", json!([e.scale.0, e.scale.1]));
                out.insert("ratio", json!([e.ratio.0, e.ratio.1]));
                match e.value {
                    EraseValue::Fixed(v) => out.insert("value", json!(v)),
                    EraseValue::Random => out.insert("value", json!("random")),
                };
            }
            PixelOp::Auto(a, warp) => a.args(*warp, out),
            PixelOp::TimmRandAugment(t) => t.args(out),
            PixelOp::RandomRotation(r) => {
                out.insert("degrees", json!([r.degrees.0, r.degrees.1]));
                if r.warp == Warp::Bilinear {
                    out.insert("interpolation", json!("bilinear"));
                }
            }
        }
    }

    /// This sample's draw for an image of `size`.
    pub fn draw(&self, size: Size2, rng: &mut impl Rng) -> PixelDraw {
        match self {
            PixelOp::ColorJitter(j) => PixelDraw::Step(PixelStep::Jitter(j.draw(rng))),
            PixelOp::RandomGrayscale { p } => {
                if rng.gen::<f64>() < *p {
                    PixelDraw::Step(PixelStep::Grayscale)
                } else {
                    PixelDraw::Nothing
                }
            }
            PixelOp::GaussianBlur(b) => PixelDraw::Step(PixelStep::Blur { kernel: b.kernel, sigma: b.draw(rng) }),
            PixelOp::RandomErasing(e) => match e.draw(size, rng) {
                Some(erase) => PixelDraw::Erase(erase),
                None => PixelDraw::Nothing,
            },
            PixelOp::Auto(a, warp) => PixelDraw::Step(PixelStep::Auto(a.draw(*warp, size, rng))),
            PixelOp::TimmRandAugment(t) => PixelDraw::Step(PixelStep::Timm(t.draw(rng))),
            PixelOp::RandomRotation(r) => PixelDraw::Step(PixelStep::Rotate { degrees: r.draw(rng), warp: r.warp }),
        }
    }
}

/// Applies the drawn steps in order to packed RGB `pixels` of `size`.
pub fn apply(steps: &[PixelStep], size: Size2, pixels: &mut [u8]) {
    for step in steps {
        match step {
            PixelStep::Jitter(j) => j.apply(pixels),
            PixelStep::Grayscale => color::grayscale(pixels),
            PixelStep::Blur { kernel, sigma } => {
                blur::blur(pixels, size.width as usize, size.height as usize, *kernel, *sigma)
            }
            PixelStep::Auto(a) => a.apply(pixels, size),
            PixelStep::Timm(t) => t.apply(pixels, size),
            PixelStep::Rotate { degrees, warp } => rotation::rotate(pixels, size, *degrees, *warp),
        }
    }
}

/// What a pixel op's draw comes to for one sample.
pub enum PixelDraw {
    /// An op on the pixels, in the pipeline's order.
    Step(PixelStep),
    /// `random_erasing`'s rectangle.
    Erase(Erase),
    /// Nothing this time (a random op not drawn).
    Nothing,
}

/// torchvision's `_check_input`: a number `v` is [center - v, center + v] (the low end clipped at
/// 0 for the factors), a pair is taken as given; both within `bound`. `None` when it is the
/// identity (off).
fn jitter_range(args: &Args<'_>, key: &str, center: f64, bound: (f64, f64)) -> Result<Option<(f64, f64)>, OpError> {
    let (lo, hi) = match args.get(key) {
        None => return Ok(None),
        Some(Value::Number(_)) => {
            let v = args.float(key)?.unwrap_or(0.0);
            if v < 0.0 {
                return Err(args.bad(key, "be non-negative"));
            }
            let lo = if center == 1.0 { (center - v).max(0.0) } else { center - v };
            (lo, center + v)
        }
        Some(Value::Sequence(s)) if s.len() == 2 => match (s[0].as_f64(), s[1].as_f64()) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => return Err(args.bad(key, "be a number or [low, high]")),
        },
        Some(_) => return Err(args.bad(key, "be a number or [low, high]")),
    };
    if !(bound.0 <= lo && lo <= hi && hi <= bound.1) {
        return Err(args.bad(key, format!("lie within [{}, {}] with low <= high", bound.0, bound.1)));
    }
    Ok(if lo == center && hi == center { None } else { Some((lo, hi)) })
}

/// `p`, in [0, 1], `default` when absent.
pub(crate) fn probability(args: &Args<'_>, default: f64) -> Result<f64, OpError> {
    let p = args.float("p")?.unwrap_or(default);
    if !(0.0..=1.0).contains(&p) {
        return Err(args.bad("p", format!("lie in [0, 1], got {p}")));
    }
    Ok(p)
}

/// `gaussian_blur`'s `kernel_size`: n or [kx, ky], odd and positive.
fn kernel_size(args: &Args<'_>) -> Result<(u32, u32), OpError> {
    let bad = || args.bad("kernel_size", "be an odd whole number from 1 to 255, or [kx, ky] of them");
    let one = |v: &Value| v.as_u64().filter(|k| k % 2 == 1 && *k <= 255).map(|k| k as u32).ok_or_else(bad);
    match args.get("kernel_size") {
        None => Err(args.missing("kernel_size")),
        Some(v @ Value::Number(_)) => one(v).map(|k| (k, k)),
        Some(Value::Sequence(s)) if s.len() == 2 => Ok((one(&s[0])?, one(&s[1])?)),
        Some(_) => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::augment::tests::parse_one as parse;
    use crate::augment::{check_order, AugmentOp};

    #[test]
    fn color_jitter_reads_torchvisions_ranges() {
        let AugmentOp::Pixel(PixelOp::ColorJitter(j)) = parse("color_jitter: {brightness: 0.4, contrast: [0.5, 1.5], hue: 0.1}").expect("op")
        else {
            panic!("not a jitter")
        };
        assert_eq!(j.brightness, Some((0.6, 1.4)));
        assert_eq!(j.contrast, Some((0.5, 1.5)));
        assert_eq!(j.saturation, None);
        assert_eq!(j.hue, Some((-0.1, 0.1)));
        let AugmentOp::Pixel(PixelOp::ColorJitter(j)) = parse("color_jitter: {brightness: 1.5}").expect("op") else { panic!() };
        assert_eq!(j.brightness, Some((0.0, 2.5)));
        assert!(parse("color_jitter: {hue: 0.7}").unwrap_err().contains("hue"));
        assert!(parse("color_jitter: {gamma: 1}").unwrap_err().contains("gamma"));
    }

    #[test]
    fn blur_and_erasing_take_torchvisions_defaults() {
        assert_eq!(
            parse("gaussian_blur: {kernel_size: 5}").expect("op"),
            AugmentOp::Pixel(PixelOp::GaussianBlur(GaussianBlur { kernel: (5, 5), sigma: (0.1, 2.0) }))
        );
        assert!(parse("gaussian_blur: {kernel_size: 4}").unwrap_err().contains("kernel_size"));
        assert_eq!(parse("gaussian_blur: {}").unwrap_err(), "gaussian_blur: `kernel_size` is required");
        assert_eq!(
            parse("random_erasing: {}").expect("op"),
            AugmentOp::Pixel(PixelOp::RandomErasing(RandomErasing {
                p: 0.5,
                scale: (0.02, 0.33),
                ratio: (0.3, 3.3),
                value: EraseValue::Fixed([0.0; 3])
            }))
        );
        assert_eq!(parse("random_grayscale: {}").expect("op"), AugmentOp::Pixel(PixelOp::RandomGrayscale { p: 0.1 }));
        let AugmentOp::Pixel(PixelOp::RandomErasing(e)) = parse("random_erasing: {value: random}").expect("op") else { panic!() };
        assert_eq!(e.value, EraseValue::Random);
        let err = parse("random_erasing: {value: noise}").unwrap_err();
        assert_eq!(err, "random_erasing: `value` must be a number, three (one per channel), or random");
        // One number in a list (torchvision v2 keeps `value=0` as `[0.0]`) is every channel's.
        let AugmentOp::Pixel(PixelOp::RandomErasing(e)) = parse("random_erasing: {value: [0.5]}").expect("op") else { panic!() };
        assert_eq!(e.value, EraseValue::Fixed([0.5; 3]));
        assert!(parse("random_erasing: {value: [0.5, 1]}").is_err());
    }

    #[test]
    fn a_pixel_op_before_the_geometry_or_after_erasing_is_refused() {
        let ops = |yaml: &str| -> Vec<AugmentOp> {
            let list: Vec<BTreeMap<String, Value>> = serde_norway::from_str(yaml).expect("yaml");
            list.iter().map(|e| AugmentOp::from_yaml(e).expect("op")).collect()
        };
        let good = ops("- random_resized_crop: {size: 8}\n- color_jitter: {brightness: 0.4}\n- random_horizontal_flip: {}\n- random_erasing: {}");
        assert!(check_order(&good).is_ok());
        let (i, why) = check_order(&ops("- color_jitter: {brightness: 0.4}\n- center_crop: {size: 8}")).unwrap_err();
        assert_eq!(i, 0);
        assert!(why.to_string().starts_with("color_jitter: goes after the geometry"), "{why}");
        let (i, why) = check_order(&ops("- center_crop: {size: 8}\n- random_erasing: {}\n- random_grayscale: {}")).unwrap_err();
        assert_eq!((i, why.to_string()), (1, "random_erasing: comes last (after normalize), where torchvision places it".to_string()));
    }

    #[test]
    fn resize_then_random_resized_crop_serves_torchvisions_two_resamples() {
        use crate::augment::{plan_sample, ResizeTo};
        use crate::interpolation::{Filter, Interpolation};
        use crate::pipeline;
        use crate::rgb::RgbRef;
        use crate::draw::draw_rng;
        let jpeg = crate::synthetic::photo_jpeg(512, 384, turbojpeg::Subsamp::None);
        let ops = vec![
            AugmentOp::Resize { to: ResizeTo::ShorterSide(64), interpolation: Interpolation::Bilinear },
            AugmentOp::RandomResizedCrop {
                size: Size2::new(48, 48),
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0),
                interpolation: Interpolation::Bilinear,
            },
        ];
        let full = pipeline::decode_full(&jpeg, 1 << 30).expect("decode");
        for sample in 0..10 {
            let plan = plan_sample(&ops, Size2::new(512, 384), &mut draw_rng(1, 0, 0, sample));
            let served = pipeline::augment(&jpeg, &plan, 1 << 30).expect("served");
            // torchvision: the whole image resized, then the crop of that resized.
            let mut small = vec![0u8; 85 * 64 * 3];
            let whole = crate::augment::Rect::whole(Size2::new(512, 384));
            pipeline::resample_into(RgbRef::of(&full), (0, 0), whole, Size2::new(85, 64), Filter::Bilinear, &mut small).expect("resize");
            let mut crop = vec![0u8; 48 * 48 * 3];
            let stage = plan.then[0];
            let small = RgbRef { width: 85, height: 64, pixels: &small };
            pipeline::resample_into(small, (0, 0), stage.crop, stage.out, stage.filter, &mut crop).expect("crop");
            let reference = crate::rgb::Rgb { width: 48, height: 48, pixels: crop };
            let diff = pipeline::mean_abs_diff(&served, &reference);
            assert!(diff <= pipeline::FAST_PATH_TOLERANCE, "draw {sample}: {diff}");
        }
    }

    #[test]
    fn erasing_on_float32_output_writes_the_value_after_normalising() {
        use crate::output_config::{Dtype, Format, OutputConfig};
        use crate::augment::plan_sample;
        use crate::output::Dest;
        use crate::pipeline;
        use crate::draw::draw_rng;
        let jpeg = crate::synthetic::photo_jpeg(200, 150, turbojpeg::Subsamp::None);
        let list: Vec<BTreeMap<String, Value>> =
            serde_norway::from_str("- center_crop: {size: 64}\n- random_erasing: {p: 1.0, value: 0}").expect("yaml");
        let ops: Vec<AugmentOp> = list.iter().map(|e| AugmentOp::from_yaml(e).expect("op")).collect();
        let output = OutputConfig { format: Format::Npy, dtype: Dtype::Float32, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225], ..OutputConfig::default() };
        let plan = plan_sample(&ops, Size2::new(200, 150), &mut draw_rng(3, 0, 0, 0));
        let e = plan.erase.expect("p = 1 erases");
        let bytes = pipeline::augment_served(&jpeg, &plan, 1 << 30, &output, Dest::Memory).expect("served").to_vec().expect("bytes");
        let body = &bytes[bytes.len() - 64 * 64 * 3 * 4..];
        let value = |c: usize, y: u32, x: u32| f32::from_le_bytes(body[(c * 64 * 64 + (y * 64 + x) as usize) * 4..][..4].try_into().expect("4"));
        let zeros = (0..3).map(|c| (0..64).flat_map(|y| (0..64).map(move |x| (y, x))).filter(|&(y, x)| value(c, y, x) == 0.0).count()).sum::<usize>();
        assert_eq!(zeros, 3 * (e.height * e.width) as usize, "exactly the rectangle is 0 after normalising");
        assert_eq!(value(1, e.top, e.left), 0.0);
    }
}
