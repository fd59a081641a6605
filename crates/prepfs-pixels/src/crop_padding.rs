//! `random_crop`'s padding: torchvision's `RandomCrop(padding, pad_if_needed, fill,
//! padding_mode)` read from an `augment:` entry ([`CropPadding`]), the sides it pads for one image
//! ([`CropPadding::sides`]) and the padded pixels of a window ([`pad_window`]).
//!
//! Padding modes follow `numpy.pad` (what torchvision's `F.pad` does on PIL images, and on
//! tensors within the sizes torch accepts): `constant` writes `fill`; `edge` repeats the edge
//! pixel; `reflect` mirrors about the edge pixel without repeating it (`[1 2 3]` padded by 2 is
//! `3 2 | 1 2 3 | 2 1`); `symmetric` mirrors with the edge repeated (`2 1 | 1 2 3 | 3 2`). A pad
//! wider than the image keeps reflecting, as numpy does (torch's tensor `reflect` refuses a pad
//! of the image's size or more, and `symmetric` one over it).

use std::collections::BTreeMap;

use serde_norway::Value;

use crate::op_args::{Args, OpError};
use crate::rgb::RgbRef;
use crate::rgb::Size2;

/// The largest padding of one side prepfs accepts (the largest image side it crops to).
const MAX_PAD: u64 = 16384;

/// How the padded pixels are made (`padding_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    Constant,
    Edge,
    Reflect,
    Symmetric,
}

impl PadMode {
    pub fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Edge => "edge",
            PadMode::Reflect => "reflect",
            PadMode::Symmetric => "symmetric",
        }
    }
}

/// `random_crop`'s padding settings, as torchvision's `RandomCrop` keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CropPadding {
    /// `padding`: left, top, right, bottom.
    pub padding: [u32; 4],
    /// `pad_if_needed`.
    pub if_needed: bool,
    pub mode: PadMode,
    /// `fill`, per channel (constant mode only).
    pub fill: [u8; 3],
}

/// The padding of one pipeline stage: the sides (left, top, right, bottom) and how to fill them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pad {
    pub sides: [u32; 4],
    pub mode: PadMode,
    pub fill: [u8; 3],
}

impl Pad {
    /// The size of an image of `size` once padded.
    pub fn padded(&self, size: Size2) -> Size2 {
        let [l, t, r, b] = self.sides;
        Size2::new(size.width + l + r, size.height + t + b)
    }
}

impl CropPadding {
    /// Reads `padding`, `pad_if_needed`, `fill` and `padding_mode`; `None` when nothing is
    /// padded (no `padding`, or 0, and `pad_if_needed` false: `fill` and `padding_mode` then do
    /// nothing, as in torchvision).
    pub fn from_args(args: &Args<'_>) -> Result<Option<CropPadding>, OpError> {
        let padding = match args.get("padding") {
            None | Some(Value::Null) => [0; 4],
            Some(v) => parse_padding(args, v)?,
        };
        let if_needed = match args.get("pad_if_needed") {
            None | Some(Value::Null) => false,
            Some(v) => v.as_bool().ok_or_else(|| args.bad("pad_if_needed", "be true or false"))?,
        };
        let mode = match args.get("padding_mode") {
            None => PadMode::Constant,
            Some(v) => match v.as_str() {
                Some("constant") => PadMode::Constant,
                Some("edge") => PadMode::Edge,
                Some("reflect") => PadMode::Reflect,
                Some("symmetric") => PadMode::Symmetric,
                _ => return Err(args.bad("padding_mode", "be constant, edge, reflect or symmetric")),
            },
        };
        let fill = match args.get("fill") {
            None | Some(Value::Null) => [0; 3],
            Some(v) => parse_fill(args, v)?,
        };
        if padding == [0; 4] && !if_needed {
            return Ok(None);
        }
        Ok(Some(CropPadding { padding, if_needed, mode, fill }))
    }

    /// The settings as the config would write them (for the recipe's serialised form).
    pub fn args(&self, args: &mut BTreeMap<&str, serde_json::Value>) {
        args.insert("padding", serde_json::json!(self.padding));
        args.insert("pad_if_needed", serde_json::json!(self.if_needed));
        args.insert("fill", serde_json::json!(self.fill));
        args.insert("padding_mode", serde_json::json!(self.mode.name()));
    }

    /// The sides (left, top, right, bottom) torchvision v2's `RandomCrop.make_params` pads an
    /// image of `image` by before cropping `crop` from it: `padding`, then, with
    /// `pad_if_needed`, where the padded image is still narrower (shorter) than the crop by `d`,
    /// `d` more on the left and on the right (top and bottom): both sides by the whole
    /// difference, so the padded side is `2 * crop - side`, not `crop`.
    pub fn sides(&self, image: Size2, crop: Size2) -> [u32; 4] {
        let [mut l, mut t, mut r, mut b] = self.padding;
        if self.if_needed {
            let height = image.height + t + b;
            if height < crop.height {
                let d = crop.height - height;
                (t, b) = (t + d, b + d);
            }
            let width = image.width + l + r;
            if width < crop.width {
                let d = crop.width - width;
                (l, r) = (l + d, r + d);
            }
        }
        [l, t, r, b]
    }
}

/// torchvision's `padding`: n (every side), [n], [left/right, top/bottom] or [left, top,
/// right, bottom]; whole numbers, none negative.
fn parse_padding(args: &Args<'_>, v: &Value) -> Result<[u32; 4], OpError> {
    let rule = format!("be n, [left/right, top/bottom] or [left, top, right, bottom], whole numbers from 0 to {MAX_PAD}");
    let side = |v: &Value| v.as_u64().filter(|n| *n <= MAX_PAD).map(|n| n as u32).ok_or_else(|| args.bad("padding", rule.clone()));
    match v {
        Value::Number(_) => {
            let n = side(v)?;
            Ok([n; 4])
        }
        Value::Sequence(s) => match s.as_slice() {
            [n] => Ok([side(n)?; 4]),
            [lr, tb] => {
                let (lr, tb) = (side(lr)?, side(tb)?);
                Ok([lr, tb, lr, tb])
            }
            [l, t, r, b] => Ok([side(l)?, side(t)?, side(r)?, side(b)?]),
            _ => Err(args.bad("padding", rule)),
        },
        _ => Err(args.bad("padding", rule)),
    }
}

/// `fill`: one value for every channel or [r, g, b], whole numbers from 0 to 255 (the 8-bit
/// image's values; torchvision's per-type dict is not read).
fn parse_fill(args: &Args<'_>, v: &Value) -> Result<[u8; 3], OpError> {
    let rule = "be a whole number from 0 to 255 or [r, g, b] of them";
    let value = |v: &Value| v.as_u64().filter(|n| *n <= 255).map(|n| n as u8).ok_or_else(|| args.bad("fill", rule));
    match v {
        Value::Number(_) => Ok([value(v)?; 3]),
        Value::Sequence(s) => match s.as_slice() {
            [n] => Ok([value(n)?; 3]),
            [r, g, b] => Ok([value(r)?, value(g)?, value(b)?]),
            _ => Err(args.bad("fill", rule)),
        },
        _ => Err(args.bad("fill", rule)),
    }
}

/// The index into a side of `n` pixels that padded position `i` (the image's own pixels at
/// 0..n, the padding at negative and at n and beyond) takes its pixel from; `None` for the
/// fill.
pub(crate) fn source_index(i: i64, n: u32, mode: PadMode) -> Option<u32> {
    let n = i64::from(n);
    if (0..n).contains(&i) {
        return Some(i as u32);
    }
    let at = match mode {
        PadMode::Constant => return None,
        PadMode::Edge => i.clamp(0, n - 1),
        // numpy's reflect of one pixel repeats it.
        PadMode::Reflect if n == 1 => 0,
        PadMode::Reflect => {
            let m = i.rem_euclid(2 * (n - 1));
            if m < n { m } else { 2 * (n - 1) - m }
        }
        PadMode::Symmetric => {
            let m = i.rem_euclid(2 * n);
            if m < n { m } else { 2 * n - 1 - m }
        }
    };
    Some(at as u32)
}

/// Writes the `width` x `height` window of `image` padded by `pad` whose top left pixel is at
/// (`x`, `y`) of the image (negative in the padding) into `dst` (packed RGB rows).
pub(crate) fn pad_window(image: RgbRef<'_>, pad: &Pad, x: i64, y: i64, width: u32, height: u32, dst: &mut [u8]) {
    let columns: Vec<Option<u32>> = (0..i64::from(width)).map(|c| source_index(x + c, image.width, pad.mode)).collect();
    let stride = image.width as usize * 3;
    for (row, out) in dst.chunks_exact_mut(width as usize * 3).take(height as usize).enumerate() {
        let Some(sy) = source_index(y + row as i64, image.height, pad.mode) else {
            for px in out.chunks_exact_mut(3) {
                px.copy_from_slice(&pad.fill);
            }
            continue;
        };
        let line = &image.pixels[sy as usize * stride..][..stride];
        for (px, sx) in out.chunks_exact_mut(3).zip(&columns) {
            match sx {
                Some(sx) => px.copy_from_slice(&line[*sx as usize * 3..][..3]),
                None => px.copy_from_slice(&pad.fill),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_does_not_repeat_the_edge_and_symmetric_does_as_numpy_pads_past_the_image() {
        // numpy.pad([1, 2, 3], 7, mode) for each mode, as indices.
        let padded = |mode| (-7..10).map(|i| source_index(i, 3, mode).map_or(-1, |s| s as i64 + 1)).collect::<Vec<_>>();
        assert_eq!(padded(PadMode::Reflect), [2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2]);
        assert_eq!(padded(PadMode::Symmetric), [1, 1, 2, 3, 3, 2, 1, 1, 2, 3, 3, 2, 1, 1, 2, 3, 3]);
        assert_eq!(padded(PadMode::Edge), [1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3]);
        assert_eq!(padded(PadMode::Constant), [-1, -1, -1, -1, -1, -1, -1, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1]);
        assert_eq!(source_index(-2, 1, PadMode::Reflect), Some(0));
    }

    #[test]
    fn pad_if_needed_pads_both_sides_by_the_whole_shortfall_after_padding() {
        let only = CropPadding { padding: [0; 4], if_needed: true, mode: PadMode::Constant, fill: [0; 3] };
        // 3x2 to a 4x4 crop: 1 short in width, 2 in height; each added on both sides.
        assert_eq!(only.sides(Size2::new(3, 2), Size2::new(4, 4)), [1, 2, 1, 2]);
        // Large enough already: nothing added.
        assert_eq!(only.sides(Size2::new(5, 4), Size2::new(4, 4)), [0; 4]);
        // After padding 1 a 3x2 is 5x4, still 1 and 2 short of 6x6.
        let padded = CropPadding { padding: [1; 4], ..only };
        assert_eq!(padded.sides(Size2::new(3, 2), Size2::new(6, 6)), [2, 3, 2, 3]);
        assert_eq!(CropPadding { if_needed: false, ..padded }.sides(Size2::new(3, 2), Size2::new(6, 6)), [1; 4]);
    }
}
