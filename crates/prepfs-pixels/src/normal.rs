//! Standard normal draws (Box-Muller) for the ops that need them: timm's magnitude noise
//! (`random.gauss`) and `random_erasing`'s `value: random` (`Tensor.normal_()`).

use rand::Rng;

/// One draw of N(0, 1).
pub(crate) fn standard_normal(rng: &mut (impl Rng + ?Sized)) -> f64 {
    // 1 - [0, 1) is (0, 1]: the logarithm stays finite.
    let u1 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::draw::draw_rng;

    #[test]
    fn draws_have_mean_zero_variance_one_and_normal_tails() {
        let mut rng = draw_rng(9, 0, 0, 0);
        let xs: Vec<f64> = (0..20_000).map(|_| standard_normal(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.04, "{var}");
        // P(|x| > 1.96) = 0.05.
        let tails = xs.iter().filter(|x| x.abs() > 1.96).count() as f64 / xs.len() as f64;
        assert!((0.04..0.06).contains(&tails), "{tails}");
    }
}
