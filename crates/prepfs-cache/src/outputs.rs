//! The kept augmented outputs of every pipeline the mount serves: `augmented/`'s (pipeline 0,
//! `SampleCache::augmented`, the store whose status bits opportunistic sampling reads) and each
//! recipe's (its number, from 1: a store of its own, so no view is ever served another's
//! output), how the jobs reading a pipeline share its outputs, and how the plan's augmented
//! budget is split between them.
//!
//! Sharing is alike in every pipeline (Seneca's): an output records the jobs that used it (one
//! bit per job slot); a job takes only one it has not used, and it is dropped once every job
//! still needing the sample (in that pipeline's view) has used it, or when the job that made a
//! job wait retires. With several jobs reading, a full store makes room for a new one by
//! evicting the oldest kept.
//!
//! The split is kept simple on purpose: the plan gives one augmented budget (its model knows no
//! recipes), and each pipeline gets the share of it that its reads are of all pipelines' reads
//! (each counted one more, so before any read every pipeline gets an equal share, and a
//! pipeline no one reads keeps a sliver). A share that shrinks evicts down to it before the
//! others grow, as a new split does between the forms.

use prepfs_base::sync::atomic::{AtomicU64, Ordering};
use prepfs_base::sync::{LockExt, Mutex};

use crate::settings::EvictionPolicy;

use super::tiers::{AugmentedEntry, FormStore, SampleCache};
use prepfs_pixels::served::ServedBytes;
use prepfs_source::catalog::FileId;

/// The recipes' own output stores and the state of the budget's split (in [`SampleCache`]).
pub(super) struct RecipeOutputs {
    /// Recipe `r`'s kept outputs at `stores[r - 1]`: taken whole, each served once.
    stores: Vec<FormStore<AugmentedEntry>>,
    /// The augmented budget the plan gives all pipelines together.
    total: AtomicU64,
    /// Each pipeline's reads when the budget was last split (0: `augmented/`'s).
    reads: Mutex<Vec<u64>>,
}

impl RecipeOutputs {
    /// `recipes` stores, empty; the whole of `total` stays `augmented/`'s until
    /// [`SampleCache::with_recipe_outputs`] splits it.
    pub(super) fn new(recipes: usize, total: u64) -> RecipeOutputs {
        RecipeOutputs {
            // Outputs are used once and dropped: never evicted to admit others.
            stores: (0..recipes).map(|_| FormStore::new(0, EvictionPolicy::Keep)).collect(),
            total: AtomicU64::new(total),
            reads: Mutex::new(vec![0; recipes + 1]),
        }
    }

    /// The augmented budget all pipelines share.
    pub(super) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Every recipe's store, in recipe order.
    pub(super) fn stores(&self) -> &[FormStore<AugmentedEntry>] {
        &self.stores
    }
}

/// Each pipeline's bytes of `total`, by its share of `reads` (each counted one more).
fn shares(total: u64, reads: &[u64]) -> Vec<u64> {
    let weights: Vec<u128> = reads.iter().map(|&r| u128::from(r) + 1).collect();
    let sum: u128 = weights.iter().sum::<u128>().max(1);
    weights.iter().map(|w| (u128::from(total) * w / sum) as u64).collect()
}

impl SampleCache {
    /// The same cache with a store of kept outputs for each of `recipes` recipes, the augmented
    /// budget split between them and `augmented/` equally until reads are counted.
    pub fn with_recipe_outputs(mut self, recipes: usize) -> SampleCache {
        self.recipes = RecipeOutputs::new(recipes, self.augmented.budget());
        self.split_outputs();
        self
    }

    /// The kept outputs of pipeline `pipeline` (0: `augmented/`'s, else the recipe's number);
    /// `None` for a number no recipe has.
    pub fn outputs(&self, pipeline: u8) -> Option<&FormStore<AugmentedEntry>> {
        match pipeline {
            0 => Some(&self.augmented),
            r => self.recipes.stores.get(usize::from(r) - 1),
        }
    }

    /// Every pipeline's kept outputs, `augmented/`'s first.
    pub fn all_outputs(&self) -> impl Iterator<Item = &FormStore<AugmentedEntry>> {
        std::iter::once(&self.augmented).chain(self.recipes.stores())
    }

    /// Pipeline `pipeline`'s output of `id` for a job (its used-by bit `job`, the jobs that still
    /// need the sample in that pipeline `active`): one the job has not used, marked used by it,
    /// and dropped once every one of `active` has used it.
    pub fn take_output_for_job(&self, pipeline: u8, id: FileId, job: u64, active: u64) -> Option<ServedBytes> {
        let store = self.outputs(pipeline)?;
        store.use_entry(id, |entry| {
            if entry.used_by & job != 0 {
                return (None, false);
            }
            entry.used_by |= job;
            store.set_refs(id, entry.used_by.count_ones());
            (Some(entry.bytes.clone()), entry.used_by & active == active)
        })
    }

    /// Whether pipeline `pipeline` keeps an output of `id` the job (its used-by bit `job`) has
    /// not used.
    pub fn output_usable_by(&self, pipeline: u8, id: FileId, job: u64) -> bool {
        self.outputs(pipeline).and_then(|store| store.peek(id, |entry| entry.used_by & job == 0)).unwrap_or(false)
    }

    /// After a job (bit `job`) retired: forgets its uses in every pipeline and drops the outputs
    /// every remaining active job (`active`) has used. Returns how many were dropped.
    pub fn forget_job(&self, job: u64, active: u64) -> u64 {
        let forget = |store: &FormStore<AugmentedEntry>| {
            store.retain(|id, entry| {
                if entry.used_by & job != 0 {
                    entry.used_by &= !job;
                    store.set_refs(id, entry.used_by.count_ones());
                }
                entry.used_by == 0 || entry.used_by & active != active
            })
        };
        self.all_outputs().map(forget).sum()
    }

    /// With several jobs reading, the cache is a window (see `planner::prepfs`): a job's new
    /// output evicts the oldest one kept for the other jobs rather than be dropped (`shared`), in
    /// every pipeline; with one job or none, outputs wait for room.
    pub fn set_shared_outputs(&self, shared: bool) {
        for store in self.all_outputs() {
            store.set_lru(shared);
        }
    }

    /// How many pipelines keep outputs: `augmented/`'s and one per recipe.
    pub fn pipelines(&self) -> u8 {
        (self.recipes.stores.len() + 1) as u8
    }

    /// Each pipeline's share of the augmented budget (0: `augmented/`'s), summing to 1, and
    /// whether it has been read: the shares [`SampleCache::set_output_reads`] splits it in, for
    /// the plan's room size.
    pub fn output_shares(&self) -> Vec<(f64, bool)> {
        let reads = self.recipes.reads.lock_or_recover().clone();
        let sum: f64 = reads.iter().map(|&r| r as f64 + 1.0).sum();
        reads.iter().map(|&r| ((r as f64 + 1.0) / sum, r > 0)).collect()
    }

    /// Sets the augmented budget all pipelines share (a new split's), split between them.
    pub(super) fn set_outputs_budget(&self, total: u64) -> u64 {
        self.recipes.total.store(total, Ordering::Relaxed);
        self.split_outputs()
    }

    /// Splits the augmented budget again by each pipeline's `reads` so far (0: `augmented/`'s;
    /// the mount's housekeeping calls this once a second). Returns how many outputs were evicted.
    pub fn set_output_reads(&self, reads: &[u64]) -> u64 {
        {
            let mut kept = self.recipes.reads.lock_or_recover();
            for (k, r) in kept.iter_mut().zip(reads) {
                *k = *r;
            }
        }
        self.split_outputs()
    }

    /// Applies the split: shrinking stores first, so all together never pass the total.
    fn split_outputs(&self) -> u64 {
        if self.recipes.stores.is_empty() {
            return self.augmented.set_budget(self.recipes.total.load(Ordering::Relaxed));
        }
        let reads = self.recipes.reads.lock_or_recover().clone();
        let budgets = shares(self.recipes.total.load(Ordering::Relaxed), &reads);
        let stores: Vec<&FormStore<AugmentedEntry>> = (0..self.pipelines()).filter_map(|p| self.outputs(p)).collect();
        let mut evicted = 0;
        for shrinking in [true, false] {
            for (store, &budget) in stores.iter().zip(&budgets) {
                if (budget < store.budget()) == shrinking {
                    evicted += store.set_budget(budget);
                }
            }
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ENTRY_OVERHEAD;
    use prepfs_planner::Split;

    fn cache(recipes: usize, augmented: u64) -> SampleCache {
        let split = Split::new(0, 0, 100).expect("sums to 100");
        SampleCache::new(augmented, split, EvictionPolicy::Keep, 16).with_recipe_outputs(recipes)
    }

    fn output(n: usize) -> AugmentedEntry {
        AugmentedEntry::fresh(std::sync::Arc::<[u8]>::from(vec![1u8; n]))
    }

    #[test]
    fn before_any_read_augmented_and_each_recipe_get_an_equal_share_of_the_augmented_budget() {
        let cache = cache(2, 3000);
        let budgets: Vec<u64> = (0..3).map(|p| cache.outputs(p).expect("store").budget()).collect();
        assert_eq!(budgets, [1000, 1000, 1000]);
        assert!(cache.outputs(3).is_none(), "no store for a number no recipe has");
    }

    #[test]
    fn the_augmented_budget_follows_the_pipelines_read_shares_and_never_passes_the_plans() {
        let cache = cache(2, 100 * (100 + ENTRY_OVERHEAD));
        // Recipe 1 fills its share.
        let ones = (0..16).filter(|&id| cache.outputs(1).expect("store").admit(id, output(100))).count();
        assert!(ones > 0);
        // Recipe 2 is read three times as much as recipe 1, augmented/ not at all.
        cache.set_output_reads(&[0, 100, 300]);
        let budgets: Vec<u64> = (0..3).map(|p| cache.outputs(p).expect("store").budget()).collect();
        let total = 100 * (100 + ENTRY_OVERHEAD);
        assert!(budgets.iter().sum::<u64>() <= total);
        assert!(budgets[0] < total / 100, "a pipeline no one reads keeps a sliver: {budgets:?}");
        assert!(budgets[2] > 2 * budgets[1] && budgets[2] < 4 * budgets[1], "{budgets:?}");
        for p in 0..3 {
            let store = cache.outputs(p).expect("store");
            assert!(store.used() <= store.budget(), "pipeline {p} holds more than its share");
        }
        // A new split of the memory moves the total; the shares follow it.
        cache.set_split(Split::new(50, 0, 50).expect("sums to 100"));
        let after: u64 = (0..3).map(|p| cache.outputs(p).expect("store").budget()).sum();
        assert!(after <= total / 2 && after + 3 >= total / 2, "{after}");
    }

    #[test]
    fn the_plan_is_told_the_shares_the_budget_is_split_in() {
        let cache = cache(2, 3000);
        assert_eq!(cache.output_shares(), [(1.0 / 3.0, false); 3]);
        cache.set_output_reads(&[0, 99, 299]);
        let (shares, read): (Vec<f64>, Vec<bool>) = cache.output_shares().into_iter().unzip();
        assert_eq!(read, [false, true, true]);
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // Each pipeline's reads counted one more, as the split counts them.
        assert_eq!(shares, [1.0 / 401.0, 100.0 / 401.0, 300.0 / 401.0]);
        let budgets: Vec<u64> = (0..3).map(|p| cache.outputs(p).expect("store").budget()).collect();
        for (b, w) in budgets.iter().zip(&shares) {
            assert!((*b as f64 - 3000.0 * w).abs() <= 1.0, "{budgets:?} against {shares:?}");
        }
    }

    #[test]
    fn a_recipes_kept_output_is_in_its_own_store_alone_and_taken_once() {
        let cache = cache(2, 1 << 20);
        assert!(cache.outputs(1).expect("store").admit(5, output(10)));
        assert!(!cache.augmented.contains(5) && !cache.outputs(2).expect("store").contains(5));
        assert_eq!(cache.status.held(5), 0, "augmented/'s status bits are its own outputs'");
        assert!(cache.outputs(1).expect("store").take(5).is_some());
        assert!(cache.outputs(1).expect("store").take(5).is_none(), "an output is served once");
    }

    #[test]
    fn without_recipes_augmented_keeps_the_whole_augmented_budget() {
        let cache = cache(0, 5000);
        assert_eq!(cache.augmented.budget(), 5000);
        cache.set_output_reads(&[10]);
        assert_eq!(cache.augmented.budget(), 5000);
        assert_eq!(cache.pipelines(), 1);
    }
}
