//! `random_rotation`: torchvision's `RandomRotation(degrees, interpolation, expand=False,
//! center=None, fill=0)` on the output's pixels: an angle drawn uniformly from `degrees`, the
//! image turned about its centre by it (counter-clockwise for a positive angle), what comes
//! from outside the image filled with 0. Warped as the policies warp ([`Warp`]):
//! nearest as torchvision does on a tensor (`affine.rs`), bilinear as PIL does on an image
//! (`pil_warp.rs`).

use rand::Rng;
use serde_norway::Value;

use crate::affine;
use crate::interpolation::Filter;
use crate::op_args::{Args, OpError};
use crate::pil_warp;
use crate::rgb::Size2;

/// How a turn (and the policies' other geometric ops) resample (`interpolation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Warp {
    /// torchvision's default, on a tensor: nearest on `grid_sample`'s grid (`affine.rs`).
    #[default]
    Nearest,
    /// `InterpolationMode.BILINEAR` on a PIL image: PIL's affine transform (`pil_warp.rs`).
    Bilinear,
}

/// One `random_rotation` as configured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomRotation {
    /// The range the angle is drawn from, degrees (`degrees: d` is `[-d, d]`).
    pub degrees: (f64, f64),
    pub warp: Warp,
}

impl RandomRotation {
    /// Its arguments: `degrees` (required), `interpolation` (nearest or bilinear); `expand`,
    /// `center` and `fill` only at torchvision's defaults.
    pub(crate) fn from_args(args: &Args<'_>) -> Result<RandomRotation, OpError> {
        args.only(&["degrees", "interpolation", "expand", "center", "fill"])?;
        let unsupported = |setting| OpError::Unsupported { op: "random_rotation".into(), setting };
        let degrees = match args.get("degrees") {
            None => return Err(args.missing("degrees")),
            Some(Value::Number(_)) => {
                let d = args.float("degrees")?.unwrap_or(-1.0);
                if !(0.0..=360.0).contains(&d) {
                    return Err(args.bad("degrees", "be from 0 to 360, or [low, high]"));
                }
                (-d, d)
            }
            Some(Value::Sequence(pair)) if pair.len() == 2 => {
                let (lo, hi) = (pair[0].as_f64(), pair[1].as_f64());
                match (lo, hi) {
                    (Some(lo), Some(hi)) if lo <= hi && lo.is_finite() && hi.is_finite() => (lo, hi),
                    _ => return Err(args.bad("degrees", "be [low, high] with low <= high")),
                }
            }
            Some(_) => return Err(args.bad("degrees", "be a number or [low, high]")),
        };
        let warp = match args.get("interpolation").map(|v| v.as_str()) {
            None | Some(Some("nearest")) => Warp::Nearest,
            Some(Some("bilinear")) => Warp::Bilinear,
            Some(_) => return Err(unsupported("interpolation: nearest or bilinear")),
        };
        if args.get("expand").is_some_and(|v| v.as_bool() != Some(false)) {
            return Err(unsupported("expand: false"));
        }
        if args.get("center").is_some_and(|v| !v.is_null()) {
            return Err(unsupported("center: null (the image's centre)"));
        }
        let zero = |v: &Value| v.as_f64() == Some(0.0) || v.as_sequence().is_some_and(|s| s.iter().all(|x| x.as_f64() == Some(0.0)));
        if args.get("fill").is_some_and(|v| !v.is_null() && !zero(v)) {
            return Err(unsupported("fill: 0"));
        }
        Ok(RandomRotation { degrees, warp })
    }

    /// This sample's angle, degrees: uniform over the range (torchvision's `uniform_`).
    pub(crate) fn draw(&self, rng: &mut impl Rng) -> f64 {
        let (lo, hi) = self.degrees;
        lo + (hi - lo) * rng.gen::<f64>()
    }
}

/// Turns packed RGB `pixels` of `size` by `degrees` about the centre, not expanded, fill 0.
pub(crate) fn rotate(pixels: &mut [u8], size: Size2, degrees: f64, warp: Warp) {
    match warp {
        Warp::Nearest => affine::rotate(pixels, size, degrees),
        Warp::Bilinear => pil_warp::transform(pixels, size, &pil_warp::rotation(size, degrees), Filter::Bilinear, [0; 3]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::tests::parse_one;
    use crate::augment::AugmentOp;
    use crate::draw::draw_rng;
    use crate::pixel_ops::PixelOp;

    fn parsed(yaml: &str) -> Result<RandomRotation, String> {
        match parse_one(yaml)? {
            AugmentOp::Pixel(PixelOp::RandomRotation(r)) => Ok(r),
            other => Err(format!("not a rotation: {other:?}")),
        }
    }

    #[test]
    fn degrees_take_torchvisions_forms_and_settings_it_does_not_serve_are_refused_by_name() {
        assert_eq!(parsed("random_rotation: {degrees: 15}"), Ok(RandomRotation { degrees: (-15.0, 15.0), warp: Warp::Nearest }));
        assert_eq!(
            parsed("random_rotation: {degrees: [-5, 30], interpolation: bilinear, expand: false, center: null, fill: [0, 0, 0]}"),
            Ok(RandomRotation { degrees: (-5.0, 30.0), warp: Warp::Bilinear })
        );
        for (yaml, names) in [
            ("random_rotation: {}", "degrees"),
            ("random_rotation: {degrees: -3}", "degrees"),
            ("random_rotation: {degrees: [30, 5]}", "degrees"),
            ("random_rotation: {degrees: 10, expand: true}", "expand"),
            ("random_rotation: {degrees: 10, center: [3, 4]}", "center"),
            ("random_rotation: {degrees: 10, fill: 128}", "fill"),
            ("random_rotation: {degrees: 10, interpolation: bicubic}", "interpolation"),
        ] {
            let err = parsed(yaml).unwrap_err();
            assert!(err.contains("random_rotation") && err.contains(names), "{yaml}: {err}");
        }
    }

    #[test]
    fn the_angle_is_uniform_over_the_range_on_1500_draws() {
        let r = RandomRotation { degrees: (-10.0, 30.0), warp: Warp::Nearest };
        let mut angles: Vec<f64> = (0..1500).map(|s| r.draw(&mut draw_rng(9, 0, 0, s))).collect();
        angles.sort_by(f64::total_cmp);
        assert!(angles[0] >= -10.0 && angles[1499] <= 30.0);
        // Kolmogorov-Smirnov against U(-10, 30): the critical value at alpha 0.001 is
        // 1.95 / sqrt(1500) = 0.050.
        let d = angles
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let cdf = (a + 10.0) / 40.0;
                (cdf - i as f64 / 1500.0).abs().max(((i + 1) as f64 / 1500.0 - cdf).abs())
            })
            .fold(0.0, f64::max);
        assert!(d < 0.050, "KS distance {d:.3}");
    }

    #[test]
    fn no_turn_keeps_the_image_and_a_quarter_turn_moves_its_corners_counter_clockwise() {
        let size = Size2::new(4, 4);
        let image: Vec<u8> = (0..16u8).flat_map(|i| [i + 1, 2 * i + 1, 7]).collect();
        for warp in [Warp::Nearest, Warp::Bilinear] {
            let mut px = image.clone();
            rotate(&mut px, size, 0.0, warp);
            assert_eq!(px, image, "{warp:?}");
            let mut px = image.clone();
            rotate(&mut px, size, 90.0, warp);
            // The top-right pixel goes to the top-left, the top-left to the bottom-left.
            assert_eq!(&px[..3], &image[3 * 3..][..3], "{warp:?}");
            assert_eq!(&px[12 * 3..][..3], &image[..3], "{warp:?}");
        }
        // A small turn brings in the fill at the corners.
        let mut px = vec![200u8; 32 * 32 * 3];
        rotate(&mut px, Size2::new(32, 32), 30.0, Warp::Nearest);
        assert_eq!(&px[..3], &[0, 0, 0]);
        assert_eq!(&px[(16 * 32 + 16) * 3..][..3], &[200, 200, 200]);
    }
}
