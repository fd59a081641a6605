//! One shard's index: its samples' image members as (offset, length) in the tar, and their
//! labels, found by walking the tar headers and seeking over the data (the `tar` crate's
//! `entries_with_seek`); only the small label members (`.cls`, `.json`) are read. The walk reads
//! through a [`SourceFile`] (`read_at`), so any source that answers ranged reads can be indexed:
//! a local shard one `pread` per header (the data seeked over, never read), a shard in an object
//! store in large windows (one ranged GET holds many headers; see [`At`]).
//!
//! A bad member costs only its sample: a label that does not parse drops that sample, a member
//! cut by the end of the file and everything after it are dropped (the members before the cut
//! are served), a damaged header ends the walk there. Each problem is counted and the first
//! said in words ([`Problems`]).

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};

use super::label::{self, Label, MAX_LABEL_BYTES};
use super::names::split_member;
use crate::source::catalog::IMAGE_EXTENSIONS;
use crate::source::{FileMeta, SourceFile};

/// What tells one version of a shard from another: its size, mtime and inode. A shard whose
/// stamp differs from its index's is indexed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) len: u64,
    pub(crate) mtime_ns: i128,
    pub(crate) ino: u64,
}

impl Stamp {
    pub(crate) fn of(meta: &FileMeta) -> Stamp {
        Stamp { len: meta.len(), mtime_ns: meta.identity.mtime_ns, ino: meta.identity.ino }
    }
}

/// A sample of a shard: its image member and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Indexed {
    /// The key, as in the tar (may hold `/`).
    pub(crate) key: Vec<u8>,
    /// The image member's extension, as in the tar (`jpg`, `JPEG`, `png`, ...).
    pub(crate) ext: Vec<u8>,
    /// Where the image's bytes start in the shard, and how many there are.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) label: Label,
}

/// What a shard's walk could not serve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Problems {
    /// Samples dropped for a label member that does not parse (or is too large).
    pub(crate) bad_labels: u32,
    /// Further image members of a key that has one already (the first is served).
    pub(crate) extra_images: u32,
    /// Whether the walk ended early (a member cut by the end of the file, a damaged header):
    /// the members before it are served.
    pub(crate) cut: bool,
    /// The first problem, in words.
    pub(crate) first: Option<String>,
}

impl Problems {
    fn note(&mut self, why: String) {
        self.first.get_or_insert(why);
    }

    pub(crate) fn any(&self) -> bool {
        self.bad_labels > 0 || self.extra_images > 0 || self.cut
    }
}

/// One shard's index: the version indexed, its samples in tar order, its problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardIndex {
    pub(crate) stamp: Stamp,
    pub(crate) samples: Vec<Indexed>,
    pub(crate) problems: Problems,
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
pub(crate) fn index(file: &dyn SourceFile, window: usize) -> ShardIndex {
    let stamp = Stamp::of(file.meta());
    let len = file.meta().len();
    let mut problems = Problems::default();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut partial: HashMap<Vec<u8>, Partial> = HashMap::new();
    let mut archive = tar::Archive::new(At::new(file, window));
    match archive.entries_with_seek() {
        Ok(entries) => {
            for entry in entries {
                let mut entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        problems.cut = true;
                        problems.note(format!("a damaged tar header ({e}); the members before it are served"));
                        break;
                    }
                };
                if !entry.header().entry_type().is_file() {
                    continue;
                }
                let name = entry.path_bytes().into_owned();
                let (offset, size) = (entry.raw_file_position(), entry.size());
                if offset.saturating_add(size) > len {
                    problems.cut = true;
                    problems.note(format!("cut short in {} (the file ends before its data does); the members before it are served", String::from_utf8_lossy(&name)));
                    break;
                }
                let Some((key, ext)) = split_member(&name) else { continue };
                let lower = ext.to_ascii_lowercase();
                if IMAGE_EXTENSIONS.iter().any(|e| e.as_bytes() == lower.as_slice()) {
                    let part = entry_for(&mut partial, &mut keys, key);
                    if part.image.is_some() {
                        problems.extra_images += 1;
                        problems.note(format!("{} is a second image of its key; the first is served", String::from_utf8_lossy(&name)));
                    } else {
                        part.image = Some((ext.to_vec(), offset, size));
                    }
                } else if lower == b"cls" || lower == b"json" {
                    let read = read_label(&mut entry, size).and_then(|bytes| if lower == b"cls" { label::of_cls(&bytes) } else { label::of_json(&bytes) });
                    let part = entry_for(&mut partial, &mut keys, key);
                    if lower == b"cls" {
                        part.cls = Some(read);
                    } else {
                        part.json = Some(read);
                    }
                }
            }
        }
        Err(e) => {
            problems.cut = true;
            problems.note(format!("not readable as tar ({e})"));
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
                problems.note(format!("{}: {why}; the sample is not served", String::from_utf8_lossy(&key)));
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

/// A label member's bytes, refused past [`MAX_LABEL_BYTES`] or where the read fails.
fn read_label(entry: &mut impl Read, size: u64) -> Result<Vec<u8>, String> {
    if size > MAX_LABEL_BYTES {
        return Err(format!("a label member of {size} bytes (more than {MAX_LABEL_BYTES})"));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    entry.read_to_end(&mut bytes).map_err(|e| format!("an unreadable label member ({e})"))?;
    Ok(bytes)
}

/// A read of a window shorter than this is not made: a window after a member longer than the
/// window is this long (a header, a long name, a label member), so a shard of large members
/// costs little more than its headers.
const SMALL_WINDOW: usize = 64 << 10;

/// A [`SourceFile`] as the `Read + Seek` the tar crate walks. Without a window each read is a
/// `read_at`. With one, a read outside the bytes held fetches a window from there (one
/// `read_at`: one ranged GET of an object store), and the reads after it, the following
/// headers and label members, are answered from it until the walk seeks past its end; a read
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

impl Seek for At<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let base = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.file.meta().len().checked_add_signed(d),
        };
        self.pos = base.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::source::{LocalSource, SourceIo};
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
