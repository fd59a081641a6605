//! The shards as a [`SourceIo`]: the tree `<root>/<class>/<name>` their index describes, each
//! sample's bytes one ranged read of its shard. It sits on another `SourceIo` that reads the
//! shard files themselves (the local directory of the shards, or an object store's objects,
//! each read a ranged GET), so what a source's checks refuse (a FIFO, a link out of it) stays
//! refused.
//!
//! A sample shows its shard's owner, mode and times (its size is its own): nothing a shard's
//! permissions deny is served from it. Class directories show the shards' directory's. A shard
//! that changed since it was indexed (size, mtime, ctime or inode) serves nothing until a remount
//! indexes it again: never a sample at an offset of another version.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::index::Stamp;
use crate::{FileMeta, SourceFile, SourceIo, Space};

/// One shard file, as indexed.
pub struct Shard {
    pub path: PathBuf,
    pub stamp: Stamp,
}

/// A sample's place: its name in `names`, its shard, its bytes there.
#[derive(Debug, Clone, Copy)]
struct Member {
    name: (u32, u32),
    shard: u32,
    offset: u64,
    len: u64,
}

/// A class directory: its name in `names`, its members' range.
struct Class {
    name: (u32, u32),
    members: (u32, u32),
}

/// A sample as it is given to [`ShardSource::new`]: its served name, shard, offset, length.
pub(crate) type Placed = (Vec<u8>, u32, u64, u64);

/// The shards' tree: see the module documentation.
pub(crate) struct ShardSource {
    inner: Arc<dyn SourceIo>,
    root: PathBuf,
    shards: Vec<Shard>,
    classes: Vec<Class>,
    members: Vec<Member>,
    names: Vec<u8>,
}

enum Node {
    Root,
    Class,
    Member(Member),
}

impl ShardSource {
    /// The tree at `root` of `classes` (each its name and its samples, names distinct within a
    /// class), the shards read through `inner`.
    pub fn new(inner: Arc<dyn SourceIo>, root: &Path, shards: Vec<Shard>, mut classes: Vec<(Vec<u8>, Vec<Placed>)>) -> ShardSource {
        let mut names = Vec::new();
        let mut intern = |n: &[u8]| {
            let at = names.len() as u32;
            names.extend_from_slice(n);
            (at, n.len() as u32)
        };
        classes.sort_by(|a, b| a.0.cmp(&b.0));
        let (mut out_classes, mut members) = (Vec::with_capacity(classes.len()), Vec::new());
        for (class, mut placed) in classes {
            placed.sort_by(|a, b| a.0.cmp(&b.0));
            let first = members.len() as u32;
            for (name, shard, offset, len) in placed {
                members.push(Member { name: intern(&name), shard, offset, len });
            }
            out_classes.push(Class { name: intern(&class), members: (first, members.len() as u32) });
        }
        names.shrink_to_fit();
        ShardSource { inner, root: root.to_path_buf(), shards, classes: out_classes, members, names }
    }

    fn name(&self, (at, len): (u32, u32)) -> &[u8] {
        &self.names[at as usize..(at + len) as usize]
    }

    /// Bytes of memory the tree takes per sample, names included.
    pub fn bytes_per_sample(&self) -> f64 {
        let bytes = self.names.capacity() + self.members.capacity() * std::mem::size_of::<Member>() + self.classes.capacity() * std::mem::size_of::<Class>();
        bytes as f64 / self.members.len().max(1) as f64
    }

    fn find(&self, path: &Path) -> io::Result<Node> {
        let missing = || io::Error::from(io::ErrorKind::NotFound);
        let rel = path.strip_prefix(&self.root).map_err(|_| missing())?;
        let mut parts = rel.iter();
        let Some(class) = parts.next() else { return Ok(Node::Root) };
        let c = self.classes.binary_search_by(|c| self.name(c.name).cmp(class.as_bytes())).map_err(|_| missing())?;
        let Some(file) = parts.next() else { return Ok(Node::Class) };
        if parts.next().is_some() {
            return Err(missing());
        }
        let (first, last) = self.classes[c].members;
        let range = &self.members[first as usize..last as usize];
        let i = range.binary_search_by(|m| self.name(m.name).cmp(OsStr::as_bytes(file))).map_err(|_| missing())?;
        Ok(Node::Member(range[i]))
    }

    /// A member's metadata from its shard's: its own size, checked against the version indexed.
    fn member_meta(&self, member: &Member, shard_meta: &FileMeta) -> io::Result<FileMeta> {
        let shard = &self.shards[member.shard as usize];
        if Stamp::of(shard_meta) != shard.stamp {
            return Err(io::Error::other(format!(
                "shard {} changed since it was indexed (size, mtime, ctime or inode); remount to index it again",
                prepfs_base::escape::escaped(&shard.path)
            )));
        }
        let mut meta = *shard_meta;
        meta.identity.len = member.len;
        meta.is_dir = false;
        Ok(meta)
    }
}

impl SourceIo for ShardSource {
    fn space(&self) -> io::Result<Space> {
        self.inner.space()
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        match self.find(path)? {
            Node::Root | Node::Class => self.inner.metadata(&self.root),
            Node::Member(m) => {
                let shard_meta = self.inner.metadata(&self.shards[m.shard as usize].path)?;
                self.member_meta(&m, &shard_meta)
            }
        }
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SourceFile>> {
        match self.find(path)? {
            Node::Root | Node::Class => Err(io::Error::new(io::ErrorKind::InvalidInput, "a directory; not read")),
            Node::Member(m) => {
                let file = self.inner.open(&self.shards[m.shard as usize].path)?;
                let meta = self.member_meta(&m, file.meta())?;
                Ok(Box::new(MemberFile { file, meta, offset: m.offset }))
            }
        }
    }
}

/// A sample's bytes: a window of its open shard.
struct MemberFile {
    file: Box<dyn SourceFile>,
    meta: FileMeta,
    offset: u64,
}

impl SourceFile for MemberFile {
    fn meta(&self) -> &FileMeta {
        &self.meta
    }

    /// One read of the shard, within the member (0 at its end, without a call).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let left = self.meta.len().saturating_sub(offset);
        let n = (buf.len() as u64).min(left) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.file.read_at(&mut buf[..n], self.offset + offset)
    }

    // `as_file` stays `None`: the kernel must not pass reads through to the whole shard.
}
