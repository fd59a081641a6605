//! The core's public surface, driven as the FUSE adapter drives it but without FUSE: a
//! [`Filesystem`] over a real source directory of PNGs, files looked up, opened, read in pieces
//! and released.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::Ordering;

use prepfs_core::config::{Config, Overrides};
use prepfs_core::fs::{Caller, Filesystem, Kind, ROOT_INO};
use prepfs_source::catalog::Catalog;

/// Writes `n` lossless PNGs, each of its own pixels and size, as class `c0` of `dir/src`.
fn png_source(dir: &Path, n: u32) -> Vec<image::RgbImage> {
    let class = dir.join("src/c0");
    std::fs::create_dir_all(&class).expect("mkdir");
    (0..n)
        .map(|i| {
            let image = image::RgbImage::from_fn(40 + 4 * i, 30 + 2 * i, |x, y| image::Rgb([(x * 5 + i) as u8, (y * 7) as u8, ((x ^ y) + 3 * i) as u8]));
            image.save(class.join(format!("s{i:03}.png"))).expect("write png");
            image
        })
        .collect()
}

/// A filesystem over `dir/src` as its owner, who may read every sample.
fn filesystem(dir: &Path) -> (Filesystem, Caller) {
    let overrides = Overrides { source: Some(dir.join("src")), mountpoint: Some(dir.join("mnt")), seed: Some(7) };
    let config = Config::parse("threads: 1\n", &overrides).expect("config");
    let catalog = Catalog::scan(&config.source, |_| {}).expect("scan");
    let meta = std::fs::metadata(dir.join("src")).expect("source");
    (Filesystem::new(config, catalog).expect("filesystem"), Caller { uid: meta.uid(), gid: meta.gid() })
}

/// The inode at `path` from the root, one lookup per part, as the kernel resolves it.
fn lookup(fs: &Filesystem, caller: Caller, path: &str) -> (u64, u64) {
    let mut attr = fs.getattr(ROOT_INO).expect("root");
    for part in path.split('/') {
        attr = fs.lookup(attr.ino, OsStr::new(part), caller).unwrap_or_else(|e| panic!("lookup {part}: {e}"));
    }
    assert_eq!(attr.kind, Kind::File, "{path} is a file");
    (attr.ino, attr.size)
}

/// Opens the file, reads it in 1000-byte pieces at their offsets up to its size, releases it.
fn read_whole(fs: &Filesystem, caller: Caller, ino: u64, size: u64) -> Vec<u8> {
    let opened = fs.open(ino, false, caller).expect("open");
    assert_eq!(fs.stats().open_handles.load(Ordering::Relaxed), 1, "the open holds a handle");
    let mut bytes = Vec::new();
    while (bytes.len() as u64) < size {
        let piece = fs.read(opened.fh, bytes.len() as u64, 1000, |r| r.expect("read").to_vec());
        assert!(!piece.is_empty(), "a read before the end returns bytes");
        bytes.extend(piece);
    }
    let past_end = fs.read(opened.fh, size, 1000, |r| r.expect("read at the end").len());
    assert_eq!(past_end, 0, "a read at the end returns nothing");
    fs.release(ino, opened.fh);
    assert_eq!(fs.stats().open_handles.load(Ordering::Relaxed), 0, "the release gives the handle back");
    bytes
}

#[test]
fn the_public_filesystem_serves_each_png_as_its_exact_pixels_in_decoded_and_its_own_bytes_in_encoded_without_fuse() {
    let dir = tempfile::tempdir().expect("tempdir");
    let images = png_source(dir.path(), 3);
    let (fs, caller) = filesystem(dir.path());
    for (i, image) in images.iter().enumerate() {
        let (ino, size) = lookup(&fs, caller, &format!("decoded/c0/s{i:03}.ppm"));
        let ppm = read_whole(&fs, caller, ino, size);
        let header = format!("P6\n{} {}\n255\n", image.width(), image.height());
        assert_eq!(size as usize, header.len() + image.as_raw().len(), "the size lookup says is the PPM's");
        assert_eq!(&ppm[..header.len()], header.as_bytes());
        assert!(ppm[header.len()..] == image.as_raw()[..], "sample {i}: the decoded pixels are the PNG's, exactly");

        let (ino, size) = lookup(&fs, caller, &format!("encoded/c0/s{i:03}.png"));
        let source = std::fs::read(dir.path().join(format!("src/c0/s{i:03}.png"))).expect("source");
        assert!(read_whole(&fs, caller, ino, size) == source, "sample {i}: encoded serves the source's bytes");
    }
    fs.shutdown();
}
