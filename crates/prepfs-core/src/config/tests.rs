//! The config's tests: parsing, validation, refusals and their messages, the YAML writer.

use super::machine::auto_cache_memory;
use prepfs_base::human::human_bytes;
use super::*;
use prepfs_planner::Split;

fn parse(yaml: &str) -> Result<Config, ConfigError> {
    let dir = std::env::temp_dir();
    let overrides = Overrides { source: Some(dir), mountpoint: Some("/mnt/x".into()), seed: None };
    Config::parse(yaml, &overrides)
}

#[test]
fn minimal_config_gets_the_imagenet_defaults() {
    let c = parse("seed: 7\n").expect("valid");
    assert_eq!(c.seed, 7);
    assert_eq!(c.output.format, Format::Ppm);
    assert_eq!(c.augmented_size(), Some(Size2 { width: 224, height: 224 }));
    assert_eq!(c.max_pixels, DEFAULT_MAX_PIXELS);
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let err = parse("seed: 1\nthreds: 4\n").unwrap_err().to_string();
    assert!(err.contains("threds"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn unknown_operation_is_named_with_its_line() {
    let err = parse("seed: 1\naugment:\n  - random_perspective: { p: 0.5 }\n").unwrap_err().to_string();
    assert!(err.contains("random_perspective"), "{err}");
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn a_bad_timm_rand_augment_string_is_refused_naming_the_key_and_line() {
    let yaml = "seed: 1\naugment:\n  - random_resized_crop: { size: 32 }\n  - rand_augment: { timm: \"rand-m9-mstd0.5-inc0\" }\n";
    let err = parse(yaml).unwrap_err().to_string();
    assert!(err.contains("rand_augment") && err.contains("`timm`") && err.contains("line 4"), "{err}");
    assert!(err.contains("inc1"), "{err}");
    let recipe = "recipes:\n  t:\n    augment:\n      - center_crop: { size: 8 }\n      - rand_augment: { timm: \"rand-q3\" }\n";
    let err = parse(recipe).unwrap_err().to_string();
    assert!(err.contains("recipes.t.augment") && err.contains("`q3`") && err.contains("line 5"), "{err}");
    let good = parse("augment:\n  - random_resized_crop: { size: 32 }\n  - rand_augment: { timm: rand-m7-mstd0.5-inc1 }\n  - random_erasing: { value: random }\noutput: { format: npy, dtype: float32 }\n");
    assert!(good.is_ok(), "{:?}", good.err());
}

#[test]
fn bad_values_are_refused_by_key() {
    let err = parse("augment:\n  - random_resized_crop: { size: 224, scale: [0.9, 0.1] }\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("random_resized_crop") && err.contains("scale"), "{err}");
    let err = parse("output: { format: webp }\n").unwrap_err().to_string();
    assert!(err.contains("webp"), "{err}");
    let err = parse("output: { format: png, quality: 90 }\n").unwrap_err().to_string();
    assert!(err.contains("quality") && err.contains("jpeg` only"), "{err}");
    let err = parse("output: { format: jpeg, quality: 0 }\n").unwrap_err().to_string();
    assert!(err.contains("quality") && err.contains("1 to 100"), "{err}");
    let err = parse("output: { format: png, dtype: float32 }\n").unwrap_err().to_string();
    assert!(err.contains("png output is uint8"), "{err}");
    let jpeg = parse("output: { format: jpeg, quality: 75 }\n").expect("jpeg at 75");
    assert_eq!((jpeg.output.jpeg_quality(), jpeg.output.extension()), (75, "jpg"));
    assert_eq!(parse("output: { format: jpeg }\n").expect("jpeg").output.jpeg_quality(), 90);
    let err = parse("output: { format: ppm, mean: [0.5, 0.5, 0.5] }\n").unwrap_err().to_string();
    assert!(err.contains("mean"), "{err}");
    let err = parse("max_pixels: 0\n").unwrap_err().to_string();
    assert!(err.contains("max_pixels") && err.contains("line 1"), "{err}");
}

#[test]
fn missing_source_is_refused() {
    let overrides = Overrides { mountpoint: Some("/mnt/x".into()), ..Default::default() };
    let err = Config::parse("seed: 1\n", &overrides).unwrap_err().to_string();
    assert!(err.contains("source"), "{err}");
    let overrides = Overrides {
        source: Some("/definitely/not/here".into()),
        mountpoint: Some("/mnt/x".into()),
        seed: None,
    };
    let err = Config::parse("seed: 1\n", &overrides).unwrap_err().to_string();
    assert!(err.contains("source") && err.contains("/definitely/not/here"), "{err}");
}

#[test]
fn normalize_needs_float_npy_and_sets_mean_std() {
    let yaml = "augment:\n  - random_resized_crop: { size: 32 }\n  - normalize: { mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25] }\noutput: { format: npy, dtype: float32 }\n";
    let c = parse(yaml).expect("valid");
    assert_eq!(c.output.mean, [0.5; 3]);
    assert_eq!(c.output.std, [0.25; 3]);
    let err = parse("augment:\n  - random_resized_crop: { size: 32 }\n  - normalize: { mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25] }\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("normalize"), "{err}");
}

#[test]
fn the_default_cache_is_on_with_a_quarter_of_available_memory_and_auto_settings() {
    let c = parse("").expect("valid");
    assert!(c.cache.memory > 0, "a cache by default");
    // Available memory moves between two readings while other tests run: within 10%.
    let near = |bytes: u64| bytes.abs_diff(auto_cache_memory()) <= auto_cache_memory() / 10;
    assert!(near(c.cache.memory), "{} against {}", c.cache.memory, auto_cache_memory());
    assert_eq!((c.cache.split, c.cache.policy), (SplitChoice::Auto, EvictionPolicy::Auto));
    assert!(near(parse("cache: { memory: auto }\n").expect("valid").cache.memory));
    assert_eq!(parse("cache: { memory: 0 }\n").expect("valid").cache.memory, 0, "0 turns it off");
    assert_eq!(parse("cache: { policy: auto }\n").expect("valid").cache.policy, EvictionPolicy::Auto);
}

#[test]
fn cache_settings_parse_sizes_and_splits() {
    let c = parse("cache: { memory: 2GiB, split: 20-30-50, policy: lru }\n").expect("valid");
    assert_eq!(c.cache.memory, 2 << 30);
    assert_eq!(c.cache.split, SplitChoice::Fixed(Split::new(20, 30, 50).expect("sums to 100")));
    assert_eq!(c.cache.policy, EvictionPolicy::Lru);
    assert_eq!(parse("cache: { memory: 500MB }\n").expect("valid").cache.split, SplitChoice::Auto);
    assert_eq!(parse_bytes("1.5KiB"), Ok(1536));
    let err = parse("cache:\n  memory: 8 GiBs\n").unwrap_err().to_string();
    assert!(err.contains("memory") && err.contains("line 2"), "{err}");
    let err = parse("cache:\n  split: 50-50-10\n").unwrap_err().to_string();
    assert!(err.contains("split") && err.contains("line 2"), "{err}");
    assert!(err.contains("sum to 110") && err.contains("E-D-A"), "the planner's wording: {err}");
    let err = parse("cache: { memroy: 1GB }\n").unwrap_err().to_string();
    assert!(err.contains("memroy"), "{err}");
}

#[test]
fn cache_disk_settings_parse_and_are_checked() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("src");
    std::fs::create_dir_all(&source).expect("mkdir");
    let overrides = Overrides { source: Some(source.clone()), mountpoint: Some(tmp.path().join("mnt")), seed: None };
    let parse = |yaml: &str| Config::parse(yaml, &overrides);
    let disk = tmp.path().join("nvme/cache");
    let yaml = format!("cache:\n  memory: 1GiB\n  disk: {{ path: {}, size: 100GiB }}\n", disk.display());
    let c = parse(&yaml).expect("valid");
    let d = c.cache.disk.expect("disk");
    assert_eq!(d.size, 100 << 30);
    assert!(disk.is_dir(), "the path is created");
    assert_eq!(d.path, disk.canonicalize().expect("canonical"));
    assert_eq!(parse("cache: { memory: 1MiB }\n").expect("valid").cache.disk, None);

    let err = parse(&format!("cache:\n  disk:\n    path: {}\n    size: 10 GiBs\n", disk.display())).unwrap_err().to_string();
    assert!(err.contains("size") && err.contains("line 4"), "{err}");
    let err = parse(&format!("cache:\n  disk:\n    path: {}\n    sise: 1GiB\n", disk.display())).unwrap_err().to_string();
    assert!(err.contains("sise") && err.contains("line"), "{err}");
    let err = parse("cache:\n  disk: { size: 1GiB }\n").unwrap_err().to_string();
    assert!(err.contains("disk") && err.contains("path"), "{err}");
    let inside = source.join("cache");
    let err = parse(&format!("cache:\n  disk: {{ path: {}, size: 1GiB }}\n", inside.display())).unwrap_err().to_string();
    assert!(err.contains("path") && err.contains("inside the source"), "{err}");
    assert!(!inside.exists(), "a refused path is not created in the source");
}

#[test]
fn cache_remote_settings_parse_with_a_server_or_a_cluster_and_bad_urls_are_refused() {
    let parse = |yaml: &str| Config::parse(yaml, &Overrides { source: Some(std::env::temp_dir()), mountpoint: Some("/mnt/x".into()), seed: None });
    let tmp = tempfile::tempdir().expect("tempdir");
    let secret = private_file(tmp.path(), "secret", &[9; 32], 0o600);
    let s = secret.display();
    let c = parse(&format!("cache:\n  remote: {{ url: \"redis://127.0.0.1:6379\", size: 32GiB, secret_file: {s} }}\n")).expect("valid");
    let expected = RemoteConfig { url: "redis://127.0.0.1:6379".into(), size: 32 << 30, secret_file: secret.clone(), password_file: None, tls_ca_file: None };
    assert_eq!(c.cache.remote, Some(expected));
    let c = parse(&format!("cache:\n  remote:\n    url: \"redis+cluster://h1:7000,h2:7001\"\n    size: 1GiB\n    secret_file: {s}\n")).expect("a cluster");
    assert_eq!(c.cache.remote.map(|r| r.url), Some("redis+cluster://h1:7000,h2:7001".to_string()));
    let c = parse(&format!("cache:\n  remote: {{ url: \"rediss://u:pw@h1:7000\", size: 1GiB, secret_file: {s} }}\n")).expect("TLS");
    assert_eq!(c.cache.remote.map(|r| r.url), Some("rediss://u:pw@h1:7000".to_string()));
    let err = parse(&format!("cache:\n  remote:\n    url: \"redis+cluster://\"\n    size: 1GiB\n    secret_file: {s}\n")).unwrap_err().to_string();
    assert!(err.contains("cache.remote.url") && err.contains("names its nodes") && err.contains("line 3"), "{err}");
    let refused = |url: &str| parse(&format!("cache:\n  remote: {{ url: \"{url}\", size: 1GiB, secret_file: {s} }}\n")).unwrap_err().to_string();
    let err = refused("redis+cluster://h1:7000/2");
    assert!(err.contains("no databases"), "{err}");
    let err = refused("http://h:6379");
    assert!(err.contains("redis://HOST:PORT"), "{err}");
    let err = refused("redis://u:hunter2@h:notaport");
    assert!(err.contains("cache.remote.url") && !err.contains("hunter2"), "a refused URL's password is not shown: {err}");
    let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", secret_file: {s} }}\n")).unwrap_err().to_string();
    assert!(err.contains("size") && err.contains("missing"), "{err}");
    let err = parse(&format!("cache:\n  remote: {{ size: 1GiB, secret_file: {s} }}\n")).unwrap_err().to_string();
    assert!(err.contains("url") && err.contains("missing"), "{err}");
    let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", size: 0, secret_file: {s} }}\n")).unwrap_err().to_string();
    assert!(err.contains("cache.remote.size"), "{err}");
    let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", size: 1GiB, ttl: 5, secret_file: {s} }}\n")).unwrap_err().to_string();
    assert!(err.contains("ttl"), "{err}");
    let err = parse(&format!("cache:\n  remote: {{ url: \"redis://h:6379\", size: 1GiB, secret_file: {s}, tls_ca_file: {s} }}\n")).unwrap_err().to_string();
    assert!(err.contains("cache.remote.tls_ca_file") && err.contains("rediss://"), "{err}");
}

/// A file of `bytes` at `dir/name` with `mode`.
fn private_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path.canonicalize().expect("canonical")
}

#[test]
fn a_remote_tier_without_a_private_secret_file_is_refused_saying_how_to_make_one() {
    let parse = |yaml: &str| Config::parse(yaml, &Overrides { source: Some(std::env::temp_dir()), mountpoint: Some("/mnt/x".into()), seed: None });
    let tmp = tempfile::tempdir().expect("tempdir");
    let err = parse("cache:\n  remote: { url: \"redis://h:6379\", size: 1GiB }\n").unwrap_err().to_string();
    assert!(err.contains("`cache.remote`") && err.contains("secret_file") && err.contains("head -c 32 /dev/urandom") && err.contains("chmod 600"), "{err}");
    let with = |path: &Path| parse(&format!("cache:\n  remote:\n    url: \"redis://h:6379\"\n    size: 1GiB\n    secret_file: {}\n", path.display())).unwrap_err().to_string();
    let open = private_file(tmp.path(), "open", &[9; 32], 0o644);
    let err = with(&open);
    assert!(err.contains("cache.remote.secret_file") && err.contains("line 5") && err.contains("group or others") && err.contains("0644"), "{err}");
    let err = with(&private_file(tmp.path(), "empty", b"", 0o600));
    assert!(err.contains("cache.remote.secret_file") && err.contains("0 bytes"), "{err}");
    let err = with(&tmp.path().join("missing"));
    assert!(err.contains("cache.remote.secret_file") && err.contains("cannot read"), "{err}");
    let err = with(tmp.path());
    assert!(err.contains("not a regular file"), "{err}");
    // A password file is private too; the printed config shows neither the URL's password
    // nor the file's.
    let secret = private_file(tmp.path(), "secret", &[9; 32], 0o600);
    let pw = private_file(tmp.path(), "pw", b"filepass\n", 0o644);
    let yaml = |pw: &Path| format!("cache:\n  remote: {{ url: \"redis://app:urlpass@h:6379\", size: 1GiB, secret_file: {}, password_file: {} }}\n", secret.display(), pw.display());
    let err = parse(&yaml(&pw)).unwrap_err().to_string();
    assert!(err.contains("cache.remote.password_file") && err.contains("group or others"), "{err}");
    let pw = private_file(tmp.path(), "pw-private", b"filepass\n", 0o600);
    let c = parse(&yaml(&pw)).expect("valid");
    let printed = c.to_yaml();
    assert!(!printed.contains("urlpass") && !printed.contains("filepass") && printed.contains("redis://app:***@h:6379"), "{printed}");
    assert!(printed.contains("secret_file") && printed.contains("password_file"), "{printed}");
}

#[test]
fn jobs_and_read_limits_parse_and_are_checked() {
    let c = parse("jobs: { max: 3, idle_timeout: 2m, prefetch_window: 4, ods: false }\n").expect("valid");
    assert_eq!(c.jobs, JobsConfig { max: 3, idle_timeout_s: 120.0, prefetch_window: 4, ods: false, per_user: 1, shared: true });
    assert_eq!(parse("seed: 1\n").expect("valid").jobs, JobsConfig::default());
    assert_eq!(parse("jobs: { idle_timeout: 45 }\n").expect("valid").jobs.idle_timeout_s, 45.0);
    let err = parse("jobs:\n  max: 65\n").unwrap_err().to_string();
    assert!(err.contains("max") && err.contains("line 2"), "{err}");
    let err = parse("jobs:\n  idle_timeout: 10 fortnights\n").unwrap_err().to_string();
    assert!(err.contains("idle_timeout") && err.contains("line 2"), "{err}");
    let err = parse("jobs: { odss: true }\n").unwrap_err().to_string();
    assert!(err.contains("odss"), "{err}");

    let dir = std::env::temp_dir();
    let overrides = Overrides { mountpoint: Some("/mnt/x".into()), ..Default::default() };
    let yaml = format!("source:\n  path: {}\n  read_limit: 200MB/s\n", dir.display());
    let c = Config::parse(&yaml, &overrides).expect("valid");
    assert_eq!(c.source_read_limit, Some(200_000_000));
    assert_eq!(c.source, dir.canonicalize().expect("canonical"));
    let plain = Config::parse(&format!("source: {}\n", dir.display()), &overrides).expect("valid");
    assert_eq!(plain.source_read_limit, None);
    let err = Config::parse(&format!("source:\n  path: {}\n  read_limit: fast\n", dir.display()), &overrides)
        .unwrap_err()
        .to_string();
    assert!(err.contains("read_limit") && err.contains("line 3"), "{err}");
    let err = Config::parse(&format!("source:\n  path: {}\n  limit: 1MB/s\n", dir.display()), &overrides)
        .unwrap_err()
        .to_string();
    assert!(err.contains("limit") && err.contains("line 3"), "{err}");
    assert_eq!(parse_rate("1.5GiB/s"), Ok(1_610_612_736));
    assert_eq!(parse_duration("500ms"), Ok(0.5));
}

#[test]
fn the_stop_drain_parses_takes_zero_and_is_printed() {
    let d = parse("seed: 1\n").expect("valid").stop;
    assert_eq!(d, crate::drain::DrainConfig::default());
    let c = parse("stop: { drain: 500ms, drain_max: 2m }\n").expect("valid");
    assert_eq!((c.stop.quiet.as_secs_f64(), c.stop.max.as_secs_f64()), (0.5, 120.0));
    for zero in ["0", "0s", "\"0\""] {
        assert_eq!(parse(&format!("stop: {{ drain: {zero} }}\n")).expect(zero).stop.quiet, std::time::Duration::ZERO, "{zero}");
    }
    let err = parse("stop:\n  drain_max: 0\n").unwrap_err().to_string();
    assert!(err.contains("stop.drain_max") && err.contains("line 2"), "{err}");
    assert!(parse("stop: { drain: -1s }\n").is_err());
    assert!(parse("stop: { linger: 1s }\n").is_err());
    let printed = c.to_yaml();
    assert!(printed.contains("drain: 0.5") && printed.contains("drain_max: 120"), "{printed}");
}

#[test]
fn a_size_with_a_unit_users_type_is_accepted() {
    let gib = 1u64 << 30;
    for (written, bytes) in [
        ("8G", 8_000_000_000),
        ("8GB", 8_000_000_000),
        ("8g", 8_000_000_000),
        ("8 gb", 8_000_000_000),
        ("8GiB", 8 * gib),
        ("8 GiB", 8 * gib),
        ("8gib", 8 * gib),
        ("8Gi", 8 * gib),
        ("500M", 500_000_000),
        ("500 MB", 500_000_000),
        ("512MiB", 512 << 20),
        ("1.5GiB", 3 * gib / 2),
        ("2T", 2_000_000_000_000),
        ("1TiB", 1 << 40),
        ("3k", 3_000),
        ("1.5KiB", 1536),
        ("7250000", 7_250_000),
        ("0", 0),
        ("+2KB", 2_000),
        ("18446744073709551615", u64::MAX),
    ] {
        assert_eq!(parse_bytes(written), Ok(bytes), "{written}");
    }
    assert_eq!(parse("cache: { memory: 1G }\n").expect("valid").cache.memory, 1_000_000_000);
    assert_eq!(parse("cache: { memory: 64 MiB }\n").expect("valid").cache.memory, 64 << 20);
    assert_eq!(parse("max_open_bytes: 8388608\n").expect("valid").access.max_open_bytes, 8 << 20);
    assert_eq!(parse_rate("200MB/s"), Ok(200_000_000));
    assert_eq!(parse_rate("1.5GiB/s"), Ok(1_610_612_736));
    assert_eq!(parse_rate("5 k/s"), Ok(5_000));
}

#[test]
fn an_unknown_unit_is_refused_with_every_unit_the_parser_accepts() {
    let err = parse_bytes("8 GiBs").unwrap_err();
    assert_eq!(
        err,
        ValueError::UnknownUnit { text: "8 GiBs".into(), unit: "GiBs".into(), quantity: Quantity::Size }
    );
    let message = err.to_string();
    // The list is the table the parser reads: every unit listed parses, in any case.
    for (name, bytes) in SIZE_UNITS {
        assert!(message.contains(&format!(" {name},")) || message.contains(&format!(" {name} ")), "{name}: {message}");
        assert_eq!(parse_bytes(&format!("2{name}")), Ok(2 * bytes), "{name}");
        assert_eq!(parse_bytes(&format!("2 {}", name.to_lowercase())), Ok(2 * bytes), "{name}");
    }
    assert!(message.contains("powers of 1000") && message.contains("powers of 1024"), "{message}");
    let err = parse("cache:\n  memory: 8 GiBs\n").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`cache.memory` (line 2)") && text.contains("unknown unit `GiBs`"), "{text}");
    assert!(matches!(err.value_error(), Some(ValueError::UnknownUnit { .. })), "{err:?}");
    let err = parse_duration("10 fortnights").unwrap_err().to_string();
    assert!(err.contains("`fortnights`"), "{err}");
    for (name, secs) in DURATION_UNITS {
        assert!(err.contains(name), "{name}: {err}");
        assert_eq!(parse_duration(&format!("2{name}")), Ok(2.0 * secs), "{name}");
    }
    let err = parse_rate("5 XB/s").unwrap_err().to_string();
    assert!(err.contains("`XB`") && err.contains("a rate takes") && err.contains("/s"), "{err}");
}

#[test]
fn negative_nan_and_overflowing_sizes_are_refused_with_a_clear_error() {
    let size = Quantity::Size;
    assert_eq!(parse_bytes("-5GiB"), Err(ValueError::Negative { text: "-5GiB".into(), quantity: size }));
    assert_eq!(parse_bytes("-0.5 MB"), Err(ValueError::Negative { text: "-0.5 MB".into(), quantity: size }));
    assert_eq!(parse_bytes("fast"), Err(ValueError::NotANumber { text: "fast".into(), quantity: size }));
    assert_eq!(parse_bytes("MB"), Err(ValueError::NotANumber { text: "MB".into(), quantity: size }));
    assert_eq!(parse_bytes("NaN"), Err(ValueError::NotANumber { text: "NaN".into(), quantity: size }));
    assert_eq!(parse_bytes("1.2.3GB"), Err(ValueError::NotANumber { text: "1.2.3GB".into(), quantity: size }));
    assert_eq!(parse_bytes(""), Err(ValueError::NotANumber { text: "".into(), quantity: size }));
    for too_large in ["18446744073709551616", "20000000TiB", "99999999999999999999999GB", "16777216.5TiB"] {
        assert_eq!(parse_bytes(too_large), Err(ValueError::TooLarge { text: too_large.into(), quantity: size }));
    }
    let err = parse_bytes("20000000TiB").unwrap_err().to_string();
    assert!(err.contains("too large") && err.contains(&u64::MAX.to_string()), "{err}");
    assert_eq!(parse_bytes("-5GiB").unwrap_err().to_string(), "`-5GiB` is negative");

    let err = parse("cache:\n  memory: -1\n").unwrap_err();
    assert!(matches!(err.value_error(), Some(ValueError::Negative { .. })), "{err}");
    assert!(err.to_string().contains("`cache.memory` (line 2)"), "{err}");
    let err = parse("cache: { memory: .nan }\n").unwrap_err();
    assert!(matches!(err.value_error(), Some(ValueError::NotANumber { .. })), "{err}");
    let err = parse("seed: 1\nmax_open_bytes: 1.0e+30\n").unwrap_err();
    assert!(matches!(err.value_error(), Some(ValueError::TooLarge { .. })), "{err}");
    assert!(err.to_string().contains("`max_open_bytes` (line 2)"), "{err}");
    let err = parse("cache: { memory: [1, 2] }\n").unwrap_err();
    assert_eq!(err.value_error(), Some(&ValueError::WrongType { quantity: size }));
    let err = parse("max_open_bytes: 1KiB\n").unwrap_err();
    assert!(err.to_string().contains("must be at least 1.0 MiB"), "{err}");
    let dir = std::env::temp_dir();
    let err = parse(&format!("source: {{ path: {}, read_limit: 0MB/s }}\n", dir.display())).unwrap_err();
    assert_eq!(err.value_error(), Some(&ValueError::NotPositive));
    let err = parse(&format!("source: {{ path: {}, max_file_size: -1KB }}\n", dir.display())).unwrap_err();
    assert!(err.to_string().contains("`source.max_file_size` (line 1)"), "{err}");
}

#[test]
fn a_duration_that_is_zero_negative_or_over_a_year_is_refused() {
    let duration = Quantity::Duration;
    assert_eq!(parse_duration("0s"), Err(ValueError::NotPositive));
    assert_eq!(parse_duration("-1s"), Err(ValueError::Negative { text: "-1s".into(), quantity: duration }));
    assert_eq!(parse_duration("9000h"), Err(ValueError::TooLarge { text: "9000h".into(), quantity: duration }));
    assert_eq!(parse_duration("8760h"), Ok(MAX_DURATION_S));
    assert_eq!(parse_duration("90"), Ok(90.0));
    assert_eq!(parse_duration("1.5 min"), Ok(90.0));
    let err = parse("jobs:\n  idle_timeout: 1.0e+300\n").unwrap_err().to_string();
    assert!(err.contains("`jobs.idle_timeout` (line 2)") && err.contains("at most 8760h"), "{err}");
    let err = parse("jobs: { idle_timeout: .nan }\n").unwrap_err();
    assert!(matches!(err.value_error(), Some(ValueError::NotANumber { .. })), "{err}");
    let err = parse("jobs: { idle_timeout: 0 }\n").unwrap_err();
    assert_eq!(err.value_error(), Some(&ValueError::NotPositive));
}

#[test]
fn a_cache_larger_than_the_machine_is_refused_with_the_figure() {
    let machine = machine_memory().expect("Linux reports its memory");
    let err = parse("seed: 1\ncache:\n  memory: 1000000TiB\n").unwrap_err();
    let expected = format!(
        "`cache.memory` (line 3): 1000000TiB (1099511627776000000 bytes) is more than this machine's memory ({})",
        human_bytes(machine)
    );
    assert!(err.to_string().contains(&expected), "{err}\nwanted {expected}");
    assert!(matches!(err.value_error(), Some(ValueError::MoreThanMachine { .. })), "{err:?}");
    let over = machine + 1;
    let err = parse(&format!("max_open_bytes: {over}\n")).unwrap_err().to_string();
    assert!(err.contains(&format!("`max_open_bytes` (line 1): {over} bytes is more than this machine's memory")), "{err}");
    assert_eq!(parse(&format!("cache: {{ memory: {machine} }}\n")).expect("all of it").cache.memory, machine);
    let example = ValueError::MoreThanMachine { written: "1TiB".into(), bytes: 1 << 40, machine: 24_682_416 * 1024 };
    assert_eq!(example.to_string(), "1TiB (1099511627776 bytes) is more than this machine's memory (23.5 GiB)");
}

#[test]
fn bad_samples_default_to_hidden_in_jobs_found_at_first_touch() {
    let c = parse("").expect("defaults");
    assert_eq!(c.bad_samples, BadSamplesConfig { hide: HideBad::Jobs, validate: Validate::FirstTouch });
    let c = parse("bad_samples: { hide: none, validate: headers }\n").expect("valid");
    assert_eq!(c.bad_samples, BadSamplesConfig { hide: HideBad::None, validate: Validate::Headers });
    let err = parse("bad_samples: { hide: sometimes }\n").unwrap_err().to_string();
    assert!(err.contains("sometimes"), "{err}");
    assert_eq!("first-touch".parse::<Validate>(), Ok(Validate::FirstTouch));
    assert!("loud".parse::<HideBad>().is_err());
}

#[test]
fn bytes_are_written_for_people_in_binary_units() {
    assert_eq!(human_bytes(0), "0 B");
    assert_eq!(human_bytes(1023), "1023 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(1 << 40), "1.0 TiB");
    assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
}

/// A config with every section and key set, its paths in `tmp`.
fn every_section(tmp: &Path) -> (String, PathBuf) {
    let source = tmp.join("source");
    std::fs::create_dir_all(&source).expect("source");
    let yaml = format!(
        "source:\n  path: {source}\n  read_limit: 1.5GiB/s\n  max_file_size: 64MiB\n  timeout: 2m\n\
         mountpoint: {mnt}\nseed: 42\nthreads: 3\nfuse_threads: 5\nmax_pixels: 1000000\n\
         augment:\n  - random_resized_crop: {{ size: [300, 320], scale: [0.2, 0.9], ratio: [0.5, 2.0] }}\n\
         \x20 - resize: {{ size: [256, 260] }}\n  - center_crop: {{ size: [200, 224] }}\n\
         \x20 - random_horizontal_flip: {{ p: 0.25 }}\n\
         \x20 - normalize: {{ mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] }}\n\
         output: {{ format: npy, dtype: float32 }}\n\
         cache:\n  memory: 64MiB\n  split: 20-30-50\n  policy: lru\n  refill: false\n  consumer_samples_per_s: 1234.5\n\
         \x20 disk: {{ path: {disk}, size: 10G }}\n\
         \x20 remote: {{ url: \"redis://127.0.0.1:6390/2\", size: 32GiB, secret_file: {secret} }}\n\
         jobs: {{ max: 8, idle_timeout: 90s, prefetch_window: 7, ods: false, per_user: 3, shared: false }}\n\
         allow_other: true\nuid: 1000\ngid: 100\ncontrol_public: true\nmax_open_bytes: 32MiB\n\
         bad_samples: {{ hide: all, validate: scan }}\n",
        source = source.display(),
        mnt = tmp.join("mnt").display(),
        disk = tmp.join("disk").display(),
        secret = private_file(tmp, "secret", &[9; 32], 0o600).display(),
    );
    (yaml, source)
}

#[test]
fn what_check_prints_is_accepted_as_a_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (yaml, _) = every_section(tmp.path());
    let first = Config::parse(&yaml, &Overrides::default()).expect("valid");
    assert_eq!(first.cache.split, SplitChoice::Fixed(Split::new(20, 30, 50).expect("sums to 100")));
    assert_eq!(first.source_read_limit, Some(1_610_612_736));
    assert!(first.cache.disk.is_some() && first.access.allow_other && !first.jobs.ods && !first.jobs.shared);
    assert_eq!(first.bad_samples, BadSamplesConfig { hide: HideBad::All, validate: Validate::Scan });
    assert_eq!((first.access.uid, first.access.gid), (Some(1000), Some(100)));
    let secret_file = tmp.path().join("secret").canonicalize().expect("secret");
    assert_eq!(first.cache.remote, Some(RemoteConfig { url: "redis://127.0.0.1:6390/2".into(), size: 32 << 30, secret_file, password_file: None, tls_ca_file: None }));
    // `prepfs check` prints `to_yaml`, and `.prepfs/config.yaml` serves it.
    let printed = first.to_yaml();
    let again = Config::parse(&printed, &Overrides::default()).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    assert_eq!(again, first, "{printed}");
    assert_eq!(again.to_yaml(), printed, "printing is stable");
}

#[test]
fn the_default_config_as_printed_is_accepted_as_a_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("source");
    std::fs::create_dir_all(&source).expect("source");
    let first = Config::parse(&format!("source: {}\nmountpoint: /mnt/x\n", source.display()), &Overrides::default())
        .expect("valid");
    let printed = first.to_yaml();
    assert!(!printed.contains("read_limit") && !printed.contains("disk") && !printed.contains("remote"), "unset keys are left out: {printed}");
    assert!(printed.contains("split: auto") && printed.contains("idle_timeout: 600"), "{printed}");
    let again = Config::parse(&printed, &Overrides::default()).unwrap_or_else(|e| panic!("{e}\n{printed}"));
    // `memory: auto` is printed as the figure it chose, which reads back as a set memory.
    assert!(first.cache.auto.is_some() && again.cache.auto.is_none());
    let first = Config { cache: CacheConfig { auto: None, ..first.cache.clone() }, ..first };
    assert_eq!(again, first, "{printed}");
}

#[test]
fn the_shipped_mount_configs_are_valid() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../mount-configs");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("mount-configs") {
        let path = entry.expect("entry").path();
        // plan-example.yaml holds the planner's parameters, not a mount (planner tests it).
        if path.extension().is_none_or(|e| e != "yaml") || path.ends_with("plan-example.yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read").replace("/var/cache/prepfs", &tmp.path().join("disk").display().to_string());
        let source = tmp.path().join("source");
        std::fs::create_dir_all(&source).expect("source");
        let overrides = Overrides { source: Some(source), mountpoint: Some("/mnt/x".into()), seed: None };
        Config::parse(&text, &overrides).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        checked += 1;
    }
    assert!(checked >= 3, "{checked} configs");
}

#[test]
fn check_accepts_a_missing_disk_directory_and_makes_nothing_where_a_mount_makes_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = tmp.path().join("source");
    std::fs::create_dir_all(&source).expect("source");
    let disk = tmp.path().join("disk/tier");
    let file = tmp.path().join("mount.yaml");
    std::fs::write(&file, format!("mountpoint: /mnt/x\ncache:\n  disk: {{ path: {}, size: 1GiB }}\n", disk.display())).expect("write");
    let overrides = Overrides { source: Some(source), mountpoint: None, seed: None };
    let checked = Config::check(&file, &overrides).expect("check");
    assert_eq!(checked.cache.disk.map(|d| d.path), Some(disk.clone()));
    assert!(!tmp.path().join("disk").exists(), "check made the disk directory");
    Config::load(&file, &overrides).expect("load");
    assert!(disk.is_dir(), "a mount's load makes it");
}

#[test]
fn cli_overrides_win() {
    let overrides = Overrides {
        source: Some(std::env::temp_dir()),
        mountpoint: Some("/mnt/cli".into()),
        seed: Some(99),
    };
    let c = Config::parse("seed: 1\nmountpoint: /mnt/yaml\n", &overrides).expect("valid");
    assert_eq!(c.seed, 99);
    assert_eq!(c.mountpoint, PathBuf::from("/mnt/cli"));
}

#[test]
fn a_shard_pattern_as_the_source_serves_its_directory_and_keeps_the_index_beside_the_disk_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shards = dir.path().join("shards");
    std::fs::create_dir_all(&shards).expect("mkdir");
    for n in 0..10 {
        std::fs::write(shards.join(format!("train-{n:03}.tar")), b"").expect("shard");
    }
    let pattern = format!("{}/train-{{000..009}}.tar", shards.display());
    let mount = |yaml: &str, source: Option<&str>| {
        let overrides = Overrides { source: source.map(PathBuf::from), mountpoint: Some("/mnt/x".into()), seed: None };
        Config::parse(yaml, &overrides)
    };
    // Given where a directory would be (`prepfs mount PATTERN MNT`).
    let c = mount("seed: 1\n", Some(&pattern)).expect("pattern");
    assert_eq!(c.source, shards.canonicalize().expect("canonical"));
    assert_eq!(c.shards.as_ref().map(|s| s.pattern.as_str()), Some(pattern.as_str()));
    assert_eq!(c.shard_index_dir(), None, "kept nowhere unless named");
    // In the YAML, with an index directory; a disk tier takes the index beside its entries.
    let index = dir.path().join("index");
    let c = mount(&format!("source: {{ shards: \"{pattern}\", index_dir: {} }}\n", index.display()), None).expect("yaml");
    assert_eq!(c.shard_index_dir(), Some(index.clone()));
    let disk = dir.path().join("disk");
    let c = mount(&format!("source: {{ shards: \"{pattern}\", index_dir: {} }}\ncache: {{ disk: {{ path: {}, size: 1GiB }} }}\n", index.display(), disk.display()), None).expect("disk");
    assert_eq!(c.shard_index_dir(), Some(disk.join("shard-index")));
    // The effective config says the shards, and reads back as the same config.
    let written = c.to_yaml();
    assert!(written.contains("shards:"), "{written}");
    assert_eq!(mount(&written, None).expect("round trip").shards, c.shards);
    // Refused: a pattern that names a missing shard or matches nothing, a glob in the
    // directory, an index inside the shards' directory.
    let err = mount("seed: 1\n", Some(&format!("{}/train-{{000..010}}.tar", shards.display()))).expect_err("no 010").to_string();
    assert!(err.contains("train-010.tar") && err.contains("source"), "{err}");
    let err = mount("seed: 1\n", Some(&format!("{}/val-*.tar", shards.display()))).expect_err("none").to_string();
    assert!(err.contains("matches no file"), "{err}");
    let err = mount("seed: 1\n", Some(&format!("{}/*/x.tar", dir.path().display()))).expect_err("dir glob").to_string();
    assert!(err.contains("file name only"), "{err}");
    let err = mount(&format!("source: {{ shards: \"{pattern}\", index_dir: {}/idx }}\n", shards.display()), None).expect_err("inside").to_string();
    assert!(err.contains("never written"), "{err}");
    // A plain directory is still a directory.
    assert!(mount("seed: 1\n", Some(&shards.display().to_string())).expect("dir").shards.is_none());
}

#[test]
fn an_s3_url_as_the_source_is_an_object_store_with_its_endpoint_region_and_bounded_retries() {
    let mount = |yaml: &str, source: Option<&str>| {
        let overrides = Overrides { source: source.map(PathBuf::from), mountpoint: Some("/mnt/x".into()), seed: None };
        Config::parse(yaml, &overrides)
    };
    // Given where a directory would be (`prepfs mount s3://BUCKET/PREFIX MNT`): the defaults.
    let c = mount("seed: 1\n", Some("s3://train/imagenet/train/")).expect("url");
    let store = c.object_store.clone().expect("an object store");
    assert_eq!((store.url.as_str(), store.bucket.as_str(), store.prefix.as_str()), ("s3://train/imagenet/train", "train", "imagenet/train"));
    assert_eq!((store.endpoint, store.region, store.retry_timeout_s), (None, None, 10.0));
    assert_eq!(c.source, PathBuf::from("s3://train/imagenet/train"));
    assert!(c.shards.is_none());
    // In the YAML, with the store's keys; the effective config reads back as the same.
    let yaml = "source: { url: s3://b, endpoint: \"http://127.0.0.1:9000\", region: eu-west-1, timeout: 9s, retry_timeout: 4s }\n";
    let c = mount(yaml, None).expect("yaml");
    let store = c.object_store.clone().expect("an object store");
    assert_eq!((store.url.as_str(), store.prefix.as_str(), store.endpoint.as_deref(), store.region.as_deref(), store.retry_timeout_s), ("s3://b", "", Some("http://127.0.0.1:9000"), Some("eu-west-1"), 4.0));
    let written = c.to_yaml();
    assert!(written.contains("url:") && written.contains("s3://b") && written.contains("retry_timeout: 4"), "{written}");
    assert_eq!(mount(&written, None).expect("round trip").object_store, c.object_store);
    // The listing is kept in `index_dir`, or beside a disk tier's entries, for an hour by
    // default; `listing_max_age: 0` keeps it nowhere.
    assert_eq!((c.listing_dir(), store.listing_max_age_s), (None, 3600.0), "kept nowhere unless named");
    let c = mount("source: { url: s3://b, index_dir: /tmp/kept, listing_max_age: 10m }\n", None).expect("kept");
    assert_eq!((c.listing_dir(), c.object_store.as_ref().map(|s| s.listing_max_age_s)), (Some(PathBuf::from("/tmp/kept")), Some(600.0)));
    assert_eq!(mount(&c.to_yaml(), None).expect("round trip").object_store, c.object_store);
    let disk = tempfile::tempdir().expect("tempdir");
    let c = mount(&format!("source: {{ url: s3://b, index_dir: /tmp/kept }}\ncache: {{ disk: {{ path: {}, size: 1GiB }} }}\n", disk.path().display()), None).expect("disk");
    assert_eq!(c.listing_dir(), Some(disk.path().join("s3-listing")));
    assert_eq!(mount("source: { url: s3://b, index_dir: /tmp/kept, listing_max_age: 0 }\n", None).expect("never").listing_dir(), None);
    // WebDataset shards in a store: the pattern's directory is the prefix listed.
    for (yaml, source) in [("seed: 1\n", Some("s3://b/wds/train-{000..009}.tar")), ("source: { shards: \"s3://b/wds/train-*.tar\", endpoint: \"http://127.0.0.1:9000\" }\n", None)] {
        let c = mount(yaml, source).expect("shards in a store");
        assert_eq!(c.object_store.as_ref().map(|s| (s.bucket.as_str(), s.prefix.as_str())), Some(("b", "wds")), "{yaml}");
        assert!(c.shards.as_ref().is_some_and(|s| s.pattern.starts_with("s3://b/wds/train-")), "{yaml}");
    }
    // The default retry window is a third of the source's timeout (at most 10 s).
    assert_eq!(mount("source: { url: s3://b/p, timeout: 6s }\n", None).expect("short").object_store.map(|s| s.retry_timeout_s), Some(2.0));
    // The URL on the command line keeps the YAML's endpoint.
    let c = mount("source: { url: s3://a/x, endpoint: \"https://store.example\" }\n", Some("s3://b/y")).expect("override");
    assert_eq!(c.object_store.map(|s| (s.url, s.endpoint)), Some(("s3://b/y".to_string(), Some("https://store.example".to_string()))));
    // Refused, naming the key.
    for (yaml, key, why) in [
        ("source: { url: s3://b/p, timeout: 6s, retry_timeout: 4s }\n", "source.retry_timeout", "half of source.timeout"),
        ("source: { url: \"s3:///p\" }\n", "source", "no bucket"),
        ("source: { url: s3://b/../p }\n", "source", "`..`"),
        ("source: { url: /data }\n", "source.url", "s3://BUCKET/PREFIX"),
        ("source: { url: s3://b, endpoint: \"127.0.0.1:9000\" }\n", "source.endpoint", "http://"),
        ("source: { path: /tmp, region: us-east-1 }\n", "source", "object store"),
        ("source: { path: /tmp, listing_max_age: 1h }\n", "source", "object store"),
        ("source: { url: s3://b, listing_max_age: soon }\n", "source.listing_max_age", ""),
    ] {
        let err = mount(yaml, None).expect_err(yaml).to_string();
        assert!(err.contains(key) && err.contains(why), "{yaml}: {err}");
    }
}

#[test]
fn an_object_store_endpoints_password_is_shown_as_stars_in_the_printed_config() {
    // As `prepfs check` prints it and `.prepfs/config.yaml` serves it.
    let overrides = Overrides { source: None, mountpoint: Some("/mnt/x".into()), seed: None };
    let yaml = "source: { url: s3://b/p, endpoint: \"http://prepfs:hunter2pass@127.0.0.1:9000\" }\n";
    let printed = Config::parse(yaml, &overrides).expect("config").to_yaml();
    assert!(!printed.contains("hunter2pass") && printed.contains("http://prepfs:***@127.0.0.1:9000"), "{printed}");
}

#[test]
fn the_refill_waits_for_a_reader_by_default_starts_at_mount_when_warm_and_is_written_back_as_given() {
    let at = |yaml: &str| parse(yaml).map(|c| c.cache.refill);
    assert_eq!(at("").expect("default"), RefillWhen::AfterFirstRead);
    assert_eq!(at("cache: { refill: true }").expect("true"), RefillWhen::AfterFirstRead);
    assert_eq!(at("cache: { refill: warm }").expect("warm"), RefillWhen::FromMount);
    assert_eq!(at("cache: { refill: false }").expect("false"), RefillWhen::Off);
    let err = at("cache: { refill: sometimes }").unwrap_err().to_string();
    assert!(err.contains("cache.refill") && err.contains("warm"), "{err}");
    for refill in ["true", "warm", "false"] {
        let c = parse(&format!("cache: {{ refill: {refill} }}\n")).expect("config");
        let again = parse(&c.to_yaml()).expect("written back");
        assert_eq!(again.cache.refill, c.cache.refill, "{refill}");
    }
}
