//! Model checks of the cache's and sampling's concurrency with shuttle: each test runs its threads
//! under thousands of random (and PCT) schedules, switching threads at every lock, wait and atomic
//! operation of `prepfs_base::sync`. Run with `cargo test --features shuttle --test shuttle`; a failure
//! prints the schedule that found it, which shuttle can replay.
//!
//! What is checked: single-flight loads (`cache::SingleFlight`), the byte budget's reservation and
//! the status bits (`cache::FormStore`, `cache::SampleCache`), and a job's claims on samples
//! (`sampling::Job`).
#![cfg(feature = "shuttle")]

use std::collections::HashSet;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;
use std::sync::Arc;

use shuttle::scheduler::{PctScheduler, RandomScheduler};
use shuttle::sync::atomic::{AtomicU32, Ordering};
use shuttle::sync::{Condvar, Mutex};
use shuttle::{thread, Config, Runner};

use prepfs_cache::{
    AugmentedEntry, FormStore, SampleCache, SingleFlight, ENTRY_OVERHEAD, HELD_AUGMENTED, HELD_DECODED, HELD_ENCODED,
};
use prepfs_source::catalog::FileId;
use prepfs_cache::settings::EvictionPolicy;
use prepfs_sampling::{Job, Jobs, Requester};

/// Random schedules per test, and PCT schedules (which find bugs of a few ordered preemptions).
const RANDOM: usize = 5000;
const PCT: usize = 2000;
const PCT_DEPTH: usize = 3;

/// Runs `f` under `RANDOM` random schedules, then `PCT` PCT schedules.
fn check<F>(f: F)
where
    F: Fn() + Send + Sync + 'static,
{
    let mut config = Config::new();
    // The code under test uses relaxed orderings on purpose; shuttle treats every atomic as SeqCst.
    config.silence_warnings = true;
    let f = Arc::new(f);
    let g = Arc::clone(&f);
    Runner::new(RandomScheduler::new(RANDOM), config.clone()).run(move || g());
    Runner::new(PctScheduler::new(PCT_DEPTH, PCT), config).run(move || f());
}

fn bytes(n: usize) -> Arc<[u8]> {
    vec![1u8; n].into()
}

// ---- single flight --------------------------------------------------------------------------

/// What one `run` of the work did: which run it was. `active` counts works running now.
fn counted_work(runs: &AtomicU32, active: &AtomicU32) -> u32 {
    assert_eq!(active.fetch_add(1, Ordering::SeqCst), 0, "two loads of one key ran at once");
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    thread::yield_now();
    active.fetch_sub(1, Ordering::SeqCst);
    run
}

#[test]
fn concurrent_misses_of_one_sample_never_load_twice_at_once_and_share_the_running_load() {
    const CALLERS: usize = 3;
    // Schedules in which all callers shared one load (the promise, seen to be kept).
    static SHARED_BY_ALL: StdAtomicUsize = StdAtomicUsize::new(0);
    check(|| {
        let flights = Arc::new(SingleFlight::<u32>::default());
        let runs = Arc::new(AtomicU32::new(0));
        let active = Arc::new(AtomicU32::new(0));
        let callers: Vec<_> = (0..CALLERS)
            .map(|_| {
                let (flights, runs, active) = (Arc::clone(&flights), Arc::clone(&runs), Arc::clone(&active));
                thread::spawn(move || flights.run(7, || counted_work(&runs, &active)))
            })
            .collect();
        let got: Vec<u32> = callers.into_iter().map(|t| t.join().expect("caller")).collect();
        let ran = runs.load(Ordering::SeqCst);
        // Each load's result went to its own caller at least, and every caller got some load's.
        let distinct: HashSet<u32> = got.iter().copied().collect();
        assert_eq!(distinct, (1..=ran).collect::<HashSet<u32>>(), "results {got:?} from {ran} loads");
        if ran == 1 {
            SHARED_BY_ALL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // Nothing stays in flight, and a later miss loads afresh (no result is kept).
        assert!(!flights.in_flight(7));
        assert_eq!(flights.run(7, || 100), 100);
    });
    assert!(SHARED_BY_ALL.load(std::sync::atomic::Ordering::Relaxed) > 0, "no schedule shared one load");
}

#[test]
fn a_failed_load_is_shared_by_its_waiters_and_the_next_miss_loads_again() {
    check(|| {
        // The first load fails; later ones succeed.
        let flights = Arc::new(SingleFlight::<Result<u32, u32>>::default());
        let runs = Arc::new(AtomicU32::new(0));
        let active = Arc::new(AtomicU32::new(0));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let (flights, runs, active) = (Arc::clone(&flights), Arc::clone(&runs), Arc::clone(&active));
                thread::spawn(move || {
                    flights.run(3, || {
                        let run = counted_work(&runs, &active);
                        if run == 1 {
                            Err(run)
                        } else {
                            Ok(run)
                        }
                    })
                })
            })
            .collect();
        let got: Vec<Result<u32, u32>> = callers.into_iter().map(|t| t.join().expect("caller")).collect();
        assert!(got.contains(&Err(1)), "the failed load's caller sees its error: {got:?}");
        for r in &got {
            assert!(matches!(r, Err(1) | Ok(2..)), "{got:?}");
        }
        // The error is not kept: the next miss loads again, and now succeeds.
        assert!(!flights.in_flight(3));
        let before = runs.load(Ordering::SeqCst);
        assert_eq!(flights.run(3, || Ok(before + 1)), Ok(before + 1));
    });
}

#[test]
fn loads_of_different_samples_run_side_by_side() {
    check(|| {
        let flights = Arc::new(SingleFlight::<u32>::default());
        // The load of sample 1 waits until the load of sample 2 has run: if one held up the other,
        // every thread would block and shuttle would report the deadlock.
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let first = {
            let (flights, done) = (Arc::clone(&flights), Arc::clone(&done));
            thread::spawn(move || {
                flights.run(1, || {
                    let (lock, cv) = &*done;
                    let mut two_ran = lock.lock().expect("lock");
                    while !*two_ran {
                        two_ran = cv.wait(two_ran).expect("wait");
                    }
                    10
                })
            })
        };
        let second = {
            let (flights, done) = (Arc::clone(&flights), Arc::clone(&done));
            thread::spawn(move || {
                flights.run(2, || {
                    let (lock, cv) = &*done;
                    *lock.lock().expect("lock") = true;
                    cv.notify_all();
                    20
                })
            })
        };
        assert_eq!(first.join().expect("first"), 10);
        assert_eq!(second.join().expect("second"), 20);
    });
}

// ---- budgets and status ---------------------------------------------------------------------

/// Admits, from three threads at once, samples that fit the budget only in part, some in one shard
/// (ids a multiple of the shard count) and some in others; checks the budget at every step and that
/// the charge matches what is held at the end.
fn admissions_race(policy: EvictionPolicy) {
    check(move || {
        let payload = |id: FileId| 100 + (id as usize % 7) * 10;
        let budget = 3 * (130 + ENTRY_OVERHEAD);
        let store = Arc::new(FormStore::<Arc<[u8]>>::new(budget, policy));
        let ids: [[FileId; 2]; 3] = [[0, 1], [16, 2], [32, 3]];
        let threads: Vec<_> = ids
            .iter()
            .map(|&mine| {
                let store = Arc::clone(&store);
                thread::spawn(move || {
                    for id in mine {
                        store.admit(id, bytes(payload(id)));
                        assert!(store.used() <= store.budget(), "charged {} of {}", store.used(), store.budget());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("admitter");
        }
        let held: Vec<FileId> = ids.iter().flatten().copied().filter(|&id| store.contains(id)).collect();
        let charged: u64 = held.iter().map(|&id| payload(id) as u64 + ENTRY_OVERHEAD).sum();
        assert_eq!(store.used(), charged, "charged bytes are what is held ({held:?})");
        assert_eq!(store.entries(), held.len() as u64);
        assert!(store.used() <= budget);
        assert!(!held.is_empty());
    });
}

#[test]
fn concurrent_admissions_never_charge_past_the_budget_and_charge_what_is_held() {
    admissions_race(EvictionPolicy::Keep);
}

#[test]
fn concurrent_admissions_that_evict_never_charge_past_the_budget_and_charge_what_is_held() {
    admissions_race(EvictionPolicy::Lru);
}

#[test]
fn takes_and_admissions_racing_leave_the_status_bits_in_step_with_the_stores() {
    check(|| {
        let split = prepfs_planner::Split::new(30, 30, 40).expect("sums to 100");
        let cache = Arc::new(SampleCache::new(100_000, split, EvictionPolicy::Keep, 4));
        let (a, b) = (1u64, 2u64);
        let active = a | b;
        let pixels = Arc::new(prepfs_pixels::rgb::Rgb { width: 2, height: 1, pixels: vec![0; 6] });
        let t1 = {
            let cache = Arc::clone(&cache);
            thread::spawn(move || {
                cache.augmented.admit(1, AugmentedEntry::fresh(bytes(10)));
                cache.encoded.admit(1, bytes(10));
                cache.take_output_for_job(0, 1, a, active);
                cache.augmented.admit(2, AugmentedEntry::fresh(bytes(10)));
            })
        };
        let t2 = {
            let cache = Arc::clone(&cache);
            thread::spawn(move || {
                cache.take_output_for_job(0, 1, b, active);
                cache.decoded.admit(1, pixels);
                cache.augmented.admit(1, AugmentedEntry::fresh(bytes(20)));
                cache.take_output_for_job(0, 2, b, active);
            })
        };
        let t3 = {
            let cache = Arc::clone(&cache);
            thread::spawn(move || {
                cache.augmented.take(1);
                cache.encoded.take(1);
                // Job a retires: b is the only active job.
                cache.forget_job(a, b);
                // Sample 2's source changed: every form of it is dropped.
                cache.forget_sample(2);
            })
        };
        for t in [t1, t2, t3] {
            t.join().expect("thread");
        }
        for id in 0..4 {
            let held = cache.status.held(id);
            assert_eq!(held & HELD_ENCODED != 0, cache.encoded.contains(id), "sample {id}: encoded");
            assert_eq!(held & HELD_DECODED != 0, cache.decoded.contains(id), "sample {id}: decoded");
            assert_eq!(held & HELD_AUGMENTED != 0, cache.augmented.contains(id), "sample {id}: augmented");
            let used_by = cache.augmented.use_entry(id, |e| (Some(e.used_by), false)).unwrap_or(0);
            assert_eq!(u32::from(cache.status.refs(id)), used_by.count_ones(), "sample {id}: jobs that used it");
        }
        let charged = |n: u64, payload: u64| n * (payload + ENTRY_OVERHEAD);
        let augmented: u64 = [1, 2]
            .iter()
            .filter_map(|&id| cache.augmented.use_entry(id, |e| (Some(e.bytes.len() as u64), false)))
            .map(|len| charged(1, len))
            .sum();
        assert_eq!(cache.augmented.used(), augmented);
        assert_eq!(cache.encoded.used(), charged(cache.encoded.entries(), 10));
    });
}

// ---- a job's claims ---------------------------------------------------------------------------

fn new_job(reg: &Jobs) -> Arc<Job> {
    reg.get_or_create(b"j", Requester::OWNER).expect("job")
}

#[test]
fn two_handles_of_one_job_opening_at_once_never_hold_the_same_sample_and_each_read_is_new() {
    check(|| {
        // One directory of three samples; sample 1 is cached. Two threads open two files each:
        // more opens than samples, so an epoch ends on the way.
        let reg = Jobs::new(4, 3, 3, 7);
        let job = new_job(&reg);
        let dir: Arc<[FileId]> = vec![0, 1, 2].into();
        // Samples claimed by an open handle that has not read or released it yet.
        let held = Arc::new(Mutex::new(HashSet::new()));
        let opens: [[(FileId, bool); 2]; 2] = [[(0, true), (2, true)], [(0, false), (1, true)]];
        let threads: Vec<_> = opens
            .iter()
            .enumerate()
            .map(|(t, &mine)| {
                let (job, dir, held) = (Arc::clone(&job), Arc::clone(&dir), Arc::clone(&held));
                thread::spawn(move || {
                    for (requested, read) in mine {
                        let rank = |c: FileId| if c == 1 { 2 } else { 0 };
                        let choice = job.choose(requested, &dir, rank, 2, t, true);
                        assert!(dir.contains(&choice.sample));
                        if !choice.claimed {
                            continue;
                        }
                        assert!(held.lock().expect("held").insert(choice.sample), "sample {} claimed twice", choice.sample);
                        thread::yield_now();
                        held.lock().expect("held").remove(&choice.sample);
                        if read {
                            assert!(job.mark_served(choice.sample, true), "sample {} was served twice in an epoch", choice.sample);
                        } else {
                            job.unclaim(choice.sample);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("opener");
        }
        // The epoch's count is its seen bits.
        let seen = dir.iter().filter(|&&s| job.has_seen(s)).count() as u64;
        assert_eq!(job.served_this_epoch(), seen);
        assert!(held.lock().expect("held").is_empty());
    });
}
