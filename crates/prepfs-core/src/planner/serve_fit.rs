//! What serving costs the machine with several jobs reading, split between a sample served and
//! a source read: a least-squares fit over the serving probe's intervals (a pure function of
//! what the controller measured; the controller owns the probe).
//!
//! With several jobs no interval serves from the cache alone until a cache that holds the set
//! has been filled, so the controller costs serving as the machine's busy core-seconds beyond
//! the timed pixel work, per sample served. Lumped that way, the cost of a miss beyond its pixel
//! work (the source read's CPU, the output written) is spread over every sample served at the
//! first epoch's mix of misses and hits, which later epochs do not share: three jobs over the
//! 1600x1200 set with a cache that holds it were predicted at 956 samples/s for epoch 2 and ran
//! at about 2,200. Each interval's spent core-seconds are fitted here as `per_sample * served +
//! per_read * reads`; where the intervals' mixes do not tell the two apart (a steady mix), there
//! is no fit and the lumped cost stands, right for that steady mix.

/// Sums of the fit's normal equations over the intervals added.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServeFit {
    ss: f64,
    sr: f64,
    rr: f64,
    sy: f64,
    ry: f64,
}

/// The fitted costs, core-seconds each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ServeCosts {
    /// Serving one sample (FUSE round trips, copies, the readers' own work).
    pub(crate) per_sample: f64,
    /// A source read beyond its pixel work.
    pub(crate) per_read: f64,
}

/// How far from collinear the intervals' mixes must be: the squared correlation of samples
/// served and reads, over the intervals, at most this.
const MAX_SHARED_VARIATION: f64 = 0.9;

impl ServeFit {
    /// Adds an interval that served `served` samples, read `reads` from the source and spent
    /// `spent` core-seconds beyond its pixel work.
    pub(crate) fn add(&mut self, served: u64, reads: u64, spent: f64) {
        let (s, r) = (served as f64, reads as f64);
        self.ss += s * s;
        self.sr += s * r;
        self.rr += r * r;
        self.sy += s * spent;
        self.ry += r * spent;
    }

    /// The costs that fit the intervals best, if their mixes tell them apart and both come out
    /// as costs (a sample's positive, a read's not negative).
    pub(crate) fn costs(&self) -> Option<ServeCosts> {
        let det = self.ss * self.rr - self.sr * self.sr;
        if self.rr <= 0.0 || det <= (1.0 - MAX_SHARED_VARIATION) * self.ss * self.rr {
            return None;
        }
        let per_sample = (self.sy * self.rr - self.ry * self.sr) / det;
        let per_read = (self.ry * self.ss - self.sy * self.sr) / det;
        (per_sample > 0.0 && per_read >= 0.0).then_some(ServeCosts { per_sample, per_read })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_of_changing_mixes_give_back_the_costs_they_were_made_of() {
        let mut fit = ServeFit::default();
        // A first epoch: early intervals mostly misses, later ones mostly hits; then pure hits.
        for (served, reads) in [(300, 250), (400, 200), (500, 120), (600, 60), (700, 0), (800, 0)] {
            fit.add(served, reads, 0.0004 * served as f64 + 0.003 * reads as f64);
        }
        let c = fit.costs().expect("a fit");
        assert!((c.per_sample - 0.0004).abs() < 1e-9 && (c.per_read - 0.003).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn a_steady_mix_gives_no_fit_and_no_reads_give_none() {
        let mut steady = ServeFit::default();
        for k in 1..6 {
            steady.add(500 * k, 100 * k, 0.5 * k as f64);
        }
        assert_eq!(steady.costs(), None);
        let mut hits = ServeFit::default();
        hits.add(500, 0, 0.2);
        hits.add(700, 0, 0.3);
        assert_eq!(hits.costs(), None);
    }

    #[test]
    fn a_fit_that_makes_a_cost_negative_is_no_fit() {
        let mut fit = ServeFit::default();
        // More reads cost less: noise, not a cost.
        fit.add(500, 400, 0.1);
        fit.add(500, 0, 0.5);
        assert_eq!(fit.costs(), None);
    }
}
