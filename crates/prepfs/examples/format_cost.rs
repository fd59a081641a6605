//! What each output format costs per sample: encode time and file size at 224x224 (or `--size`)
//! on real photographs, against PPM. Each photo is decoded and resized once (PIL-like Triangle
//! filter); then every format encodes every photo `--reps` times, single-threaded.
//!
//! usage: cargo run --release --example format_cost -- DIR [--size 224] [--reps 200]
//! (DIR: searched recursively for .jpg/.jpeg/.png; target/photos has real photographs.)

use std::path::PathBuf;
use std::time::Instant;

use prepfs_core::config::{Dtype, Format, OutputConfig};
use prepfs_pixels::output;
use prepfs_pixels::rgb::Rgb;

#[path = "support/photos.rs"]
mod support_photos;
use support_photos::photos;

fn arg(args: &[String], name: &str, default: u32) -> u32 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().map_or("target/photos", String::as_str));
    let side = arg(&args, "--size", 224);
    let reps = arg(&args, "--reps", 200);
    let mut files = Vec::new();
    photos(&dir, &mut files);
    let images: Vec<Rgb> = files
        .iter()
        .filter_map(|p| image::open(p).ok())
        .map(|img| {
            let small = image::imageops::resize(&img.to_rgb8(), side, side, image::imageops::FilterType::Triangle);
            Rgb { width: side, height: side, pixels: small.into_raw() }
        })
        .collect();
    assert!(!images.is_empty(), "no photographs under {}", dir.display());
    println!("{} photographs from {}, {side}x{side}, {reps} encodes each, one thread", images.len(), dir.display());
    println!("{:<14} {:>12} {:>12} {:>10} {:>12}", "format", "us/sample", "bytes", "vs ppm", "samples/s");
    let ppm_len = output::encode(&OutputConfig::default(), &images[0]).expect("ppm").len() as f64;
    let formats = [
        ("ppm", OutputConfig::default()),
        ("npy uint8", OutputConfig { format: Format::Npy, ..OutputConfig::default() }),
        ("npy float32", OutputConfig { format: Format::Npy, dtype: Dtype::Float32, ..OutputConfig::default() }),
        ("png", OutputConfig { format: Format::Png, ..OutputConfig::default() }),
        ("jpeg q90", OutputConfig { format: Format::Jpeg, ..OutputConfig::default() }),
        ("jpeg q75", OutputConfig { format: Format::Jpeg, quality: Some(75), ..OutputConfig::default() }),
    ];
    for (name, config) in formats {
        let started = Instant::now();
        let mut bytes = 0usize;
        for _ in 0..reps {
            for img in &images {
                bytes = output::encode(&config, img).expect("encodes").len();
            }
        }
        let per = started.elapsed().as_secs_f64() / f64::from(reps) / images.len() as f64;
        println!("{name:<14} {:>12.1} {bytes:>12} {:>9.2}x {:>12.0}", per * 1e6, bytes as f64 / ppm_len, 1.0 / per);
    }
}
