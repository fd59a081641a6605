//! The tree the kernel walks: what a node reports ([`Attr`]: owners and modes shown from the
//! source, write bits cleared, or the `--uid`/`--gid` owner: `fs::access`), lookup, getattr, and directory listings (opendir snapshots one,
//! readdir pages through it, releasedir drops it). A listing holds a view's files as catalog ids
//! ([`Listing`]: 4 bytes an entry) and names each from the catalog as readdir sends it, so a
//! directory of a million files costs no allocation per entry at opendir or readdir.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::SystemTime;

use super::access;
use super::jobs;
use super::handles::HandleData;
use super::inodes::{JOBS_DIR_INO, ROOT_INO};
use super::{Caller, Filesystem, Node, View};
use crate::error::{Error, Result};
use prepfs_pixels::{output, pipeline};
use prepfs_pixels::rgb::Size2;
use prepfs_cache::form::Form;
use prepfs_source::catalog::{DirId, Entry, FileId};
use prepfs_source::FileMeta;

/// Directory or regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// The attributes the core reports for a node. Owner and mode are the source's (write bits
/// cleared) for everything made of the source, so the kernel (`default_permissions`) refuses
/// through the mount what the source refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    pub uid: u32,
    pub gid: u32,
    /// Permission bits.
    pub perm: u16,
    /// The node may go away soon (a job's directory): names of it should be kept briefly.
    pub volatile: bool,
}

impl Attr {
    /// Attributes that say nothing but the kind (size 0, no permission, root's), for a node
    /// listed whose attributes cannot be had now.
    pub fn unknown(ino: u64, kind: Kind) -> Attr {
        Attr { ino, kind, size: 0, mtime: SystemTime::UNIX_EPOCH, uid: 0, gid: 0, perm: 0, volatile: true }
    }
}

/// One listing entry as readdir hands it out, its name borrowed from the listing or the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub ino: u64,
    pub kind: Kind,
    pub name: &'a OsStr,
}

/// A directory listing snapshotted at opendir: a few entries named there (`.`, `..`,
/// subdirectories, the root's and `.prepfs/`'s), then a view's files by catalog id, each named
/// from the catalog when readdir reaches it (its name in `encoded/`, its stem and the output's
/// extension in the pixel views).
pub(super) struct Listing {
    named: Vec<(u64, Kind, OsString)>,
    view: View,
    files: Box<[FileId]>,
    /// The pixel views' extension; `None`: `encoded/`, each file under its own name.
    ext: Option<Box<[u8]>>,
    /// The same at every opendir for the mount's life: a top-level view's directory that hides
    /// no sample (the catalog never changes; a job's order and a hiding view's samples do).
    fixed: bool,
}

impl Listing {
    /// The bytes the listing holds (pinned against the open budget while it is open).
    pub(super) fn pinned_bytes(&self) -> u64 {
        let named: usize = self.named.iter().map(|(_, _, n)| std::mem::size_of::<(u64, Kind, OsString)>() + n.len()).sum();
        (named + std::mem::size_of_val(&*self.files) + self.ext.as_ref().map_or(0, |e| e.len())) as u64
    }

    fn len(&self) -> usize {
        self.named.len() + self.files.len()
    }
}

impl Filesystem {
    /// A node of prepfs's own (not made of the source): the mount's owner's, with `perm`.
    fn own_attr(&self, node: Node, kind: Kind, size: u64, perm: u16) -> Attr {
        let (uid, gid) = self.shown_owner(self.owner.0, self.owner.1);
        let volatile = matches!(node, Node::JobRoot(_));
        Attr { ino: node.ino(), kind, size, mtime: self.mounted_at, uid, gid, perm, volatile }
    }

    /// A directory made of a source directory: its owner and mode, write bits cleared.
    fn source_dir_attr(&self, node: Node, dir: DirId) -> Result<Attr> {
        let meta = self.reader.metadata(&self.catalog().dir_path(dir))?;
        Ok(Attr { mtime: meta.mtime, ..self.made_of(node, Kind::Dir, 0, &meta) })
    }

    fn made_of(&self, node: Node, kind: Kind, size: u64, meta: &FileMeta) -> Attr {
        let (uid, gid) = self.shown_owner(meta.uid, meta.gid);
        Attr {
            ino: node.ino(),
            kind,
            size,
            mtime: meta.mtime,
            uid,
            gid,
            perm: (meta.mode & 0o555) as u16,
            volatile: false,
        }
    }

    /// Finds `name` in the directory `parent` for `caller`. Under `jobs/`, a name no job has
    /// yet is found as a pending name (nothing is made: see `fs::jobs::PendingNames`).
    pub fn lookup(&self, parent: u64, name: &OsStr, caller: Caller) -> Result<Attr> {
        let node = match Node::from_ino(parent).ok_or(Error::NotFound)? {
            Node::Root => match name.to_str() {
                Some(".prepfs") => Node::ControlDir,
                Some("jobs") => Node::JobsDir,
                _ => Node::Dir(self.view_named(name, 0).ok_or(Error::NotFound)?, 0),
            },
            Node::ControlDir => match name.to_str() {
                Some("stats.json") => Node::StatsFile,
                Some("config.yaml") => Node::ConfigFile,
                Some("metrics") => Node::MetricsFile,
                Some("loader.json") => Node::LoaderFile,
                _ => return Err(Error::NotFound),
            },
            // A lookup makes no job: a name no job has yet answers as a pending one.
            Node::JobsDir => self.job_root_named(name)?,
            Node::JobRoot(code) => {
                self.job_for(code, caller, false)?;
                Node::Dir(self.view_named(name, code).ok_or(Error::NotFound)?, 0)
            }
            Node::Dir(view, dir) => {
                if view.job != 0 {
                    self.job_for(view.job, caller, false)?;
                }
                self.check_dir_access(dir, caller, access::SEARCH)?;
                let catalog = self.catalog();
                let entry = match view.form {
                    Form::Encoded => catalog.lookup(dir, name),
                    Form::Decoded | Form::Augmented => catalog.lookup_image(dir, name, self.view_output(view).extension()),
                };
                match entry.ok_or(Error::NotFound)? {
                    Entry::Dir(d) => Node::Dir(view, d),
                    Entry::File(f) => Node::File(view, f),
                }
            }
            Node::StatsFile | Node::ConfigFile | Node::MetricsFile | Node::LoaderFile | Node::File(..) => return Err(Error::NotADirectory),
        };
        self.attr_of(node)
    }

    /// The mount's size and use, for `statfs` (`df`): the source's file system's, free space
    /// included (nothing can be written through the mount; `df` shows what the source has).
    pub fn statfs(&self) -> Result<prepfs_source::Space> {
        self.reader.space(&self.config().source)
    }

    /// The attributes of an inode.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.attr_of(Node::from_ino(ino).ok_or(Error::NotFound)?)
    }

    pub(super) fn attr_of(&self, node: Node) -> Result<Attr> {
        let catalog = self.catalog();
        match node {
            // Briefly cached: the kernel asks again soon, so a mount whose daemon died is found
            // dead (ENOTCONN) at once, however long ago it died.
            Node::Root => self
                .source_dir_attr(node, 0)
                .or_else(|_| Ok(self.own_attr(node, Kind::Dir, 0, 0o555)))
                .map(|a| Attr { volatile: true, ..a }),
            // Anyone may start a job (mkdir); only its owner, the mount's owner or root may
            // retire it (the sticky bit).
            Node::JobsDir => Ok(self.own_attr(node, Kind::Dir, 0, 0o1777)),
            Node::ControlDir => Ok(self.own_attr(node, Kind::Dir, 0, self.control_perm(true))),
            Node::JobRoot(code) => {
                let job = if jobs::is_pending(code) { self.pending_job(code)? } else { Some(self.jobs.by_code(code).ok_or(Error::NotFound)?) };
                match job {
                    // A job's views are its owner's: another user cannot read from (and so
                    // steal samples of) someone else's epoch.
                    Some(job) => Ok(Attr { uid: job.owner(), ..self.own_attr(node, Kind::Dir, 0, 0o500) }),
                    // A name no job has yet: an empty directory anyone may enter (whoever opens
                    // something inside first makes the job, theirs).
                    None => Ok(self.own_attr(node, Kind::Dir, 0, 0o555)),
                }
            }
            Node::Dir(view, d) => {
                if d as usize >= catalog.dir_count() || self.job_gone(view) || !self.view_exists(view) {
                    return Err(Error::NotFound);
                }
                self.source_dir_attr(node, d)
            }
            Node::StatsFile => Ok(self.own_attr(node, Kind::File, self.stats_json().len() as u64, self.control_perm(false))),
            Node::ConfigFile => {
                Ok(self.own_attr(node, Kind::File, self.config().to_yaml().len() as u64, self.control_perm(false)))
            }
            Node::MetricsFile => Ok(self.own_attr(node, Kind::File, self.metrics_text().len() as u64, self.control_perm(false))),
            Node::LoaderFile => Ok(self.own_attr(node, Kind::File, self.loader_json().len() as u64, self.loader_file_perm())),
            Node::File(view, file) => {
                if file as usize >= catalog.file_count() || self.job_gone(view) || !self.view_exists(view) {
                    return Err(Error::NotFound);
                }
                let meta = self.resolve(file)?.meta;
                let size = match view.form {
                    Form::Encoded => meta.len(),
                    // An undecodable header, or one claiming more than `max_pixels` (never
                    // decoded), still lists, with size 0; opening it gets EIO.
                    Form::Decoded => {
                        let config = self.config();
                        let decodable = |s: &Size2| pipeline::check_pixels(*s, config.max_pixels).is_ok();
                        self.reader.size(file).ok().filter(decodable).map_or(0, |s| output::encoded_len(&config.output, s))
                    }
                    Form::Augmented => self.producer.recipe_out_len(view.recipe),
                };
                Ok(self.made_of(node, Kind::File, size, &meta))
            }
        }
    }

    /// Whether `view` is a job's that was retired (its inodes are stale). A pending name's
    /// views stand whether or not its job exists.
    fn job_gone(&self, view: View) -> bool {
        view.job != 0 && !jobs::is_pending(view.job) && self.jobs.by_code(view.job).is_none()
    }

    /// Snapshots a directory listing; [`Filesystem::readdir`] pages through it. In a job's view
    /// the samples come in the job's order for this epoch (cached and unseen first).
    pub fn opendir(&self, ino: u64, caller: Caller) -> Result<u64> {
        let node = Node::from_ino(ino).ok_or(Error::NotFound)?;
        let catalog = self.catalog();
        let parent_ino = match node {
            Node::Dir(view, d) if d != 0 => Node::Dir(view, catalog.dir_parent(d)).ino(),
            Node::Dir(view, _) if view.job != 0 => Node::JobRoot(view.job).ino(),
            Node::JobRoot(_) => JOBS_DIR_INO,
            _ => ROOT_INO,
        };
        let mut named: Vec<(u64, Kind, OsString)> = vec![(ino, Kind::Dir, ".".into()), (parent_ino, Kind::Dir, "..".into())];
        let dir = |node: Node, name: &OsStr| (node.ino(), Kind::Dir, name.to_owned());
        let file = |node: Node, name: &str| (node.ino(), Kind::File, OsString::from(name));
        let views = |job: u32| self.views_in(job).into_iter().map(|(view, name)| dir(Node::Dir(view, 0), OsStr::new(name)));
        // The files of a view's directory, by id, and how they are named (see `Listing`).
        let mut files: Vec<FileId> = Vec::new();
        let mut files_view = View::of(Form::Encoded, 0); // no files: unused
        let mut ext = None;
        let mut fixed = false;
        match node {
            Node::Root => {
                named.extend(views(0));
                named.push(dir(Node::JobsDir, OsStr::new("jobs")));
                named.push(dir(Node::ControlDir, OsStr::new(".prepfs")));
            }
            Node::ControlDir => {
                named.push(file(Node::StatsFile, "stats.json"));
                named.push(file(Node::ConfigFile, "config.yaml"));
                named.push(file(Node::MetricsFile, "metrics"));
                named.push(file(Node::LoaderFile, "loader.json"));
            }
            Node::JobsDir => {
                for job in self.jobs.active() {
                    named.push(dir(Node::JobRoot(job.code()), OsStr::new(job.name())));
                }
            }
            // A name no job has yet lists empty (listing it makes nothing).
            Node::JobRoot(code) => {
                if self.job_for(code, caller, false)?.is_some() {
                    named.extend(views(code));
                }
            }
            Node::Dir(view, d) => {
                if d as usize >= catalog.dir_count() || !self.view_exists(view) {
                    return Err(Error::NotFound);
                }
                self.check_dir_access(d, caller, access::READ)?;
                for sub in catalog.subdirs(d) {
                    named.push(dir(Node::Dir(view, sub), catalog.dir_name(sub)));
                }
                // Samples known bad are left out where the view hides them (`fs::bad`).
                let shown: Vec<FileId>;
                let images = if self.hides_bad(view) {
                    shown = catalog.images(d).iter().copied().filter(|&f| !self.hidden(view, f)).collect();
                    &shown[..]
                } else {
                    catalog.images(d)
                };
                let ordered: Arc<[FileId]>;
                let samples: &[FileId] = if view.job == 0 {
                    images
                } else {
                    // Listing a job's view is a use: a pending name's job is made here.
                    let job = self.job_for(view.job, caller, true)?.ok_or(Error::NotFound)?;
                    let job = self.job_in_view(&job, view);
                    let rank = |c: FileId| self.preference_in(view, c, job.bit());
                    ordered = job.listing_order(d, images, rank, self.config().jobs.ods);
                    &ordered
                };
                files_view = view;
                fixed = view.job == 0 && !self.hides_bad(view);
                files.reserve_exact(samples.len());
                files.extend_from_slice(samples);
                match view.form {
                    Form::Encoded => {
                        // Then the files that are not samples (and images hidden by a stem
                        // collision): those of the directory's range not listed above, marked
                        // in a bitmap of the range (no hashing per entry).
                        let range = catalog.files(d);
                        let mut listed = vec![false; range.len()];
                        for &f in samples {
                            if let Some(seen) = f.checked_sub(range.start).and_then(|i| listed.get_mut(i as usize)) {
                                *seen = true;
                            }
                        }
                        let rest = range.zip(listed).filter(|&(f, seen)| !seen && !self.hidden(view, f)).map(|(f, _)| f);
                        files.extend(rest);
                    }
                    Form::Decoded | Form::Augmented => {
                        let mut e = Vec::with_capacity(1 + self.view_output(view).extension().len());
                        e.push(b'.');
                        e.extend_from_slice(self.view_output(view).extension().as_bytes());
                        ext = Some(e.into_boxed_slice());
                    }
                }
            }
            Node::StatsFile | Node::ConfigFile | Node::MetricsFile | Node::LoaderFile | Node::File(..) => return Err(Error::NotADirectory),
        }
        let listing = Listing { named, view: files_view, files: files.into_boxed_slice(), ext, fixed };
        let handle = self.pin(HandleData::Listing(listing), caller)?;
        Ok(self.handles.insert(handle))
    }

    /// Entries of an open listing from `offset` on (offset k resumes after the k-th entry),
    /// until `add` says the reply is full. A file's name is made here, from the catalog, into
    /// one buffer reused for the call.
    pub fn readdir(&self, fh: u64, offset: u64, mut add: impl FnMut(&DirEntry, u64) -> bool) -> Result<()> {
        let handle = self.handles.get(fh)?;
        let HandleData::Listing(listing) = &handle.data else { return Err(Error::NotADirectory) };
        let catalog = self.catalog();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let mut name: Vec<u8> = Vec::new();
        for i in start..listing.len() {
            let full = match listing.named.get(i) {
                Some((ino, kind, n)) => add(&DirEntry { ino: *ino, kind: *kind, name: n }, i as u64 + 1),
                None => {
                    let Some(&f) = listing.files.get(i - listing.named.len()) else { break };
                    let file_name = match &listing.ext {
                        None => catalog.file_name(f),
                        Some(ext) => {
                            name.clear();
                            name.extend_from_slice(catalog.stem(f));
                            name.extend_from_slice(ext);
                            OsStr::from_bytes(&name)
                        }
                    };
                    add(&DirEntry { ino: Node::File(listing.view, f).ino(), kind: Kind::File, name: file_name }, i as u64 + 1)
                }
            };
            if full {
                break; // the reply buffer is full
            }
        }
        Ok(())
    }

    /// Whether the open listing `fh` is the same at every opendir for the mount's life (a
    /// top-level view's directory that hides no sample), so that the kernel may keep it and
    /// list it again without asking (the adapter's `FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE`).
    pub fn listing_is_fixed(&self, fh: u64) -> bool {
        self.handles.get(fh).is_ok_and(|h| matches!(&h.data, HandleData::Listing(l) if l.fixed))
    }

    /// Releases an open listing.
    pub fn releasedir(&self, fh: u64) {
        self.handles.remove(fh);
    }
}
