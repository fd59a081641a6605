//! The framing of what the source keeps on disk between mounts (a shard's index, an object
//! store's listing): a magic naming the format and its version, length-prefixed fields in
//! little-endian, a CRC-32 of everything before it at the end; written to a temporary name,
//! then renamed, so a reader sees the old file or the new one, never half of one; read only up
//! to a bound, so a file of the wrong size is refused before it is read. A file that fails any
//! check is not used: what it kept is made again.

use std::io::{self, Read};
use std::path::Path;

/// Appends a length-prefixed field.
pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Appends the CRC-32 of `out` to it: the file's bytes are then whole.
pub(crate) fn seal(out: &mut Vec<u8>) {
    let crc = crc32fast::hash(out);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// A reader over a file's fields, after its CRC and magic were checked ([`Reader::open`]).
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// The fields of `bytes` after `magic`, if they end in the CRC of what comes before it and
    /// begin with `magic`.
    pub(crate) fn open(bytes: &'a [u8], magic: &[u8; 8]) -> Option<Reader<'a>> {
        let (body, crc) = bytes.split_at(bytes.len().checked_sub(4)?);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return None;
        }
        let mut r = Reader { bytes: body };
        (r.take(8)? == magic).then_some(r)
    }

    /// Bytes not yet read.
    pub(crate) fn left(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        (self.bytes.len() >= n).then(|| {
            let (head, rest) = self.bytes.split_at(n);
            self.bytes = rest;
            head
        })
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub(crate) fn i128(&mut self) -> Option<i128> {
        Some(i128::from_le_bytes(self.take(16)?.try_into().ok()?))
    }

    /// A length-prefixed field ([`put_bytes`]).
    pub(crate) fn bytes_field(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

/// The bytes of the file at `path`, if it is there and holds at most `max` bytes (a larger
/// one is refused unread: an `InvalidData` error saying so).
pub(crate) fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: {len} bytes, over the {max} kept files may hold", path.display())));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // Bounded even if the file grows meanwhile.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: grew past the {max} bytes kept files may hold", path.display())));
    }
    Ok(bytes)
}

/// Writes `bytes` to `path` (its directory made if missing) through a temporary name beside
/// it, renamed over `path` once written: a crash leaves the old file or none, never a part.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_reads_back_and_a_damaged_cut_or_foreign_one_does_not() {
        let mut out = b"PFSTEST1".to_vec();
        put_bytes(&mut out, b"hello");
        out.extend_from_slice(&7u64.to_le_bytes());
        seal(&mut out);
        let mut r = Reader::open(&out, b"PFSTEST1").expect("whole");
        assert_eq!((r.bytes_field(), r.u64(), r.left()), (Some(&b"hello"[..]), Some(7), 0));
        assert!(Reader::open(&out, b"PFSTEST2").is_none(), "another format or version");
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 1;
            assert!(Reader::open(&bad, b"PFSTEST1").is_none(), "byte {i} flipped");
        }
        for n in 0..out.len() {
            assert!(Reader::open(&out[..n], b"PFSTEST1").is_none(), "cut at {n}");
        }
    }

    #[test]
    fn a_file_is_written_whole_under_its_name_and_read_only_within_its_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a/b/kept.bin");
        write_atomically(&path, b"first").expect("write");
        write_atomically(&path, b"second").expect("rewrite");
        assert_eq!(read_bounded(&path, 6).expect("read"), b"second");
        assert_eq!(read_bounded(&path, 5).expect_err("over").kind(), io::ErrorKind::InvalidData);
        let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir")).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, ["kept.bin"], "no temporary file left");
    }
}
