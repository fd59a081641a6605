//! The disk tier reading back entry files it did not write (or wrote and then found damaged):
//! `DiskCache::open` (the warm-restart scan checks each header) and `DiskCache::get` (checks
//! header, length and CRC). Whatever is on disk, `get` returns a miss or an intact hit; never a
//! panic.
//!
//! Input: a flags byte, then
//! - raw mode (flags bit 1 clear): the rest is the entry file itself, placed at the entry's path
//!   before the store is opened;
//! - written mode (bit 1 set): `[n][n x (offset u16 LE, xor u8)][payload]`: the payload is
//!   admitted through the real writer (decoded: width `payload[0] % 64 + 1`, pixels the rest),
//!   then the file is damaged by the edits (xor a byte; xor 0 truncates the file there), before
//!   the store is reopened (flags bit 3 clear) or after (bit 3 set: damage the scan cannot see).
//!
//! Flags bit 0 picks the kind (clear: encoded, set: decoded); bit 2 also stores an intact entry
//! of the other kind for the same key, so the lookup must fall through to it.
//!
//! Checked: an undamaged entry comes back exactly as written; a hit's pixels fill its size; a
//! miss leaves no file behind and counts a corrupt drop (the module's contract); with an intact
//! entry of the other kind, the lookup hits.
//!
//! `PREPFS_FUZZ_DUMP=DIR` writes each undamaged written entry to DIR as a raw-mode input (how
//! the raw seeds in fuzz/seeds/disk_entry were made from the real writer).
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use prepfs_cache::disk::{DiskCache, DiskKind};
use prepfs_cache::lower::LowerHit;
use prepfs_pixels::rgb::Rgb;

const KEY: u64 = 0x0123_4567_89ab_cdef;
const SIZE: u64 = 1 << 30;
const OTHER_BYTES: &[u8] = b"the intact entry of the other kind";

/// This process's scratch store, `$TMPDIR/prepfs-fuzz/disk-PID` (those of gone processes are
/// removed).
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::temp_dir().join("prepfs-fuzz");
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("disk-") {
                    if !std::path::Path::new("/proc").join(pid).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        base.join(format!("disk-{}", std::process::id()))
    })
}

enum Written {
    Bytes(Vec<u8>),
    Pixels(Rgb),
}

fn written_payload(kind: DiskKind, payload: &[u8]) -> Written {
    match kind {
        DiskKind::Encoded => Written::Bytes(payload.to_vec()),
        DiskKind::Decoded => {
            let (width, pixels) = match payload.split_first() {
                Some((&w, rest)) => (u32::from(w % 64) + 1, rest),
                None => (1, payload),
            };
            let height = (pixels.len() / (3 * width as usize)) as u32;
            let len = (width * height * 3) as usize;
            Written::Pixels(Rgb { width, height, pixels: pixels[..len].to_vec() })
        }
    }
}

/// The decoded entry stored as "the other kind".
fn other_pixels() -> Rgb {
    Rgb { width: 2, height: 1, pixels: b"abcdef".to_vec() }
}

fn other(kind: DiskKind) -> DiskKind {
    match kind {
        DiskKind::Encoded => DiskKind::Decoded,
        DiskKind::Decoded => DiskKind::Encoded,
    }
}

/// Applies the edits to the file; returns whether any changed it.
fn damage(path: &std::path::Path, edits: &[(usize, u8)]) -> bool {
    let Ok(mut bytes) = std::fs::read(path) else { return false };
    let mut changed = false;
    for &(offset, xor) in edits {
        if offset >= bytes.len() {
            continue;
        }
        if xor == 0 {
            bytes.truncate(offset);
        } else {
            bytes[offset] ^= xor;
        }
        changed = true;
    }
    if changed {
        std::fs::write(path, &bytes).expect("write the damaged entry");
    }
    changed
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let kind = if flags & 1 == 0 { DiskKind::Encoded } else { DiskKind::Decoded };
    let written_mode = flags & 2 != 0;
    let with_other = flags & 4 != 0;
    let damage_after_open = flags & 8 != 0;

    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create the scratch store");

    // Written mode: the edits, and the payload through the real writer.
    let (edits, written) = if written_mode {
        let n = rest.first().map_or(0, |&n| usize::from(n % 8));
        let body = rest.get(1..).unwrap_or_default();
        let edits: Vec<(usize, u8)> = body
            .chunks_exact(3)
            .take(n)
            .map(|e| (usize::from(u16::from_le_bytes([e[0], e[1]])), e[2]))
            .collect();
        let payload = &body[(edits.len() * 3).min(body.len())..];
        (edits, Some(written_payload(kind, payload)))
    } else {
        (Vec::new(), None)
    };
    let path = {
        let cache = DiskCache::open(dir, SIZE).expect("open the scratch store");
        if with_other {
            let queued = match other(kind) {
                DiskKind::Encoded => cache.admit_encoded(KEY, Arc::from(OTHER_BYTES)),
                DiskKind::Decoded => cache.admit_decoded(KEY, Arc::new(other_pixels())),
            };
            assert!(queued, "the other kind's entry was not queued");
        }
        match &written {
            Some(Written::Bytes(b)) => assert!(cache.admit_encoded(KEY, Arc::from(b.as_slice())), "not queued"),
            Some(Written::Pixels(p)) => assert!(cache.admit_decoded(KEY, Arc::new(p.clone())), "not queued"),
            None => {}
        }
        assert!(cache.flush(Duration::from_secs(30)), "writes did not finish");
        cache.entry_path(kind, KEY)
    };
    if written.is_some() {
        if let Some(out) = std::env::var_os("PREPFS_FUZZ_DUMP") {
            let mut seed = vec![flags & 1];
            seed.extend(std::fs::read(&path).expect("read the written entry"));
            let name = format!("raw-{}-{:016x}", kind.dir_name(), fnv(&seed));
            std::fs::write(PathBuf::from(out).join(name), seed).expect("dump the entry");
        }
    } else {
        std::fs::create_dir_all(path.parent().expect("entry parent")).expect("create the entry's directory");
        std::fs::write(&path, rest).expect("write the raw entry");
    }

    let mut damaged = written.is_none();
    if !damage_after_open {
        damaged |= damage(&path, &edits);
    }
    let cache = DiskCache::open(dir, SIZE).expect("reopen the scratch store");
    if damage_after_open {
        damaged |= damage(&path, &edits);
    }
    let hit = cache.get(KEY);

    match &hit {
        Some(LowerHit::Pixels(p)) => assert_eq!(
            p.pixels.len() as u64,
            u64::from(p.width) * u64::from(p.height) * 3,
            "a {}x{} hit with {} bytes",
            p.width,
            p.height,
            p.pixels.len()
        ),
        Some(LowerHit::Bytes(_)) => {}
        None => {
            assert!(!with_other, "the intact entry of the other kind was not found");
            assert!(!path.exists(), "a refused entry was left on disk");
            assert!(cache.corrupt_dropped() >= 1, "a refused entry was not counted");
        }
    }
    // Decoded entries are looked up first: the first intact one of the two answers.
    let other_pixels = other_pixels();
    match (kind, with_other, damaged, &written, &hit) {
        (DiskKind::Encoded, true, _, _, hit) => match hit {
            Some(LowerHit::Pixels(p)) => assert_eq!(p, &other_pixels, "the other kind's entry changed"),
            _ => panic!("the intact decoded entry was not returned"),
        },
        (DiskKind::Decoded, true, true, _, Some(LowerHit::Bytes(b))) => {
            assert_eq!(b.as_slice(), OTHER_BYTES, "the other kind's entry changed")
        }
        (_, _, false, Some(Written::Bytes(w)), hit) => match hit {
            Some(LowerHit::Bytes(b)) => assert_eq!(w, b, "encoded entry changed"),
            _ => panic!("an intact encoded entry was not returned"),
        },
        (_, _, false, Some(Written::Pixels(w)), hit) => match hit {
            Some(LowerHit::Pixels(p)) => assert_eq!(w, p, "decoded entry changed"),
            _ => panic!("an intact decoded entry was not returned"),
        },
        _ => {}
    }
});

fn fnv(data: &[u8]) -> u64 {
    prepfs_base::hash::fnv1a64(&[data])
}
