//! The core's unit tests of recipes' kept outputs: each recipe's own store, filled by the
//! refill, served once in its own view only, its figures in `stats.json`, and the encoded and
//! decoded forms every recipe shares.

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
