//! torchvision v2's `gaussian_blur` on uint8 RGB: a sigma drawn uniformly from its range per
//! sample (one for both axes, as `GaussianBlur` draws it), torchvision's kernel (the Gaussian at
//! the integer offsets of an odd `kernel_size`, normalised), reflect padding, and the result
//! rounded to uint8. Applied as two 1-D passes, which is the same convolution.

use rand::Rng;

/// `gaussian_blur`'s arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianBlur {
    /// Kernel width and height, odd.
    pub kernel: (u32, u32),
    /// The range sigma is drawn from.
    pub sigma: (f64, f64),
}

impl GaussianBlur {
    /// This sample's sigma: torchvision's `uniform_(sigma[0], sigma[1])`.
    pub fn draw(&self, rng: &mut impl Rng) -> f32 {
        let (lo, hi) = self.sigma;
        (if hi > lo { rng.gen_range(lo..hi) } else { lo }) as f32
    }
}

/// torchvision's `_get_gaussian_kernel1d`.
fn kernel1d(size: u32, sigma: f32) -> Vec<f32> {
    let half = (size as f32 - 1.0) * 0.5;
    let k: Vec<f32> = (0..size).map(|i| (-0.5 * ((i as f32 - half) / sigma).powi(2)).exp()).collect();
    let sum: f32 = k.iter().sum();
    k.into_iter().map(|v| v / sum).collect()
}

/// Reflect padding's index (`torch.nn.functional.pad(mode="reflect")`: the edge not repeated).
fn reflect(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let mut i = i.rem_euclid(period);
    if i >= n as isize {
        i = period - i;
    }
    i as usize
}

/// Blurs packed RGB `pixels` of `width` x `height` with `kernel` and `sigma`.
pub(crate) fn blur(pixels: &mut [u8], width: usize, height: usize, kernel: (u32, u32), sigma: f32) {
    if width == 0 || height == 0 {
        return;
    }
    let kx = kernel1d(kernel.0, sigma);
    let ky = kernel1d(kernel.1, sigma);
    let (hx, hy) = ((kernel.0 / 2) as isize, (kernel.1 / 2) as isize);
    // The reflected source column and row of every tap, computed once.
    let cols: Vec<usize> = (0..width).flat_map(|x| (0..kx.len()).map(move |t| reflect(x as isize + t as isize - hx, width))).collect();
    // Horizontal pass into floats, then vertical pass back to uint8.
    let mut rows = vec![0f32; pixels.len()];
    for y in 0..height {
        let row = &pixels[y * width * 3..][..width * 3];
        let out = &mut rows[y * width * 3..][..width * 3];
        for (x, taps) in cols.chunks_exact(kx.len()).enumerate() {
            let mut acc = [0f32; 3];
            for (w, &sx) in kx.iter().zip(taps) {
                let px = &row[sx * 3..][..3];
                acc[0] += w * f32::from(px[0]);
                acc[1] += w * f32::from(px[1]);
                acc[2] += w * f32::from(px[2]);
            }
            out[x * 3..][..3].copy_from_slice(&acc);
        }
    }
    let mut acc = vec![0f32; width * 3];
    for y in 0..height {
        acc.fill(0.0);
        for (t, w) in ky.iter().enumerate() {
            let sy = reflect(y as isize + t as isize - hy, height);
            for (a, v) in acc.iter_mut().zip(&rows[sy * width * 3..][..width * 3]) {
                *a += w * v;
            }
        }
        for (out, a) in pixels[y * width * 3..][..width * 3].iter_mut().zip(&acc) {
            *out = a.round().clamp(0.0, 255.0) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_is_normalised_and_symmetric() {
        let k = kernel1d(5, 1.0);
        assert!((k.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(k[0], k[4]);
        assert!(k[2] > k[1] && k[1] > k[0]);
    }

    #[test]
    fn reflect_padding_does_not_repeat_the_edge() {
        assert_eq!([-2, -1, 0, 4, 5, 6].map(|i| reflect(i, 5)), [2, 1, 0, 4, 3, 2]);
    }

    #[test]
    fn blur_keeps_a_flat_image_and_softens_an_edge() {
        let mut flat = vec![77u8; 6 * 4 * 3];
        blur(&mut flat, 6, 4, (5, 5), 1.5);
        assert!(flat.iter().all(|&v| v == 77));
        let mut edge: Vec<u8> = (0..8 * 3 * 3).map(|i| if (i / 3) % 8 < 4 { 0 } else { 240 }).collect();
        blur(&mut edge, 8, 3, (3, 3), 1.0);
        let row: Vec<u8> = edge[..24].chunks(3).map(|p| p[0]).collect();
        assert!(row[3] > 0 && row[4] < 240 && row[0] == 0 && row[7] == 240, "{row:?}");
    }
}
