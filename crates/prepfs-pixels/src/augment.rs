//! The augmentation pipeline: torchvision's operations, their random draws, and the geometry
//! they amount to.
//!
//! A pipeline is an ordered list of [`AugmentOp`]s with torchvision's names and semantics. For one
//! sample, [`plan_sample`] draws every random parameter (a pure function of the draw seed) and
//! folds the whole list into one [`SamplePlan`]: a rectangle of the source image, the output
//! size and a mirror flag. Folding the geometry first is what lets the decoder do the
//! data-reducing work early (decode only the rectangle, let the DCT downscale), Pecan-style.
//! Pixels are produced by `pipeline`, not here. An `augment:` entry of the configuration that
//! cannot be read is an [`OpError`] naming the operation and the argument.

use std::collections::BTreeMap;

use rand::Rng;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_norway::Value;
use crate::interpolation::{Filter, Interpolation};
use crate::op_args::{Args, OpError};
use crate::pixel_ops::{PixelDraw, PixelOp, PixelStep};
use crate::erasing::Erase;
use crate::rgb::Size2;

/// `resize`'s target: torchvision's `Resize(int)` (shorter side) or `Resize((h, w))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ResizeTo {
    ShorterSide(u32),
    Exact(Size2),
}

/// One operation of the pipeline, with torchvision's semantics.
#[derive(Debug, Clone, PartialEq)]
pub enum AugmentOp {
    /// `RandomResizedCrop(size, scale, ratio, interpolation)`, antialiased.
    RandomResizedCrop { size: Size2, scale: (f64, f64), ratio: (f64, f64), interpolation: Interpolation },
    /// `RandomHorizontalFlip(p)`.
    RandomHorizontalFlip { p: f64 },
    /// `Resize(size, interpolation)`, antialiased.
    Resize { to: ResizeTo, interpolation: Interpolation },
    /// `CenterCrop(size)`.
    CenterCrop { size: Size2 },
    /// `RandomCrop(size)`: a window of `size` at a uniformly drawn place (torchvision's
    /// `randint(0, h - th + 1)`, `randint(0, w - tw + 1)`); no padding.
    RandomCrop { size: Size2 },
    /// `Normalize(mean, std)` on `ToTensor`'s 0-1 values; npy float32 output only.
    Normalize { mean: [f32; 3], std: [f32; 3] },
    /// An op on the output's pixels (colour, blur, erasing, the auto-augment policies):
    /// `pixel_ops`.
    Pixel(PixelOp),
}

impl AugmentOp {
    /// torchvision's standard ImageNet training geometry: `RandomResizedCrop(224)` and a flip.
    pub fn imagenet_train() -> Vec<AugmentOp> {
        vec![
            AugmentOp::RandomResizedCrop {
                size: Size2::new(224, 224),
                scale: (0.08, 1.0),
                ratio: (3.0 / 4.0, 4.0 / 3.0),
                interpolation: Interpolation::Bilinear,
            },
            AugmentOp::RandomHorizontalFlip { p: 0.5 },
        ]
    }

    /// The operation's name in configs.
    pub fn name(&self) -> &'static str {
        match self {
            AugmentOp::RandomResizedCrop { .. } => "random_resized_crop",
            AugmentOp::RandomHorizontalFlip { .. } => "random_horizontal_flip",
            AugmentOp::Resize { .. } => "resize",
            AugmentOp::CenterCrop { .. } => "center_crop",
            AugmentOp::RandomCrop { .. } => "random_crop",
            AugmentOp::Normalize { .. } => "normalize",
            AugmentOp::Pixel(op) => op.name(),
        }
    }

    /// Parses one list entry, `{op_name: {arg: value, ...}}`; the error names the argument.
    pub fn from_yaml(entry: &BTreeMap<String, Value>) -> Result<AugmentOp, OpError> {
        let (name, args) = match entry.iter().next() {
            Some(only) if entry.len() == 1 => only,
            _ => return Err(OpError::NotOneOperation),
        };
        let args = Args::new(name, args)?;
        let op = match name.as_str() {
            "random_resized_crop" => {
                let op = AugmentOp::RandomResizedCrop {
                    size: args.size("size")?.ok_or_else(|| args.missing("size"))?,
                    scale: args.range("scale", (0.08, 1.0))?,
                    ratio: args.range("ratio", (3.0 / 4.0, 4.0 / 3.0))?,
                    interpolation: args.interpolation()?,
                };
                args.only(&["size", "scale", "ratio", "interpolation", "antialias"])?;
                op
            }
            "random_horizontal_flip" => {
                let p = args.float("p")?.unwrap_or(0.5);
                if !(0.0..=1.0).contains(&p) {
                    return Err(args.bad("p", format!("lie in [0, 1], got {p}")));
                }
                args.only(&["p"])?;
                AugmentOp::RandomHorizontalFlip { p }
            }
            "resize" => {
                let to = match args.get("size") {
                    Some(Value::Number(_)) => ResizeTo::ShorterSide(args.side("size")?),
                    Some(_) => ResizeTo::Exact(args.size("size")?.ok_or_else(|| args.missing("size"))?),
                    None => return Err(args.missing("size")),
                };
                args.only(&["size", "interpolation", "antialias"])?;
                AugmentOp::Resize { to, interpolation: args.interpolation()? }
            }
            "center_crop" => {
                let size = args.size("size")?.ok_or_else(|| args.missing("size"))?;
                args.only(&["size"])?;
                AugmentOp::CenterCrop { size }
            }
            "random_crop" => {
                let size = args.size("size")?.ok_or_else(|| args.missing("size"))?;
                // torchvision's defaults, accepted as written; padding is not implemented.
                if args.get("padding").is_some_and(|v| !v.is_null()) {
                    return Err(OpError::Unsupported { op: "random_crop".into(), setting: "padding: null" });
                }
                if args.get("pad_if_needed").is_some_and(|v| v.as_bool() != Some(false)) {
                    return Err(OpError::Unsupported { op: "random_crop".into(), setting: "pad_if_needed: false" });
                }
                args.only(&["size", "padding", "pad_if_needed"])?;
                AugmentOp::RandomCrop { size }
            }
            "normalize" => {
                let mean = args.triple("mean")?.ok_or_else(|| args.missing("mean"))?;
                let std = args.triple("std")?.ok_or_else(|| args.missing("std"))?;
                args.only(&["mean", "std"])?;
                AugmentOp::Normalize { mean, std }
            }
            other => match PixelOp::from_args(other, &args)? {
                Some(op) => AugmentOp::Pixel(op),
                None => {
                    let known = format!("random_resized_crop, random_horizontal_flip, resize, center_crop, random_crop, normalize, {}", crate::pixel_ops::NAMES.join(", "));
                    return Err(OpError::UnknownOperation { op: other.to_string(), known });
                }
            },
        };
        Ok(op)
    }
}

impl Serialize for AugmentOp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut args: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
        let size = |s: &Size2| serde_json::json!([s.height, s.width]);
        match self {
            AugmentOp::RandomResizedCrop { size: s, scale, ratio, interpolation } => {
                args.insert("size", size(s));
                args.insert("scale", serde_json::json!([scale.0, scale.1]));
                args.insert("ratio", serde_json::json!([ratio.0, ratio.1]));
                args.insert("interpolation", serde_json::json!(interpolation.name()));
            }
            AugmentOp::RandomHorizontalFlip { p } => {
                args.insert("p", serde_json::json!(p));
            }
            AugmentOp::Resize { to, interpolation } => {
                let n = match to {
                    ResizeTo::ShorterSide(n) => serde_json::json!(n),
                    ResizeTo::Exact(s) => size(s),
                };
                args.insert("size", n);
                args.insert("interpolation", serde_json::json!(interpolation.name()));
            }
            AugmentOp::CenterCrop { size: s } | AugmentOp::RandomCrop { size: s } => {
                args.insert("size", size(s));
            }
            AugmentOp::Normalize { mean, std } => {
                args.insert("mean", serde_json::json!(mean));
                args.insert("std", serde_json::json!(std));
            }
            AugmentOp::Pixel(op) => op.args(&mut args),
        }
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry(self.name(), &args)?;
        map.end()
    }
}

/// Refuses a pixel op before a geometric op, and anything after `random_erasing` but a flip;
/// the error is the op's index and why.
pub fn check_order(ops: &[AugmentOp]) -> Result<(), (usize, OpError)> {
    let geometry = |op: &AugmentOp| {
        matches!(
            op,
            AugmentOp::RandomResizedCrop { .. } | AugmentOp::Resize { .. } | AugmentOp::CenterCrop { .. } | AugmentOp::RandomCrop { .. }
        )
    };
    for (i, op) in ops.iter().enumerate() {
        let AugmentOp::Pixel(pixel) = op else { continue };
        let later = &ops[i + 1..];
        if later.iter().any(geometry) {
            let why = "goes after the geometry (random_resized_crop, resize, center_crop, random_crop): prepfs runs it \
                       on the output's pixels, where torchvision's recipes place it";
            return Err((i, OpError::Placement { op: pixel.name().to_string(), why }));
        }
        let erasing = matches!(pixel, PixelOp::RandomErasing(_));
        if erasing && later.iter().any(|o| !matches!(o, AugmentOp::RandomHorizontalFlip { .. })) {
            let why = "comes last (after normalize), where torchvision places it";
            return Err((i, OpError::Placement { op: pixel.name().to_string(), why }));
        }
    }
    Ok(())
}

/// A rectangle in source-image pixel coordinates (pixel k covers [k, k+1)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
}

/// Everything one sample's augmentation does, after the random draws: resample `crop` of the
/// source to `out` with `filter`, then each of `then` in turn, mirror if `flip`, then the pixel
/// ops' `pixels` and the `erase` (which the output applies: after normalising on float32).
///
/// Geometry folds into one resample where that keeps torchvision's result: a crop after a resize
/// is a crop of the source, exactly. A resample after a resample (`resize` then
/// `random_resized_crop`) is not folded: upscaling a small crop of the source is sharper than
/// torchvision's crop of the resized image, so it becomes a second resample in `then`.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplePlan {
    pub crop: Rect,
    pub out: Size2,
    pub filter: Filter,
    pub then: Vec<Resample>,
    pub flip: bool,
    pub pixels: Vec<PixelStep>,
    pub(crate) erase: Option<Erase>,
}

/// One resample after the first: `crop` of the previous resample's output to `out`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resample {
    pub crop: Rect,
    pub out: Size2,
    pub filter: Filter,
}

impl SamplePlan {
    /// The identity plan: the whole image at full resolution.
    #[cfg(test)]
    pub fn identity(source: Size2) -> SamplePlan {
        SamplePlan {
            crop: Rect::whole(source),
            out: source,
            filter: Filter::Bilinear,
            then: Vec::new(),
            flip: false,
            pixels: Vec::new(),
            erase: None,
        }
    }

    /// The size of the served image (the last resample's output).
    pub fn size(&self) -> Size2 {
        self.then.last().map_or(self.out, |r| r.out)
    }
}

impl Rect {
    /// All of an image of `size`.
    pub fn whole(size: Size2) -> Rect {
        Rect { x: 0.0, y: 0.0, width: size.width.into(), height: size.height.into() }
    }
}

/// The output size the pipeline always produces, whatever the source size; `None` when it
/// depends on the source (then augmented files would have no exact size before reading).
pub fn fixed_output_size(ops: &[AugmentOp]) -> Option<Size2> {
    let mut size = None;
    for op in ops {
        match op {
            AugmentOp::RandomResizedCrop { size: s, .. } | AugmentOp::CenterCrop { size: s } | AugmentOp::RandomCrop { size: s } => {
                size = Some(*s)
            }
            AugmentOp::Resize { to: ResizeTo::Exact(s), .. } => size = Some(*s),
            AugmentOp::Resize { to: ResizeTo::ShorterSide(_), .. } => size = None,
            AugmentOp::RandomHorizontalFlip { .. } | AugmentOp::Normalize { .. } | AugmentOp::Pixel(_) => {}
        }
    }
    size
}

/// Draws every random parameter of the pipeline for a source of size `source` and folds the
/// geometry into as few resamples as keep torchvision's result. Follows torchvision's order of
/// draws and its integer rounding.
pub fn plan_sample(ops: &[AugmentOp], source: Size2, rng: &mut impl Rng) -> SamplePlan {
    let mut cur = source;
    // Every resample, the first of the source; each crop in its input's pixels.
    let mut stages = vec![Resample { crop: Rect::whole(source), out: source, filter: Filter::Bilinear }];
    // Whether the last resample already changes the scale (then a new one is not folded in).
    let mut scaled = false;
    let mut flip = false;
    let mut pixels = Vec::new();
    let mut erase = None;
    // Maps a crop of the current image (x, y, w, h in its pixels) back onto the last resample's
    // input; a flip still to come mirrors it.
    let take = |cur: Size2, crop: &mut Rect, flip: bool, x: u32, y: u32, w: u32, h: u32| {
        let x = if flip { cur.width - x - w } else { x };
        let sx = crop.width / f64::from(cur.width);
        let sy = crop.height / f64::from(cur.height);
        *crop = Rect {
            x: crop.x + f64::from(x) * sx,
            y: crop.y + f64::from(y) * sy,
            width: f64::from(w) * sx,
            height: f64::from(h) * sy,
        };
    };
    for op in ops {
        match op {
            AugmentOp::RandomResizedCrop { size, scale, ratio, interpolation } => {
                let (i, j, h, w) = random_resized_crop_params(cur, *scale, *ratio, rng);
                if scaled {
                    stages.push(Resample { crop: Rect::whole(cur), out: cur, filter: Filter::Bilinear });
                }
                let stage = stages.last_mut().expect("the source's resample");
                take(cur, &mut stage.crop, flip, j, i, w, h);
                stage.out = *size;
                stage.filter = interpolation.draw(rng);
                scaled = true;
                cur = *size;
            }
            AugmentOp::RandomHorizontalFlip { p } => {
                if rng.gen::<f64>() < *p {
                    flip = !flip;
                }
            }
            AugmentOp::Resize { to, interpolation } => {
                let next = match to {
                    ResizeTo::Exact(size) => *size,
                    ResizeTo::ShorterSide(n) => shorter_side_resize(cur, *n),
                };
                if scaled {
                    stages.push(Resample { crop: Rect::whole(cur), out: cur, filter: Filter::Bilinear });
                }
                let stage = stages.last_mut().expect("the source's resample");
                stage.out = next;
                stage.filter = interpolation.draw(rng);
                scaled = true;
                cur = next;
            }
            AugmentOp::CenterCrop { size } => {
                let w = size.width.min(cur.width);
                let h = size.height.min(cur.height);
                let top = ((f64::from(cur.height - h)) / 2.0).round_ties_even() as u32;
                let left = ((f64::from(cur.width - w)) / 2.0).round_ties_even() as u32;
                let stage = stages.last_mut().expect("the source's resample");
                take(cur, &mut stage.crop, flip, left, top, w, h);
                cur = Size2::new(w, h);
                stage.out = cur;
            }
            AugmentOp::RandomCrop { size } => {
                let w = size.width.min(cur.width);
                let h = size.height.min(cur.height);
                // torchvision draws the row, then the column.
                let top = rng.gen_range(0..=cur.height - h);
                let left = rng.gen_range(0..=cur.width - w);
                let stage = stages.last_mut().expect("the source's resample");
                take(cur, &mut stage.crop, flip, left, top, w, h);
                cur = Size2::new(w, h);
                stage.out = cur;
            }
            AugmentOp::Normalize { .. } => {}
            AugmentOp::Pixel(op) => match op.draw(cur, rng) {
                PixelDraw::Step(step) => pixels.push(step),
                PixelDraw::Erase(e) => erase = Some(e),
                PixelDraw::Nothing => {}
            },
        }
    }
    let first = stages.remove(0);
    SamplePlan { crop: first.crop, out: first.out, filter: first.filter, then: stages, flip, pixels, erase }
}

/// torchvision's `Resize(int)` output size: the shorter side becomes `n`, the longer keeps the
/// aspect ratio (truncated, as torchvision does).
pub(crate) fn shorter_side_resize(cur: Size2, n: u32) -> Size2 {
    let (w, h) = (u64::from(cur.width), u64::from(cur.height));
    if w <= h {
        Size2::new(n, ((u64::from(n) * h) / w).max(1) as u32)
    } else {
        Size2::new(((u64::from(n) * w) / h).max(1) as u32, n)
    }
}

/// torchvision's `RandomResizedCrop.get_params`: ten tries at a random area and log-uniform
/// aspect ratio, then the central-crop fallback. Returns (top, left, height, width).
pub(crate) fn random_resized_crop_params(
    image: Size2,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut impl Rng,
) -> (u32, u32, u32, u32) {
    let (width, height) = (f64::from(image.width), f64::from(image.height));
    let area = width * height;
    let (log_lo, log_hi) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target_area = area * uniform(rng, scale.0, scale.1);
        let aspect = uniform(rng, log_lo, log_hi).exp();
        let w = (target_area * aspect).sqrt().round_ties_even();
        let h = (target_area / aspect).sqrt().round_ties_even();
        if w > 0.0 && w <= width && h > 0.0 && h <= height {
            let (w, h) = (w as u32, h as u32);
            let i = rng.gen_range(0..=image.height - h);
            let j = rng.gen_range(0..=image.width - w);
            return (i, j, h, w);
        }
    }
    let in_ratio = width / height;
    let (w, h) = if in_ratio < ratio.0 {
        (image.width, ((width / ratio.0).round_ties_even() as u32).max(1))
    } else if in_ratio > ratio.1 {
        (((height * ratio.1).round_ties_even() as u32).max(1), image.height)
    } else {
        (image.width, image.height)
    };
    ((image.height - h) / 2, (image.width - w) / 2, h, w)
}

fn uniform(rng: &mut impl Rng, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        lo + (hi - lo) * rng.gen::<f64>()
    } else {
        lo
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::draw::draw_rng;

    /// One `augment:` entry parsed from YAML, or its error's text (the ops' tests' parser).
    pub(crate) fn parse_one(yaml: &str) -> Result<AugmentOp, String> {
        let entry: BTreeMap<String, Value> = serde_norway::from_str(yaml).expect("yaml");
        AugmentOp::from_yaml(&entry).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_torchvision_names_and_defaults() {
        let op = parse_one("random_resized_crop: { size: 224 }").expect("op");
        assert_eq!(
            op,
            AugmentOp::RandomResizedCrop {
                size: Size2::new(224, 224),
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0),
                interpolation: Interpolation::Bilinear,
            }
        );
        assert_eq!(parse_one("random_horizontal_flip:").expect("op"), AugmentOp::RandomHorizontalFlip { p: 0.5 });
        assert_eq!(
            parse_one("resize: { size: 256 }").expect("op"),
            AugmentOp::Resize { to: ResizeTo::ShorterSide(256), interpolation: Interpolation::Bilinear }
        );
        assert_eq!(
            parse_one("center_crop: { size: [100, 200] }").expect("op"),
            AugmentOp::CenterCrop { size: Size2::new(200, 100) }
        );
        assert!(parse_one("random_resized_crop: { size: 224, scale: [0.5, 0.1] }").unwrap_err().contains("scale"));
        assert!(parse_one("random_resized_crop: { size: 224, interpolation: nearest }").is_err());
        assert!(parse_one("resize: { size: 0 }").unwrap_err().contains("size"));
        assert!(parse_one("center_crop: { size: 2, pad: 1 }").unwrap_err().contains("pad"));
    }

    #[test]
    fn interpolation_is_read_as_torchvision_and_timm_name_it() {
        let rrc = |i: Interpolation| AugmentOp::RandomResizedCrop {
            size: Size2::new(224, 224),
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
            interpolation: i,
        };
        assert_eq!(parse_one("random_resized_crop: { size: 224, interpolation: bicubic }"), Ok(rrc(Interpolation::Bicubic)));
        assert_eq!(parse_one("random_resized_crop: { size: 224, interpolation: random }"), Ok(rrc(Interpolation::Random)));
        assert_eq!(
            parse_one("resize: { size: 232, interpolation: bicubic, antialias: true }"),
            Ok(AugmentOp::Resize { to: ResizeTo::ShorterSide(232), interpolation: Interpolation::Bicubic })
        );
        assert!(parse_one("resize: { size: 8, antialias: false }").unwrap_err().contains("antialias: true"));
        let plan = plan_sample(&[rrc(Interpolation::Bicubic)], Size2::new(300, 200), &mut draw_rng(0, 0, 0, 0));
        assert_eq!(plan.filter, Filter::Bicubic);
    }

    #[test]
    fn resize_then_random_resized_crop_is_two_resamples_not_one() {
        let ops = vec![
            AugmentOp::Resize { to: ResizeTo::ShorterSide(64), interpolation: Interpolation::Bilinear },
            AugmentOp::RandomResizedCrop {
                size: Size2::new(48, 48),
                scale: (0.08, 1.0),
                ratio: (0.75, 4.0 / 3.0),
                interpolation: Interpolation::Bicubic,
            },
        ];
        let plan = plan_sample(&ops, Size2::new(512, 384), &mut draw_rng(0, 0, 0, 3));
        // The source is resized whole to 85x64 first, as torchvision does; the crop is of that.
        assert_eq!((plan.crop, plan.out), (Rect::whole(Size2::new(512, 384)), Size2::new(85, 64)));
        assert_eq!(plan.then.len(), 1);
        let crop = plan.then[0].crop;
        assert!(crop.x + crop.width <= 85.0 && crop.y + crop.height <= 64.0, "{crop:?}");
        assert_eq!((plan.then[0].out, plan.then[0].filter, plan.size()), (Size2::new(48, 48), Filter::Bicubic, Size2::new(48, 48)));
        // A crop after the resize still folds: one resample of a source rectangle.
        let folded = plan_sample(
            &[ops[0].clone(), AugmentOp::CenterCrop { size: Size2::new(48, 48) }],
            Size2::new(512, 384),
            &mut draw_rng(0, 0, 0, 3),
        );
        assert!(folded.then.is_empty());
        assert_eq!(folded.out, Size2::new(48, 48));
    }

    #[test]
    fn the_policies_warp_nearest_by_default_or_bilinear_and_refuse_other_filters_by_name() {
        for policy in ["trivial_augment_wide", "rand_augment", "auto_augment"] {
            assert!(parse_one(&format!("{policy}: {{}}")).is_ok());
            assert!(parse_one(&format!("{policy}: {{ interpolation: nearest }}")).is_ok());
            let bilinear = parse_one(&format!("{policy}: {{ interpolation: bilinear }}")).expect("bilinear");
            assert_ne!(bilinear, parse_one(&format!("{policy}: {{}}")).expect("nearest"));
            assert_eq!(
                parse_one(&format!("{policy}: {{ interpolation: bicubic }}")).unwrap_err(),
                format!("{policy}: only `interpolation: nearest or bilinear` is supported")
            );
        }
    }

    #[test]
    fn refusals_name_the_operation_and_the_argument() {
        assert_eq!(parse_one("random_horizontal_flip: { p: 1.5 }").unwrap_err(), "random_horizontal_flip: `p` must lie in [0, 1], got 1.5");
        assert_eq!(parse_one("resize: { size: 8, interpolation: nearest }").unwrap_err(), "resize: only `interpolation: bilinear, bicubic or random` is supported");
        assert_eq!(parse_one("normalize: { mean: [0, 0, 0] }").unwrap_err(), "normalize: `std` is required");
        assert_eq!(parse_one("resize: 3").unwrap_err(), "resize: arguments go in a mapping, like `resize: {size: 224}`");
        assert_eq!(
            parse_one("blur: {}").unwrap_err(),
            "unknown operation `blur`; known: random_resized_crop, random_horizontal_flip, resize, center_crop, random_crop, normalize, \
             color_jitter, random_rotation, random_grayscale, gaussian_blur, random_erasing, trivial_augment_wide, rand_augment, auto_augment"
        );
        let two: BTreeMap<String, Value> = serde_norway::from_str("resize: {size: 8}\ncenter_crop: {size: 4}").expect("yaml");
        assert_eq!(AugmentOp::from_yaml(&two), Err(OpError::NotOneOperation));
    }

    #[test]
    fn crop_params_stay_inside_and_follow_the_scale_and_ratio() {
        let image = Size2::new(500, 375);
        let mut rng = draw_rng(1, 0, 0, 0);
        let mut areas = Vec::new();
        for _ in 0..5000 {
            let (i, j, h, w) = random_resized_crop_params(image, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut rng);
            assert!(i + h <= 375 && j + w <= 500 && h > 0 && w > 0);
            let frac = f64::from(w * h) / image.area() as f64;
            assert!((0.07..=1.0 + 1e-9).contains(&frac), "{frac}");
            areas.push(frac);
        }
        // Uniform area in [0.08, 1] with rejections of too-large crops: the mean sits a bit under
        // the midpoint 0.54 but well above 0.3.
        let mean = areas.iter().sum::<f64>() / areas.len() as f64;
        assert!((0.3..0.56).contains(&mean), "{mean}");
    }

    #[test]
    fn crop_fallback_is_torchvisions_central_crop() {
        // A very wide image never fits ratio 1:1 with scale 1: the fallback crops the centre.
        let image = Size2::new(1000, 100);
        let mut rng = draw_rng(0, 0, 0, 0);
        let (i, j, h, w) = random_resized_crop_params(image, (1.0, 1.0), (1.0, 1.0), &mut rng);
        assert_eq!((i, j, h, w), (0, 450, 100, 100));
    }

    #[test]
    fn draws_are_a_pure_function_of_their_inputs() {
        let ops = AugmentOp::imagenet_train();
        let image = Size2::new(640, 480);
        let a = plan_sample(&ops, image, &mut draw_rng(3, 1, 2, 42));
        let b = plan_sample(&ops, image, &mut draw_rng(3, 1, 2, 42));
        let c = plan_sample(&ops, image, &mut draw_rng(3, 1, 3, 42));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.out, Size2::new(224, 224));
    }

    #[test]
    fn flips_come_out_about_half_the_time() {
        let ops = AugmentOp::imagenet_train();
        let flips = (0..2000)
            .filter(|&s| plan_sample(&ops, Size2::new(64, 64), &mut draw_rng(0, 0, 0, s)).flip)
            .count();
        assert!((850..1150).contains(&flips), "{flips}");
    }

    #[test]
    fn resize_then_center_crop_maps_back_onto_the_source() {
        let ops = vec![
            AugmentOp::Resize { to: ResizeTo::ShorterSide(256), interpolation: Interpolation::Bilinear },
            AugmentOp::CenterCrop { size: Size2::new(224, 224) },
        ];
        let plan = plan_sample(&ops, Size2::new(512, 1024), &mut draw_rng(0, 0, 0, 0));
        assert_eq!(plan.out, Size2::new(224, 224));
        // 512x1024 -> 256x512; the centre 224 crop starts at (16, 144) there, (32, 288) in the source.
        assert_eq!(plan.crop, Rect { x: 32.0, y: 288.0, width: 448.0, height: 448.0 });
        assert_eq!(fixed_output_size(&ops), Some(Size2::new(224, 224)));
        assert_eq!(fixed_output_size(&ops[..1]), None);
    }

    #[test]
    fn a_crop_after_a_flip_is_mirrored() {
        let ops = vec![
            AugmentOp::RandomHorizontalFlip { p: 1.0 },
            AugmentOp::CenterCrop { size: Size2::new(10, 10) },
        ];
        let plan = plan_sample(&ops, Size2::new(41, 10), &mut draw_rng(0, 0, 0, 0));
        // Centre crop of 41 wide starts at round(15.5) = 16; mirrored it is 41 - 16 - 10 = 15.
        assert!(plan.flip);
        assert_eq!(plan.crop.x, 15.0);
    }

    #[test]
    fn resize_then_random_crop_places_every_window_the_resized_image_has_about_equally_often() {
        let ops = vec![
            AugmentOp::Resize { to: ResizeTo::ShorterSide(20), interpolation: Interpolation::Bilinear },
            AugmentOp::RandomCrop { size: Size2::new(16, 16) },
        ];
        assert_eq!(fixed_output_size(&ops), Some(Size2::new(16, 16)));
        // 40x20 -> resized 40x20 (shorter side 20): 25 columns and 5 rows of window, in source
        // pixels the same (no scaling), each cell of the 5x25 grid 1/125 of the draws.
        let mut counts = vec![0u32; 125];
        let draws = 12_500u32;
        for s in 0..draws {
            let plan = plan_sample(&ops, Size2::new(40, 20), &mut draw_rng(3, 0, 0, u64::from(s)));
            assert_eq!(plan.out, Size2::new(16, 16));
            assert_eq!((plan.crop.width, plan.crop.height), (16.0, 16.0));
            let (x, y) = (plan.crop.x as usize, plan.crop.y as usize);
            assert!(x <= 24 && y <= 4, "the window lies inside the image: ({x}, {y})");
            counts[y * 25 + x] += 1;
        }
        // Pearson's chi-square against uniform, 124 degrees of freedom: the critical value at
        // alpha 0.001 is 175.3, so a skew of a few percent in any cell fails.
        let expected = f64::from(draws) / 125.0;
        let chi2: f64 = counts.iter().map(|&c| (f64::from(c) - expected).powi(2) / expected).sum();
        assert!(chi2 < 175.3, "chi-square {chi2:.1}: {counts:?}");
        assert!(counts.iter().all(|&c| c > 0), "every window is drawn");
    }

    #[test]
    fn random_crop_parses_torchvisions_defaults_and_refuses_padding() {
        assert_eq!(parse_one("random_crop: {size: [32, 48]}"), Ok(AugmentOp::RandomCrop { size: Size2::new(48, 32) }));
        assert_eq!(
            parse_one("random_crop: {size: 8, padding: null, pad_if_needed: false}"),
            Ok(AugmentOp::RandomCrop { size: Size2::new(8, 8) })
        );
        let padded = parse_one("random_crop: {size: 8, padding: 4}").unwrap_err();
        assert!(padded.contains("random_crop") && padded.contains("padding"), "{padded}");
        let padded = parse_one("random_crop: {size: 8, pad_if_needed: true}").unwrap_err();
        assert!(padded.contains("pad_if_needed"), "{padded}");
        assert!(parse_one("random_crop: {}").unwrap_err().contains("size"));
    }
}
