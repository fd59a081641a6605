//! A fault-injecting source for tests: the real [`LocalSource`] underneath, with errors,
//! delays, hangs and files that grow while read, chosen per path.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{FileMeta, LocalSource, SourceFile, SourceIo};
use prepfs_base::sync::{Condvar, CondvarExt, LockExt, Mutex};

/// A fault of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Opening fails with this kind of error.
    Error(io::ErrorKind),
    /// Every open and read waits this long first (slow storage).
    Delay(Duration),
    /// Opening blocks until [`FaultySource::release_hangs`] (a hung network share).
    Hang,
    /// `stat` blocks until [`FaultySource::release_hangs`] (a hung share's metadata).
    HangStat,
    /// Reads deliver this many bytes more than the file's length (a file being appended to).
    Grow(u64),
}

/// See the module documentation.
pub struct FaultySource {
    inner: LocalSource,
    faults: Mutex<HashMap<PathBuf, Fault>>,
    hung: Mutex<bool>,
    released: Condvar,
}

impl FaultySource {
    /// No faults yet over `inner`.
    pub fn new(inner: LocalSource) -> FaultySource {
        FaultySource { inner, faults: Mutex::new(HashMap::new()), hung: Mutex::new(true), released: Condvar::new() }
    }

    /// Gives `path` a fault (replacing any it had).
    #[cfg(any(test, feature = "faults"))]
    pub fn inject(&self, path: &Path, fault: Fault) {
        self.faults.lock_or_recover().insert(path.to_path_buf(), fault);
    }

    /// Removes every fault.
    pub fn clear(&self) {
        self.faults.lock_or_recover().clear();
    }

    /// Lets every hung open go on (and later ones not hang).
    #[cfg(any(test, feature = "faults"))]
    pub fn release_hangs(&self) {
        *self.hung.lock_or_recover() = false;
        self.released.notify_all();
    }

    /// Blocks until [`FaultySource::release_hangs`].
    fn wait_for_release(&self) {
        let mut hung = self.hung.lock_or_recover();
        while *hung {
            hung = self.released.wait_or_recover(hung);
        }
    }

    fn fault(&self, path: &Path) -> Option<Fault> {
        self.faults.lock_or_recover().get(path).copied()
    }
}

impl SourceIo for FaultySource {
    fn space(&self) -> io::Result<super::Space> {
        self.inner.space()
    }

    fn metadata(&self, path: &Path) -> io::Result<FileMeta> {
        match self.fault(path) {
            Some(Fault::Error(kind)) => Err(io::Error::new(kind, "injected fault")),
            Some(Fault::HangStat) => {
                self.wait_for_release();
                self.inner.metadata(path)
            }
            _ => self.inner.metadata(path),
        }
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn SourceFile>> {
        let fault = self.fault(path);
        match fault {
            Some(Fault::Error(kind)) => return Err(io::Error::new(kind, "injected fault")),
            Some(Fault::Delay(d)) => std::thread::sleep(d),
            Some(Fault::Hang) => self.wait_for_release(),
            _ => {}
        }
        let inner = self.inner.open(path)?;
        Ok(Box::new(FaultyFile { inner, fault }))
    }
}

struct FaultyFile {
    inner: Box<dyn SourceFile>,
    fault: Option<Fault>,
}

impl SourceFile for FaultyFile {
    fn meta(&self) -> &FileMeta {
        self.inner.meta()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self.fault {
            Some(Fault::Delay(d)) => std::thread::sleep(d),
            Some(Fault::Grow(extra)) => {
                let len = self.inner.meta().len();
                if offset >= len {
                    let n = (len + extra).saturating_sub(offset).min(buf.len() as u64) as usize;
                    buf[..n].fill(0xAB);
                    return Ok(n);
                }
            }
            _ => {}
        }
        self.inner.read_at(buf, offset)
    }
}
