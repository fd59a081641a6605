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
use crate::crop_padding::{CropPadding, Pad};

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
    /// `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)`, as torchvision v2's:
    /// the image is padded by `padding` (n for every side, [left/right, top/bottom] or [left,
    /// top, right, bottom]); then, with `pad_if_needed`, a side still shorter than the crop by
    /// `d` is padded by `d` at both ends (v2's `make_params` adds the whole difference to each
    /// side, so a 3-wide image cropped to 4 is padded to 5, not 4); then a window of `size` is
    /// drawn uniformly over the padded image (`randint(0, H - th + 1)` for the row, then
    /// `randint(0, W - tw + 1)` for the column). The padded pixels are `fill` (constant, the
    /// default; a number or [r, g, b]), the edge pixel (`edge`), or the image mirrored without
    /// (`reflect`) or with (`symmetric`) its edge pixel repeated: `crop_padding`. A crop still
    /// larger than the padded image is cut to it (torchvision raises).
    ///
    /// A window inside the image folds into the resample as an unpadded crop does (the same
    /// bytes); one reaching into the padding becomes a stage of its own that pads the image
    /// it gets ([`Resample::pad`]).
    RandomCrop { size: Size2, padding: Option<CropPadding> },
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
                args.only(&["size", "padding", "pad_if_needed", "fill", "padding_mode"])?;
                AugmentOp::RandomCrop { size, padding: CropPadding::from_args(&args)? }
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
            AugmentOp::CenterCrop { size: s } | AugmentOp::RandomCrop { size: s, padding: None } => {
                args.insert("size", size(s));
            }
            AugmentOp::RandomCrop { size: s, padding: Some(padding) } => {
                args.insert("size", size(s));
                padding.args(&mut args);
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

/// One resample after the first: `crop` of the previous resample's output to `out`. With `pad`
/// (a `random_crop` window reaching into its padding), the previous output is padded first and
/// `crop` is in the padded image's pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resample {
    pub crop: Rect,
    pub out: Size2,
    pub filter: Filter,
    pub pad: Option<Pad>,
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
            AugmentOp::RandomResizedCrop { size: s, .. } | AugmentOp::CenterCrop { size: s } | AugmentOp::RandomCrop { size: s, .. } => {
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
    let mut stages = vec![Resample { crop: Rect::whole(source), out: source, filter: Filter::Bilinear, pad: None }];
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
                    stages.push(Resample { crop: Rect::whole(cur), out: cur, filter: Filter::Bilinear, pad: None });
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
                    stages.push(Resample { crop: Rect::whole(cur), out: cur, filter: Filter::Bilinear, pad: None });
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
            AugmentOp::RandomCrop { size, padding } => {
                let sides = padding.map_or([0; 4], |p| p.sides(cur, *size));
                let [l, t, r, b] = sides;
                let padded = Size2::new(cur.width + l + r, cur.height + t + b);
                let w = size.width.min(padded.width);
                let h = size.height.min(padded.height);
                // torchvision draws the row, then the column, over the padded image.
                let top = rng.gen_range(0..=padded.height - h);
                let left = rng.gen_range(0..=padded.width - w);
                let inside = left >= l && top >= t && left + w <= l + cur.width && top + h <= t + cur.height;
                match padding {
                    Some(p) if !inside => {
                        // A stage of its own on the image so far, padded: a flip still to come
                        // mirrors the padding (every mode is symmetric under the mirror) as
                        // `take` mirrors the window.
                        let sides = if flip { [r, t, l, b] } else { sides };
                        let pad = Pad { sides, mode: p.mode, fill: p.fill };
                        stages.push(Resample { crop: Rect::whole(padded), out: padded, filter: Filter::Bilinear, pad: Some(pad) });
                        let stage = stages.last_mut().expect("the padded stage");
                        take(padded, &mut stage.crop, flip, left, top, w, h);
                        scaled = false;
                    }
                    _ => {
                        let stage = stages.last_mut().expect("the source's resample");
                        take(cur, &mut stage.crop, flip, left - l, top - t, w, h);
                    }
                }
                cur = Size2::new(w, h);
                stages.last_mut().expect("a resample").out = cur;
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
    use crate::crop_padding::PadMode;

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
            AugmentOp::RandomCrop { size: Size2::new(16, 16), padding: None },
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

    fn crop(size: u32, padding: Option<CropPadding>) -> AugmentOp {
        AugmentOp::RandomCrop { size: Size2::new(size, size), padding }
    }

    fn padding(padding: [u32; 4], mode: PadMode) -> Option<CropPadding> {
        Some(CropPadding { padding, if_needed: false, mode, fill: [0; 3] })
    }

    #[test]
    fn random_crop_reads_torchvisions_padding_forms_and_keeps_the_unpadded_form_as_it_was() {
        assert_eq!(parse_one("random_crop: {size: [32, 48]}"), Ok(AugmentOp::RandomCrop { size: Size2::new(48, 32), padding: None }));
        // torchvision's defaults written out, and padding 0, pad nothing.
        for yaml in [
            "random_crop: {size: 8, padding: null, pad_if_needed: false}",
            "random_crop: {size: 8, padding: 0, fill: 3, padding_mode: reflect}",
        ] {
            assert_eq!(parse_one(yaml), Ok(crop(8, None)), "{yaml}");
        }
        let parsed = |yaml: &str| match parse_one(yaml) {
            Ok(AugmentOp::RandomCrop { padding: Some(p), .. }) => p,
            other => panic!("{yaml}: {other:?}"),
        };
        // n, [n], [left/right, top/bottom], [left, top, right, bottom]; kept as l, t, r, b.
        assert_eq!(parsed("random_crop: {size: 8, padding: 4}").padding, [4; 4]);
        assert_eq!(parsed("random_crop: {size: 8, padding: [4]}").padding, [4; 4]);
        assert_eq!(parsed("random_crop: {size: 8, padding: [1, 2]}").padding, [1, 2, 1, 2]);
        assert_eq!(parsed("random_crop: {size: 8, padding: [1, 2, 3, 4]}").padding, [1, 2, 3, 4]);
        let all = parsed("random_crop: {size: 8, padding: 2, pad_if_needed: true, fill: [1, 2, 3], padding_mode: symmetric}");
        assert_eq!(all, CropPadding { padding: [2; 4], if_needed: true, mode: PadMode::Symmetric, fill: [1, 2, 3] });
        let defaults = parsed("random_crop: {size: 8, pad_if_needed: true}");
        assert_eq!(defaults, CropPadding { padding: [0; 4], if_needed: true, mode: PadMode::Constant, fill: [0; 3] });
        assert_eq!(parsed("random_crop: {size: 8, padding: 1, fill: 7, padding_mode: edge}").fill, [7; 3]);
        // The serialised form reads back as the same op; the unpadded form is unchanged.
        let op = AugmentOp::RandomCrop { size: Size2::new(8, 8), padding: Some(all) };
        let yaml = serde_norway::to_string(&op).expect("yaml");
        assert_eq!(parse_one(&yaml), Ok(op), "{yaml}");
        assert_eq!(serde_json::to_string(&crop(8, None)).expect("json"), r#"{"random_crop":{"size":[8,8]}}"#);
    }

    #[test]
    fn random_crop_refuses_by_name_what_it_does_not_read() {
        let refused = |yaml: &str| parse_one(&format!("random_crop: {{size: 8, {yaml}}}")).unwrap_err();
        let padding = "random_crop: `padding` must be n, [left/right, top/bottom] or [left, top, right, bottom], whole numbers from 0 to 16384";
        for negative_or_odd in ["padding: -1", "padding: [1, -2]", "padding: [1, 2, 3]", "padding: 1.5", "padding: [1, 2, 3, 4, 5]", "padding: 20000"] {
            assert_eq!(refused(negative_or_odd), padding, "{negative_or_odd}");
        }
        let fill = "random_crop: `fill` must be a whole number from 0 to 255 or [r, g, b] of them";
        for bad in ["fill: 256", "fill: -1", "fill: 0.5", "fill: [1, 2]", "fill: {uint8: 3}"] {
            assert_eq!(refused(&format!("padding: 1, {bad}")), fill, "{bad}");
        }
        assert_eq!(
            refused("padding: 1, padding_mode: wrap"),
            "random_crop: `padding_mode` must be constant, edge, reflect or symmetric"
        );
        assert_eq!(refused("pad_if_needed: yes please"), "random_crop: `pad_if_needed` must be true or false");
        assert_eq!(
            refused("pad: 1"),
            "random_crop: unknown argument `pad`; known: size, padding, pad_if_needed, fill, padding_mode"
        );
        assert!(parse_one("random_crop: {}").unwrap_err().contains("size"));
    }

    /// A 3x2 image: values 1 2 3 / 4 5 6 in red, 10 and 20 more in green and blue.
    fn three_by_two() -> crate::rgb::Rgb {
        let pixels = (1..=6u8).flat_map(|v| [v, v + 10, v + 20]).collect();
        crate::rgb::Rgb { width: 3, height: 2, pixels }
    }

    /// The red channel's rows of an image.
    fn reds(image: &crate::rgb::Rgb) -> Vec<Vec<u8>> {
        image.pixels.chunks(image.width as usize * 3).map(|row| row.iter().step_by(3).copied().collect()).collect()
    }

    #[test]
    fn each_padding_mode_pads_a_3x2_image_as_worked_out_by_hand() {
        // padding [2, 1]: 2 left and right, 1 top and bottom; a 7x4 crop takes all of it.
        let image = three_by_two();
        let padded = |mode, fill| {
            let op = AugmentOp::RandomCrop { size: Size2::new(7, 4), padding: Some(CropPadding { padding: [2, 1, 2, 1], if_needed: false, mode, fill }) };
            let plan = plan_sample(&[op], Size2::new(3, 2), &mut draw_rng(0, 0, 0, 0));
            crate::pipeline::augment_pixels(&image, &plan).expect("pixels")
        };
        let constant = padded(PadMode::Constant, [90, 80, 70]);
        assert_eq!(
            reds(&constant),
            [[90, 90, 90, 90, 90, 90, 90], [90, 90, 1, 2, 3, 90, 90], [90, 90, 4, 5, 6, 90, 90], [90, 90, 90, 90, 90, 90, 90]]
        );
        // The fill is per channel; the image's own pixels keep theirs.
        assert_eq!(&constant.pixels[..3], &[90, 80, 70]);
        assert_eq!(&constant.pixels[(7 + 2) * 3..][..3], &[1, 11, 21]);
        assert_eq!(
            reds(&padded(PadMode::Edge, [0; 3])),
            [[1, 1, 1, 2, 3, 3, 3], [1, 1, 1, 2, 3, 3, 3], [4, 4, 4, 5, 6, 6, 6], [4, 4, 4, 5, 6, 6, 6]]
        );
        // reflect: the edge pixel is not repeated.
        assert_eq!(
            reds(&padded(PadMode::Reflect, [0; 3])),
            [[6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1], [6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1]]
        );
        // symmetric: it is.
        let symmetric = padded(PadMode::Symmetric, [0; 3]);
        assert_eq!(reds(&symmetric), [[2, 1, 1, 2, 3, 3, 2], [2, 1, 1, 2, 3, 3, 2], [5, 4, 4, 5, 6, 6, 5], [5, 4, 4, 5, 6, 6, 5]]);
        assert_eq!(&symmetric.pixels[..3], &[2, 12, 22]);
    }

    #[test]
    fn a_padded_crop_is_the_window_of_the_padded_image_and_one_inside_the_image_folds_as_today() {
        // torchvision's order on a 9x7 image: flip (or not), pad (uneven sides), then the window.
        let image = crate::rgb::Rgb { width: 9, height: 7, pixels: (0..9 * 7 * 3).map(|v| (v * 7 % 251) as u8).collect() };
        let (mut inside, mut outside) = (0, 0);
        for mode in [PadMode::Constant, PadMode::Edge, PadMode::Reflect, PadMode::Symmetric] {
            let pad = CropPadding { padding: [3, 1, 0, 2], if_needed: false, mode, fill: [5, 6, 7] };
            let ops = [AugmentOp::RandomHorizontalFlip { p: 0.5 }, crop(6, Some(pad))];
            for sample in 0..60 {
                let plan = plan_sample(&ops, Size2::new(9, 7), &mut draw_rng(4, 0, 0, sample));
                let got = crate::pipeline::augment_pixels(&image, &plan).expect("pixels");
                // The same draws, done as torchvision does them.
                let mut rng = draw_rng(4, 0, 0, sample);
                let flip = rng.gen::<f64>() < 0.5;
                let top: u32 = rng.gen_range(0..=(7 + 3 - 6));
                let left: u32 = rng.gen_range(0..=(9 + 3 - 6));
                let (top, left) = (i64::from(top), i64::from(left));
                let mut seen = image.clone();
                if flip {
                    crate::pipeline::mirror_rows(&mut seen.pixels, 9);
                }
                let mut want = vec![0u8; 6 * 6 * 3];
                let stage_pad = Pad { sides: pad.padding, mode, fill: pad.fill };
                let seen_ref = crate::rgb::RgbRef::of(&seen);
                crate::crop_padding::pad_window(seen_ref, &stage_pad, left - 3, top - 1, 6, 6, &mut want);
                assert_eq!(got.pixels, want, "{mode:?} draw {sample}");
                if left >= 3 && top >= 1 && left + 6 <= 3 + 9 && top + 6 <= 1 + 7 {
                    // Inside: today's folded crop of the source, no stage of its own.
                    inside += 1;
                    assert!(plan.then.is_empty(), "{plan:?}");
                    let x = if flip { 9 - (left - 3) - 6 } else { left - 3 };
                    assert_eq!(plan.crop, Rect { x: f64::from(x as u32), y: f64::from(top as u32 - 1), width: 6.0, height: 6.0 });
                } else {
                    outside += 1;
                    assert_eq!(plan.then.len(), 1);
                }
            }
        }
        assert!(inside > 10 && outside > 10, "{inside} inside, {outside} outside");
    }

    #[test]
    fn pad_if_needed_makes_an_image_smaller_than_the_crop_croppable() {
        let image = three_by_two();
        let needed = Some(CropPadding { padding: [0; 4], if_needed: true, mode: PadMode::Reflect, fill: [0; 3] });
        let ops = [crop(4, needed)];
        assert_eq!(fixed_output_size(&ops), Some(Size2::new(4, 4)));
        // Padded to 5x6 (1 more on the left and right, 2 more on top and bottom): 2 x 3 windows.
        let mut windows = std::collections::BTreeSet::new();
        for sample in 0..200 {
            let plan = plan_sample(&ops, Size2::new(3, 2), &mut draw_rng(6, 0, 0, sample));
            let got = crate::pipeline::augment_pixels(&image, &plan).expect("pixels");
            assert_eq!((got.width, got.height), (4, 4));
            windows.insert(reds(&got));
        }
        // Reflect-padded rows of 1 2 3 / 4 5 6 by (1, 2): 2 1 2 3 2 / 5 4 5 6 5, rows 4 1 4 1 4 1.
        let row = |r: u8| if r == 1 { vec![2, 1, 2, 3, 2] } else { vec![5, 4, 5, 6, 5] };
        let padded: Vec<Vec<u8>> = [4u8, 1, 4, 1, 4, 1].iter().map(|&r| row(r)).collect();
        let expected: std::collections::BTreeSet<_> = (0..3)
            .flat_map(|top| (0..2).map(move |left| (top, left)))
            .map(|(top, left)| padded[top..top + 4].iter().map(|r| r[left..left + 4].to_vec()).collect::<Vec<_>>())
            .collect();
        assert_eq!(windows, expected);
        // Without it the crop is cut to the image, as before.
        let plain = plan_sample(&[crop(4, None)], Size2::new(3, 2), &mut draw_rng(6, 0, 0, 0));
        assert_eq!(plain.size(), Size2::new(3, 2));
    }

    #[test]
    fn a_padded_crop_after_a_resize_serves_from_jpeg_bytes_and_decoded_pixels_alike() {
        let jpeg = crate::synthetic::photo_jpeg(120, 90, turbojpeg::Subsamp::Sub2x2);
        let full = crate::pipeline::decode_full(&jpeg, 1 << 30).expect("decode");
        let ops = [
            AugmentOp::Resize { to: ResizeTo::ShorterSide(40), interpolation: Interpolation::Bilinear },
            crop(36, padding([4; 4], PadMode::Reflect)),
            AugmentOp::Resize { to: ResizeTo::Exact(Size2::new(18, 18)), interpolation: Interpolation::Bilinear },
        ];
        let mut padded_stages = 0;
        for sample in 0..20 {
            let plan = plan_sample(&ops, Size2::new(120, 90), &mut draw_rng(8, 0, 0, sample));
            padded_stages += plan.then.iter().filter(|s| s.pad.is_some()).count();
            let from_bytes = crate::pipeline::augment(&jpeg, &plan, 1 << 30).expect("bytes");
            let from_pixels = crate::pipeline::augment_pixels(&full, &plan).expect("pixels");
            assert_eq!((from_bytes.width, from_bytes.height), (18, 18));
            assert!(crate::pipeline::mean_abs_diff(&from_bytes, &from_pixels) <= crate::pipeline::FAST_PATH_TOLERANCE);
        }
        assert!(padded_stages > 5, "{padded_stages}");
    }
}
