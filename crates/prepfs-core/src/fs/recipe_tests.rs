//! The core's unit tests of recipes' kept outputs: each recipe's own store, filled by the
//! refill, served once in its own view only, shared between the jobs reading the recipe (each
//! served an output once), its figures in `stats.json`, the jobs the plan counts per output,
//! and the encoded and decoded forms every recipe shares.

use std::collections::HashSet;

use super::tests::{core, ino_of, job_view_file_ino, read_file, source_bytes, work_count};
use super::*;

/// Two recipes of random crops of different sizes (16 and 8): an output served in the wrong
/// view has the wrong size.
const TWO_RECIPES: &str = "cache: { memory: 256MiB, split: 0-50-50, refill: false }\nrecipes:\n  big: { augment: [ {random_resized_crop: {size: 16}} ] }\n  small: { augment: [ {random_resized_crop: {size: 8}} ] }\n";

/// Bytes of a PPM file of `side` x `side`.
fn ppm_len(side: usize) -> usize {
    format!("P6\n{side} {side}\n255\n").len() + side * side * 3
}

/// One pass over `n` samples of a recipe's top-level view.
fn recipe_epoch(fs: &Filesystem, recipe: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| read_file(fs, ino_of(fs, recipe, &format!("s{i:03}.ppm")))).collect()
}

/// Recipe `name`'s figures in `stats.json`.
fn figures(fs: &Filesystem, name: &str) -> serde_json::Value {
    let doc: serde_json::Value = serde_json::from_str(&fs.stats_json()).expect("stats.json");
    doc["recipes"][name].clone()
}

#[test]
fn each_recipe_is_served_its_own_outputs_kept_by_the_refill_each_once_and_never_anothers() {
    let (_dir, fs) = core(4, TWO_RECIPES);
    let mut seen = HashSet::new();
    // Epoch 1: nothing kept yet, every output made at its open.
    for (recipe, side) in [("big", 16), ("small", 8)] {
        for out in recipe_epoch(&fs, recipe, 4) {
            assert_eq!(out.len(), ppm_len(side), "{recipe}");
            assert!(seen.insert(out), "an output was served twice");
        }
        assert_eq!((figures(&fs, recipe)["made_at_open"].as_u64(), figures(&fs, recipe)["served_kept"].as_u64()), (Some(4), Some(0)));
    }
    // Idle CPU: the refill makes each recipe outputs of its own, kept in its own store, from the
    // pixels the shared decoded form holds (the source is not read again).
    let before = source_bytes(&fs);
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    for r in [1, 2] {
        assert_eq!(fs.cache().outputs(r).expect("store").entries(), 4, "recipe {r}");
    }
    assert_eq!(source_bytes(&fs), before);
    // Epoch 2: each recipe is served its kept outputs, of its own size, each a new draw, once.
    for (recipe, side) in [("small", 8), ("big", 16)] {
        for out in recipe_epoch(&fs, recipe, 4) {
            assert_eq!(out.len(), ppm_len(side), "{recipe} was served another recipe's output");
            assert!(seen.insert(out), "a kept output repeated an earlier draw");
        }
        let f = figures(&fs, recipe);
        assert_eq!((f["opens"].as_u64(), f["served_kept"].as_u64(), f["made_at_open"].as_u64()), (Some(8), Some(4), Some(4)), "{f}");
        assert_eq!(f["refills"].as_u64(), Some(4));
        assert!(f["pixel_ns_per_sample"].as_u64().is_some_and(|ns| ns > 0), "{f}");
        assert_eq!(f["kept"].as_u64(), Some(0), "a kept output is taken by the open it serves");
    }
    // Epoch 3: none kept now, so each open makes its own again.
    for out in recipe_epoch(&fs, "big", 4) {
        assert!(seen.insert(out), "an output was served twice");
    }
    assert_eq!(figures(&fs, "big")["served_kept"].as_u64(), Some(4));
}

#[test]
fn a_jobs_open_in_a_recipes_view_takes_that_recipes_kept_output() {
    let (_dir, fs) = core(2, TWO_RECIPES);
    let kept = |r: u8| fs.cache().outputs(r).expect("store").entries();
    let mut cursor = 0;
    // A recipe no one has read gets no outputs ahead.
    while fs.refill_once(&mut cursor) {}
    assert_eq!((kept(0), kept(1), kept(2)), (2, 0, 0));
    recipe_epoch(&fs, "big", 2);
    recipe_epoch(&fs, "small", 2);
    while fs.refill_once(&mut cursor) {}
    assert_eq!((kept(0), kept(1), kept(2)), (2, 2, 2));
    let out = read_file(&fs, job_view_file_ino(&fs, "a", "small", "s000.ppm"));
    assert_eq!(out.len(), ppm_len(8));
    assert_eq!((kept(0), kept(1), kept(2)), (2, 2, 1), "only small's store gave an output");
    let a = fs.jobs().by_name("a").expect("a");
    assert_eq!(a.counters.hits_augmented.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(figures(&fs, "small")["served_kept"].as_u64(), Some(1));
    assert_eq!(a.counters.opens.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[test]
fn a_job_reading_only_a_recipes_view_counts_its_epochs_there_for_the_plan() {
    let (_dir, fs) = core(2, TWO_RECIPES);
    assert_eq!(fs.epochs_done(), 0);
    let names: Vec<String> = (0..2).map(|i| format!("s{i:03}.ppm")).collect();
    for name in &names {
        read_file(&fs, job_view_file_ino(&fs, "a", "small", name));
    }
    // Its first epoch in `small/` is whole; the next open begins its second.
    read_file(&fs, job_view_file_ino(&fs, "a", "small", &names[0]));
    assert_eq!(fs.epochs_done(), 1, "the job's epoch in its recipe's view");
}

#[test]
fn recipes_read_over_one_set_share_its_encoded_and_decoded_forms_decoding_each_sample_once() {
    let (_dir, fs) = core(4, TWO_RECIPES);
    recipe_epoch(&fs, "big", 4);
    let read_once = source_bytes(&fs);
    recipe_epoch(&fs, "small", 4);
    // The second recipe reads nothing from the source and decodes nothing: it augments the
    // pixels the first one's reads kept.
    assert_eq!(source_bytes(&fs), read_once);
    assert!(work_count(&fs, "full_decodes") + work_count(&fs, "decode_augments") <= 4);
    assert_eq!(work_count(&fs, "pixel_augments"), 8 - work_count(&fs, "decode_augments"));
}

#[test]
fn the_augmented_budget_is_split_between_augmented_and_the_recipes_by_their_reads() {
    let (_dir, fs) = core(2, TWO_RECIPES);
    let budget = |r: u8| fs.cache().outputs(r).expect("store").budget();
    assert!(budget(0).abs_diff(budget(1)) <= 1 && budget(1).abs_diff(budget(2)) <= 1, "equal before any read: {:?}", [budget(0), budget(1), budget(2)]);
    recipe_epoch(&fs, "small", 2);
    recipe_epoch(&fs, "small", 2);
    fs.replan();
    assert!(budget(2) > budget(1) && budget(2) > budget(0), "small, read alone, has the largest share");
    // However the plan moved the augmented budget, the three share it within the memory.
    assert!(budget(0) + budget(1) + budget(2) + fs.cache().encoded.budget() + fs.cache().decoded.budget() <= 256 << 20);
}

/// Makes jobs `names` and has each read `first` in recipe `recipe`'s view, so each has its state
/// there (a job's outputs are kept for the jobs reading the recipe). Returns what each was served.
fn jobs_reading(fs: &Filesystem, recipe: &str, names: &[&str], first: &str) -> Vec<Vec<u8>> {
    names.iter().map(|job| read_file(fs, job_view_file_ino(fs, job, recipe, first))).collect()
}

/// Job `job`'s count of opens served from a kept augmented output (any pipeline's).
fn kept_hits(fs: &Filesystem, job: &str) -> u64 {
    fs.jobs().by_name(job).expect("job").counters.hits_augmented.load(std::sync::atomic::Ordering::Relaxed)
}

/// Decodes so far (full decodes and region decodes with an augmentation).
fn decodes(fs: &Filesystem) -> u64 {
    work_count(fs, "full_decodes") + work_count(fs, "decode_augments")
}

#[test]
fn a_second_job_reading_a_recipe_is_served_the_output_the_first_made_which_is_dropped_once_both_used_it() {
    let (_dir, fs) = core(4, TWO_RECIPES);
    let kept = || fs.cache().outputs(1).expect("store").entries();
    // Both jobs read `big`; b was served s000 already.
    let b_first = jobs_reading(&fs, "big", &["b"], "s000.ppm");
    // a's outputs of the samples b still needs in `big` are kept for b (its first is not).
    let a_outputs: Vec<Vec<u8>> = (0..4).map(|i| read_file(&fs, job_view_file_ino(&fs, "a", "big", &format!("s{i:03}.ppm")))).collect();
    assert_eq!(kept(), 3, "a's outputs of the samples b has not seen are kept for it");
    assert_eq!(figures(&fs, "big")["made_at_open"].as_u64(), Some(5));
    let before = (decodes(&fs), source_bytes(&fs));
    // b's opens of the rest are hits on a's outputs: the same bytes, no decode, no source read.
    let b_rest: Vec<Vec<u8>> = (1..4).map(|i| read_file(&fs, job_view_file_ino(&fs, "b", "big", &format!("s{i:03}.ppm")))).collect();
    assert_eq!((decodes(&fs), source_bytes(&fs)), before, "b's opens decoded or read");
    assert_eq!(kept_hits(&fs, "b"), 3);
    assert_eq!(figures(&fs, "big")["served_kept"].as_u64(), Some(3));
    for out in &b_rest {
        assert_eq!(out.len(), ppm_len(16), "b was served another view's output");
        assert!(a_outputs.contains(out), "b's hit is not the output a made");
    }
    assert!(!a_outputs.contains(&b_first[0]), "b's first open made its own");
    // Both used each: nothing is kept any more. 8 served for 5 outputs made.
    assert_eq!(kept(), 0, "an output both jobs used is dropped");
    assert_eq!(fs.cache().outputs(1).expect("store").used(), 0);
    assert_eq!(figures(&fs, "big")["opens"].as_u64(), Some(8));
}

#[test]
fn a_job_is_never_served_a_kept_output_of_a_recipe_twice() {
    let (_dir, fs) = core(4, TWO_RECIPES);
    jobs_reading(&fs, "big", &["b"], "s000.ppm");
    let mut served_to_a = HashSet::new();
    let mut epoch_of_a = |fs: &Filesystem| {
        for i in 0..4 {
            let out = read_file(fs, job_view_file_ino(fs, "a", "big", &format!("s{i:03}.ppm")));
            assert!(served_to_a.insert(out), "a was served an output twice");
        }
    };
    // Epoch 1: a's outputs are kept for b, which reads no more.
    epoch_of_a(&fs);
    let kept = || fs.cache().outputs(1).expect("store").entries();
    assert_eq!(kept(), 3);
    // Idle CPU: the refill adds fresh outputs (b still needs three samples; the fourth, s000,
    // only the top-level readers' pass).
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    assert_eq!(kept(), 4);
    // Epoch 2: a takes the one fresh output (dropped: b has seen s000), never the three it
    // used; they stay for b.
    epoch_of_a(&fs);
    assert_eq!(kept_hits(&fs, "a"), 1);
    assert_eq!(kept(), 3);
    // Epoch 3: every kept output is one a used: a is made new draws.
    epoch_of_a(&fs);
    assert_eq!(kept_hits(&fs, "a"), 1);
    assert_eq!(served_to_a.len(), 12);
}

#[test]
fn a_job_reading_one_recipe_is_never_served_an_output_of_another_recipe_or_of_augmented() {
    let (_dir, fs) = core(4, TWO_RECIPES);
    // a reads `big` (and has a state in `small` and its own views, so b's outputs there are
    // kept for it); b reads `small` and `augmented/`.
    jobs_reading(&fs, "small", &["a"], "s000.ppm");
    jobs_reading(&fs, "big", &["a"], "s000.ppm");
    let mut others = HashSet::new();
    for i in 0..4 {
        others.insert(read_file(&fs, job_view_file_ino(&fs, "b", "small", &format!("s{i:03}.ppm"))));
        others.insert(read_file(&fs, job_view_file_ino(&fs, "b", "augmented", &format!("s{i:03}.ppm"))));
    }
    let mut cursor = 0;
    while fs.refill_once(&mut cursor) {}
    let held = || (0..3).map(|p| fs.cache().outputs(p).expect("store").entries()).collect::<Vec<_>>();
    let before = held();
    assert!(before[0] > 0 && before[2] > 0, "outputs of augmented/ and small are kept: {before:?}");
    for i in 1..4 {
        let out = read_file(&fs, job_view_file_ino(&fs, "a", "big", &format!("s{i:03}.ppm")));
        assert_eq!(out.len(), ppm_len(16), "a was served another view's output");
        assert!(!others.contains(&out));
    }
    let after = held();
    assert_eq!((after[0], after[2]), (before[0], before[2]), "a's opens in big took from another store");
}

#[test]
fn a_recipes_output_kept_for_a_job_goes_once_that_job_no_longer_needs_it() {
    let (_dir, fs) = core(3, TWO_RECIPES);
    let kept = || fs.cache().outputs(1).expect("store").entries();
    // Every sample's pixels held (so a's open below is served the sample it asks for).
    recipe_epoch(&fs, "big", 3);
    jobs_reading(&fs, "big", &["b", "c"], "s000.ppm");
    // a's output of s001 is kept for b and c.
    read_file(&fs, job_view_file_ino(&fs, "a", "big", "s001.ppm"));
    assert_eq!(kept(), 1);
    assert_eq!(fs.drop_outputs_no_job_needs(), 0, "b and c still need it");
    // b is served s001 in `big` another way: only c needs it now.
    fs.jobs().by_name("b").and_then(|b| b.recipe_state(1)).expect("b's state in big").mark_served(1, false);
    assert_eq!(fs.drop_outputs_no_job_needs(), 0, "c still needs it");
    // c retires: no job needs it.
    let jobs = fs.lookup(super::inodes::ROOT_INO, std::ffi::OsStr::new("jobs"), Caller::ROOT).expect("jobs").ino;
    fs.rmdir(jobs, std::ffi::OsStr::new("c")).expect("rmdir c");
    assert_eq!(fs.drop_outputs_no_job_needs(), 1);
    assert_eq!(kept(), 0);
}

#[test]
fn the_plan_counts_the_jobs_reading_a_recipe_as_sharing_its_outputs() {
    let (_dir, fs) = core(4, TWO_RECIPES);
    for i in 0..4 {
        jobs_reading(&fs, "big", &["a", "b", "c"], &format!("s{i:03}.ppm"));
    }
    fs.replan();
    // The shares are the reads counted one more: augmented/ 1, big 13, small 1 (of 15).
    let jobs = fs.output_jobs(&fs.jobs().active()).expect("with recipes");
    assert!((jobs - (1.0 + 13.0 * 3.0 + 1.0) / 15.0).abs() < 1e-9, "{jobs}");
    // Each job reading its own recipe: one job an output.
    let (_dir, fs) = core(4, TWO_RECIPES);
    for i in 0..4 {
        jobs_reading(&fs, "big", &["a"], &format!("s{i:03}.ppm"));
        jobs_reading(&fs, "small", &["b"], &format!("s{i:03}.ppm"));
    }
    fs.replan();
    assert!((fs.output_jobs(&fs.jobs().active()).expect("with recipes") - 1.0).abs() < 1e-9);
}
