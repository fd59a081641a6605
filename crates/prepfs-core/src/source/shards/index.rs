//! One shard's index: its samples' image members as (offset, length) in the tar, and their
//! labels, found by walking the tar headers and seeking over the data (the `tar` crate's
//! `entries_with_seek`); only the small label members (`.cls`, `.json`) are read. The walk reads
//! through a [`SourceFile`] (`read_at`), so any source that answers ranged reads can be indexed.
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

/// Indexes the shard open as `file`.
pub(crate) fn index(file: &dyn SourceFile) -> ShardIndex {
    let stamp = Stamp::of(file.meta());
    let len = file.meta().len();
    let mut problems = Problems::default();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut partial: HashMap<Vec<u8>, Partial> = HashMap::new();
    let mut archive = tar::Archive::new(At { file, pos: 0 });
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

/// A [`SourceFile`] as the `Read + Seek` the tar crate walks: each read is a `read_at`.
struct At<'a> {
    file: &'a dyn SourceFile,
    pos: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
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
        let source = LocalSource::new(path.parent().expect("dir")).expect("source");
        index(&*source.open(path).expect("open"))
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
        assert_eq!(idx.samples.iter().map(|s| &s.key[..]).collect::<Vec<_>>(), [&b"a"[..]]);
        assert!(idx.problems.cut, "{:?}", idx.problems);
        assert!(idx.problems.first.as_deref().is_some_and(|w| w.contains("b.jpg")), "{:?}", idx.problems.first);
        // Cut inside a header: the samples before it, and a damaged header said.
        std::fs::write(&path, &whole[..1024 + 200]).expect("cut in a header");
        let idx = index_of(&path);
        assert_eq!(idx.samples.len(), 1);
        assert!(idx.problems.cut);
        // Not a tar at all: nothing, said.
        std::fs::write(&path, vec![0x55u8; 4096]).expect("garbage");
        let idx = index_of(&path);
        assert!(idx.samples.is_empty() && idx.problems.cut, "{:?}", idx.problems);
    }
}
