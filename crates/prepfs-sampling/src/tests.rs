//! Opportunistic sampling's unit tests: names, the registry's limits, and jobs' choices, epochs,
//! listings and prefetch.

use super::*;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

use rand::seq::SliceRandom;

use prepfs_pixels::draw::draw_rng;
use prepfs_source::catalog::FileId;
use prepfs_base::sync::Arc;

fn jobs(files: usize) -> Jobs {
    Jobs::new(8, files, files as u64, 7)
}

#[test]
fn a_user_holds_at_most_per_user_jobs_and_never_the_last_slot() {
    let reg = Jobs::new(4, 10, 10, 0).with_per_user(2);
    let nobody = Requester { uid: 65534, privileged: false };
    let other = Requester { uid: 1000, privileged: false };
    reg.get_or_create(b"n1", nobody).expect("first");
    reg.get_or_create(b"n2", nobody).expect("second");
    assert_eq!(reg.get_or_create(b"n3", nobody).err(), Some(JobError::TooManyForUser { uid: 65534, held: 2 }));
    assert_eq!(reg.get_or_create(b"n1", nobody).expect("its own job again").owner(), 65534);
    reg.get_or_create(b"o1", other).expect("another user");
    assert_eq!(reg.get_or_create(b"o2", other).err(), Some(JobError::TooMany(4)), "the last slot is kept");
    let train = reg.get_or_create(b"train", Requester::OWNER).expect("root always finds one");
    assert_eq!(train.owner(), 0);
}

#[test]
fn bitsets_set_clear_and_count_their_memory() {
    let b = Bitset::new(130);
    assert!(!b.get(129));
    assert!(b.set(129));
    assert!(!b.set(129), "already set");
    assert!(b.get(129) && !b.get(128));
    assert!(b.clear(129) && !b.clear(129));
    b.set(3);
    b.clear_all();
    assert!(!b.get(3));
    assert_eq!(b.bytes(), 24);
    assert!(!b.get(10_000) && !b.set(10_000), "out of range is never set");
}

#[test]
fn names_are_checked() {
    assert_eq!(check_name(b"resnet50-run_2.a"), Ok("resnet50-run_2.a"));
    for bad in [&b""[..], b".", b"..", b".hidden", b"a/b", b"a b", b"caf\xc3\xa9", b"x\0y"] {
        assert!(matches!(check_name(bad), Err(JobError::BadName(_))), "{bad:?}");
    }
    assert_eq!(check_name(&[b'a'; MAX_NAME_LEN + 1]), Err(JobError::NameTooLong));
    assert!(check_name(&[b'a'; MAX_NAME_LEN]).is_ok());
}

#[test]
fn jobs_exist_from_first_use_and_are_bounded() {
    let reg = Jobs::new(2, 10, 10, 0);
    let a = reg.get_or_create(b"a", Requester::OWNER).expect("a");
    assert!(Arc::ptr_eq(&a, &reg.get_or_create(b"a", Requester::OWNER).expect("a again")));
    let b = reg.get_or_create(b"b", Requester::OWNER).expect("b");
    assert_ne!(a.bit(), b.bit());
    assert_eq!(reg.active_mask(), a.bit() | b.bit());
    assert_eq!(reg.get_or_create(b"c", Requester::OWNER).err(), Some(JobError::TooMany(2)));
    assert!(reg.by_code(a.code()).is_some());
    // Retiring frees the slot; the successor in that slot gets a new code.
    let old_code = a.code();
    assert!(reg.retire("a").is_some());
    assert!(reg.retire("a").is_none());
    assert!(reg.by_code(old_code).is_none(), "a retired job's inodes are stale");
    let c = reg.get_or_create(b"c", Requester::OWNER).expect("c");
    assert_eq!(c.bit(), a.bit());
    assert_ne!(c.code(), old_code);
    assert!(reg.by_code(old_code).is_none());
}

#[test]
fn idle_jobs_retire() {
    let reg = jobs(4);
    reg.get_or_create(b"busy", Requester::OWNER).expect("busy");
    reg.get_or_create(b"idle", Requester::OWNER).expect("idle");
    // 30 ms later by the registry's clock: "busy" was used then, "idle" not since it began.
    let later = reg.now_ms() + 30;
    reg.by_name("busy").expect("busy").touch(later);
    let retired = reg.retire_idle(later, 20);
    assert_eq!(retired.iter().map(|j| j.name()).collect::<Vec<_>>(), ["idle"]);
    assert!(reg.by_name("busy").is_some() && reg.by_name("idle").is_none());
}

/// One epoch of opens of every sample of one directory in a random order, each read at once;
/// returns what was served.
fn epoch(job: &Job, dir: &[FileId], cached: &HashSet<FileId>, order_seed: u64) -> Vec<FileId> {
    let mut order = dir.to_vec();
    order.shuffle(&mut draw_rng(order_seed, 0, 0, 0));
    order
        .iter()
        .map(|&s| {
            let rank = |c: FileId| u8::from(cached.contains(&c)) * 2;
            let choice = job.choose(s, dir, rank, 2, Jobs::scan_start(dir.len()), true);
            assert!(choice.claimed);
            job.mark_served(choice.sample, true);
            choice.sample
        })
        .collect()
}

#[test]
fn each_sample_is_served_once_per_epoch_with_cached_ones_first() {
    let reg = jobs(40);
    let job = reg.get_or_create(b"j", Requester::OWNER).expect("job");
    let dir: Vec<FileId> = (0..40).collect();
    let cached: HashSet<FileId> = (0..40).filter(|i| i % 4 == 0).collect();
    for e in 0..3 {
        assert_eq!(job.epoch(), e + 1);
        let served = epoch(&job, &dir, &cached, e);
        let distinct: HashSet<_> = served.iter().copied().collect();
        assert_eq!(distinct.len(), 40, "epoch {e}: a sample was served twice");
        // The first ten opens got the ten cached samples, whatever they asked for.
        assert!(served[..10].iter().all(|s| cached.contains(s)), "epoch {e}: {served:?}");
    }
    assert_eq!(job.epoch(), 4);
    assert_eq!(job.counters.served.load(Ordering::Relaxed), 120);
}

#[test]
fn an_open_that_is_never_read_gives_its_claim_back() {
    let reg = jobs(3);
    let job = reg.get_or_create(b"j", Requester::OWNER).expect("job");
    let dir = [0, 1, 2];
    let none = |_c: FileId| 0u8;
    let a = job.choose(0, &dir, none, 2, 0, true);
    assert_eq!(a.sample, 0);
    // A second open of the same name while the first is unread gets another sample.
    let b = job.choose(0, &dir, none, 2, 0, true);
    assert_ne!(b.sample, a.sample);
    job.unclaim(b.sample);
    job.mark_served(a.sample, true);
    // The requested sample was served: the next open of it is served an unseen one.
    let c = job.choose(0, &dir, none, 2, 0, true);
    assert!(c.substituted && c.sample != 0);
}

#[test]
fn a_walk_of_an_epoch_the_job_has_ended_claims_nothing_of_the_next() {
    // Two loaders walk epoch 1 of a 2-sample job; one serves the last sample, which ends it.
    let reg = jobs(2);
    let job = reg.get_or_create(b"walks", Requester::OWNER).expect("job");
    let dir = [0, 1];
    let none = |_c: FileId| 0u8;
    let walked = job.epoch();
    for s in [0, 1] {
        let c = job.choose_within_epoch(walked, s, &dir, none, 2, 0, |_| false);
        assert!(c.claimed);
        job.mark_served(c.sample, true);
    }
    assert_eq!(job.epoch(), walked + 1, "every sample served: the next epoch");
    // The other loader, still walking epoch 1, asks again: nothing is claimed for it.
    let late = job.choose_within_epoch(walked, 0, &dir, none, 2, 0, |_| false);
    assert!(!late.claimed, "{late:?}");
    assert!(!job.has_seen(0) && !job.has_seen(1));
    // A walk of the new epoch claims as usual.
    assert!(job.choose_within_epoch(job.epoch(), 0, &dir, none, 2, 0, |_| false).claimed);
}

#[test]
fn reopening_an_exhausted_directory_starts_the_next_pass() {
    // Two directories; the job reads one of them twice before touching the other.
    let reg = jobs(4);
    let job = reg.get_or_create(b"partial", Requester::OWNER).expect("job");
    let d0 = [0, 1];
    let none = |_c: FileId| 0u8;
    for s in [0, 1] {
        let c = job.choose(s, &d0, none, 2, 0, true);
        job.mark_served(c.sample, true);
    }
    assert_eq!(job.epoch(), 1, "two of four samples served");
    let c = job.choose(0, &d0, none, 2, 0, true);
    assert_eq!(job.epoch(), 2, "a pass over d0 again is the next epoch");
    assert!(!c.substituted);
}

#[test]
fn without_ods_the_requested_sample_is_served() {
    let reg = jobs(10);
    let job = reg.get_or_create(b"plain", Requester::OWNER).expect("job");
    let dir: Vec<FileId> = (0..10).collect();
    let all = |_c: FileId| 3u8;
    for s in (0..10).rev() {
        let c = job.choose(s, &dir, all, 3, 0, false);
        assert_eq!(c.sample, s);
        job.mark_served(c.sample, true);
    }
    assert_eq!(job.epoch(), 2);
    assert_eq!(&*job.listing_order(0, &dir, all, false), &dir[..]);
}

#[test]
fn listings_put_cached_unseen_samples_first_and_reshuffle_each_epoch() {
    let reg = jobs(100);
    let job = reg.get_or_create(b"lister", Requester::OWNER).expect("job");
    let dir: Vec<FileId> = (0..100).collect();
    let cached = |c: FileId| u8::from(c % 10 == 0);
    let first = job.listing_order(0, &dir, cached, true);
    assert_eq!(first.len(), 100);
    assert!(first[..10].iter().all(|c| c % 10 == 0), "{first:?}");
    assert_eq!(first.iter().copied().collect::<HashSet<_>>().len(), 100);
    assert_eq!(job.listing_order(0, &dir, cached, true), first, "same epoch, same order");
    for &s in first.iter() {
        job.mark_served(s, true);
    }
    assert_eq!(job.epoch(), 2);
    assert_ne!(job.listing_order(0, &dir, cached, true), first, "a new epoch reshuffles");
    // Another job gets its own order.
    let other = reg.get_or_create(b"other", Requester::OWNER).expect("job");
    assert_ne!(other.listing_order(0, &dir, cached, true)[10..], first[10..]);
}

#[test]
fn prefetch_runs_ahead_along_the_listing() {
    let reg = jobs(20);
    let job = reg.get_or_create(b"p", Requester::OWNER).expect("job");
    let dir: Vec<FileId> = (0..20).collect();
    let order = job.listing_order(3, &dir, |_| 0, true);
    let none_cached = |_c: FileId| false;
    let ahead = job.prefetch_candidates(3, order[0], 4, none_cached);
    assert_eq!(ahead, order[1..5]);
    // The next call continues where the last stopped, never repeating a candidate.
    let more = job.prefetch_candidates(3, order[1], 4, none_cached);
    assert_eq!(more, order[5..9]);
    // Cached or seen samples are skipped.
    job.mark_served(order[9], true);
    let skip = job.prefetch_candidates(3, order[2], 2, |c| c == order[10]);
    assert_eq!(skip, order[11..13]);
    assert!(job.prefetch_candidates(4, 0, 4, none_cached).is_empty(), "no listing of dir 4");
}

#[test]
fn per_sample_state_is_two_bits_per_sample() {
    // 1.3 million samples, 8 jobs: the paper's budget is single megabytes.
    let reg = Jobs::new(8, 1_300_000, 1_300_000, 0);
    let total: usize = (0..8).map(|i| reg.get_or_create(format!("j{i}").as_bytes(), Requester::OWNER).expect("job").state_bytes()).sum();
    assert!(total <= 2_700_000, "{total} bytes");
}

#[test]
fn an_unusable_sample_is_never_chosen_with_ods_on_or_off() {
    for ods in [true, false] {
        let reg = jobs(4);
        let job = reg.get_or_create(b"bad", Requester::OWNER).expect("job");
        let dir = [0, 1, 2, 3];
        let bad = |c: FileId| c == 1 || c == 2;
        // Sample 1 is cached (rank 2): it still is never picked.
        let rank = |c: FileId| if c == 1 { 2u8 } else { 0 };
        let mut served = Vec::new();
        for epoch in 0..3 {
            for requested in dir {
                let choice = job.choose_usable(requested, &dir, rank, 2, epoch, ods, bad);
                assert!(!bad(choice.sample), "ods {ods}: {requested} was served bad {}", choice.sample);
                assert_eq!(choice.substituted, choice.sample != requested);
                job.mark_served(choice.sample, choice.claimed);
                served.push(choice.sample);
            }
        }
        // Each pass serves the two good samples once each (the other two opens start a pass).
        assert!(served.iter().all(|s| *s == 0 || *s == 3), "ods {ods}: {served:?}");
        assert!(served.contains(&0) && served.contains(&3), "ods {ods}: {served:?}");
        // A directory of nothing usable returns the request, unclaimed, for its open to fail.
        let none = job.choose_usable(1, &[1, 2], rank, 2, 0, ods, bad);
        assert_eq!(none, Choice { sample: 1, substituted: false, claimed: false });
    }
}

#[test]
fn an_epoch_is_ended_unserved_only_once_no_walk_is_in_it_and_no_open_holds_a_claim() {
    let reg = jobs(4);
    let job = reg.get_or_create(b"walked", Requester::OWNER).expect("job");
    let dir = [0, 1, 2, 3];
    let none = |_c: FileId| 0u8;
    let (a, b) = (job.walk_begun(), job.walk_begun());
    assert_eq!((a, b), (1, 1));
    let c = job.choose_within_epoch(1, 0, &dir, none, 2, 0, |_| false);
    job.mark_served(c.sample, true);
    job.walk_ended(a);
    assert!(!job.end_epoch_unless_walked(1), "b still walks epoch 1");
    job.walk_ended(b);
    // An open's claim (chosen, not yet read) is a reader still serving the epoch.
    let open = job.choose(1, &dir, none, 2, 0, true);
    assert!(open.claimed);
    assert!(!job.end_epoch_unless_walked(1), "a claim is held");
    job.unclaim(open.sample);
    assert!(job.end_epoch_unless_walked(1));
    assert_eq!((job.epoch(), job.served_this_epoch()), (2, 0), "ended with 3 of 4 unserved");
    // Once past it, asking again ends nothing more.
    assert!(job.end_epoch_unless_walked(1));
    assert_eq!(job.epoch(), 2);
    // A walk begun after the end is in the new epoch.
    assert_eq!(job.walk_begun(), 2);
    assert!(!job.end_epoch_unless_walked(2));
}

#[test]
fn a_job_read_only_through_a_recipes_view_shows_its_epochs_and_samples_served_in_stats() {
    let reg = jobs(10);
    let job = reg.get_or_create(b"train", Requester::OWNER).expect("job");
    let ta = reg.in_recipe(&job, 1);
    // Two whole epochs and three samples of the third, in recipe 1's view only.
    for s in (0..10).chain(0..10).chain(0..3) {
        assert!(ta.mark_served(s, false), "sample {s} is new in its epoch");
    }
    let stats = reg.stats(&["ta".to_string()]);
    let figures = &stats["active"][0];
    assert_eq!(figures["name"], "train");
    assert_eq!(figures["samples_served"], 23, "{figures}");
    assert_eq!((figures["epoch"].as_u64(), figures["served_this_epoch"].as_u64()), (Some(3), Some(3)), "{figures}");
    // Its recipe view under the recipe's name (its number where the names are not given).
    assert_eq!(figures["recipes"]["ta"]["epoch"], 3, "{figures}");
    assert_eq!(figures["recipes"]["ta"]["samples_served"], 23, "{figures}");
    assert_eq!(reg.stats(&[])["active"][0]["recipes"]["1"]["samples_served"], 23);
    // Its own view's reads add to the same figures; the epoch is the furthest view's.
    assert!(job.mark_served(4, false));
    let figures = &reg.stats(&[])["active"][0];
    assert_eq!((figures["samples_served"].as_u64(), figures["epoch"].as_u64()), (Some(24), Some(3)), "{figures}");
}
