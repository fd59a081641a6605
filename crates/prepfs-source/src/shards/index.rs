//! One shard's index: its samples' image members as (offset, length) in the tar, and their
//! labels, found by walking the tar headers and seeking over the data ([`Walk`], a reader of
//! our own: every header's size is checked before anything it declares is read); only the
//! small label members (`.cls`, `.json`) and extension headers are read. The walk reads
//! through a [`SourceFile`] (`read_at`), so any source that answers ranged reads can be indexed:
//! a local shard one `pread` per header (the data seeked over, never read), a shard in an object
//! store in large windows (one ranged GET holds many headers; see [`At`]).
//!
//! Headers are bounded before they are read: an extension header (a GNU long name `L` or long
//! link `K`, a PAX `x` or global `g` header) holds at most [`MAX_EXTENSION_BYTES`]; a larger
//! one is a damaged shard (the walk ends there, nothing of it read), so a header declaring
//! gigabytes costs nothing. A compressed shard (gzip, bzip2, xz, zstd) is said to be one.
//!
//! A bad member costs only its sample: a label that does not parse drops that sample, a member
//! cut by the end of the file and everything after it are dropped (the members before the cut
//! are served), a damaged header ends the walk there. Each problem is counted and the first
//! said in words ([`Problems`]), names escaped.

use std::collections::HashMap;
use std::io::{self, Read};

use super::label::{self, Label, MAX_LABEL_BYTES};
use super::names::split_member;
use prepfs_base::escape::escaped_bytes as escaped;
use crate::catalog::IMAGE_EXTENSIONS;
use crate::{FileMeta, SourceFile};

/// The most bytes an extension header (`L`, `K`, `x`, `g`) may hold: a long name is at most
/// `PATH_MAX` (4 KiB), a PAX header a few records. A larger one is a damaged shard.
pub(crate) const MAX_EXTENSION_BYTES: u64 = 64 << 10;

/// A tar block: every header is one, and every member's data is padded to whole blocks.
const BLOCK: u64 = 512;

/// What tells one version of a shard from another: its size, mtime, ctime and inode. A shard
/// whose stamp differs from its index's is indexed again (an edit in place whose mtime was set
/// back still moves the ctime, which no user can set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub len: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
}

impl Stamp {
    pub fn of(meta: &FileMeta) -> Stamp {
        Stamp { len: meta.len(), mtime_ns: meta.identity.mtime_ns, ctime_ns: meta.identity.ctime_ns, ino: meta.identity.ino }
    }
}

/// A sample of a shard: its image member and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Indexed {
    /// The key, as in the tar (may hold `/`).
    pub key: Vec<u8>,
    /// The image member's extension, as in the tar (`jpg`, `JPEG`, `png`, ...).
    pub ext: Vec<u8>,
    /// Where the image's bytes start in the shard, and how many there are.
    pub offset: u64,
    pub len: u64,
    pub label: Label,
}

/// What a shard's walk could not serve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Problems {
    /// Samples dropped for a label member that does not parse (or is too large).
    pub bad_labels: u32,
    /// Further image members of a key that has one already (the first is served).
    pub(crate) extra_images: u32,
    /// Whether the walk ended early (a member cut by the end of the file, a damaged header):
    /// the members before it are served.
    pub cut: bool,
    /// The first problem, in words (names in it escaped).
    pub first: Option<String>,
}

impl Problems {
    fn note(&mut self, why: String) {
        self.first.get_or_insert(why);
    }

    pub fn any(&self) -> bool {
        self.bad_labels > 0 || self.extra_images > 0 || self.cut
    }
}

/// One shard's index: the version indexed, its samples in tar order, its problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardIndex {
    pub stamp: Stamp,
    pub samples: Vec<Indexed>,
    pub(crate) problems: Problems,
}

impl ShardIndex {
    /// Whether nothing of the shard could be served because it could not be read as a tar
    /// (compressed, damaged from its first header, or cut before its first sample).
    pub fn unreadable(&self) -> bool {
        self.samples.is_empty() && self.problems.cut
    }
}

/// What the walk keeps of a key until its members are all seen.
#[derive(Default)]
struct Partial {
    image: Option<(Vec<u8>, u64, u64)>,
    cls: Option<Result<Label, String>>,
    json: Option<Result<Label, String>>,
}

/// Indexes the shard open as `file`, read in windows of `window` bytes (0: each read of the
/// walk one `read_at`; see [`At`]).
pub fn index(file: &dyn SourceFile, window: usize) -> ShardIndex {
    let stamp = Stamp::of(file.meta());
    let len = file.meta().len();
    let mut problems = Problems::default();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut partial: HashMap<Vec<u8>, Partial> = HashMap::new();
    let mut walk = Walk::new(At::new(file, window), len);
    loop {
        let member = match walk.next_member() {
            Ok(Some(member)) => member,
            Ok(None) => break,
            Err(why) => {
                problems.cut = true;
                problems.note(why);
                break;
            }
        };
        if !member.is_file() {
            continue;
        }
        let (name, offset, size) = (&member.name, member.offset, member.size);
        if offset.saturating_add(size) > len {
            problems.cut = true;
            problems.note(format!("cut short in {} (the file ends before its data does); the members before it are served", escaped(name)));
            break;
        }
        let Some((key, ext)) = split_member(name) else { continue };
        let lower = ext.to_ascii_lowercase();
        if IMAGE_EXTENSIONS.iter().any(|e| e.as_bytes() == lower.as_slice()) {
            let part = entry_for(&mut partial, &mut keys, key);
            if part.image.is_some() {
                problems.extra_images += 1;
                problems.note(format!("{} is a second image of its key; the first is served", escaped(name)));
            } else {
                part.image = Some((ext.to_vec(), offset, size));
            }
        } else if lower == b"cls" || lower == b"json" {
            let read = read_label(&mut walk.at, offset, size).and_then(|bytes| if lower == b"cls" { label::of_cls(&bytes) } else { label::of_json(&bytes) });
            let part = entry_for(&mut partial, &mut keys, key);
            if lower == b"cls" {
                part.cls = Some(read);
            } else {
                part.json = Some(read);
            }
        }
    }
    let mut samples = Vec::with_capacity(keys.len());
    for key in keys {
        let Some(part) = partial.remove(&key) else { continue };
        let Some((ext, offset, len)) = part.image else { continue };
        // `.cls` wins over `.json`; neither: no label.
        let label = match (part.cls, part.json) {
            (Some(l), _) | (None, Some(l)) => l,
            (None, None) => Ok(Label::None),
        };
        match label {
            Ok(label) => samples.push(Indexed { key, ext, offset, len, label }),
            Err(why) => {
                problems.bad_labels += 1;
                problems.note(format!("{}: {why}; the sample is not served", escaped(&key)));
            }
        }
    }
    ShardIndex { stamp, samples, problems }
}

fn entry_for<'a>(partial: &'a mut HashMap<Vec<u8>, Partial>, keys: &mut Vec<Vec<u8>>, key: &[u8]) -> &'a mut Partial {
    if !partial.contains_key(key) {
        keys.push(key.to_vec());
    }
    partial.entry(key.to_vec()).or_default()
}

/// A label member's bytes (`size` of them at `offset`), refused past [`MAX_LABEL_BYTES`] or
/// where the read fails.
fn read_label(at: &mut At<'_>, offset: u64, size: u64) -> Result<Vec<u8>, String> {
    if size > MAX_LABEL_BYTES {
        return Err(format!("a label member of {size} bytes (more than {MAX_LABEL_BYTES})"));
    }
    let mut bytes = vec![0u8; size as usize];
    at.read_exact_at(&mut bytes, offset).map_err(|e| format!("an unreadable label member ({e})"))?;
    Ok(bytes)
}

/// A member as its headers describe it: its type, its name (a GNU long name's, else a PAX
/// `path`'s, else the header's), where its data starts in the shard and how long it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    pub kind: u8,
    pub name: Vec<u8>,
    pub offset: u64,
    pub size: u64,
}

impl Member {
    /// A regular file (`0`, or NUL in old archives): the only members served.
    pub fn is_file(&self) -> bool {
        self.kind == b'0' || self.kind == 0
    }
}

/// What an extension header's type is, in words.
fn extension_kind(kind: u8) -> Option<&'static str> {
    match kind {
        b'L' => Some("a GNU long name (`L`)"),
        b'K' => Some("a GNU long link name (`K`)"),
        b'x' => Some("a PAX header (`x`)"),
        b'g' => Some("a PAX global header (`g`)"),
        _ => None,
    }
}

/// The compression whose magic number `head` (a file's first bytes) starts with.
fn compression(head: &[u8]) -> Option<&'static str> {
    [(&b"\x1f\x8b"[..], "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\x04\x22\x4d\x18", "lz4")]
        .into_iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, name)| name)
}

/// A tar's headers walked one member at a time: each header read (one block), its checksum
/// checked and its size parsed before anything it declares is read; an extension header's
/// body read only if it holds at most [`MAX_EXTENSION_BYTES`]; file data never read (the next
/// header is found by the size). Errors are the shard's damage in words.
pub struct Walk<'a> {
    at: At<'a>,
    /// Where the next header starts.
    next: u64,
    len: u64,
}

impl<'a> Walk<'a> {
    fn new(at: At<'a>, len: u64) -> Walk<'a> {
        Walk { at, next: 0, len }
    }

    /// The next member (`None`: the end of the archive: two zero blocks, or the end of the
    /// file at a header's place), extension headers applied to it.
    pub(crate) fn next_member(&mut self) -> Result<Option<Member>, String> {
        let mut long_name: Option<Vec<u8>> = None;
        let mut long_link = false;
        let mut pax: Option<Vec<u8>> = None;
        loop {
            let pos = self.next;
            let described = long_name.is_some() || long_link || pax.is_some();
            let Some(header) = self.header_at(pos)? else {
                return if described { Err(format!("an extension header at offset {pos} and no member after it")) } else { Ok(None) };
            };
            let kind = header[156];
            let size = number(&header[124..136]).ok_or_else(|| format!("a damaged tar header at offset {pos} (its size is not a number)"))?;
            let data = pos + BLOCK;
            if let Some(what) = extension_kind(kind) {
                if size > MAX_EXTENSION_BYTES {
                    return Err(format!(
                        "{what} header of {size} bytes at offset {pos}, more than the {MAX_EXTENSION_BYTES} bytes a header may hold (a damaged or hostile shard); nothing of it is read, the members before it are served"
                    ));
                }
                if data + size > self.len {
                    return Err(format!("cut short in {what} header at offset {pos}; the members before it are served"));
                }
                self.next = data + padded(size);
                let mut body = vec![0u8; size as usize];
                self.at.read_exact_at(&mut body, data).map_err(|e| format!("an unreadable header at offset {pos} ({e})"))?;
                let twice = || Err(format!("two {what} headers for one member at offset {pos}"));
                match kind {
                    b'L' if long_name.is_some() => return twice(),
                    b'L' => {
                        // The name and its NUL.
                        if body.last() == Some(&0) {
                            body.pop();
                        }
                        long_name = Some(body);
                    }
                    b'K' if long_link => return twice(),
                    b'K' => long_link = true,
                    b'x' if pax.is_some() => return twice(),
                    b'x' => pax = Some(body),
                    // A global header describes no one member.
                    _ => {}
                }
                continue;
            }
            // A PAX `size` overrides the header's (where parsers disagree, archives can be
            // made that look different to each).
            let size = match pax.as_deref().and_then(|p| pax_value(p, b"size")) {
                Some(value) => std::str::from_utf8(value).ok().and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| format!("a PAX size that is not a number at offset {pos}"))?,
                None => size,
            };
            let mut offset = data;
            if kind == b'S' && header[482] != 0 {
                // A GNU sparse member's further maps, a block each, before its data.
                offset = self.skip_sparse_maps(data)?;
            }
            self.next = offset.checked_add(padded(size)).ok_or_else(|| format!("a damaged tar header at offset {pos} (its size overflows)"))?;
            let name = match (long_name, pax.as_deref().and_then(|p| pax_value(p, b"path"))) {
                (Some(name), _) => name,
                (None, Some(path)) => path.to_vec(),
                (None, None) => header_name(&header),
            };
            return Ok(Some(Member { kind, name, offset, size }));
        }
    }

    /// The header block at `pos`, its checksum checked (`None`: the end of the archive).
    fn header_at(&mut self, pos: u64) -> Result<Option<[u8; BLOCK as usize]>, String> {
        let mut header = [0u8; BLOCK as usize];
        let got = self.at.read_at_most(&mut header, pos).map_err(|e| format!("an unreadable tar header at offset {pos} ({e})"))?;
        let compressed = || (pos == 0).then(|| compression(&header[..got])).flatten();
        if let Some(how) = compressed() {
            return Err(format!("compressed ({how}): compressed shards are not supported; decompress it to a plain .tar (e.g. `{}`)", decompressor(how)));
        }
        if got == 0 {
            return Ok(None);
        }
        if got < header.len() {
            return Err(format!("a damaged tar header at offset {pos} (the file ends inside it); the members before it are served"));
        }
        if header.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        let sum: u64 = header[..148].iter().chain(&header[156..]).map(|&b| u64::from(b)).sum::<u64>() + 8 * u64::from(b' ');
        if number(&header[148..156]) != Some(sum) {
            return Err(format!("a damaged tar header at offset {pos} (its checksum does not match: not a tar, or damaged there); the members before it are served"));
        }
        Ok(Some(header))
    }

    /// Skips the further sparse maps of a GNU sparse member whose data would start at `from`;
    /// where its data starts.
    fn skip_sparse_maps(&mut self, mut from: u64) -> Result<u64, String> {
        loop {
            let mut map = [0u8; BLOCK as usize];
            if self.at.read_at_most(&mut map, from).map_err(|e| format!("an unreadable sparse map at offset {from} ({e})"))? < map.len() {
                return Err(format!("cut short in a sparse map at offset {from}"));
            }
            from += BLOCK;
            if map[504] == 0 {
                return Ok(from);
            }
        }
    }
}

/// The command that makes a plain tar of a shard compressed with `how`.
fn decompressor(how: &str) -> &'static str {
    match how {
        "gzip" => "gunzip shard.tar.gz",
        "bzip2" => "bunzip2 shard.tar.bz2",
        "xz" => "unxz shard.tar.xz",
        "zstd" => "unzstd shard.tar.zst",
        _ => "lz4 -d shard.tar.lz4 shard.tar",
    }
}

/// `size` rounded up to whole blocks (saturating: a size that large ends the walk anyway).
fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK).saturating_mul(BLOCK)
}

/// A header's numeric field: octal text (ending at a NUL or space), or GNU's base-256 (the
/// high bit of the first byte set, the rest big-endian binary). `None` if it is neither, or
/// does not fit 64 bits.
fn number(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|&b| b & 0x80 != 0) {
        let (first, rest) = field.split_first()?;
        let mut n: u64 = u64::from(first & 0x7f);
        for &b in rest {
            n = n.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(n);
    }
    let text = field.split(|&b| b == 0).next().unwrap_or_default();
    let text = std::str::from_utf8(text).ok()?.trim();
    u64::from_str_radix(text, 8).ok()
}

/// The name a header holds: ustar's prefix, `/` and name, else the name (up to a NUL).
fn header_name(header: &[u8; BLOCK as usize]) -> Vec<u8> {
    let field = |bytes: &[u8]| bytes.split(|&b| b == 0).next().unwrap_or_default().to_vec();
    let name = field(&header[..100]);
    let ustar = &header[257..263] == b"ustar\0" && &header[263..265] == b"00";
    let prefix = if ustar { field(&header[345..500]) } else { Vec::new() };
    if prefix.is_empty() {
        return name;
    }
    let mut path = prefix;
    path.push(b'/');
    path.extend_from_slice(&name);
    path
}

/// The value of `key` in a PAX header's records (`"<len> key=value\n"`, the length counting
/// the whole record); records after a malformed one are not read.
fn pax_value<'p>(records: &'p [u8], key: &[u8]) -> Option<&'p [u8]> {
    let mut rest = records;
    let mut found = None;
    while let Some(space) = rest.iter().position(|&b| b == b' ') {
        let Some(len) = std::str::from_utf8(&rest[..space]).ok().and_then(|l| l.parse::<usize>().ok()) else { break };
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            break;
        }
        let record = &rest[space + 1..len - 1];
        if let Some(eq) = record.iter().position(|&b| b == b'=') {
            if &record[..eq] == key {
                // The last record of a key wins.
                found = Some(&record[eq + 1..]);
            }
        }
        rest = &rest[len..];
    }
    found
}

/// A read of a window shorter than this is not made: a window after a member longer than the
/// window is this long (a header, a long name, a label member), so a shard of large members
/// costs little more than its headers.
const SMALL_WINDOW: usize = 64 << 10;

/// A [`SourceFile`] as the walk reads it, at the places it asks for (`read_at_most`,
/// `read_exact_at`). Without a window each read is a `read_at`. With one, a read outside the bytes held fetches a window from there (one
/// `read_at`: one ranged GET of an object store), and the reads after it, the following
/// headers and label members, are answered from it until the walk reads past its end; a read
/// that straddles the end gets the bytes held, and its rest comes from the next window. A fetch
/// that starts past the last window's end (a member longer than what was left of the window
/// was seeked over) fetches [`SMALL_WINDOW`] bytes, and a fetch that goes on where the last one
/// ended fetches `window` again: a shard of large members is not read whole for its headers.
struct At<'a> {
    file: &'a dyn SourceFile,
    pos: u64,
    window: usize,
    held: Vec<u8>,
    held_at: u64,
}

impl<'a> At<'a> {
    fn new(file: &'a dyn SourceFile, window: usize) -> At<'a> {
        At { file, pos: 0, window, held: Vec::new(), held_at: 0 }
    }

    /// Fetches the window at `self.pos` into `held` (fewer bytes at the end of the file).
    fn fetch(&mut self) -> io::Result<()> {
        let held_end = self.held_at + self.held.len() as u64;
        let skipped = !self.held.is_empty() && self.pos > held_end;
        let want = if skipped { self.window.min(SMALL_WINDOW) } else { self.window };
        let left = self.file.meta().len().saturating_sub(self.pos);
        let want = (want as u64).min(left) as usize;
        self.held.clear();
        self.held.resize(want, 0);
        self.held_at = self.pos;
        let mut got = 0;
        while got < want {
            match self.file.read_at(&mut self.held[got..], self.pos + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.held.clear();
                    return Err(e);
                }
            }
        }
        self.held.truncate(got);
        Ok(())
    }
}

impl At<'_> {
    /// Fills `buf` from `pos` as far as the file goes: the bytes read.
    fn read_at_most(&mut self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.pos = pos;
        let mut got = 0;
        while got < buf.len() {
            match self.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    /// Fills `buf` from `pos`; the end of the file before it is full is an error.
    fn read_exact_at(&mut self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        if self.read_at_most(buf, pos)? < buf.len() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file ends inside it"));
        }
        Ok(())
    }
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.window == 0 {
            let n = self.file.read_at(buf, self.pos)?;
            self.pos += n as u64;
            return Ok(n);
        }
        let inside = |at: &At<'_>| at.pos >= at.held_at && at.pos < at.held_at + at.held.len() as u64;
        if !inside(self) {
            self.fetch()?;
            if !inside(self) {
                return Ok(0); // the end of the file
            }
        }
        let from = (self.pos - self.held_at) as usize;
        let n = buf.len().min(self.held.len() - from);
        buf[..n].copy_from_slice(&self.held[from..from + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::{LocalSource, SourceIo};
    use std::path::Path;

    /// A tar of `members` (name, bytes) at `path`, made with the `tar` crate.
    pub(crate) fn write_tar(path: &Path, members: &[(&str, &[u8])]) {
        let mut builder = tar::Builder::new(std::fs::File::create(path).expect("create"));
        for (name, bytes) in members {
            let mut header = tar::Header::new_gnu();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            builder.append_data(&mut header, name, *bytes).expect("append");
        }
        builder.into_inner().expect("finish");
    }

    fn index_of(path: &Path) -> ShardIndex {
        index_in_windows(path, 0).0
    }

    /// A file that counts its reads and the bytes they asked for.
    struct Counted {
        inner: Box<dyn SourceFile>,
        reads: std::sync::Mutex<(usize, u64)>,
    }

    impl SourceFile for Counted {
        fn meta(&self) -> &FileMeta {
            self.inner.meta()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let mut reads = self.reads.lock().expect("reads");
            *reads = (reads.0 + 1, reads.1 + buf.len() as u64);
            self.inner.read_at(buf, offset)
        }
    }

    /// The index of the shard at `path` walked in windows of `window` bytes, and the reads it
    /// took (how many, how many bytes).
    fn index_in_windows(path: &Path, window: usize) -> (ShardIndex, (usize, u64)) {
        let source = LocalSource::new(path.parent().expect("dir")).expect("source");
        let file = Counted { inner: source.open(path).expect("open"), reads: std::sync::Mutex::new((0, 0)) };
        let idx = index(&file, window);
        let reads = *file.reads.lock().expect("reads");
        (idx, reads)
    }

    #[test]
    fn a_walk_in_windows_finds_what_a_read_per_header_finds_with_headers_and_labels_across_window_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        // Sizes that put headers and label members at every offset of a window.
        let images: Vec<Vec<u8>> = (0..60u32).map(|i| (0..(i * 397 % 3001 + 1)).map(|b| (b * 7 + i) as u8).collect()).collect();
        let labels: Vec<String> = (0..60).map(|i| format!("{}", i % 7)).collect();
        let names: Vec<(String, String)> = (0..60).map(|i| (format!("k{i:03}.jpg"), format!("k{i:03}.cls"))).collect();
        let mut members: Vec<(&str, &[u8])> = Vec::new();
        for i in 0..60 {
            members.push((names[i].0.as_str(), images[i].as_slice()));
            members.push((names[i].1.as_str(), labels[i].as_bytes()));
        }
        write_tar(&path, &members);
        let len = std::fs::metadata(&path).expect("stat").len();
        let (direct, (direct_reads, _)) = index_in_windows(&path, 0);
        assert_eq!(direct.samples.len(), 60);
        assert!(!direct.problems.any(), "{:?}", direct.problems);
        for window in [700, 1000, 4096, 10_000, 1 << 20] {
            let (idx, (reads, bytes)) = index_in_windows(&path, window);
            assert_eq!(idx, direct, "window {window}");
            // Reads of at most a window each, going on where the last ended: about the
            // shard's length over the window, never more reads than the direct walk's.
            assert!(bytes <= len + window as u64, "window {window}: {bytes} bytes read of {len}");
            assert!(reads <= (len as usize).div_ceil(window) + 1, "window {window}: {reads} reads");
            if window >= 4096 {
                assert!(reads * 4 < direct_reads, "window {window}: {reads} reads, direct {direct_reads}");
            }
        }
        // A shard smaller than the window is one read.
        assert_eq!(index_in_windows(&path, 1 << 20).1 .0, 1);
        for s in &direct.samples {
            let i: usize = String::from_utf8_lossy(&s.key[1..]).parse().expect("key");
            assert_eq!(bytes_at(&path, s), images[i]);
        }
    }

    #[test]
    fn a_member_longer_than_the_window_is_seeked_over_and_the_shard_is_not_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        let big: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 300_000]).collect();
        write_tar(&path, &[
            ("a.jpg", b"A"), ("a.cls", b"1"),
            ("b.jpg", &big[0]), ("b.cls", b"2"),
            ("c.jpg", &big[1]), ("c.cls", b"3"),
            ("d.jpg", &big[2]), ("e.jpg", &big[3]), ("e.json", br#"{"class": 5}"#),
            ("f.jpg", b"F"), ("f.cls", b"6"),
        ]);
        let len = std::fs::metadata(&path).expect("stat").len();
        let (direct, _) = index_in_windows(&path, 0);
        let window = 200_000;
        let (idx, (reads, bytes)) = index_in_windows(&path, window);
        assert_eq!(idx, direct);
        let keys: Vec<&[u8]> = idx.samples.iter().map(|s| &s.key[..]).collect();
        assert_eq!(keys, [&b"a"[..], b"b", b"c", b"d", b"e", b"f"]);
        for (s, want) in idx.samples[1..5].iter().zip(&big) {
            assert_eq!(&bytes_at(&path, s), want);
        }
        // After a member longer than the window, small windows: far less than the shard read.
        assert!(bytes < len / 2, "{bytes} bytes read of {len} in {reads} reads");
        assert!(reads <= 8, "{reads} reads");
    }

    fn bytes_at(path: &Path, s: &Indexed) -> Vec<u8> {
        let all = std::fs::read(path).expect("read");
        all[s.offset as usize..(s.offset + s.len) as usize].to_vec()
    }

    #[test]
    fn the_index_finds_each_samples_image_bytes_and_label() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        let long_key = format!("deep/{}/k", "d".repeat(150)); // past ustar's 100 bytes: a GNU long name
        write_tar(&path, &[
            ("a.jpg", b"AAAA"),
            ("a.cls", b"3\n"),
            ("b.json", br#"{"label": "dog"}"#),
            ("b.PNG", b"BBBBBB"),
            ("c.jpg", b"C"),
            ("notes.txt", b"no sample"),
            (&format!("{long_key}.jpg"), b"LONG"),
            (&format!("{long_key}.cls"), b"4"),
        ]);
        let idx = index_of(&path);
        assert!(!idx.problems.any(), "{:?}", idx.problems);
        let got: Vec<(&[u8], &[u8], Label)> = idx.samples.iter().map(|s| (&s.key[..], &s.ext[..], s.label.clone())).collect();
        assert_eq!(got, [
            (&b"a"[..], &b"jpg"[..], Label::Number(3)),
            (b"b", b"PNG", Label::Name(b"dog".to_vec())),
            (b"c", b"jpg", Label::None),
            (long_key.as_bytes(), b"jpg", Label::Number(4)),
        ]);
        for (s, want) in idx.samples.iter().zip([&b"AAAA"[..], b"BBBBBB", b"C", b"LONG"]) {
            assert_eq!(bytes_at(&path, s), want, "{:?}", String::from_utf8_lossy(&s.key));
        }
        assert_eq!(idx.stamp.len, std::fs::metadata(&path).expect("stat").len());
    }

    /// A PAX record `"<len> key=value\n"`, its length counting itself.
    fn pax_record(key: &str, value: &str) -> Vec<u8> {
        let body = format!(" {key}={value}\n");
        let mut len = body.len() + 1;
        while format!("{len}{body}").len() != len {
            len += 1;
        }
        format!("{len}{body}").into_bytes()
    }

    #[test]
    fn a_long_key_in_a_pax_header_as_pythons_tarfile_writes_it_is_read_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        let key = format!("ünïcödé/{}", "k".repeat(120));
        let mut builder = tar::Builder::new(std::fs::File::create(&path).expect("create"));
        for (name, bytes) in [(format!("{key}.jpg"), &b"IMAGE"[..]), (format!("{key}.cls"), b"2")] {
            let record = pax_record("path", &name);
            let mut pax = tar::Header::new_ustar();
            pax.set_path("PaxHeaders/x").expect("pax name");
            pax.set_size(record.len() as u64);
            pax.set_entry_type(tar::EntryType::XHeader);
            pax.set_cksum();
            builder.append(&pax, &record[..]).expect("pax");
            let mut header = tar::Header::new_ustar();
            header.set_path("short-name-ignored").expect("name");
            header.set_size(bytes.len() as u64);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            builder.append(&header, bytes).expect("entry");
        }
        builder.into_inner().expect("finish");
        let idx = index_of(&path);
        assert!(!idx.problems.any(), "{:?}", idx.problems);
        assert_eq!(idx.samples.len(), 1, "{:?}", idx.samples);
        assert_eq!((idx.samples[0].key.as_slice(), idx.samples[0].label.clone()), (key.as_bytes(), Label::Number(2)));
        assert_eq!(bytes_at(&path, &idx.samples[0]), b"IMAGE");
    }

    #[test]
    fn a_bad_label_drops_its_sample_and_the_rest_are_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        let huge = vec![b'1'; (MAX_LABEL_BYTES + 1) as usize];
        write_tar(&path, &[
            ("a.jpg", b"A"), ("a.cls", b"\xff\xfe"),
            ("b.jpg", b"B"), ("b.json", b"{oops"),
            ("c.jpg", b"C"), ("c.cls", &huge),
            ("d.jpg", b"D"), ("d.jpg", b"D2"),
            ("e.jpg", b"E"), ("e.cls", b"1"),
        ]);
        let idx = index_of(&path);
        assert_eq!(index_in_windows(&path, 1000).0, idx, "the same in windows");
        let keys: Vec<&[u8]> = idx.samples.iter().map(|s| &s.key[..]).collect();
        assert_eq!(keys, [&b"d"[..], b"e"]);
        assert_eq!((idx.problems.bad_labels, idx.problems.extra_images, idx.problems.cut), (3, 1, false));
        assert!(idx.problems.first.as_deref().is_some_and(|w| w.contains("d.jpg is a second image")), "{:?}", idx.problems.first);
        assert_eq!(bytes_at(&path, &idx.samples[0]), b"D", "the first image of a key is served");
        // The reason a label is refused is said.
        write_tar(&path, &[("a.jpg", b"A"), ("a.cls", b"\xff\xfe")]);
        let idx = index_of(&path);
        assert!(idx.samples.is_empty());
        assert!(idx.problems.first.as_deref().is_some_and(|w| w.starts_with("a: a .cls that is not UTF-8")), "{:?}", idx.problems.first);
    }

    /// A header of `kind` declaring `declared` bytes (its checksum right).
    fn header_declaring(kind: tar::EntryType, declared: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_path("././@LongLink").expect("name");
        header.set_size(declared);
        header.set_mode(0o644);
        header.set_entry_type(kind);
        header.set_cksum();
        header
    }

    /// A shard at `path`: `a.jpg` and `a.cls`, then a header of `kind` declaring `declared`
    /// bytes (the file made long enough to hold them by `set_len`: sparse, as cheap on disk as
    /// it is large), then `b.jpg`. Its length.
    fn shard_with_header(path: &Path, kind: tar::EntryType, declared: u64) -> u64 {
        use std::io::{Seek, SeekFrom, Write};
        write_tar(path, &[("a.jpg", b"A"), ("a.cls", b"1")]);
        let mut file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open");
        // Over the two zero blocks that end the archive.
        let end = file.seek(SeekFrom::End(0)).expect("end") - 1024;
        file.seek(SeekFrom::Start(end)).expect("seek");
        file.write_all(header_declaring(kind, declared).as_bytes()).expect("header");
        let after = end + 512 + declared.div_ceil(512) * 512;
        file.set_len(after).expect("sparse body");
        file.seek(SeekFrom::Start(after)).expect("seek");
        let mut builder = tar::Builder::new(file);
        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, "b.jpg", &b"B"[..]).expect("b.jpg");
        builder.into_inner().expect("finish").metadata().expect("stat").len()
    }

    #[test]
    fn an_extension_header_larger_than_a_header_may_be_is_a_damaged_shard_and_nothing_of_it_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        for (kind, what) in [(tar::EntryType::GNULongName, "`L`"), (tar::EntryType::GNULongLink, "`K`"), (tar::EntryType::XHeader, "`x`"), (tar::EntryType::XGlobalHeader, "`g`")] {
            for declared in [300_000_000, MAX_EXTENSION_BYTES + 1] {
                let len = shard_with_header(&path, kind, declared);
                for window in [0, 1 << 20] {
                    let (idx, (_, bytes)) = index_in_windows(&path, window);
                    let keys: Vec<&[u8]> = idx.samples.iter().map(|s| &s.key[..]).collect();
                    assert_eq!(keys, [&b"a"[..]], "{what} of {declared}: the members before it are served");
                    assert!(idx.problems.cut, "{what} of {declared}");
                    let first = idx.problems.first.as_deref().unwrap_or("");
                    assert!(first.contains(what) && first.contains(&format!("{declared} bytes")) && first.contains("more than the 65536 bytes"), "{what}: {first}");
                    // Nothing of the header's body is read (a window of 1 MiB holds the shard's
                    // head; the direct walk reads its three headers and a label).
                    assert!(bytes <= (3 * 512 + 512 + (1 << 20)).min(len), "{what} of {declared}: {bytes} bytes read");
                    if window == 0 {
                        assert!(bytes <= 4 * 512, "{what} of {declared}: {bytes} bytes read directly");
                    }
                }
            }
        }
        // A header of the most a header may hold is read, and the walk goes on past it.
        for kind in [tar::EntryType::XHeader, tar::EntryType::XGlobalHeader, tar::EntryType::GNULongLink] {
            shard_with_header(&path, kind, MAX_EXTENSION_BYTES);
            let idx = index_of(&path);
            let keys: Vec<&[u8]> = idx.samples.iter().map(|s| &s.key[..]).collect();
            assert_eq!(keys, [&b"a"[..], b"b"], "{kind:?} of the most a header may hold: {:?}", idx.problems);
        }
    }

    #[test]
    fn a_compressed_shard_is_said_to_be_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar.gz");
        for (magic, how) in [(&b"\x1f\x8b\x08\x00"[..], "gzip"), (b"BZh91AY", "bzip2"), (b"\xfd7zXZ\x00\x00", "xz"), (b"\x28\xb5\x2f\xfd\x00", "zstd")] {
            for len in [magic.len(), 700, 5000] {
                let mut bytes = magic.to_vec();
                bytes.resize(len, 0x5a);
                std::fs::write(&path, &bytes).expect("write");
                let idx = index_of(&path);
                assert!(idx.unreadable(), "{how}");
                let first = idx.problems.first.as_deref().unwrap_or("");
                assert!(first.starts_with(&format!("compressed ({how}): compressed shards are not supported")), "{how}, {len} bytes: {first}");
            }
        }
        // A tar that is no compressed one: the damage said as damage.
        std::fs::write(&path, vec![0x55u8; 4096]).expect("garbage");
        let idx = index_of(&path);
        assert!(idx.problems.first.as_deref().is_some_and(|w| w.contains("checksum does not match")), "{:?}", idx.problems);
    }

    /// Each regular member's (name, data offset, size) as `tar`'s own walk finds them.
    fn tar_crate_members(path: &Path) -> Vec<(Vec<u8>, u64, u64)> {
        let mut archive = tar::Archive::new(std::fs::File::open(path).expect("open"));
        let mut out = Vec::new();
        for entry in archive.entries_with_seek().expect("entries") {
            let entry = entry.expect("entry");
            if entry.header().entry_type().is_file() {
                out.push((entry.path_bytes().into_owned(), entry.raw_file_position(), entry.size()));
            }
        }
        out
    }

    fn walked_members(path: &Path) -> Vec<(Vec<u8>, u64, u64)> {
        let source = LocalSource::new(path.parent().expect("dir")).expect("source");
        let file = source.open(path).expect("open");
        let len = file.meta().len();
        let mut walk = Walk::new(At::new(&*file, 0), len);
        let mut out = Vec::new();
        while let Some(m) = walk.next_member().expect("walk") {
            if m.is_file() {
                out.push((m.name, m.offset, m.size));
            }
        }
        out
    }

    #[test]
    fn the_walk_finds_the_members_the_tar_crate_finds_in_every_header_format() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        let mut builder = tar::Builder::new(std::fs::File::create(&path).expect("create"));
        let deep = format!("{}/{}", "p".repeat(120), "n".repeat(90));
        // ustar: a long path split into prefix and name; GNU: a long name; old (v7) headers.
        for (i, header) in [tar::Header::new_ustar(), tar::Header::new_gnu(), tar::Header::new_old()].into_iter().enumerate() {
            let mut header = header;
            header.set_size(3 + i as u64);
            header.set_entry_type(tar::EntryType::Regular);
            let name = if i == 2 { format!("old{i}.jpg") } else { format!("{deep}{i}.jpg") };
            builder.append_data(&mut header, &name, &vec![i as u8; 3 + i][..]).expect("append");
        }
        // A directory, a symlink: not files.
        let mut dir_header = tar::Header::new_gnu();
        dir_header.set_entry_type(tar::EntryType::Directory);
        dir_header.set_size(0);
        builder.append_data(&mut dir_header, "d/", &b""[..]).expect("dir");
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        builder.append_link(&mut link, "l.jpg", "/etc/passwd").expect("link");
        // PAX path and size (the size overriding the header's), and a global header.
        let global = pax_record("comment", "global");
        let mut g = tar::Header::new_ustar();
        g.set_path("GlobalHead").expect("name");
        g.set_size(global.len() as u64);
        g.set_entry_type(tar::EntryType::XGlobalHeader);
        g.set_cksum();
        builder.append(&g, &global[..]).expect("global");
        let record = [pax_record("path", "pax/ünï.jpg"), pax_record("size", "7")].concat();
        let mut pax = tar::Header::new_ustar();
        pax.set_path("PaxHeaders/x").expect("pax name");
        pax.set_size(record.len() as u64);
        pax.set_entry_type(tar::EntryType::XHeader);
        pax.set_cksum();
        builder.append(&pax, &record[..]).expect("pax");
        let mut sized = tar::Header::new_ustar();
        sized.set_path("ignored.jpg").expect("name");
        sized.set_size(2);
        sized.set_entry_type(tar::EntryType::Regular);
        sized.set_cksum();
        builder.append(&sized, &b"SEVEN77"[..]).expect("entry");
        let mut after = tar::Header::new_gnu();
        after.set_size(5);
        after.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut after, "after.jpg", &b"AFTER"[..]).expect("after");
        builder.into_inner().expect("finish");
        let walked = walked_members(&path);
        assert_eq!(walked, tar_crate_members(&path));
        let names: Vec<String> = walked.iter().map(|m| String::from_utf8_lossy(&m.0).into_owned()).collect();
        assert_eq!(names, [format!("{deep}0.jpg"), format!("{deep}1.jpg"), "old2.jpg".into(), "pax/ünï.jpg".into(), "after.jpg".into()]);
        assert_eq!(walked[3].2, 7, "the PAX size");
    }

    #[test]
    fn numeric_fields_are_octal_or_base_256() {
        assert_eq!(number(b"00000000017\0"), Some(15));
        assert_eq!(number(b"     17 \0\0\0\0"), Some(15));
        assert_eq!(number(&[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1]), Some(0x2_0001));
        assert_eq!(number(&[0x80, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), None, "past 64 bits");
        assert_eq!(number(b"0000000009\0\0"), None);
        assert_eq!(pax_value(b"12 path=abc\n9 size=7\n", b"size"), Some(&b"7"[..]));
        assert_eq!(pax_value(b"12 path=abc\nbroken", b"path"), Some(&b"abc"[..]));
        assert_eq!(pax_value(b"99 path=abc\n", b"path"), None);
    }

    #[test]
    fn a_truncated_shard_serves_the_members_before_the_cut() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.tar");
        let big = vec![7u8; 5000];
        write_tar(&path, &[("a.jpg", b"A"), ("a.cls", b"0"), ("b.jpg", &big), ("b.cls", b"1"), ("c.jpg", b"C")]);
        let whole = std::fs::read(&path).expect("read");
        // Cut inside b.jpg's data.
        let cut_at = whole.windows(4).position(|w| w == [7, 7, 7, 7]).expect("b's data") + 100;
        std::fs::write(&path, &whole[..cut_at]).expect("cut");
        let idx = index_of(&path);
        for window in [700, 1 << 20] {
            assert_eq!(index_in_windows(&path, window).0, idx, "the same in windows of {window}");
        }
        assert_eq!(idx.samples.iter().map(|s| &s.key[..]).collect::<Vec<_>>(), [&b"a"[..]]);
        assert!(idx.problems.cut, "{:?}", idx.problems);
        assert!(idx.problems.first.as_deref().is_some_and(|w| w.contains("b.jpg")), "{:?}", idx.problems.first);
        // Cut inside a header: the samples before it, and a damaged header said.
        std::fs::write(&path, &whole[..1024 + 200]).expect("cut in a header");
        let idx = index_of(&path);
        assert_eq!(index_in_windows(&path, 700).0, idx, "the same in windows");
        assert_eq!(idx.samples.len(), 1);
        assert!(idx.problems.cut);
        // Not a tar at all: nothing, said.
        std::fs::write(&path, vec![0x55u8; 4096]).expect("garbage");
        let idx = index_of(&path);
        assert!(idx.samples.is_empty() && idx.problems.cut, "{:?}", idx.problems);
    }
}
