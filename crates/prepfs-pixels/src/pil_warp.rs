//! PIL's `Image.transform(size, AFFINE, data, resample, fillcolor)` on uint8 RGB, as timm's
//! auto-augment ops call it (shear, translate, and `Image.rotate` without expand): each output
//! pixel's centre mapped through the matrix onto the source, sampled there with PIL's bilinear
//! or bicubic filter (the source's edge pixels repeated beyond it, bicubic with a = -1 and
//! clipped, both truncated to uint8), and the fill colour wherever the centre lands outside the
//! source. torchvision's policies use it too where they warp bilinear (as torchvision does a PIL
//! image); their nearest warps, as on a tensor, are `affine.rs`'.

use crate::interpolation::Filter;
use crate::rgb::Size2;

/// `Image.rotate(degrees)`'s matrix (about the centre, counter-clockwise, not expanded): maps
/// an output position onto the source.
pub(crate) fn rotation(size: Size2, degrees: f64) -> [f64; 6] {
    let (cx, cy) = (f64::from(size.width) / 2.0, f64::from(size.height) / 2.0);
    let angle = -(degrees.rem_euclid(360.0)).to_radians();
    // PIL rounds both to 15 decimals, so a quarter turn lands on whole pixels.
    let round15 = |v: f64| (v * 1e15).round() / 1e15;
    let (cos, sin) = (round15(angle.cos()), round15(angle.sin()));
    let mut m = [cos, sin, 0.0, -sin, cos, 0.0];
    m[2] = m[0] * -cx + m[1] * -cy + cx;
    m[5] = m[3] * -cx + m[4] * -cy + cy;
    m
}

/// Resamples packed RGB `pixels` of `size` through the affine `matrix` (output (x, y) to source
/// (a x + b y + c, d x + e y + f), in PIL's order), `fill` outside.
pub fn transform(pixels: &mut [u8], size: Size2, matrix: &[f64; 6], filter: Filter, fill: [u8; 3]) {
    let (w, h) = (size.width as usize, size.height as usize);
    if w == 0 || h == 0 {
        return;
    }
    let src = pixels.to_vec();
    let [a, b, c, d, e, f] = *matrix;
    for y in 0..h {
        let yo = y as f64 + 0.5;
        for x in 0..w {
            let xo = x as f64 + 0.5;
            let (xin, yin) = (a * xo + b * yo + c, d * xo + e * yo + f);
            let out = &mut pixels[(y * w + x) * 3..][..3];
            if !((0.0..w as f64).contains(&xin) && (0.0..h as f64).contains(&yin)) {
                out.copy_from_slice(&fill);
                continue;
            }
            match filter {
                Filter::Bilinear => bilinear(&src, w, h, xin - 0.5, yin - 0.5, out),
                Filter::Bicubic => bicubic(&src, w, h, xin - 0.5, yin - 0.5, out),
            }
        }
    }
}

/// The source columns (or rows) `first`, `first + 1`, ... clamped to `0..len`: PIL's edge rule,
/// worked out once per output pixel rather than once per tap and channel.
fn clamped<const N: usize>(first: i64, len: usize) -> [usize; N] {
    std::array::from_fn(|i| (first + i as i64).clamp(0, len as i64 - 1) as usize)
}

/// PIL's `bilinear_filter32RGB` at (x, y) (pixel centres on whole numbers), truncated.
fn bilinear(src: &[u8], w: usize, h: usize, x: f64, y: f64, out: &mut [u8]) {
    let (x0, y0) = (x.floor(), y.floor());
    let (dx, dy) = (x - x0, y - y0);
    let (cols, rows) = (clamped::<2>(x0 as i64, w), clamped::<2>(y0 as i64, h));
    for (ch, o) in out.iter_mut().enumerate() {
        let row = |r: usize| {
            let (p, q) = (f64::from(src[(r * w + cols[0]) * 3 + ch]), f64::from(src[(r * w + cols[1]) * 3 + ch]));
            p + (q - p) * dx
        };
        let (top, bottom) = (row(rows[0]), row(rows[1]));
        *o = (top + (bottom - top) * dy) as u8;
    }
}

/// PIL's cubic through four values at offset `d` from the second (a = -1).
fn cubic(v: [f64; 4], d: f64) -> f64 {
    let p2 = -v[0] + v[2];
    let p3 = 2.0 * (v[0] - v[1]) + v[2] - v[3];
    let p4 = -v[0] + v[1] - v[2] + v[3];
    v[1] + d * (p2 + d * (p3 + d * p4))
}

/// PIL's `bicubic_filter32RGB` at (x, y): clipped to [0, 255], truncated.
fn bicubic(src: &[u8], w: usize, h: usize, x: f64, y: f64, out: &mut [u8]) {
    let (x0, y0) = (x.floor(), y.floor());
    let (dx, dy) = (x - x0, y - y0);
    let (cols, rows) = (clamped::<4>(x0 as i64 - 1, w), clamped::<4>(y0 as i64 - 1, h));
    // Each row's cubic across the columns, the three channels at once, then down the rows (the
    // same arithmetic per channel as one channel at a time; plain loops, which the compiler keeps
    // in registers where closures over arrays cost 3.5x).
    let mut across = [[0.0f64; 4]; 3];
    for (i, &r) in rows.iter().enumerate() {
        let tap = |k: usize| {
            let at = (r * w + cols[k]) * 3;
            [f64::from(src[at]), f64::from(src[at + 1]), f64::from(src[at + 2])]
        };
        let (t0, t1, t2, t3) = (tap(0), tap(1), tap(2), tap(3));
        for ch in 0..3 {
            across[ch][i] = cubic([t0[ch], t1[ch], t2[ch], t3[ch]], dx);
        }
    }
    for (o, column) in out.iter_mut().zip(across) {
        *o = cubic(column, dy).clamp(0.0, 255.0) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(w: u32, h: u32) -> Vec<u8> {
        (0..w * h).flat_map(|i| [(i * 13 % 251) as u8, (i * 7 % 241) as u8, 200]).collect()
    }

    /// PIL's bicubic tap as its formula reads: one channel at a time, every tap clamped.
    fn bicubic_by_the_formula(src: &[u8], w: usize, h: usize, x: f64, y: f64, ch: usize) -> u8 {
        let at = |x: i64, y: i64| f64::from(src[(y.clamp(0, h as i64 - 1) as usize * w + x.clamp(0, w as i64 - 1) as usize) * 3 + ch]);
        let (x0, y0) = (x.floor() as i64 - 1, y.floor() as i64 - 1);
        let (dx, dy) = (x - x.floor(), y - y.floor());
        let row = |r: i64| cubic([at(x0, r), at(x0 + 1, r), at(x0 + 2, r), at(x0 + 3, r)], dx);
        cubic([row(y0), row(y0 + 1), row(y0 + 2), row(y0 + 3)], dy).clamp(0.0, 255.0) as u8
    }

    #[test]
    fn a_rotation_by_bicubic_gives_the_formulas_pixels_at_the_edges_and_inside() {
        let size = Size2::new(23, 17);
        let src = image(23, 17);
        let m = rotation(size, 17.0);
        let mut px = src.clone();
        transform(&mut px, size, &m, Filter::Bicubic, [124, 116, 104]);
        let mut checked = 0;
        for y in 0..17usize {
            for x in 0..23usize {
                let (xo, yo) = (x as f64 + 0.5, y as f64 + 0.5);
                let (xin, yin) = (m[0] * xo + m[1] * yo + m[2], m[3] * xo + m[4] * yo + m[5]);
                if !((0.0..23.0).contains(&xin) && (0.0..17.0).contains(&yin)) {
                    continue;
                }
                for ch in 0..3 {
                    assert_eq!(px[(y * 23 + x) * 3 + ch], bicubic_by_the_formula(&src, 23, 17, xin - 0.5, yin - 0.5, ch), "({x}, {y}) channel {ch}");
                }
                checked += 1;
            }
        }
        assert!(checked > 200, "{checked}");
    }

    #[test]
    fn the_identity_matrix_keeps_every_pixel_with_both_filters() {
        let size = Size2::new(7, 5);
        for filter in [Filter::Bilinear, Filter::Bicubic] {
            let mut px = image(7, 5);
            transform(&mut px, size, &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], filter, [1, 2, 3]);
            assert_eq!(px, image(7, 5), "{filter:?}");
        }
    }

    #[test]
    fn a_whole_pixel_translation_shifts_and_fills_with_the_fill_colour() {
        let size = Size2::new(5, 3);
        let before = image(5, 3);
        let mut px = before.clone();
        // timm's translate_x: the source is sampled 2 pixels to the right.
        transform(&mut px, size, &[1.0, 0.0, 2.0, 0.0, 1.0, 0.0], Filter::Bilinear, [124, 116, 104]);
        assert_eq!(&px[..3], &before[6..9]);
        assert_eq!(&px[9..15], &[124, 116, 104, 124, 116, 104]);
    }

    #[test]
    fn a_half_pixel_shift_averages_neighbours_bilinearly_and_truncates() {
        let size = Size2::new(2, 1);
        let mut px = vec![10, 0, 0, 21, 0, 0];
        transform(&mut px, size, &[1.0, 0.0, 0.5, 0.0, 1.0, 0.0], Filter::Bilinear, [0; 3]);
        // (10 + 21) / 2 = 15.5, truncated; the second pixel's centre (2.0) lies outside.
        assert_eq!(px, vec![15, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn bicubic_overshoot_is_clipped_to_the_uint8_range() {
        let size = Size2::new(4, 1);
        let mut px = vec![0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255];
        transform(&mut px, size, &[1.0, 0.0, 0.25, 0.0, 1.0, 0.0], Filter::Bicubic, [0; 3]);
        assert!(px.iter().all(|&v| v == 0 || v == 255 || (1..255).contains(&v)));
        // a = -1 undershoots just before the edge: 0 clipped, not wrapped.
        assert_eq!(px[0], 0);
        assert!(px[3] < 128 && px[6] == 255, "{px:?}");
    }

    #[test]
    fn a_quarter_rotation_of_a_square_maps_corners_onto_corners() {
        let size = Size2::new(4, 4);
        let before = image(4, 4);
        let mut px = before.clone();
        transform(&mut px, size, &rotation(size, 90.0), Filter::Bilinear, [0; 3]);
        // Counter-clockwise: the top-right pixel goes to the top-left.
        assert_eq!(&px[..3], &before[9..12]);
    }
}
