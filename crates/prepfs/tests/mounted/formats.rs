//! Mounted tests of the `png` and `jpeg` output formats: each read through the mount with the
//! decoders users use (PIL; torchvision.io where installed), against the `ppm` output of the
//! same source, with the size `stat` gave before the first read.

use crate::common;

use std::time::Duration;

use common::{make_dataset, python, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// Mounts `source` under a fresh directory of `tmp` with `yaml`.
fn mount(tmp: &std::path::Path, name: &str, source: &std::path::Path, yaml: &str) -> Mounted {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let config = write_config(&dir, yaml);
    Mounted::start(&dir, &config, source, LIMIT)
}

fn read_format_against_ppm(format: &str, output: &str) -> serde_json::Value {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 2, 3, false);
    let ppm = mount(tmp.path(), "ppm", &source, "seed: 4\nthreads: 2\n");
    let other = mount(tmp.path(), format, &source, &format!("seed: 4\nthreads: 2\noutput: {output}\n"));
    let out = python("decode_formats.py", &[format.as_ref(), ppm.mountpoint.as_os_str(), other.mountpoint.as_os_str()]);
    serde_json::from_str(out.trim()).expect("one JSON line")
}

#[test]
fn png_outputs_decode_to_exactly_the_ppm_pixels_at_their_stat_size() {
    let report = read_format_against_ppm("png", "{ format: png }");
    assert_eq!(report["decoded"], 6, "{report}");
    assert_eq!(report["augmented"], 6, "{report}");
    assert!(report["worst_psnr_db"].is_null(), "lossless: {report}");
}

#[test]
fn jpeg_outputs_decode_close_to_the_ppm_pixels_at_their_stat_size() {
    let report = read_format_against_ppm("jpeg", "{ format: jpeg, quality: 90 }");
    assert_eq!(report["decoded"], 6, "{report}");
    assert_eq!(report["augmented"], 6, "{report}");
    assert!(report["worst_psnr_db"].as_f64().is_some_and(|p| p >= 30.0), "{report}");
}
