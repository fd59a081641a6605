//! What each augment op costs per sample: the served path from full decoded pixels (a
//! decoded-cache hit) with `random_resized_crop` 224 and a flip, then the op, against the same
//! without it, on real photographs, single-threaded. Prints a Markdown table (ms per sample).
//!
//! usage: cargo run --release --example op_cost -- DIR [--reps 300] [--only SUBSTRING]
//! (DIR: searched for .jpg/.jpeg/.png; target/photos has real photographs.)

use std::path::PathBuf;
use std::time::Instant;

use prepfs_core::config::{Config, OutputConfig, Overrides};
use prepfs_pixels::pipeline::decode_full;
use prepfs_pixels::profile::MissProfiler;

const BASE: &str = "- random_resized_crop: {size: 224}\n- random_horizontal_flip: {}\n";
const OPS: [(&str, &str); 14] = [
    ("(base: random_resized_crop 224 bilinear + flip)", ""),
    ("random_resized_crop 224 bicubic + flip", "BICUBIC"),
    ("color_jitter 0.4/0.4/0.4/0.1", "- color_jitter: {brightness: 0.4, contrast: 0.4, saturation: 0.4, hue: 0.1}\n"),
    ("color_jitter 0.4/0.4/0.4 (no hue)", "- color_jitter: {brightness: 0.4, contrast: 0.4, saturation: 0.4}\n"),
    ("random_grayscale p=1", "- random_grayscale: {p: 1.0}\n"),
    ("gaussian_blur 9, sigma 0.1-2", "- gaussian_blur: {kernel_size: 9}\n"),
    ("random_erasing p=1", "- random_erasing: {p: 1.0}\n"),
    ("trivial_augment_wide", "- trivial_augment_wide: {}\n"),
    ("rand_augment (2 ops, m9)", "- rand_augment: {}\n"),
    ("auto_augment imagenet", "- auto_augment: {}\n"),
    ("timm rand_augment rand-m9-mstd0.5-inc1", "- rand_augment: {timm: rand-m9-mstd0.5-inc1}\n"),
    ("timm rand_augment rand-m7-mstd0.5-inc1", "- rand_augment: {timm: rand-m7-mstd0.5-inc1}\n"),
    ("resize 256 then random_resized_crop 224 (2 resamples)", "RESIZE_FIRST"),
    ("resize 256 then center_crop 224 (folded)", "CENTER"),
];

#[path = "support/photos.rs"]
mod support_photos;
use support_photos::photos;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).expect("usage: op_cost DIR [--reps N]"));
    let reps: u64 = args.iter().position(|a| a == "--reps").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(300);
    let mut files = Vec::new();
    photos(&dir, &mut files);
    let full: Vec<_> = files.iter().filter_map(|p| decode_full(&std::fs::read(p).ok()?, 1 << 28).ok()).collect();
    assert!(!full.is_empty(), "no photographs under {}", dir.display());
    let overrides = Overrides { source: Some(dir.clone()), mountpoint: Some("/mnt/x".into()), seed: None };
    println!("| op | ms per sample | over the base |\n|---|---:|---:|");
    let mut base_ms = 0.0;
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    for (name, op) in OPS {
        if only.as_deref().is_some_and(|o| !op.is_empty() && !name.contains(o)) {
            continue;
        }
        let augment = match op {
            "RESIZE_FIRST" => "- resize: {size: 256}\n- random_resized_crop: {size: 224}\n- random_horizontal_flip: {}\n".to_string(),
            "CENTER" => "- resize: {size: 256}\n- center_crop: {size: 224}\n".to_string(),
            "BICUBIC" => "- random_resized_crop: {size: 224, interpolation: bicubic}\n- random_horizontal_flip: {}\n".to_string(),
            _ => format!("{BASE}{op}"),
        };
        let config = Config::parse(&format!("augment:\n{augment}"), &overrides).expect("config");
        let profiler = MissProfiler::with_ops(config.augment.clone(), OutputConfig::default(), 1 << 28, 1);
        let start = Instant::now();
        for r in 0..reps {
            for (i, image) in full.iter().enumerate() {
                profiler.serve_from_pixels(i as u64, r, image).expect("serve");
            }
        }
        let ms = start.elapsed().as_secs_f64() * 1e3 / (reps * full.len() as u64) as f64;
        if op.is_empty() {
            base_ms = ms;
        }
        println!("| {name} | {ms:.3} | {:+.3} |", ms - base_ms);
    }
}
