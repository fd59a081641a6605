//! torchvision v2's affine warps on uint8 RGB, as the auto-augment policies use them: the
//! inverse matrix of `_get_inverse_affine_matrix` (rotation, translation, shear about a centre)
//! sampled by `grid_sample` with nearest interpolation (`align_corners=False`, ties to even) and
//! fill 0 outside the image.

use crate::rgb::Size2;

/// torchvision's `_get_inverse_affine_matrix`: `center` relative to the image centre, `angle`
/// and `shear` in degrees. Maps an output position (relative to the centre) to its source.
pub(crate) fn inverse_matrix(center: (f64, f64), angle: f64, translate: (f64, f64), shear: (f64, f64)) -> [f64; 6] {
    let rot = angle.to_radians();
    let (sx, sy) = (shear.0.to_radians(), shear.1.to_radians());
    let (cx, cy) = center;
    let (tx, ty) = translate;
    let a = (rot - sy).cos() / sy.cos();
    let b = -(rot - sy).cos() * sx.tan() / sy.cos() - rot.sin();
    let c = (rot - sy).sin() / sy.cos();
    let d = -(rot - sy).sin() * sx.tan() / sy.cos() + rot.cos();
    let mut m = [d, -b, 0.0, -c, a, 0.0];
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
    m
}

/// `F.affine(angle=0, translate, scale=1, shear, center)` as the policies call it; `center`
/// `None` is the image centre, `Some((0, 0))` the top-left corner.
pub(crate) fn affine(pixels: &mut [u8], size: Size2, translate: (f64, f64), shear: (f64, f64), corner: bool) {
    let (w, h) = (f64::from(size.width), f64::from(size.height));
    let center = if corner { (-w * 0.5, -h * 0.5) } else { (0.0, 0.0) };
    warp(pixels, size, &inverse_matrix(center, 0.0, translate, shear));
}

/// `F.rotate(angle)` about the centre, not expanded: torchvision inverts the angle.
pub(crate) fn rotate(pixels: &mut [u8], size: Size2, angle: f64) {
    warp(pixels, size, &inverse_matrix((0.0, 0.0), -angle, (0.0, 0.0), (0.0, 0.0)));
}

/// Resamples `pixels` through the inverse `matrix`, nearest, fill 0.
fn warp(pixels: &mut [u8], size: Size2, m: &[f64; 6]) {
    let (w, h) = (size.width as usize, size.height as usize);
    let src = pixels.to_vec();
    let (hw, hh) = (w as f64 * 0.5, h as f64 * 0.5);
    for i in 0..h {
        let y = i as f64 + 0.5 - hh;
        for j in 0..w {
            let x = j as f64 + 0.5 - hw;
            let sx = (m[0] * x + m[1] * y + m[2] + hw - 0.5).round_ties_even();
            let sy = (m[3] * x + m[4] * y + m[5] + hh - 0.5).round_ties_even();
            let out = &mut pixels[(i * w + j) * 3..][..3];
            if sx >= 0.0 && sy >= 0.0 && (sx as usize) < w && (sy as usize) < h {
                out.copy_from_slice(&src[(sy as usize * w + sx as usize) * 3..][..3]);
            } else {
                out.fill(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(w: u32, h: u32) -> Vec<u8> {
        (0..w * h).flat_map(|i| [(i % 251) as u8 + 1, (i / 251) as u8 + 1, 7]).collect()
    }

    #[test]
    fn translation_moves_pixels_and_fills_with_zero() {
        let size = Size2::new(5, 3);
        let mut px = image(5, 3);
        let before = px.clone();
        affine(&mut px, size, (2.0, 0.0), (0.0, 0.0), false);
        assert_eq!(&px[..6], &[0; 6]);
        assert_eq!(&px[6..9], &before[..3]);
    }

    #[test]
    fn a_quarter_turn_maps_corners_onto_corners() {
        let size = Size2::new(4, 4);
        let mut px = image(4, 4);
        let before = px.clone();
        rotate(&mut px, size, 90.0);
        // Counter-clockwise: the top-right pixel goes to the top-left.
        assert_eq!(&px[..3], &before[3 * 3..][..3]);
    }

    #[test]
    fn shear_about_the_corner_keeps_the_top_row() {
        let size = Size2::new(6, 4);
        let mut px = image(6, 4);
        let before = px.clone();
        affine(&mut px, size, (0.0, 0.0), (16.7, 0.0), true);
        assert_eq!(&px[..18], &before[..18], "row 0 sits 0.5 from the corner: shifted by 0.15, rounds back");
        assert_ne!(&px[54..], &before[54..]);
    }
}
