//! The epoch ledger's tests: jobs put back after a restart over a real file (a memfd, as the
//! supervisor holds, or a tempfile), ledgers refused, wraps of the tag, and its size.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::FromRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};

use prepfs_base::sync::Arc;
use prepfs_source::catalog::FileId;

use super::*;

const SEED: u64 = 7;

/// A new memfd (what the supervisor holds).
fn memfd() -> File {
    // SAFETY: a fresh descriptor memfd_create returns, owned by the File from here.
    let fd = unsafe { libc::memfd_create(c"prepfs-ledger-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    unsafe { File::from_raw_fd(fd) }
}

/// A registry over `n` samples (every file id a sample) with the ledger in `file` (a handle of
/// its own: the registry's is dropped with it, as a dying server's is).
fn with_ledger(n: usize, file: &File) -> (Jobs, LedgerReport) {
    let jobs = Jobs::new(8, n, n as u64, SEED);
    let report = jobs.attach_ledger(file.try_clone().expect("dup")).expect("ledger attached");
    (jobs, report)
}

/// The samples `job` has been served in its current epoch.
fn served_set(job: &Job, n: usize) -> HashSet<FileId> {
    (0..n as FileId).filter(|&s| job.has_seen(s)).collect()
}

/// Opens and reads `requests` in `job` as a reader does (the real `choose` then `mark_served`),
/// all of them in one directory of every sample; returns what was served.
fn serve(job: &Job, n: usize, requests: impl IntoIterator<Item = FileId>) -> Vec<FileId> {
    let dir: Vec<FileId> = (0..n as FileId).collect();
    requests
        .into_iter()
        .map(|s| {
            // Every sample cached at the best rank: a free request is served as it is.
            let choice = job.choose(s, &dir, |_| 2, 2, 0, true);
            assert!(choice.claimed, "{choice:?}");
            assert!(job.mark_served(choice.sample, true));
            choice.sample
        })
        .collect()
}

/// Serves `job` the rest of its epoch; asserts each sample it had not been served comes once,
/// and that the epoch then ends.
fn serve_rest_of_epoch(job: &Job, n: usize) {
    let before = served_set(job, n);
    let epoch = job.epoch();
    let rest: Vec<FileId> = (0..n as FileId).filter(|s| !before.contains(s)).collect();
    let served = serve(job, n, rest.iter().copied());
    let distinct: HashSet<FileId> = served.iter().copied().collect();
    assert_eq!(distinct.len(), served.len(), "a sample served twice: {served:?}");
    assert!(distinct.is_disjoint(&before), "a sample served again in epoch {epoch}");
    assert_eq!(before.len() + distinct.len(), n);
    assert_eq!(job.epoch(), epoch + 1, "every sample served: the next epoch");
}

#[test]
fn a_job_served_half_its_epoch_resumes_with_the_other_half_after_a_restart() {
    const N: usize = 1000;
    let file = memfd();
    let (codes, half_a, half_b, recipe_served) = {
        let (jobs, report) = with_ledger(N, &file);
        assert!(report.fresh && report.jobs == 0, "{report:?}");
        let a = jobs.get_or_create(b"resnet", Requester::OWNER).expect("a");
        let b = jobs.get_or_create(b"vit", Requester { uid: 1000, privileged: false }).expect("b");
        let gone = jobs.get_or_create(b"gone", Requester::OWNER).expect("gone");
        // `gone` is retired and its slot taken again: the new job's generation is the next.
        serve(&gone, N, 0..10);
        assert!(jobs.retire("gone").is_some());
        let again = jobs.get_or_create(b"again", Requester::OWNER).expect("again");
        assert_eq!(again.bit(), gone.bit());
        assert_ne!(again.code(), gone.code());
        // a: half of epoch 1. b: all of epoch 1 (it ends), then a third of epoch 2.
        serve(&a, N, (0..N as FileId).step_by(2));
        serve(&b, N, 0..N as FileId);
        assert_eq!(b.epoch(), 2);
        serve(&b, N, (0..N as FileId).rev().step_by(3));
        // a reads recipe 2's view too: its own epoch there, 100 samples in.
        let in_recipe = jobs.in_recipe(&a, 2);
        serve(&in_recipe, N, 500..600);
        // A served sample's late read of a retired job writes nothing.
        gone.mark_served(999, false);
        let codes = [("resnet", a.code(), 0, 1), ("vit", b.code(), 1000, 2), ("again", again.code(), 0, 1)];
        (codes, served_set(&a, N), served_set(&b, N), served_set(&in_recipe, N))
        // Everything dropped here: the server died.
    };

    let (jobs, report) = with_ledger(N, &file);
    assert!(!report.fresh);
    assert_eq!((report.jobs, report.recipe_views, report.dropped), (3, 1, 0), "{report:?}");
    assert_eq!(report.samples, (half_a.len() + half_b.len() + recipe_served.len()) as u64);
    assert_eq!(report.seed_mismatch, None);
    assert!(jobs.by_name("gone").is_none(), "a retired job stays retired");
    for (name, code, owner, epoch) in codes {
        let job = jobs.by_name(name).unwrap_or_else(|| panic!("{name} put back"));
        assert_eq!((job.code(), job.owner(), job.epoch()), (code, owner, epoch), "{name}");
        assert!(Arc::ptr_eq(&job, &jobs.by_code(code).expect("by its code")));
    }
    let a = jobs.by_name("resnet").expect("a");
    let b = jobs.by_name("vit").expect("b");
    assert_eq!(served_set(&a, N), half_a);
    assert_eq!(served_set(&b, N), half_b);
    let in_recipe = a.recipe_state(2).expect("recipe 2's view put back");
    assert_eq!((in_recipe.code(), in_recipe.epoch()), (a.code(), 1));
    assert_eq!(served_set(&in_recipe, N), recipe_served);
    assert!(a.recipe_state(1).is_none());
    // The rest of each epoch: each sample not yet served, once.
    serve_rest_of_epoch(&a, N);
    serve_rest_of_epoch(&b, N);
    serve_rest_of_epoch(&in_recipe, N);
    // A new job in a slot taken before the restart gets the next generation, never a code seen.
    assert!(jobs.retire("again").is_some());
    let next = jobs.get_or_create(b"next", Requester::OWNER).expect("next");
    assert!(codes.iter().all(|c| c.1 != next.code()));

    // And a second restart sees the epochs served since.
    drop((a, b, in_recipe, next, jobs));
    let (jobs, report) = with_ledger(N, &file);
    assert_eq!((report.jobs, report.recipe_views), (3, 1), "{report:?}");
    assert_eq!(report.samples, 0, "every view has just begun an epoch");
    assert_eq!(jobs.by_name("resnet").expect("a").epoch(), 2);
    assert_eq!(jobs.by_name("vit").expect("b").epoch(), 3);
    assert!(jobs.by_name("again").is_none());
}

#[test]
fn a_ledger_for_another_catalog_is_refused_and_left_unused() {
    let file = memfd();
    {
        let (jobs, _) = with_ledger(100, &file);
        let job = jobs.get_or_create(b"j", Requester::OWNER).expect("job");
        serve(&job, 100, 0..10);
    }
    let before = read_all(&file);
    let jobs = Jobs::new(8, 101, 101, SEED);
    let refused = jobs.attach_ledger(file.try_clone().expect("dup")).expect_err("another catalog");
    assert!(matches!(refused, LedgerError::OtherCatalog { files: 100, samples: 100, our_files: 101, our_samples: 101 }), "{refused}");
    assert!(refused.to_string().contains("100 file ids"), "{refused}");
    assert!(jobs.active().is_empty(), "nothing put back");
    // Nothing recorded either: the registry runs without a ledger, the file is as it was.
    let job = jobs.get_or_create(b"k", Requester::OWNER).expect("job");
    serve(&job, 101, 0..5);
    assert_eq!(read_all(&file), before);
    // The catalog it was made for still finds its job.
    let (jobs, report) = with_ledger(100, &file);
    assert_eq!(report.jobs, 1);
    assert_eq!(jobs.by_name("j").expect("j").served_this_epoch(), 10);
}

fn read_all(file: &File) -> Vec<u8> {
    let mut f = file.try_clone().expect("dup");
    f.seek(SeekFrom::Start(0)).expect("seek");
    let mut out = Vec::new();
    // The header page and the first regions are enough to see a change.
    f.take(1 << 20).read_to_end(&mut out).expect("read");
    out
}

#[test]
fn a_torn_or_garbage_header_is_refused_never_trusted() {
    // Garbage: not a ledger.
    let mut garbage = tempfile::tempfile().expect("tempfile");
    garbage.write_all(&[0xa5; 8192]).expect("write");
    let jobs = Jobs::new(8, 10, 10, SEED);
    assert!(matches!(jobs.attach_ledger(garbage.try_clone().expect("dup")), Err(LedgerError::NotALedger)));
    assert_eq!(read_all(&garbage), vec![0xa5; 8192], "left as it was");

    // A real ledger whose header was torn (one byte of its counts changed): refused.
    let file = memfd();
    {
        let (jobs, _) = with_ledger(10, &file);
        serve(&jobs.get_or_create(b"j", Requester::OWNER).expect("job"), 10, 0..3);
    }
    file.write_all_at(&[0x01], 24 + 1).expect("tear");
    let jobs = Jobs::new(8, 10, 10, SEED);
    let refused = jobs.attach_ledger(file.try_clone().expect("dup")).expect_err("torn");
    assert!(matches!(refused, LedgerError::NotALedger), "{refused}");
    assert!(jobs.active().is_empty());

    // Another format version (its checksum right): refused by name.
    let file = memfd();
    drop(with_ledger(10, &file));
    let mut head = [0u8; 64];
    file.read_exact_at(&mut head, 0).expect("header");
    head[8..12].copy_from_slice(&2u32.to_le_bytes());
    let check = prepfs_base::hash::fnv1a64(&[&head[..56]]);
    head[56..64].copy_from_slice(&check.to_le_bytes());
    file.write_all_at(&head, 0).expect("write");
    let refused = Jobs::new(8, 10, 10, SEED).attach_ledger(file.try_clone().expect("dup")).expect_err("version");
    assert!(matches!(refused, LedgerError::Version { found: 2 }), "{refused}");
}

#[test]
fn a_torn_region_is_cleared_and_its_job_not_put_back() {
    let file = memfd();
    let code = {
        let (jobs, _) = with_ledger(10, &file);
        let kept = jobs.get_or_create(b"kept", Requester::OWNER).expect("kept");
        let torn = jobs.get_or_create(b"torn", Requester::OWNER).expect("torn");
        serve(&kept, 10, 0..4);
        serve(&torn, 10, 0..4);
        kept.code()
    };
    // One byte of the second job's name changed (its region is slot 1's view 0).
    let region = region_size(10);
    let torn_at = 4096 + 256 * region + 28;
    file.write_all_at(b"x", torn_at).expect("tear");
    let (jobs, report) = with_ledger(10, &file);
    assert_eq!((report.jobs, report.dropped), (1, 1), "{report:?}");
    assert_eq!(jobs.by_name("kept").expect("kept").code(), code);
    assert!(jobs.by_name("torn").is_none() && jobs.by_name("xorn").is_none());
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, torn_at).expect("read");
    assert_eq!(byte, [0], "the torn region is cleared");
}

/// A region's size for `n` file ids (the layout's: a header page and the tags, whole pages).
fn region_size(n: u64) -> u64 {
    4096 + n.div_ceil(4096) * 4096
}

#[test]
fn an_epoch_whose_last_mark_landed_before_its_end_did_ends_at_replay() {
    let file = memfd();
    {
        let (jobs, _) = with_ledger(20, &file);
        let job = jobs.get_or_create(b"j", Requester::OWNER).expect("job");
        serve(&job, 20, 0..20);
        serve(&job, 20, (0..20).rev());
        assert_eq!(job.epoch(), 3);
        // The death came between the last mark's byte and the header's new epoch: the header
        // still says epoch 2 (number 1), whose marks cover every sample.
        job.ledger.as_ref().expect("ledger").rolled(1);
    }
    let (jobs, report) = with_ledger(20, &file);
    let job = jobs.by_name("j").expect("job");
    assert_eq!((job.epoch(), job.served_this_epoch(), report.samples), (3, 0, 0));
    serve_rest_of_epoch(&job, 20);
}

#[test]
fn the_tag_wraps_every_255_epochs_and_no_old_mark_counts_again() {
    const N: usize = 4;
    let file = memfd();
    {
        let (jobs, _) = with_ledger(N, &file);
        let job = jobs.get_or_create(b"long", Requester::OWNER).expect("job");
        // Epoch 1 is served sample 3 alone, the next 254 epochs 0, 1 and 2 (each ended early,
        // as a loader's walk given up ends it): 255 epochs later, epoch 256 has epoch 1's tag,
        // which sample 3's byte still holds unless the wrap cleared it.
        serve(&job, N, [3]);
        assert!(job.end_epoch_unless_walked(1));
        for e in 2..=255 {
            serve(&job, N, [0, 1, 2]);
            assert!(job.end_epoch_unless_walked(e));
        }
        assert_eq!(job.epoch(), 256);
        // In epoch 256, samples 0 and 1.
        serve(&job, N, [0, 1]);
    }
    let (jobs, _) = with_ledger(N, &file);
    let job = jobs.by_name("long").expect("job");
    assert_eq!(job.epoch(), 256);
    assert_eq!(served_set(&job, N), HashSet::from([0, 1]), "no mark of epoch 1 counts in epoch 256");
    serve_rest_of_epoch(&job, N);
}

#[test]
fn a_wrap_interrupted_while_clearing_is_finished_at_replay() {
    const N: usize = 4;
    let file = memfd();
    {
        let (jobs, _) = with_ledger(N, &file);
        let job = jobs.get_or_create(b"w", Requester::OWNER).expect("job");
        serve(&job, N, [0, 1]);
    }
    // The header says epoch 256 (number 255, tag 1, as epoch 1's) with its clearing under way:
    // the marks of epoch 1 are still there.
    let at = 4096 + 288;
    let mut ident = [0u8; 8];
    file.read_exact_at(&mut ident, at).expect("read");
    let word = 255u64 | 1 << 63;
    let check = prepfs_base::hash::fnv1a64(&[&ident, &word.to_le_bytes()]);
    file.write_all_at(&[word.to_le_bytes(), check.to_le_bytes()].concat(), at + 8).expect("write");
    let (jobs, _) = with_ledger(N, &file);
    let job = jobs.by_name("w").expect("job");
    assert_eq!((job.epoch(), job.served_this_epoch()), (256, 0));
    drop((job, jobs));
    // And the clearing was written: a second replay agrees.
    let (jobs, _) = with_ledger(N, &file);
    assert_eq!(jobs.by_name("w").expect("job").served_this_epoch(), 0);
}

#[test]
fn epochs_ended_early_are_kept_too() {
    // A directory found exhausted begins the next epoch (choose), and so does a loader's walk
    // given up (end_epoch_unless_walked).
    let file = memfd();
    {
        let (jobs, _) = with_ledger(4, &file);
        let job = jobs.get_or_create(b"early", Requester::OWNER).expect("job");
        let d0 = [0, 1];
        for s in d0 {
            job.mark_served(job.choose(s, &d0, |_| 0, 2, 0, true).sample, true);
        }
        job.mark_served(job.choose(0, &d0, |_| 0, 2, 0, true).sample, true);
        assert_eq!((job.epoch(), job.served_this_epoch()), (2, 1));
        assert!(job.end_epoch_unless_walked(2));
        assert_eq!(job.epoch(), 3);
        serve(&job, 4, [3]);
    }
    let (jobs, _) = with_ledger(4, &file);
    let job = jobs.by_name("early").expect("job");
    assert_eq!((job.epoch(), served_set(&job, 4)), (3, HashSet::from([3])));
}

#[test]
fn many_threads_marking_across_wraps_leave_the_ledger_as_memory_is() {
    const N: usize = 64;
    let file = memfd();
    let (epoch, seen) = {
        let (jobs, _) = with_ledger(N, &file);
        let job = jobs.get_or_create(b"busy", Requester::OWNER).expect("job");
        let in_recipe = jobs.in_recipe(&job, 1);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (job, in_recipe) = (&job, &in_recipe);
                s.spawn(move || {
                    let dir: Vec<FileId> = (0..N as FileId).collect();
                    for i in 0..(N as u32 * 100 + 7 * t) {
                        for j in [job, in_recipe] {
                            let c = j.choose((i * 7 + t) % N as u32, &dir, |_| 0, 2, i as usize, true);
                            j.mark_served(c.sample, c.claimed);
                        }
                    }
                });
            }
        });
        assert!(job.epoch() > 256, "the tag wrapped at least once: epoch {}", job.epoch());
        let seen = (served_set(&job, N), served_set(&in_recipe, N));
        ((job.epoch(), in_recipe.epoch()), seen)
    };
    let (jobs, _) = with_ledger(N, &file);
    let job = jobs.by_name("busy").expect("job");
    let in_recipe = job.recipe_state(1).expect("recipe 1");
    assert_eq!((job.epoch(), in_recipe.epoch()), epoch);
    assert_eq!((served_set(&job, N), served_set(&in_recipe, N)), seen);
}

#[test]
fn the_ledger_of_two_jobs_over_100000_samples_takes_a_region_each() {
    const N: usize = 100_000;
    let file = memfd();
    let (jobs, report) = with_ledger(N, &file);
    assert!(report.bytes <= 4096, "a new ledger is its header page: {}", report.bytes);
    let a = jobs.get_or_create(b"a", Requester::OWNER).expect("a");
    let b = jobs.get_or_create(b"b", Requester::OWNER).expect("b");
    // Every page of their tags touched: a's whole epoch, b's every 1000th sample.
    serve(&a, N, (0..N as FileId).step_by(997).chain((0..N as FileId).filter(|s| !s.is_multiple_of(997))));
    serve(&b, N, (0..N as FileId).step_by(1000));
    let bytes = file.metadata().expect("stat").blocks() * 512;
    let region = region_size(N as u64);
    eprintln!(
        "epoch ledger over {N} samples, 2 jobs: {bytes} bytes allocated ({region} per job view at most; file size {})",
        file.metadata().expect("stat").len()
    );
    assert!(bytes <= 4096 + 2 * region, "{bytes}");
    assert!(bytes >= 2 * region - 4096, "{bytes}");
    drop((a, b, jobs));
    assert_eq!(with_ledger(N, &file).1.bytes, bytes, "replay allocates nothing");
}

#[test]
fn a_ledger_is_attached_once_and_before_any_job() {
    let jobs = Jobs::new(8, 10, 10, SEED);
    jobs.get_or_create(b"early", Requester::OWNER).expect("job");
    assert!(matches!(jobs.attach_ledger(memfd()), Err(LedgerError::JobsExist)));
    let jobs = Jobs::new(8, 10, 10, SEED);
    jobs.attach_ledger(memfd()).expect("first");
    assert!(matches!(jobs.attach_ledger(memfd()), Err(LedgerError::AlreadyAttached)));
}

#[test]
fn a_ledger_made_with_another_seed_is_put_back_and_says_so() {
    let file = memfd();
    drop(with_ledger(10, &file).0.get_or_create(b"j", Requester::OWNER).expect("job"));
    let jobs = Jobs::new(8, 10, 10, SEED + 1);
    let report = jobs.attach_ledger(file.try_clone().expect("dup")).expect("attached");
    assert_eq!((report.jobs, report.seed_mismatch), (1, Some(SEED)));
    assert!(report.to_string().contains("seed 7"), "{report}");
}
