//! Shard indexes kept on disk between mounts: one file per shard, `<dir>/<hash of the shard's
//! path>.idx`, reused while the shard's size, mtime, ctime and inode are those it was indexed at.
//!
//! Format (little-endian): magic `PFSHIDX2`; the shard's path; its [`Stamp`]; its problems; the
//! samples (key, extension, offset, length, label); a CRC-32 of everything before it. A file
//! that is damaged, of another version, for another path or of another stamp is not used (the
//! shard is indexed again and the file rewritten). The framing (fields, CRC, the atomic write)
//! is `source::kept`'s.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::index::{Indexed, Problems, ShardIndex, Stamp};
use super::label::Label;
use crate::kept::{self, put_bytes, Reader};

/// Version 2: the stamp holds the shard's ctime (a version 1 file is not used: its shard is
/// indexed again).
const MAGIC: &[u8; 8] = b"PFSHIDX2";

/// The largest index file read (a shard of 16 million samples): a larger one is not used.
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Where the index of the shard at `shard` is kept in `dir`.
pub fn file_for(dir: &Path, shard: &Path) -> PathBuf {
    let hash = prepfs_base::hash::fnv1a64(&[shard.as_os_str().as_bytes()]);
    dir.join(format!("{hash:016x}.idx"))
}

/// The index kept for `shard` in `dir`, if there is one of this version of it (`stamp`).
pub fn load(dir: &Path, shard: &Path, stamp: Stamp) -> Option<ShardIndex> {
    let bytes = kept::read_bounded(&file_for(dir, shard), MAX_FILE_BYTES).ok()?;
    let index = decode(&bytes, shard)?;
    (index.stamp == stamp).then_some(index)
}

/// Keeps `index` of `shard` in `dir` (made if missing).
pub fn save(dir: &Path, shard: &Path, index: &ShardIndex) -> io::Result<()> {
    kept::write_atomically(&file_for(dir, shard), &encode(shard, index))
}

/// The file's bytes.
pub fn encode(shard: &Path, index: &ShardIndex) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + index.samples.len() * 40);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, shard.as_os_str().as_bytes());
    out.extend_from_slice(&index.stamp.len.to_le_bytes());
    out.extend_from_slice(&index.stamp.mtime_ns.to_le_bytes());
    out.extend_from_slice(&index.stamp.ctime_ns.to_le_bytes());
    out.extend_from_slice(&index.stamp.ino.to_le_bytes());
    let p = &index.problems;
    out.extend_from_slice(&p.bad_labels.to_le_bytes());
    out.extend_from_slice(&p.extra_images.to_le_bytes());
    out.push(u8::from(p.cut));
    put_bytes(&mut out, p.first.as_deref().unwrap_or("").as_bytes());
    out.extend_from_slice(&(index.samples.len() as u32).to_le_bytes());
    for s in &index.samples {
        put_bytes(&mut out, &s.key);
        put_bytes(&mut out, &s.ext);
        out.extend_from_slice(&s.offset.to_le_bytes());
        out.extend_from_slice(&s.len.to_le_bytes());
        match &s.label {
            Label::None => out.push(0),
            Label::Number(n) => {
                out.push(1);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Label::Name(name) => {
                out.push(2);
                put_bytes(&mut out, name);
            }
        }
    }
    kept::seal(&mut out);
    out
}

/// The index in `bytes`, if they are a whole, undamaged index of `shard`.
pub fn decode(bytes: &[u8], shard: &Path) -> Option<ShardIndex> {
    let mut r = Reader::open(bytes, MAGIC)?;
    if r.bytes_field()? != shard.as_os_str().as_bytes() {
        return None;
    }
    let stamp = Stamp { len: r.u64()?, mtime_ns: r.i128()?, ctime_ns: r.i128()?, ino: r.u64()? };
    let bad_labels = r.u32()?;
    let extra_images = r.u32()?;
    let cut = r.u8()? != 0;
    let first = r.bytes_field()?;
    let first = (!first.is_empty()).then(|| String::from_utf8_lossy(first).into_owned());
    let count = r.u32()? as usize;
    let mut samples = Vec::with_capacity(count.min(r.left() / 32));
    for _ in 0..count {
        let key = r.bytes_field()?.to_vec();
        let ext = r.bytes_field()?.to_vec();
        let (offset, len) = (r.u64()?, r.u64()?);
        let label = match r.u8()? {
            0 => Label::None,
            1 => Label::Number(r.u64()?),
            2 => Label::Name(r.bytes_field()?.to_vec()),
            _ => return None,
        };
        samples.push(Indexed { key, ext, offset, len, label });
    }
    (r.left() == 0).then_some(ShardIndex { stamp, samples, problems: Problems { bad_labels, extra_images, cut, first } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_index() -> ShardIndex {
        ShardIndex {
            stamp: Stamp { len: 10_240, mtime_ns: 1_700_000_000_123_456_789, ctime_ns: 1_700_000_001_987_654_321, ino: 42 },
            samples: vec![
                Indexed { key: b"a/b".to_vec(), ext: b"jpg".to_vec(), offset: 512, len: 100, label: Label::Number(7) },
                Indexed { key: b"c".to_vec(), ext: b"png".to_vec(), offset: 2048, len: 5, label: Label::Name(b"dog".to_vec()) },
                Indexed { key: b"d".to_vec(), ext: b"jpeg".to_vec(), offset: 4096, len: 9, label: Label::None },
            ],
            problems: Problems { bad_labels: 1, extra_images: 0, cut: true, first: Some("cut".into()) },
        }
    }

    #[test]
    fn a_kept_index_reads_back_as_it_was_for_its_shard_and_version_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let shard = Path::new("/data/train-000.tar");
        let index = sample_index();
        save(dir.path(), shard, &index).expect("save");
        assert_eq!(load(dir.path(), shard, index.stamp), Some(index.clone()));
        // Another version of the shard (size, mtime, ctime or inode), or another shard: not used.
        for stamp in [Stamp { len: 1, ..index.stamp }, Stamp { mtime_ns: 1, ..index.stamp }, Stamp { ctime_ns: 1, ..index.stamp }, Stamp { ino: 1, ..index.stamp }] {
            assert_eq!(load(dir.path(), shard, stamp), None);
        }
        assert_eq!(decode(&encode(shard, &index), Path::new("/data/train-001.tar")), None);
    }

    #[test]
    fn a_damaged_or_cut_index_file_is_not_used() {
        let shard = Path::new("/data/s.tar");
        let bytes = encode(shard, &sample_index());
        for i in [0, 9, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert_eq!(decode(&bad, shard), None, "byte {i} flipped");
        }
        for n in [0, 3, 8, bytes.len() - 5] {
            assert_eq!(decode(&bytes[..n], shard), None, "cut at {n}");
        }
    }
}
