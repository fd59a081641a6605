//! The listed objects as a [`SourceIo`]: the tree `<url>/<key below the prefix>`, each file's
//! metadata from the listing (no request: an open's `stat` runs on a FUSE thread), each read
//! one ranged GET of the version listed (`If-Match` its ETag), on the calling I/O thread,
//! blocking on the client's runtime; many I/O threads read at once.
//!
//! Every file shows what the local source shows for a readable file of the mounting user: its
//! uid and gid, mode 0644 (directories 0755), the object's size and last-modified time. An
//! object's identity is its ETag, size and last-modified time: an object changed since it was
//! listed (the GET's `If-Match` fails) is looked up again (HEAD), its new version recorded, and
//! the read that found it fails with `ESTALE`'s kind (EIO), which a whole read answers by
//! opening the new version (`Source`'s `read_current`); the next open sees the new version, as
//! a replaced local file is seen, and what was made of the old one is dropped. An object is
//! asked about only when read (a request per open would cost what the cache saves), so forms
//! cached from an old version are served until a read from the store finds the change; that
//! change also removes the kept listing (`kept`), so the next mount lists the store again. A request
//! that fails after its retries is a clear `EIO`, and one log line.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::{GetOptions, GetRange, ObjectMeta};

use super::client::Client;
use crate::{FileMeta, Identity, SourceFile, SourceIo, Space};
use prepfs_base::sync::{RwLock, RwLockExt};

/// One object as listed (or as looked up again after it changed), kept small: a listing of
/// 10M keys holds 10M of them. Its key is the prefix's `strip` and `rel`; a plain MD5 ETag is
/// kept as its 16 bytes.
#[derive(Debug, Clone)]
pub struct Object {
    /// Its key below the prefix (`<class>/<file>`).
    pub(super) rel: Box<str>,
    pub(super) size: u64,
    etag: Etag,
    /// Its last-modified time, in ns since the epoch.
    pub(super) modified_ns: i64,
    /// Gone from the store since it was listed.
    gone: bool,
}

/// An ETag as the store wrote it, the common form (`"` 32 lowercase hex digits `"`, a
/// single-part upload's MD5) packed into its 16 bytes, any other kept as written.
#[derive(Debug, Clone, PartialEq)]
enum Etag {
    None,
    Md5([u8; 16]),
    Other(Box<str>),
}

impl Etag {
    fn of(etag: Option<&str>) -> Etag {
        let Some(etag) = etag else { return Etag::None };
        let hex = etag.strip_prefix('"').and_then(|e| e.strip_suffix('"')).filter(|h| h.len() == 32);
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let packed = hex.and_then(|h| {
            let mut md5 = [0u8; 16];
            for (byte, pair) in md5.iter_mut().zip(h.as_bytes().chunks_exact(2)) {
                *byte = digit(pair[0])? << 4 | digit(pair[1])?;
            }
            Some(md5)
        });
        packed.map_or_else(|| Etag::Other(etag.into()), Etag::Md5)
    }

    /// `f` of the ETag as the store wrote it (`None`: no ETag), a packed one written out on the
    /// stack: no allocation on a `stat`.
    fn with_text<R>(&self, f: impl FnOnce(Option<&str>) -> R) -> R {
        match self {
            Etag::None => f(None),
            Etag::Md5(md5) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut text = [b'"'; 34];
                for (i, b) in md5.iter().enumerate() {
                    text[1 + 2 * i] = HEX[usize::from(b >> 4)];
                    text[2 + 2 * i] = HEX[usize::from(b & 15)];
                }
                f(std::str::from_utf8(&text).ok())
            }
            Etag::Other(text) => f(Some(text)),
        }
    }
}

impl Object {
    pub(super) fn of(rel: &str, meta: &ObjectMeta) -> Object {
        let modified_ns = meta.last_modified.timestamp_nanos_opt().unwrap_or(0);
        Object::kept(rel, meta.size, meta.e_tag.as_deref(), modified_ns)
    }

    /// An object as a kept listing recorded it.
    pub(super) fn kept(rel: &str, size: u64, etag: Option<&str>, modified_ns: i64) -> Object {
        Object { rel: rel.into(), size, etag: Etag::of(etag), modified_ns, gone: false }
    }

    /// Its ETag as the store wrote it.
    pub(super) fn etag(&self) -> Option<String> {
        self.etag.with_text(|text| text.map(str::to_string))
    }

    /// Its key in the store, below the prefix's `strip` (the prefix and its `/`).
    pub(super) fn location(&self, strip: &str) -> io::Result<object_store::path::Path> {
        object_store::path::Path::parse(format!("{strip}{}", self.rel)).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{strip}{}: {e}", self.rel)))
    }
}

/// The objects' tree: see the module documentation.
pub(crate) struct S3Source {
    shared: Arc<Shared>,
}

/// What the tree and its open files share.
struct Shared {
    client: Client,
    root: PathBuf,
    url: String,
    /// The prefix and its `/` (`""` for none): an object's key is this and its `rel`.
    strip: String,
    /// Sorted by `rel`; an entry changes only when its object is found changed.
    objects: RwLock<Vec<Object>>,
    /// Directories (their key below the prefix, `""` the root), sorted.
    dirs: Vec<String>,
    /// The mounting user's, shown on every file.
    uid: u32,
    gid: u32,
    /// Tells this store's identities from another's.
    dev: u64,
    listed_at: SystemTime,
    /// The kept listing this tree was served from or written to: removed once an object is
    /// found changed, so that the next mount lists the store again rather than trust it.
    kept_file: Option<PathBuf>,
}

/// Mode bits of every file and directory: a readable file of its owner's (write bits are
/// cleared by the tree, as for any source).
const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;

impl S3Source {
    /// The tree at `root` of `objects` (sorted by key, each once, as listed at `listed_at`)
    /// read through `client`.
    pub(super) fn new(client: Client, root: &Path, url: &str, strip: &str, objects: Vec<Object>, listed_at: SystemTime, kept_file: Option<PathBuf>) -> S3Source {
        let mut dirs: Vec<String> = objects.iter().flat_map(|o| super::parents(&o.rel).map(str::to_string)).collect();
        dirs.push(String::new());
        dirs.sort();
        dirs.dedup();
        let shared = Shared {
            client,
            root: root.to_path_buf(),
            url: url.to_string(),
            strip: strip.to_string(),
            objects: RwLock::new(objects),
            dirs,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            dev: prepfs_base::hash::fnv1a64(&[url.as_bytes()]),
            listed_at,
            kept_file,
        };
        S3Source { shared: Arc::new(shared) }
    }

    pub(super) fn root(&self) -> &Path {
        &self.shared.root
    }

    /// The names of the objects directly below the root (no `/` in their key below the prefix).
    pub(super) fn names_at_root(&self) -> Vec<String> {
        self.shared.objects.read_or_recover().iter().filter(|o| !o.gone && !o.rel.contains('/')).map(|o| o.rel.to_string()).collect()
    }
}

impl Shared {
    /// `path`'s key below the prefix (`""`: the root), if it lies in the tree.
    fn rel<'a>(&self, path: &'a Path) -> io::Result<&'a str> {
        let rel = path.strip_prefix(&self.root).map_err(|_| io::Error::from(io::ErrorKind::NotFound))?;
        std::str::from_utf8(rel.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::NotFound))
    }

    /// The object at `rel`, as last known.
    fn object(&self, rel: &str) -> Option<(usize, Object)> {
        let objects = self.objects.read_or_recover();
        let at = objects.binary_search_by(|o| o.rel.as_ref().cmp(rel)).ok()?;
        Some((at, objects[at].clone()))
    }

    fn file_meta(&self, o: &Object) -> FileMeta {
        // The object's version and key: its ETag as written, the prefix and its name.
        let ino = o.etag.with_text(|etag| prepfs_base::hash::fnv1a64(&[etag.unwrap_or("").as_bytes(), self.strip.as_bytes(), o.rel.as_bytes()]));
        let mtime = system_time(o.modified_ns);
        let ns = i128::from(o.modified_ns);
        FileMeta {
            identity: Identity { dev: self.dev, ino, len: o.size, mtime_ns: ns, ctime_ns: ns },
            uid: self.uid,
            gid: self.gid,
            mode: FILE_MODE,
            is_dir: false,
            mtime,
        }
    }

    fn dir_meta(&self) -> FileMeta {
        let ns = self.listed_at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i128);
        FileMeta {
            identity: Identity { dev: self.dev, ino: 0, len: 0, mtime_ns: ns, ctime_ns: ns },
            uid: self.uid,
            gid: self.gid,
            mode: DIR_MODE,
            is_dir: true,
            mtime: self.listed_at,
        }
    }

    /// Reads `range` of the version of `object` listed: one GET. An object changed since is
    /// looked up again and recorded ([`S3Source::changed`]); the read fails.
    fn get(&self, at: usize, object: &Object, range: std::ops::Range<u64>) -> io::Result<impl std::ops::Deref<Target = [u8]>> {
        let options = GetOptions { if_match: object.etag(), range: Some(GetRange::Bounded(range)), ..GetOptions::default() };
        let location = object.location(&self.strip)?;
        let store = &self.client.store;
        let got = self.client.block_on(async move {
            let result = object_store::ObjectStore::get_opts(store, &location, options).await?;
            result.bytes().await
        })?;
        match got {
            Ok(bytes) => Ok(bytes),
            Err(object_store::Error::Precondition { .. }) => Err(self.changed(at, object)),
            Err(e) => {
                let err = store_error(&self.client, &self.url, &object.rel, &e);
                if err.kind() == io::ErrorKind::NotFound {
                    // Deleted since it was listed: gone from the tree from now on.
                    if let Some(entry) = self.objects.write_or_recover().get_mut(at).filter(|o| o.rel == object.rel) {
                        entry.gone = true;
                    }
                } else {
                    prepfs_base::warn_limited!("s3", "object store read failed: {err}");
                }
                Err(err)
            }
        }
    }

    /// Records the version of `object` the store holds now (a HEAD; gone if it is gone), and
    /// gives the error of the read that found it changed.
    fn changed(&self, at: usize, object: &Object) -> io::Error {
        let store = &self.client.store;
        let location = object.location(&self.strip);
        let now = match &location {
            Ok(location) => self.client.block_on(async move { object_store::ObjectStore::head(store, location).await }),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        };
        let mut objects = self.objects.write_or_recover();
        if let Some(entry) = objects.get_mut(at).filter(|o| o.rel == object.rel) {
            match now {
                Ok(Ok(meta)) => *entry = Object::of(&object.rel, &meta),
                Ok(Err(object_store::Error::NotFound { .. })) => entry.gone = true,
                // Not known now: the next read tries the listed version again.
                _ => {}
            }
        }
        tracing::info!(object = %format!("{}/{}", self.url, object.rel), "object changed since it was listed; the next open reads the new version");
        if let Some(file) = &self.kept_file {
            // The kept listing is out of date: the next mount lists the store again.
            let _ = std::fs::remove_file(file);
        }
        io::Error::new(
            io::ErrorKind::StaleNetworkFileHandle,
            format!("{}/{}: changed since it was listed (its ETag); the next open reads the new version", self.url, object.rel),
        )
    }
}

/// An `object_store` error of `client`'s as the source's `io::Error`, naming the object
/// (escaped): not found is `NotFound` (ENOENT), refused credentials `PermissionDenied`
/// (EACCES), anything else (a server down or failing past the retries) `Other` (EIO). A
/// password in the endpoint is not in it.
pub(super) fn store_error(client: &Client, url: &str, rel: &str, e: &object_store::Error) -> io::Error {
    use object_store::Error;
    let retried = client.retry_timeout;
    let rel = prepfs_base::escape::escaped(rel).to_string();
    let name = if rel.is_empty() { url.to_string() } else { format!("{url}/{rel}") };
    let kind = match e {
        Error::NotFound { .. } => io::ErrorKind::NotFound,
        Error::PermissionDenied { .. } | Error::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    let after = if kind == io::ErrorKind::Other { format!(" (retried for up to {:.1} s)", retried.as_secs_f64()) } else { String::new() };
    io::Error::new(kind, client.scrub(&format!("{name}: {e}{after}")))
}

fn system_time(ns: i64) -> SystemTime {
    let nanos = u64::try_from(ns.max(0)).unwrap_or(u64::MAX);
    std::time::UNIX_EPOCH + Duration::from_nanos(nanos)
}

impl SourceIo for S3Source {
    fn space(&self) -> io::Result<Space> {
        self.shared.space()
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        self.shared.metadata(path)
    }

    /// The object as listed; no request until it is read.
    fn open(&self, path: &Path) -> io::Result<Box<dyn SourceFile>> {
        let shared = &self.shared;
        let rel = shared.rel(path)?;
        match shared.object(rel) {
            Some((at, o)) if !o.gone => {
                let meta = shared.file_meta(&o);
                Ok(Box::new(ObjectFile { shared: Arc::clone(shared), at, object: o, meta }))
            }
            Some(_) => Err(io::Error::new(io::ErrorKind::NotFound, format!("{}/{rel}: gone from the object store", shared.url))),
            None if shared.is_dir(rel) => Err(io::Error::new(io::ErrorKind::InvalidInput, "a directory; not read")),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }
}

impl Shared {
    fn is_dir(&self, rel: &str) -> bool {
        self.dirs.binary_search_by(|d| d.as_str().cmp(rel)).is_ok()
    }

    /// The listed bytes as the file system's size: nothing free (the mount is read-only).
    fn space(&self) -> io::Result<Space> {
        let objects = self.objects.read_or_recover();
        let bytes: u64 = objects.iter().map(|o| o.size).sum();
        const BLOCK: u64 = 4096;
        Ok(Space {
            blocks: bytes.div_ceil(BLOCK),
            files: objects.len() as u64,
            block_size: BLOCK as u32,
            fragment_size: BLOCK as u32,
            name_max: super::NAME_MAX as u32,
            ..Space::default()
        })
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        let rel = self.rel(path)?;
        match self.object(rel) {
            Some((_, o)) if !o.gone => Ok(self.file_meta(&o)),
            Some(_) => Err(io::Error::new(io::ErrorKind::NotFound, format!("{}/{rel}: gone from the object store", self.url))),
            None if self.is_dir(rel) => Ok(self.dir_meta()),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }
}

/// An open object: the version listed when it was opened, read by ranged GETs.
struct ObjectFile {
    shared: Arc<Shared>,
    /// Its place in the listing.
    at: usize,
    object: Object,
    meta: FileMeta,
}

impl SourceFile for ObjectFile {
    fn meta(&self) -> &FileMeta {
        &self.meta
    }

    /// One GET of the bytes asked for (0 at the end, without a request: the version read is
    /// the one opened, whose size is known). A whole sample is one read, so one GET.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let end = self.object.size.min(offset.saturating_add(buf.len() as u64));
        if offset >= end {
            return Ok(0);
        }
        let bytes = self.shared.get(self.at, &self.object, offset..end)?;
        let n = bytes.len().min(buf.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        Ok(n)
    }

    // `as_file` stays `None`: there is no local file for the kernel to read.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_is_given_back_as_the_store_wrote_it_and_a_plain_md5_one_is_kept_in_16_bytes() {
        for written in ["\"0123456789abcdef0fedcba987654321\"", "\"0123456789ABCDEF0FEDCBA987654321\"", "\"d41d8cd98f00b204e9800998ecf8427e-3\"", "W/\"x\"", "\"\"", "0123456789abcdef0fedcba987654321"] {
            let o = Object::kept("c/a.jpg", 1, Some(written), 5);
            assert_eq!(o.etag().as_deref(), Some(written));
            assert_eq!(matches!(o.etag, Etag::Md5(_)), written == "\"0123456789abcdef0fedcba987654321\"", "{written}");
        }
        assert_eq!(Object::kept("c/a.jpg", 1, None, 5).etag(), None);
        assert!(std::mem::size_of::<Object>() <= 64, "{}", std::mem::size_of::<Object>());
    }

    #[test]
    fn an_objects_key_is_the_prefix_and_its_name() {
        let o = Object::kept("c/a b.jpg", 1, None, 5);
        assert_eq!(o.location("data/set/").expect("key").as_ref(), "data/set/c/a b.jpg");
        assert_eq!(o.location("").expect("key").as_ref(), "c/a b.jpg");
    }
}
