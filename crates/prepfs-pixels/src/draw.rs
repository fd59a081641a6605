//! The random generator of one draw: each fresh augmentation's randomness is a pure function
//! of (seed, job, epoch, sample), so a draw is reproduced wherever it is made.

use rand_pcg::Pcg64Mcg;

/// The random generator of one draw: a pure function of (seed, job, epoch, sample).
pub fn draw_rng(seed: u64, job: u64, epoch: u64, sample: u64) -> Pcg64Mcg {
    let mut h = splitmix64(seed ^ 0x7072_6570_6673);
    for part in [job, epoch, sample] {
        h = splitmix64(h ^ part);
    }
    Pcg64Mcg::new(u128::from(h) << 64 | u128::from(splitmix64(h)))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
