//! What serving costs the machine with several jobs reading, split between a sample served and
//! an output made: a least-squares fit over the serving probe's intervals (a pure function of
//! what the controller measured; the controller owns the probe).
//!
//! With several jobs no interval serves from the cache alone until a cache that holds the set
//! has been filled, so the controller costs serving as the machine's busy core-seconds beyond
//! the timed pixel work, per sample served. Lumped that way, the cost of a miss beyond its pixel
//! work (the source read's CPU, the output written, the round trips) is spread over every
//! sample served at the first epoch's mix of misses and hits, which later epochs do not share:
//! three jobs over the 1600x1200 set with a cache that holds it were predicted at 956 samples/s
//! for epoch 2 and ran at about 2,200. Each interval's spent core-seconds are fitted here as
//! `per_sample * served + per_made * made` (`made`: the outputs made); where the intervals'
//! mixes do not tell the two apart (a steady mix), there is no fit and the lumped cost stands,
//! right for that steady mix.
//!
//! The regressor is the outputs made, not the source reads: a miss costs its output's writing
//! and round trips whether its bytes came from the storage or from the encoded form. Fitted per
//! read, that cost was charged to reads alone, and three jobs over the generator's 500x375 set
//! with a fifth of it cached were planned 34-0-66 (an encoded share sparing two reads in three)
//! on a read that "cost" 0.19-0.35 ms of a core, where the read's own CPU was 0.06-0.08 ms; it
//! ran no faster than 0-0-100. The fit also keeps the reads per output made over the intervals
//! it used, so the controller can take the reads' own CPU out of `per_made`.

/// Sums of the fit's normal equations over the intervals added.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServeFit {
    ss: f64,
    sm: f64,
    mm: f64,
    sy: f64,
    my: f64,
    made: f64,
    reads: f64,
}

/// The fitted costs, core-seconds each.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServeCosts {
    /// Serving one sample (FUSE round trips, copies, the readers' own work).
    pub per_sample: f64,
    /// An output made beyond its pixel work (its source read's CPU where it read, the writing,
    /// the round trips).
    pub per_made: f64,
    /// Source reads per output made over the intervals fitted.
    pub reads_per_made: f64,
}

/// How far from collinear the intervals' mixes must be: the squared correlation of samples
/// served and outputs made, over the intervals, at most this.
const MAX_SHARED_VARIATION: f64 = 0.9;

impl ServeFit {
    /// Adds an interval that served `served` samples, made `made` outputs (reading `reads` from
    /// the source) and spent `spent` core-seconds beyond its pixel work.
    pub fn add(&mut self, served: u64, made: u64, reads: u64, spent: f64) {
        let (s, m) = (served as f64, made as f64);
        self.ss += s * s;
        self.sm += s * m;
        self.mm += m * m;
        self.sy += s * spent;
        self.my += m * spent;
        self.made += m;
        self.reads += reads as f64;
    }

    /// The costs that fit the intervals best, if their mixes tell them apart and both come out
    /// as costs (a sample's positive, an output's not negative).
    pub fn costs(&self) -> Option<ServeCosts> {
        let det = self.ss * self.mm - self.sm * self.sm;
        if self.mm <= 0.0 || det <= (1.0 - MAX_SHARED_VARIATION) * self.ss * self.mm {
            return None;
        }
        let per_sample = (self.sy * self.mm - self.my * self.sm) / det;
        let per_made = (self.my * self.ss - self.sy * self.sm) / det;
        let reads_per_made = self.reads / self.made;
        (per_sample > 0.0 && per_made >= 0.0).then_some(ServeCosts { per_sample, per_made, reads_per_made })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_of_changing_mixes_give_back_the_costs_they_were_made_of() {
        let mut fit = ServeFit::default();
        // A first epoch: early intervals mostly misses, later ones mostly hits; then pure hits.
        // A third of the outputs made from encoded bytes held (no read).
        for (served, made) in [(300, 240), (400, 210), (500, 120), (600, 60), (700, 0), (800, 0)] {
            fit.add(served, made, made * 2 / 3, 0.0004 * served as f64 + 0.003 * made as f64);
        }
        let c = fit.costs().expect("a fit");
        assert!((c.per_sample - 0.0004).abs() < 1e-9 && (c.per_made - 0.003).abs() < 1e-9, "{c:?}");
        assert!((c.reads_per_made - 2.0 / 3.0).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn a_steady_mix_gives_no_fit_and_nothing_made_gives_none() {
        let mut steady = ServeFit::default();
        for k in 1..6 {
            steady.add(500 * k, 100 * k, 100 * k, 0.5 * k as f64);
        }
        assert_eq!(steady.costs(), None);
        let mut hits = ServeFit::default();
        hits.add(500, 0, 0, 0.2);
        hits.add(700, 0, 0, 0.3);
        assert_eq!(hits.costs(), None);
    }

    #[test]
    fn a_fit_that_makes_a_cost_negative_is_no_fit() {
        let mut fit = ServeFit::default();
        // More made costs less: noise, not a cost.
        fit.add(500, 400, 400, 0.1);
        fit.add(500, 0, 0, 0.5);
        assert_eq!(fit.costs(), None);
    }
}
