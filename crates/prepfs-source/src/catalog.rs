//! The source catalog: the scanned directory tree of the dataset, held compactly.
//!
//! One scan at mount time records every directory and file name (no `stat`, no reads: the
//! directory entries' types suffice, but for symlinks), sorted, in one string arena. Symlinks
//! are followed only to targets inside the source (others are skipped, said in one log line),
//! a directory reached twice (a symlink cycle) is listed once, and the scan stops early when
//! asked (a signal during a long scan). Directories' children are
//! contiguous ranges, so a lookup is a binary search and a listing is a slice. Image files (by
//! extension) are the samples: each has an id, a stem for its `decoded`/`augmented` name, and a
//! pixel size probed from its header on first need and remembered. About 50 bytes per sample
//! plus the name (see [`Catalog::bytes_per_sample`]).

use std::collections::{HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use prepfs_pixels::rgb::Size2;

/// File name extensions that make a file a sample (case-insensitive).
pub(crate) const IMAGE_EXTENSIONS: &[&str] =
    &["jpg", "jpeg", "png", "bmp", "gif", "webp", "tif", "tiff", "ppm", "pgm", "pnm"];

/// Index of a directory in the catalog; 0 is the source root.
pub type DirId = u32;
/// Index of a file in the catalog; for image files it is also the sample id.
pub type FileId = u32;

#[derive(Debug, Clone, Copy)]
struct NameRef {
    offset: u32,
    len: u32,
}

#[derive(Debug)]
struct DirNode {
    name: NameRef,
    parent: DirId,
    subdirs: (u32, u32),
    files: (u32, u32),
    /// Range in `images_by_stem`.
    images: (u32, u32),
}

#[derive(Debug)]
struct FileNode {
    name: NameRef,
    dir: DirId,
    /// Length of the served stem when this is an image (its name without the extension, or
    /// the whole name when the stem is shared: see [`Catalog::stem`]), else 0.
    stem_len: u32,
}

/// The scanned source tree.
#[derive(Debug)]
pub struct Catalog {
    root: PathBuf,
    names: Vec<u8>,
    dirs: Vec<DirNode>,
    files: Vec<FileNode>,
    /// Image files of each directory sorted by stem, contiguous per directory.
    images_by_stem: Vec<FileId>,
    /// Probed pixel size per file: 0 not yet probed, [`PROBE_FAILED`], or `w << 32 | h`.
    sizes: Vec<AtomicU64>,
    /// Image files hidden from the pixel views because another would be served under the same
    /// name even after the shared-stem rule (see [`Catalog::stem`]).
    pub stem_collisions: usize,
    samples: usize,
}

const PROBE_FAILED: u64 = u64::MAX;

/// A directory entry as views list it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Dir(DirId),
    File(FileId),
}

impl Catalog {
    /// Scans `root`, calling `progress` with the running count of files every so often.
    pub fn scan(root: &Path, progress: impl FnMut(usize)) -> std::io::Result<Catalog> {
        Catalog::scan_until(root, progress, &AtomicBool::new(false))
    }

    /// [`Catalog::scan`], giving up with `Interrupted` once `stop` is set.
    pub fn scan_until(root: &Path, mut progress: impl FnMut(usize), stop: &AtomicBool) -> std::io::Result<Catalog> {
        let started = Instant::now();
        let canonical_root = root.canonicalize()?;
        // Directories listed so far, by (device, inode): a symlink cycle lists nothing twice.
        let mut visited: HashSet<(u64, u64)> = HashSet::new();
        let (mut links_outside, mut first_outside) = (0usize, None::<PathBuf>);
        let mut cat = Catalog::empty(root);
        let mut queue = VecDeque::from([(0 as DirId, root.to_path_buf())]);
        while let Some((dir_id, path)) = queue.pop_front() {
            if stop.load(Ordering::Relaxed) {
                return Err(std::io::Error::new(std::io::ErrorKind::Interrupted, "scan stopped"));
            }
            if let Ok(meta) = std::fs::metadata(&path) {
                if !visited.insert((meta.dev(), meta.ino())) {
                    continue; // already listed (reached again through a symlink)
                }
            }
            let mut subdirs = Vec::new();
            let mut files = Vec::new();
            let entries = match std::fs::read_dir(&path) {
                Ok(e) => e,
                Err(e) if dir_id == 0 => return Err(e),
                Err(e) => {
                    tracing::warn!(dir = %prepfs_base::escape::escaped(&path), error = %e, "cannot list directory; skipped");
                    continue;
                }
            };
            for entry in entries {
                let entry = entry?;
                let name = entry.file_name();
                let mut kind = entry.file_type()?;
                if kind.is_symlink() {
                    // Followed only when the target lies inside the source.
                    match entry.path().canonicalize() {
                        Ok(target) if target.starts_with(&canonical_root) => match std::fs::metadata(&target) {
                            Ok(m) => kind = m.file_type(),
                            Err(_) => continue,
                        },
                        Ok(_) => {
                            links_outside += 1;
                            first_outside.get_or_insert_with(|| entry.path());
                            continue;
                        }
                        Err(_) => continue, // dangling link
                    }
                }
                if kind.is_dir() {
                    subdirs.push(name);
                } else if kind.is_file() {
                    files.push(name);
                }
            }
            subdirs.sort();
            files.sort();
            let new_dirs = cat.add_listing(dir_id, &path, subdirs, files);
            for d in new_dirs {
                queue.push_back((d, path.join(cat.dir_name(d))));
            }
            progress(cat.files.len());
        }
        if let Some(first) = first_outside {
            tracing::warn!(
                skipped = links_outside,
                first = %prepfs_base::escape::escaped(&first),
                "symlinks leading outside the source are not served"
            );
        }
        cat.sizes = (0..cat.files.len()).map(|_| AtomicU64::new(0)).collect();
        cat.names.shrink_to_fit();
        tracing::info!(
            files = cat.files.len(),
            samples = cat.samples,
            dirs = cat.dirs.len(),
            secs = started.elapsed().as_secs_f64(),
            "scanned source"
        );
        Ok(cat)
    }

    /// Adds the listing of `dir_id` (`path` in the log): its subdirectories and files, each
    /// sorted by name, and its samples with the naming rules of shared stems. Returns the new
    /// subdirectories' ids.
    fn add_listing(&mut self, dir_id: DirId, path: &Path, subdirs: Vec<std::ffi::OsString>, files: Vec<std::ffi::OsString>) -> std::ops::Range<DirId> {
        let first_dir = self.dirs.len() as u32;
        for name in subdirs {
            let name_ref = self.intern(&name);
            self.dirs.push(DirNode {
                name: name_ref,
                parent: dir_id,
                subdirs: (0, 0),
                files: (0, 0),
                images: (0, 0),
            });
        }
        let first_file = self.files.len() as u32;
        for name in files {
            let stem_len = image_stem_len(name.as_bytes());
            let name_ref = self.intern(&name);
            self.files.push(FileNode { name: name_ref, dir: dir_id, stem_len });
        }
        let last_file = self.files.len() as u32;
        let first_image = self.images_by_stem.len() as u32;
        let mut images: Vec<FileId> =
            (first_file..last_file).filter(|&f| self.files[f as usize].stem_len > 0).collect();
        images.sort_by(|&a, &b| self.stem(a).cmp(self.stem(b)));
        // The naming rule for stems shared within a directory (`dup.jpg` and `dup.png`):
        // each of them is served under its whole name (`dup.jpg.ppm`, `dup.png.ppm`), the
        // others under their stem (`x.ppm`). Stable: it depends only on the directory's names.
        let shared: Vec<FileId> = images
            .iter()
            .enumerate()
            .filter(|&(i, &f)| {
                let same = |j: usize| images.get(j).is_some_and(|&g| self.stem(g) == self.stem(f));
                same(i + 1) || (i > 0 && same(i - 1))
            })
            .map(|(_, &f)| f)
            .collect();
        if !shared.is_empty() {
            for &f in &shared {
                let node = &mut self.files[f as usize];
                node.stem_len = node.name.len;
            }
            images.sort_by(|&a, &b| self.stem(a).cmp(self.stem(b)));
            tracing::info!(dir = %prepfs_base::escape::escaped(path), files = shared.len(), "image files share a stem; each is served under its whole name (x.jpg.ppm, x.png.ppm)");
        }
        // What still collides (`a.jpg` + `a.png` beside `a.jpg.png`, served `a.jpg.ppm`
        // twice): the one whose own stem sorts first is served, the rest hidden from the
        // pixel views (counted in `stem_collisions`, logged).
        let before = images.len();
        images.dedup_by(|b, a| self.stem(*a) == self.stem(*b));
        if images.len() != before {
            tracing::warn!(
                dir = %prepfs_base::escape::escaped(path),
                hidden = before - images.len(),
                "image files would be served under one name; only the first is served decoded"
            );
            self.stem_collisions += before - images.len();
        }
        self.samples += images.len();
        self.images_by_stem.extend(images);
        let (last_dir, last_image) = (self.dirs.len() as u32, self.images_by_stem.len() as u32);
        let node = &mut self.dirs[dir_id as usize];
        node.subdirs = (first_dir, last_dir);
        node.files = (first_file, last_file);
        node.images = (first_image, last_image);
        first_dir..last_dir
    }

    /// A catalog of a tree given as lists rather than scanned (the classes of a set of
    /// WebDataset shards, `source::shards`): `root` holds one directory per class, each holding
    /// its files. Names are sorted here; each class's files must be distinct.
    pub(crate) fn of_classes(root: &Path, classes: Vec<(std::ffi::OsString, Vec<std::ffi::OsString>)>) -> Catalog {
        let mut cat = Catalog::empty(root);
        let mut classes = classes;
        classes.sort_by(|a, b| a.0.cmp(&b.0));
        let names: Vec<std::ffi::OsString> = classes.iter().map(|(n, _)| n.clone()).collect();
        let dirs = cat.add_listing(0, root, names, Vec::new());
        for (d, (name, mut files)) in dirs.zip(classes) {
            files.sort();
            cat.add_listing(d, &root.join(name), Vec::new(), files);
        }
        cat.sizes = (0..cat.files.len()).map(|_| AtomicU64::new(0)).collect();
        cat.names.shrink_to_fit();
        cat
    }

    /// A catalog of a tree given as its files' paths below `root` (an object store's keys,
    /// `source::s3`), laid out as [`Catalog::scan`] lays out a directory: breadth first, each
    /// directory's subdirectories and files sorted by name. Each path is its names, in order;
    /// the caller gives each path once and never a file where a directory is.
    pub(crate) fn of_paths(root: &Path, paths: &[Vec<&[u8]>]) -> Catalog {
        use std::collections::BTreeMap;
        use std::ffi::OsString;
        // Each directory (by its names from the root) and what it holds: its subdirectories'
        // names and its files'.
        type Holds<'a> = (std::collections::BTreeSet<&'a [u8]>, Vec<&'a [u8]>);
        let mut dirs: BTreeMap<Vec<&[u8]>, Holds> = BTreeMap::new();
        dirs.entry(Vec::new()).or_default();
        for path in paths {
            let Some((file, parents)) = path.split_last() else { continue };
            for depth in 0..parents.len() {
                dirs.entry(parents[..depth].to_vec()).or_default().0.insert(parents[depth]);
            }
            dirs.entry(parents.to_vec()).or_default().1.push(file);
        }
        let mut cat = Catalog::empty(root);
        let mut queue = VecDeque::from([(0 as DirId, Vec::<&[u8]>::new())]);
        while let Some((dir_id, names)) = queue.pop_front() {
            let Some((subdirs, mut files)) = dirs.remove(&names) else { continue };
            files.sort();
            let path = names.iter().fold(root.to_path_buf(), |p, n| p.join(std::ffi::OsStr::from_bytes(n)));
            let subdirs: Vec<&[u8]> = subdirs.into_iter().collect();
            let owned = |v: &[&[u8]]| v.iter().map(|n| OsString::from_vec(n.to_vec())).collect::<Vec<_>>();
            let new_dirs = cat.add_listing(dir_id, &path, owned(&subdirs), owned(&files));
            for (d, name) in new_dirs.zip(subdirs) {
                let mut below = names.clone();
                below.push(name);
                queue.push_back((d, below));
            }
        }
        cat.sizes = (0..cat.files.len()).map(|_| AtomicU64::new(0)).collect();
        cat.names.shrink_to_fit();
        cat
    }

    /// A catalog of `root` holding nothing yet.
    fn empty(root: &Path) -> Catalog {
        Catalog {
            root: root.to_path_buf(),
            names: Vec::new(),
            dirs: vec![DirNode {
                name: NameRef { offset: 0, len: 0 },
                parent: 0,
                subdirs: (0, 0),
                files: (0, 0),
                images: (0, 0),
            }],
            files: Vec::new(),
            images_by_stem: Vec::new(),
            sizes: Vec::new(),
            stem_collisions: 0,
            samples: 0,
        }
    }

    fn intern(&mut self, name: &OsStr) -> NameRef {
        let offset = self.names.len() as u32;
        self.names.extend_from_slice(name.as_bytes());
        NameRef { offset, len: name.len() as u32 }
    }

    fn name_bytes(&self, name: NameRef) -> &[u8] {
        &self.names[name.offset as usize..(name.offset + name.len) as usize]
    }

    /// The source root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Number of files (images and others).
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Number of samples (image files served in the pixel views).
    pub fn sample_count(&self) -> usize {
        self.samples
    }

    /// Number of directories, the root included.
    pub fn dir_count(&self) -> usize {
        self.dirs.len()
    }

    /// A directory's own name (empty for the root).
    pub fn dir_name(&self, dir: DirId) -> &OsStr {
        OsStr::from_bytes(self.name_bytes(self.dirs[dir as usize].name))
    }

    /// A directory's parent (the root is its own parent).
    pub fn dir_parent(&self, dir: DirId) -> DirId {
        self.dirs[dir as usize].parent
    }

    /// A file's name in the source.
    pub fn file_name(&self, file: FileId) -> &OsStr {
        OsStr::from_bytes(self.name_bytes(self.files[file as usize].name))
    }

    /// The stem of an image file's `decoded`/`augmented` name (which adds the output's
    /// extension): its name without extension, or its whole name when another image of its
    /// directory has the same stem (see the scan); empty for non-images.
    pub fn stem(&self, file: FileId) -> &[u8] {
        let node = &self.files[file as usize];
        &self.name_bytes(node.name)[..node.stem_len as usize]
    }

    /// Whether a file is a sample (an image by its extension).
    pub fn is_image(&self, file: FileId) -> bool {
        self.files[file as usize].stem_len > 0
    }

    /// The directory holding a file.
    pub fn file_dir(&self, file: FileId) -> DirId {
        self.files[file as usize].dir
    }

    /// The path of a file in the source.
    pub fn file_path(&self, file: FileId) -> PathBuf {
        let node = &self.files[file as usize];
        self.path_below(node.dir, Some(self.file_name(file)))
    }

    /// The path of a directory in the source.
    pub fn dir_path(&self, dir: DirId) -> PathBuf {
        self.path_below(dir, None)
    }

    /// The root, the names from it down to `dir`, and `leaf` if any, joined by `/` in one
    /// allocation (every open builds its sample's path): measured first, then filled from the
    /// end as the walk goes up from `dir`.
    fn path_below(&self, dir: DirId, leaf: Option<&OsStr>) -> PathBuf {
        let names = || {
            let mut d = dir;
            leaf.into_iter().chain(std::iter::from_fn(move || {
                (d != 0).then(|| {
                    let name = self.dir_name(d);
                    d = self.dir_parent(d);
                    name
                })
            }))
        };
        let root = self.root.as_os_str().as_bytes();
        // Each name with the `/` before it, but none after a root that ends in one ("/").
        let below: usize = names().map(|n| n.len() + 1).sum();
        let len = match below {
            0 => root.len(),
            _ if root.ends_with(b"/") => root.len() + below - 1,
            _ => root.len() + below,
        };
        let mut path = vec![0u8; len];
        path[..root.len()].copy_from_slice(root);
        let mut end = len;
        for name in names() {
            let name = name.as_bytes();
            path[end - name.len()..end].copy_from_slice(name);
            end -= name.len();
            if end > root.len() {
                end -= 1;
                path[end] = b'/';
            }
        }
        PathBuf::from(std::ffi::OsString::from_vec(path))
    }

    /// Finds a child of `dir` by its source name (the `encoded` view).
    pub fn lookup(&self, dir: DirId, name: &OsStr) -> Option<Entry> {
        let node = &self.dirs[dir as usize];
        let name = name.as_bytes();
        let subdirs = node.subdirs.0..node.subdirs.1;
        if let Some(d) = binary_find(subdirs, |d| self.name_bytes(self.dirs[d as usize].name).cmp(name)) {
            return Some(Entry::Dir(d));
        }
        let files = node.files.0..node.files.1;
        binary_find(files, |f| self.name_bytes(self.files[f as usize].name).cmp(name)).map(Entry::File)
    }

    /// Finds a child of `dir` by its name in a pixel view: a subdirectory, or an image whose
    /// stem plus `.ext` is `name`.
    pub fn lookup_image(&self, dir: DirId, name: &OsStr, ext: &str) -> Option<Entry> {
        let node = &self.dirs[dir as usize];
        let bytes = name.as_bytes();
        let subdirs = node.subdirs.0..node.subdirs.1;
        if let Some(d) = binary_find(subdirs, |d| self.name_bytes(self.dirs[d as usize].name).cmp(bytes)) {
            return Some(Entry::Dir(d));
        }
        let stem = bytes.strip_suffix(ext.as_bytes())?.strip_suffix(b".")?;
        let images = node.images.0..node.images.1;
        binary_find(images, |i| self.stem(self.images_by_stem[i as usize]).cmp(stem))
            .map(|i| Entry::File(self.images_by_stem[i as usize]))
    }

    /// Subdirectories of `dir`, in name order.
    pub fn subdirs(&self, dir: DirId) -> std::ops::Range<DirId> {
        let node = &self.dirs[dir as usize];
        node.subdirs.0..node.subdirs.1
    }

    /// All files of `dir`, in name order.
    pub fn files(&self, dir: DirId) -> std::ops::Range<FileId> {
        let node = &self.dirs[dir as usize];
        node.files.0..node.files.1
    }

    /// The samples of `dir` served in pixel views, in stem order.
    pub fn images(&self, dir: DirId) -> &[FileId] {
        let node = &self.dirs[dir as usize];
        &self.images_by_stem[node.images.0 as usize..node.images.1 as usize]
    }

    /// The probed pixel size of an image, if probed; `Some(Err)` if probing failed.
    pub fn known_size(&self, file: FileId) -> Option<Result<Size2, ()>> {
        match self.sizes[file as usize].load(Ordering::Relaxed) {
            0 => None,
            PROBE_FAILED => Some(Err(())),
            v => Some(Ok(Size2::new((v >> 32) as u32, v as u32))),
        }
    }

    /// Remembers an image's probed size (or that probing failed).
    pub fn remember_size(&self, file: FileId, size: Result<Size2, ()>) {
        let v = match size {
            Ok(s) if s.width > 0 && s.height > 0 => u64::from(s.width) << 32 | u64::from(s.height),
            _ => PROBE_FAILED,
        };
        self.sizes[file as usize].store(v, Ordering::Relaxed);
    }

    /// Forgets an image's probed size (the file changed): the next need probes it again.
    pub fn forget_size(&self, file: FileId) {
        self.sizes[file as usize].store(0, Ordering::Relaxed);
    }

    /// Bytes of catalog memory per sample, names included.
    pub fn bytes_per_sample(&self) -> f64 {
        let bytes = self.names.capacity()
            + self.dirs.capacity() * std::mem::size_of::<DirNode>()
            + self.files.capacity() * std::mem::size_of::<FileNode>()
            + self.images_by_stem.capacity() * std::mem::size_of::<FileId>()
            + self.sizes.capacity() * std::mem::size_of::<AtomicU64>();
        bytes as f64 / self.samples.max(1) as f64
    }
}

/// The stem length of an image file name, 0 when the name has no image extension.
fn image_stem_len(name: &[u8]) -> u32 {
    let Some(dot) = name.iter().rposition(|&b| b == b'.') else { return 0 };
    if dot == 0 {
        return 0;
    }
    let ext = &name[dot + 1..];
    if IMAGE_EXTENSIONS.iter().any(|e| e.as_bytes().eq_ignore_ascii_case(ext)) {
        dot as u32
    } else {
        0
    }
}

fn binary_find(range: std::ops::Range<u32>, cmp: impl Fn(u32) -> std::cmp::Ordering) -> Option<u32> {
    let (mut lo, mut hi) = (range.start, range.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match cmp(mid) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Some(mid),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for (path, body) in [
            ("b/x2.jpg", "x"),
            ("b/x1.JPEG", "x"),
            ("b/notes.txt", "n"),
            ("a/deep/er/y.png", "y"),
            ("a/z.jpg", "z"),
            ("a/z.png", "z"),
            ("top.jpg", "t"),
        ] {
            let p = root.join(path);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(p, body).expect("write");
        }
        dir
    }

    #[test]
    fn a_tree_given_as_paths_is_laid_out_as_the_scan_of_the_same_tree() {
        let dir = tree();
        let scanned = Catalog::scan(dir.path(), |_| {}).expect("scan");
        let rels = ["b/x2.jpg", "b/x1.JPEG", "b/notes.txt", "a/deep/er/y.png", "a/z.jpg", "a/z.png", "top.jpg"];
        let paths: Vec<Vec<&[u8]>> = rels.iter().map(|r| r.split('/').map(str::as_bytes).collect()).collect();
        let given = Catalog::of_paths(dir.path(), &paths);
        assert_eq!((given.file_count(), given.sample_count(), given.dir_count()), (scanned.file_count(), scanned.sample_count(), scanned.dir_count()));
        for f in 0..scanned.file_count() as FileId {
            assert_eq!(given.file_path(f), scanned.file_path(f), "file {f}");
            assert_eq!((given.stem(f), given.is_image(f)), (scanned.stem(f), scanned.is_image(f)), "file {f}");
        }
        for d in 0..scanned.dir_count() as DirId {
            assert_eq!(given.dir_path(d), scanned.dir_path(d), "dir {d}");
            assert_eq!((given.files(d), given.subdirs(d), given.images(d)), (scanned.files(d), scanned.subdirs(d), scanned.images(d)), "dir {d}");
        }
    }

    #[test]
    fn scans_the_tree_in_name_order() {
        let dir = tree();
        let cat = Catalog::scan(dir.path(), |_| {}).expect("scan");
        assert_eq!(cat.file_count(), 7);
        assert_eq!(cat.sample_count(), 6); // z.jpg and z.png both served; notes.txt not a sample
        assert_eq!(cat.stem_collisions, 0);
        let names: Vec<_> = cat.subdirs(0).map(|d| cat.dir_name(d).to_owned()).collect();
        assert_eq!(names, ["a", "b"]);
        let Some(Entry::Dir(b)) = cat.lookup(0, OsStr::new("b")) else { panic!("b") };
        let files: Vec<_> = cat.files(b).map(|f| cat.file_name(f).to_owned()).collect();
        assert_eq!(files, ["notes.txt", "x1.JPEG", "x2.jpg"]);
        let images: Vec<_> = cat.images(b).iter().map(|&f| cat.file_name(f).to_owned()).collect();
        assert_eq!(images, ["x1.JPEG", "x2.jpg"]);
    }

    #[test]
    fn every_path_names_its_file_or_directory_under_the_root() {
        let dir = tree();
        let cat = Catalog::scan(dir.path(), |_| {}).expect("scan");
        assert_eq!(cat.dir_path(0), dir.path());
        let mut seen = Vec::new();
        for f in 0..cat.file_count() as FileId {
            let path = cat.file_path(f);
            assert!(path.is_file(), "{path:?}");
            assert_eq!(path.parent(), Some(cat.dir_path(cat.file_dir(f)).as_path()));
            let text = path.to_str().expect("utf-8");
            assert!(!text.contains("//") && !text.contains('\0'), "{text:?}");
            seen.push(path.strip_prefix(dir.path()).expect("under the root").to_owned());
        }
        assert!(seen.iter().any(|p| p == Path::new("a/deep/er/y.png")), "{seen:?}");
        // A root that ends in a separator is not doubled.
        let mut cat = cat;
        let want = cat.file_path(0);
        cat.root = PathBuf::from(format!("{}/", dir.path().display()));
        assert_eq!(cat.file_path(0), want);
        cat.root = PathBuf::from("/");
        let deep = seen.iter().position(|p| p == Path::new("a/deep/er/y.png")).expect("deep") as FileId;
        assert_eq!(cat.file_path(deep), Path::new("/a/deep/er/y.png"));
        assert_eq!(cat.file_path(0), Path::new("/").join(&seen[0]));
    }

    #[test]
    fn looks_up_source_names_and_output_names() {
        let dir = tree();
        let cat = Catalog::scan(dir.path(), |_| {}).expect("scan");
        let Some(Entry::Dir(a)) = cat.lookup(0, OsStr::new("a")) else { panic!("a") };
        let Some(Entry::Dir(deep)) = cat.lookup(a, OsStr::new("deep")) else { panic!("deep") };
        let Some(Entry::Dir(er)) = cat.lookup_image(deep, OsStr::new("er"), "ppm") else { panic!("er") };
        let Some(Entry::File(y)) = cat.lookup_image(er, OsStr::new("y.ppm"), "ppm") else { panic!("y") };
        assert_eq!(cat.file_path(y), dir.path().join("a/deep/er/y.png"));
        assert_eq!(cat.lookup_image(er, OsStr::new("y.png"), "ppm"), None);
        assert_eq!(cat.lookup_image(er, OsStr::new("y.npy"), "ppm"), None);
        // z.jpg and z.png share a stem: each is served under its whole name.
        assert_eq!(cat.lookup_image(a, OsStr::new("z.ppm"), "ppm"), None);
        let Some(Entry::File(z)) = cat.lookup_image(a, OsStr::new("z.jpg.ppm"), "ppm") else { panic!("z.jpg") };
        assert_eq!(cat.file_name(z), "z.jpg");
        let Some(Entry::File(z)) = cat.lookup_image(a, OsStr::new("z.png.ppm"), "ppm") else { panic!("z.png") };
        assert_eq!(cat.file_name(z), "z.png");
        assert!(cat.lookup(0, OsStr::new("nope")).is_none());
        assert!(cat.lookup(0, OsStr::new("top.jpg")).is_some());
    }

    #[test]
    fn a_name_the_shared_stem_rule_makes_twice_serves_one_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["a.jpg", "a.png", "a.jpg.png", "b.jpg"] {
            fs::write(dir.path().join(name), b"x").expect("write");
        }
        let cat = Catalog::scan(dir.path(), |_| {}).expect("scan");
        let served: Vec<_> = cat.images(0).iter().map(|&f| (String::from_utf8_lossy(cat.stem(f)).into_owned(), cat.file_name(f).to_owned())).collect();
        assert_eq!(served, [("a.jpg".into(), "a.jpg".into()), ("a.png".into(), "a.png".into()), ("b".into(), "b.jpg".into())]);
        assert_eq!(cat.stem_collisions, 1);
    }

    #[test]
    fn remembers_probed_sizes() {
        let dir = tree();
        let cat = Catalog::scan(dir.path(), |_| {}).expect("scan");
        assert_eq!(cat.known_size(0), None);
        cat.remember_size(0, Ok(Size2::new(500, 375)));
        assert_eq!(cat.known_size(0), Some(Ok(Size2::new(500, 375))));
        cat.remember_size(1, Err(()));
        assert_eq!(cat.known_size(1), Some(Err(())));
    }

    #[test]
    fn symlinks_are_followed_only_inside_the_source_and_cycles_are_listed_once() {
        let dir = tree();
        let root = dir.path();
        let outside = tempfile::tempdir().expect("tempdir");
        fs::write(outside.path().join("secret.jpg"), "s").expect("write");
        std::os::unix::fs::symlink(outside.path().join("secret.jpg"), root.join("b/leak.jpg")).expect("link");
        std::os::unix::fs::symlink(outside.path(), root.join("b/outdir")).expect("link");
        std::os::unix::fs::symlink("/etc/shadow", root.join("shadow.jpg")).expect("link");
        std::os::unix::fs::symlink("../../b/x2.jpg", root.join("a/deep/alias.jpg")).expect("link");
        // Two directory links back up the tree: without cycle detection the scan never ends.
        std::os::unix::fs::symlink("..", root.join("a/deep/up")).expect("link");
        std::os::unix::fs::symlink("../..", root.join("a/deep/er/upup")).expect("link");
        let cat = Catalog::scan(root, |_| {}).expect("scan");
        let names: Vec<String> = (0..cat.file_count() as u32).map(|f| cat.file_name(f).to_string_lossy().into_owned()).collect();
        assert!(!names.iter().any(|n| n == "leak.jpg" || n == "shadow.jpg"), "{names:?}");
        assert!(cat.lookup(cat.lookup(0, OsStr::new("b")).map(|e| match e { Entry::Dir(d) => d, _ => 0 }).expect("b"), OsStr::new("outdir")).is_none());
        assert!(names.iter().any(|n| n == "y.png"));
        assert!(names.iter().any(|n| n == "alias.jpg"), "a link inside the source is followed: {names:?}");
        // Each real directory is listed once, whatever points at it: the 7 files and the alias.
        assert_eq!(cat.file_count(), 8, "{names:?}");
    }

    #[test]
    fn a_scan_asked_to_stop_stops() {
        let dir = tree();
        let stop = AtomicBool::new(true);
        let err = Catalog::scan_until(dir.path(), |_| {}, &stop).expect_err("stopped");
        assert_eq!(err.kind(), std::io::ErrorKind::Interrupted);
    }

    #[test]
    fn image_extensions_are_case_insensitive() {
        assert_eq!(image_stem_len(b"n01_0001.JPEG"), 8);
        assert_eq!(image_stem_len(b"a.b.png"), 3);
        assert_eq!(image_stem_len(b"README.txt"), 0);
        assert_eq!(image_stem_len(b".jpg"), 0);
        assert_eq!(image_stem_len(b"noext"), 0);
    }
}
