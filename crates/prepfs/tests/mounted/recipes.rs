//! Mounted end-to-end tests of recipes (`recipes:`): several pipelines on one mount, each a view
//! beside `augmented/` at the top and in every job's directory, over an id-coded dataset whose
//! samples are identified by their pixels. Also `prepfs.recipe` (python/prepfs/_recipe.py) on
//! stand-ins named like torchvision's transforms, its YAML mounted and served. Each test has its
//! own temporary directory, a mount guard that unmounts on every way out, and a time limit.

use crate::common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{id_of_pixels, make_id_dataset, mount_command, parse_ppm, python, write_config, Mounted, Refused};

const LIMIT: Duration = Duration::from_secs(120);

/// `val` (resize 40, center crop 32: no chance in it) and `ta` (a 24x24 random resized crop and
/// a flip, written as uint8 npy) beside the default `augmented/` (ImageNet's, 224x224 PPM).
const TWO_RECIPES: &str = "seed: 3\ncache: { memory: 64MiB }\nrecipes:\n  val: { augment: [ {resize: {size: 40}}, {center_crop: {size: 32}} ] }\n  ta:\n    augment: [ {random_resized_crop: {size: 24}}, {random_horizontal_flip: {}} ]\n    output: { format: npy }\n";

/// An npy file's shape, element type and data.
fn parse_npy(bytes: &[u8]) -> (Vec<usize>, String, &[u8]) {
    assert_eq!(&bytes[..6], b"\x93NUMPY", "not an npy file");
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
    };
    let header = String::from_utf8_lossy(&bytes[start..start + len]).into_owned();
    let descr = header.split("'descr': '").nth(1).and_then(|s| s.split('\'').next()).expect("descr").to_owned();
    let shape = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).expect("shape");
    let shape = shape.split(',').filter_map(|d| d.trim().parse().ok()).collect();
    (shape, descr, &bytes[start + len..])
}

/// The file names (sorted) and their stems in a directory.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir).expect("list").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

fn stems(dir: &Path) -> Vec<String> {
    names(dir).into_iter().map(|n| n.rsplit_once('.').map_or(n.clone(), |(s, _)| s.to_owned())).collect()
}

/// The id a PPM's pixels carry, checked near.
fn ppm_id(bytes: &[u8]) -> usize {
    let (_, _, rgb) = parse_ppm(bytes);
    let (id, distance) = id_of_pixels(rgb);
    assert!(distance < 12.0, "pixels carry no id (distance {distance})");
    id
}

/// The id a uint8 HWC npy's pixels carry, checked near.
fn npy_id(bytes: &[u8]) -> usize {
    let (shape, descr, data) = parse_npy(bytes);
    assert_eq!((shape, descr.as_str()), (vec![24, 24, 3], "|u1"));
    let (id, distance) = id_of_pixels(data);
    assert!(distance < 12.0, "pixels carry no id (distance {distance})");
    id
}

#[test]
fn two_recipes_on_one_mount_serve_each_its_own_pipeline_beside_augmented() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, class_of) = make_id_dataset(tmp.path(), 2, 3);
    let config = write_config(tmp.path(), TWO_RECIPES);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    // Another mount whose augmented/ is val's pipeline, for the pixels val must serve.
    let other_dir = tmp.path().join("other");
    fs::create_dir(&other_dir).expect("mkdir");
    let other_config = write_config(&other_dir, "seed: 9\naugment: [ {resize: {size: 40}}, {center_crop: {size: 32}} ]\n");
    let other = Mounted::start(&other_dir, &other_config, &source, LIMIT);

    let root: BTreeSet<String> = names(&mnt.mountpoint).into_iter().collect();
    for view in ["encoded", "decoded", "augmented", "jobs", "ta", "val"] {
        assert!(root.contains(view), "{view}/ missing from the root: {root:?}");
    }
    // The recipes list the classes and samples augmented/ does, in their own format.
    assert_eq!(names(&mnt.path("val")), names(&mnt.path("augmented")));
    assert_eq!(names(&mnt.path("ta")), names(&mnt.path("augmented")));
    for class in ["c0", "c1"] {
        let augmented = stems(&mnt.path(&format!("augmented/{class}")));
        assert_eq!(stems(&mnt.path(&format!("val/{class}"))), augmented);
        assert_eq!(stems(&mnt.path(&format!("ta/{class}"))), augmented);
        assert!(names(&mnt.path(&format!("ta/{class}"))).iter().all(|n| n.ends_with(".npy")));
        assert!(names(&mnt.path(&format!("val/{class}"))).iter().all(|n| n.ends_with(".ppm")));
    }
    for (id, class) in class_of.iter().enumerate() {
        let val = format!("val/c{class}/s{id:02}.ppm");
        // Sizes exact before any read.
        let stat = fs::metadata(mnt.path(&val)).expect("stat").len();
        let bytes = fs::read(mnt.path(&val)).expect("read val");
        assert_eq!(bytes.len() as u64, stat, "{val}");
        let (w, h, _) = parse_ppm(&bytes);
        assert_eq!((w, h, ppm_id(&bytes)), (32, 32, id), "{val}");
        // val's pipeline has no chance in it: the same pixels as augmented/ configured alike.
        let alike = fs::read(other.path(&format!("augmented/c{class}/s{id:02}.ppm"))).expect("other mount");
        assert!(bytes == alike, "{val} differs from the other mount's augmented/ with val's pipeline");

        let ta = format!("ta/c{class}/s{id:02}.npy");
        let stat = fs::metadata(mnt.path(&ta)).expect("stat").len();
        let bytes = fs::read(mnt.path(&ta)).expect("read ta");
        assert_eq!(bytes.len() as u64, stat, "{ta}");
        assert_eq!(npy_id(&bytes), id, "{ta}");

        // augmented/ stays the top-level pipeline (ImageNet's: 224x224).
        let aug = fs::read(mnt.path(&format!("augmented/c{class}/s{id:02}.ppm"))).expect("read augmented");
        let (w, h, _) = parse_ppm(&aug);
        assert_eq!((w, h, ppm_id(&aug)), (224, 224, id));
    }
    // ta draws afresh at every read, as augmented/ does.
    // Each read after the last one's release: an open overlapping a handle still open in the
    // daemon shares its draw (passthrough's one backing file per inode).
    let draws: BTreeSet<Vec<u8>> = (0..6)
        .map(|_| {
            let bytes = fs::read(mnt.path("ta/c0/s00.npy")).expect("read");
            mnt.wait_released();
            bytes
        })
        .collect();
    assert!(draws.len() > 1, "six reads of ta/c0/s00.npy gave one crop");
    assert!(draws.iter().all(|d| npy_id(d) == 0));
}

/// The content ids of `n` reads of one path, each after the daemon has seen the last one's
/// file released. A close returns before its release reaches the daemon (the kernel sends it in
/// the background), and an open of a path whose handle is still open there shares that handle
/// (PIL's double open; one backing file per inode with passthrough): in a job's view it is
/// served the same sample again, and under load that is what a read right after a close gets.
fn ids_of_reads(mnt: &Mounted, rel: &str, n: usize, id: fn(&[u8]) -> usize) -> Vec<usize> {
    (0..n)
        .map(|_| {
            let got = id(&fs::read(mnt.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}\n{}", mnt.log())));
            mnt.wait_released();
            got
        })
        .collect()
}

/// Job `name`'s epoch (in its own views) as stats.json shows it.
fn job_epoch(mnt: &Mounted, name: &str) -> u64 {
    let stats = mnt.stats();
    let jobs = stats["jobs"]["active"].as_array().expect("jobs").clone();
    jobs.iter().find(|j| j["name"] == name).and_then(|j| j["epoch"].as_u64()).expect("the job's epoch")
}

#[test]
fn a_job_reads_each_recipe_with_an_epoch_of_its_own() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), 2, 3);
    let config = write_config(tmp.path(), TWO_RECIPES);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);

    // Three opens of one path of c0 in a job's view are served c0's three samples once each
    // (opportunistic sampling), in augmented/ and in each recipe, each with its own epoch.
    let set = |ids: Vec<usize>| ids.into_iter().collect::<BTreeSet<_>>();
    let c0: BTreeSet<usize> = [0, 1, 2].into();
    assert_eq!(set(ids_of_reads(&mnt, "jobs/j/augmented/c0/s00.ppm", 3, ppm_id)), c0);
    assert_eq!(set(ids_of_reads(&mnt, "jobs/j/val/c0/s00.ppm", 3, ppm_id)), c0);
    assert_eq!(set(ids_of_reads(&mnt, "jobs/j/ta/c0/s00.npy", 3, npy_id)), c0);
    // Reading the recipes began no new epoch of the job's augmented/ (its c0 was used up).
    assert_eq!(job_epoch(&mnt, "j"), 1, "a recipe's reads moved the job's own epoch");
    // One more open there begins it.
    ids_of_reads(&mnt, "jobs/j/augmented/c0/s00.ppm", 1, ppm_id);
    assert_eq!(job_epoch(&mnt, "j"), 2);
    // A recipe's view in the job lists its samples, sized before they are read.
    let listed = names(&mnt.path("jobs/j/val/c1"));
    assert_eq!(listed, ["s03.ppm", "s04.ppm", "s05.ppm"].map(String::from));
    for name in &listed {
        assert_eq!(fs::metadata(mnt.path(&format!("jobs/j/val/c1/{name}"))).expect("stat").len(), 13 + 32 * 32 * 3);
    }
    // A name no recipe has is no view.
    assert!(!mnt.path("jobs/j/nope").exists() && !mnt.path("nope").exists());
}

#[test]
fn a_recipe_named_like_a_view_of_the_mount_is_refused_at_mount_naming_it() {
    for name in ["jobs", "decoded"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (source, _) = make_id_dataset(tmp.path(), 1, 2);
        let yaml = format!("recipes:\n  {name}: {{ augment: [ {{center_crop: {{size: 8}}}} ] }}\n");
        let config = write_config(tmp.path(), &yaml);
        let mountpoint = tmp.path().join("mnt");
        let mut refused = Refused::start(mount_command(&config, &source, &mountpoint), &mountpoint);
        let (status, stderr) = refused.wait(LIMIT).expect("prepfs mounted a config it should refuse");
        assert!(!status.success());
        assert!(stderr.contains(&format!("recipe `{name}` clashes with the mount's own `{name}/`")), "{stderr}");
        assert!(stderr.contains("line 2"), "{stderr}");
    }
}

#[test]
fn prepfs_recipe_turns_a_torchvision_compose_into_a_recipe_the_mount_serves() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, _) = make_id_dataset(tmp.path(), 2, 3);
    let module = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let out = python("recipe_check.py", &[module.as_os_str()]);
    let got: serde_json::Value = serde_json::from_str(out.lines().last().unwrap_or("")).unwrap_or_else(|e| panic!("{e}: {out}"));
    // v2's training transform, ops the mount serves, to float32 normalized.
    let v2 = got["v2"].as_str().expect("v2 yaml");
    assert_eq!(
        v2,
        "recipes:\n  tv2:\n    augment:\n      - random_resized_crop: {size: [24, 24], scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333]}\n      - random_horizontal_flip: {p: 0.5}\n      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n    output: {format: npy, dtype: float32}\n"
    );
    // Each op the mount cannot serve is named, and the user told to keep it and what follows.
    for (key, op) in [
        ("nearest", "RandomResizedCrop(interpolation=nearest)"),
        ("lambda", "Lambda"),
        ("uint8", "ToImage"),
        ("geometry_after_jitter", "CenterCrop"),
        ("random_erasing_other_string", "RandomErasing(value='noise')"),
        ("timm_weighted", "RandAugment (timm's)"),
        ("timm_transform_set", "RandAugment (timm's)"),
        ("after_erasing", "Normalize"),
        ("timm_erasing_rand", "RandomErasing (timm's)"),
        ("timm_erasing_count", "RandomErasing (timm's)"),
    ] {
        let err = got["errors"][key].as_str().unwrap_or_else(|| panic!("no error for {key}: {got}"));
        assert!(err.contains(&format!("prepfs cannot serve {op} ")), "{key}: {err}");
        assert!(err.contains(&format!("Keep {op} and every op after it in your DataLoader")), "{key}: {err}");
    }
    assert_eq!(got["served_before_lambda"].as_str(), Some("augment:\n  - random_resized_crop: {size: [24, 24], scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333]}\n  - random_horizontal_flip: {p: 0.5}\n"));
    assert!(got["errors"]["no_size"].as_str().is_some_and(|e| e.contains("one size per view")), "{got}");
    // torchvision's reference recipe and the other pixel ops, each with torchvision's settings.
    let reference = got["reference"].as_str().expect("reference yaml");
    assert_eq!(
        reference,
        "recipes:\n  ref:\n    augment:\n      - random_resized_crop: {size: [24, 24], scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333], interpolation: bicubic}\n      - random_horizontal_flip: {p: 0.5}\n      - trivial_augment_wide: {num_magnitude_bins: 31, interpolation: bilinear}\n      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n      - random_erasing: {p: 0.1, scale: [0.02, 0.33], ratio: [0.3, 3.3], value: 0.0}\n    output: {format: npy, dtype: float32}\n"
    );
    let pixel = got["pixel"].as_str().expect("pixel yaml");
    assert_eq!(
        pixel,
        "recipes:\n  pix:\n    augment:\n      - resize: {size: 40}\n      - center_crop: {size: [32, 32]}\n      - color_jitter: {brightness: [0.6, 1.4], contrast: [0.6, 1.4], saturation: [0.6, 1.4], hue: [-0.1, 0.1]}\n      - random_grayscale: {p: 0.2}\n      - gaussian_blur: {kernel_size: [3, 3], sigma: [0.1, 2.0]}\n      - rand_augment: {num_ops: 2, magnitude: 9, num_magnitude_bins: 31}\n      - auto_augment: {policy: imagenet}\n"
    );
    // timm's RandAugment by its config string (inc1 from the increasing op list, mstd, mmax, the
    // fill and the interpolation from its ops), and value="random" as v2 and v1 keep it.
    assert_eq!(
        got["timm"].as_str(),
        Some("recipes:\n  timm:\n    augment:\n      - random_resized_crop: {size: [24, 24], scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333]}\n      - random_horizontal_flip: {p: 0.5}\n      - rand_augment: {timm: rand-m9-n2-p0.5-mstd0.5-inc1, interpolation: random, fill: [124, 116, 104]}\n      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n      - random_erasing: {p: 0.25, scale: [0.02, 0.33], ratio: [0.3, 3.3], value: random}\n    output: {format: npy, dtype: float32}\n")
    );
    assert_eq!(
        got["timm_plain"].as_str(),
        Some("recipes:\n  tp:\n    augment:\n      - resize: {size: 40}\n      - center_crop: {size: [32, 32]}\n      - rand_augment: {timm: rand-m7-n3-p0.5-mstd1000-mmax12, interpolation: bicubic, fill: [128, 128, 128]}\n      - random_erasing: {p: 0.5, scale: [0.02, 0.33], ratio: [0.3, 3.3], value: random}\n    output: {format: npy, dtype: float32}\n")
    );

    // timm's create_transform whole: its crop with the interpolation drawn per sample, its
    // RandAugment, MaybeToTensor, and its RandomErasing (pixel mode: torchvision's "random").
    assert_eq!(
        got["timm_create"].as_str(),
        Some("recipes:\n  timmc:\n    augment:\n      - random_resized_crop: {size: [24, 24], scale: [0.08, 1.0], ratio: [0.75, 1.3333333333333333], interpolation: random}\n      - random_horizontal_flip: {p: 0.5}\n      - rand_augment: {timm: rand-m9-n2-p0.5-mstd0.5-inc1, interpolation: random, fill: [124, 116, 104]}\n      - normalize: {mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}\n      - random_erasing: {p: 0.25, scale: [0.02, 0.3333333333333333], ratio: [0.3, 3.333333333333334], value: random}\n    output: {format: npy, dtype: float32}\n")
    );

    // The YAML mounts: v2's recipe and v1's (resize, center crop, ToTensor, Normalize) beside a
    // uint8 recipe of the same geometry, whose pixels v1's normalized floats must give back.
    let v1 = got["v1"].as_str().expect("v1 yaml");
    let yaml = format!(
        "seed: 3\n{v2}{}{}{}{}{}{}  plain: {{ augment: [ {{resize: {{size: 40}}}}, {{center_crop: {{size: 32}}}} ] }}\n",
        v1.trim_start_matches("recipes:\n"),
        reference.trim_start_matches("recipes:\n"),
        pixel.trim_start_matches("recipes:\n"),
        got["timm"].as_str().unwrap_or("").trim_start_matches("recipes:\n"),
        got["timm_plain"].as_str().unwrap_or("").trim_start_matches("recipes:\n"),
        got["timm_create"].as_str().unwrap_or("").trim_start_matches("recipes:\n")
    );
    let config = write_config(tmp.path(), &yaml);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let (mean, std) = ([0.485f32, 0.456, 0.406], [0.229f32, 0.224, 0.225]);
    for id in 0..6 {
        let class = id / 3;
        let floats = |rel: String| -> (Vec<usize>, Vec<f32>) {
            let bytes = fs::read(mnt.path(&rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
            assert_eq!(bytes.len() as u64, fs::metadata(mnt.path(&rel)).expect("stat").len());
            let (shape, descr, data) = parse_npy(&bytes);
            assert_eq!(descr, "<f4");
            (shape, data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        };
        // Back to 0-255, channel-first to HWC.
        let to_rgb = |shape: &[usize], v: &[f32]| -> Vec<u8> {
            let plane = shape[1] * shape[2];
            (0..plane).flat_map(|p| (0..3).map(move |c| (c, p))).map(|(c, p)| ((v[c * plane + p] * std[c] + mean[c]) * 255.0).round().clamp(0.0, 255.0) as u8).collect()
        };
        let (shape, v) = floats(format!("tv2/c{class}/s{id:02}.npy"));
        assert_eq!(shape, [3, 24, 24]);
        assert_eq!(id_of_pixels(&to_rgb(&shape, &v)).0, id);
        let (shape, v) = floats(format!("tv1/c{class}/s{id:02}.npy"));
        assert_eq!(shape, [3, 32, 32]);
        let plain = fs::read(mnt.path(&format!("plain/c{class}/s{id:02}.ppm"))).expect("plain");
        let (_, _, rgb) = parse_ppm(&plain);
        let back = to_rgb(&shape, &v);
        let worst = back.iter().zip(rgb).map(|(a, b)| a.abs_diff(*b)).max().unwrap_or(0);
        assert!(worst <= 1, "tv1's normalized floats are not plain's pixels (off by {worst})");
        // The reference recipe and the pixel ops' recipe serve files of their sizes.
        let (shape, _) = floats(format!("ref/c{class}/s{id:02}.npy"));
        assert_eq!(shape, [3, 24, 24]);
        let pix = fs::read(mnt.path(&format!("pix/c{class}/s{id:02}.ppm"))).expect("pix");
        let (w, h, _) = parse_ppm(&pix);
        assert_eq!((w, h), (32, 32));
        // timm's recipes serve normalized float32 of their sizes.
        assert_eq!(floats(format!("timm/c{class}/s{id:02}.npy")).0, [3, 24, 24]);
        assert_eq!(floats(format!("tp/c{class}/s{id:02}.npy")).0, [3, 32, 32]);
        assert_eq!(floats(format!("timmc/c{class}/s{id:02}.npy")).0, [3, 24, 24]);
    }
}

/// Two recipes of random crops whose outputs differ in size (96 and 64): an output served in the
/// other's view would show. Room for every sample's pixels and outputs; the refill on.
const SIZED_RECIPES: &str = "seed: 5\ncache: { memory: 64MiB, split: 0-50-50 }\nrecipes:\n  r96: { augment: [ {random_resized_crop: {size: 96}} ] }\n  r64: { augment: [ {random_resized_crop: {size: 64}} ] }\n";

/// One pass over every sample of `recipe`'s top-level view: each output's size and id checked,
/// the outputs returned.
fn read_recipe(mnt: &Mounted, recipe: &str, side: usize, class_of: &[usize]) -> Vec<Vec<u8>> {
    class_of
        .iter()
        .enumerate()
        .map(|(id, class)| {
            let rel = format!("{recipe}/c{class}/s{id:02}.ppm");
            let bytes = fs::read(mnt.path(&rel)).unwrap_or_else(|e| panic!("{rel}: {e}\n{}", mnt.log()));
            let (w, h, _) = parse_ppm(&bytes);
            assert_eq!((w, h), (side, side), "{rel} is not {recipe}'s output");
            assert_eq!(ppm_id(&bytes), id, "{rel}");
            bytes
        })
        .collect()
}

/// Both recipes read at once, each on a thread of its own; their outputs.
fn read_both_at_once(mnt: &Mounted, class_of: &[usize]) -> [Vec<Vec<u8>>; 2] {
    std::thread::scope(|s| {
        let big = s.spawn(|| read_recipe(mnt, "r96", 96, class_of));
        let small = s.spawn(|| read_recipe(mnt, "r64", 64, class_of));
        [big.join().expect("r96 reader"), small.join().expect("r64 reader")]
    })
}

/// Pixel decodes (full, and region decodes with an augment) so far.
fn decodes(stats: &serde_json::Value) -> u64 {
    stats["work"]["full_decodes"].as_u64().unwrap_or(0) + stats["work"]["decode_augments"].as_u64().unwrap_or(0)
}

#[test]
fn two_recipes_read_at_once_are_served_their_own_kept_outputs_each_a_new_draw_over_one_shared_decode() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, class_of) = make_id_dataset(tmp.path(), 2, 6);
    let samples = class_of.len() as u64;
    let config = write_config(tmp.path(), SIZED_RECIPES);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let before = mnt.stats();

    // Epoch 1: both recipes at once, each its own size (checked per file).
    let mut draws: [BTreeSet<Vec<u8>>; 2] = Default::default();
    for (seen, outs) in draws.iter_mut().zip(read_both_at_once(&mnt, &class_of)) {
        seen.extend(outs);
    }
    let first = mnt.stats();
    // The encoded and decoded forms are shared: the two recipes decoded each sample about once
    // (as one recipe would), and read it from the source once.
    let decoded = decodes(&first) - decodes(&before);
    assert!(decoded <= samples + samples / 2, "{decoded} decodes for {samples} samples read by two recipes");
    let source_read = first["source_bytes_read"].as_u64().expect("source bytes") - before["source_bytes_read"].as_u64().expect("source bytes");
    let set_bytes: u64 = class_of.iter().enumerate().map(|(id, c)| fs::metadata(source.join(format!("c{c}/s{id:02}.jpg"))).expect("stat").len()).sum();
    assert!(source_read <= set_bytes + set_bytes / 2, "{source_read} bytes read for a set of {set_bytes}");

    // Readers idle: the refill makes each recipe outputs of its own ahead.
    let kept = |stats: &serde_json::Value, r: &str| stats["recipes"][r]["kept"].as_u64().unwrap_or(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stats = mnt.stats();
        if kept(&stats, "r96") == samples && kept(&stats, "r64") == samples {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the idle refill kept no output for each sample of each recipe: {}", stats["recipes"]);
        std::thread::sleep(Duration::from_millis(100));
    }

    // Epoch 2, both at once again: served the kept outputs, each of its recipe's size, each a
    // draw never served before; nothing read from the source, and no sample decoded again.
    for (seen, outs) in draws.iter_mut().zip(read_both_at_once(&mnt, &class_of)) {
        for out in outs {
            assert!(seen.insert(out), "a read was served an output served before");
        }
    }
    let second = mnt.stats();
    for r in ["r96", "r64"] {
        let f = &second["recipes"][r];
        assert_eq!(f["opens"].as_u64(), Some(2 * samples), "{r}: {f}");
        assert!(f["served_kept"].as_u64().is_some_and(|n| n > 0), "{r} was served no kept output: {f}");
        assert!(f["refills"].as_u64().is_some_and(|n| n >= samples), "{r}: {f}");
        assert!(f["pixel_ns_per_sample"].as_u64().is_some_and(|ns| ns > 0), "{r}: {f}");
    }
    assert_eq!(second["source_bytes_read"], first["source_bytes_read"], "epoch 2 read the source");
    assert!(decodes(&second) - decodes(&before) <= samples + samples / 2, "the refill or epoch 2 decoded again");
}

/// `ta` alone, its outputs random crops (uint8 npy), the refill off: what a job's open is served
/// comes from its own miss or another job's.
const ONE_RECIPE_NO_REFILL: &str = "seed: 3\ncache: { memory: 64MiB, refill: false }\nrecipes:\n  ta:\n    augment: [ {random_resized_crop: {size: 24}}, {random_horizontal_flip: {}} ]\n    output: { format: npy }\n";

#[test]
fn two_jobs_reading_one_recipe_share_the_outputs_one_made_each_served_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (source, class_of) = make_id_dataset(tmp.path(), 2, 3);
    let config = write_config(tmp.path(), ONE_RECIPE_NO_REFILL);
    let mnt = Mounted::start(tmp.path(), &config, &source, LIMIT);
    let path = |job: &str, id: usize| format!("jobs/{job}/ta/c{}/s{id:02}.npy", class_of[id]);
    let read = |rel: String| fs::read(mnt.path(&rel)).unwrap_or_else(|e| panic!("{rel}: {e}\n{}", mnt.log()));
    // b reads its first sample in ta; then a reads the whole set there.
    assert_eq!(npy_id(&read(path("b", 0))), 0);
    let a_outputs: Vec<Vec<u8>> = (0..class_of.len()).map(|id| read(path("a", id))).collect();
    let before = mnt.stats();
    assert_eq!(before["recipes"]["ta"]["kept"].as_u64(), Some(class_of.len() as u64 - 1), "{}", before["recipes"]);
    // b's reads of the rest are a's outputs, the same bytes, made by no decode of b's.
    for id in 1..class_of.len() {
        let out = read(path("b", id));
        assert_eq!(npy_id(&out), id);
        assert!(a_outputs.contains(&out), "b's read of {id} is not the output a made");
    }
    let after = mnt.stats();
    assert_eq!(decodes(&after), decodes(&before), "b's reads decoded");
    let (f0, f1) = (&before["recipes"]["ta"], &after["recipes"]["ta"]);
    assert_eq!(f1["served_kept"].as_u64().unwrap_or(0) - f0["served_kept"].as_u64().unwrap_or(0), class_of.len() as u64 - 1, "{f1}");
    assert_eq!(f1["kept"].as_u64(), Some(0), "an output both jobs used stays kept: {f1}");
}
