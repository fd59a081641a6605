//! `prepfs job reset MOUNTPOINT NAME`: a job's state ended as `rmdir MOUNTPOINT/jobs/NAME` does
//! (its next reader begins epoch 1), asked over the mount's loader socket, so it works on a
//! read-only mount too, which refuses `rmdir`. The socket is found in `.prepfs/loader.json`; the
//! daemon checks the caller (the job's owner, or root) by the socket's peer credentials.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prepfs_wire::{Reply, Request};

/// Why a reset did not happen.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Find(#[from] crate::summary::FindError),
    #[error("{}: {source}", prepfs_base::escape::escaped(path))]
    Io { source: std::io::Error, path: PathBuf },
    #[error("the mount at {} has no loader socket (`loader.enabled: false`): remove the job with `rmdir {}/jobs/NAME` on a mount that is not read-only", prepfs_base::escape::escaped(.0), prepfs_base::escape::escaped(.0))]
    NoSocket(PathBuf),
    #[error("{0}")]
    Refused(String),
}

/// Resets job `name` of the mount `path` is in.
pub fn reset(path: &Path, name: &str) -> Result<(), JobError> {
    let root = crate::summary::find_mount(path)?;
    let file = root.join(".prepfs/loader.json");
    let text = std::fs::read_to_string(&file).map_err(|e| JobError::Io { source: e, path: file.clone() })?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| JobError::Io { source: std::io::Error::other(e), path: file.clone() })?;
    let socket = doc.get("socket").and_then(serde_json::Value::as_str).map(PathBuf::from).ok_or_else(|| JobError::NoSocket(root.clone()))?;
    let io = |e| JobError::Io { source: e, path: socket.clone() };
    let mut stream = UnixStream::connect(&socket).map_err(io)?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(io)?;
    prepfs_wire::write_frame(&mut stream, &Request::ResetJob { version: prepfs_wire::VERSION, job: name.to_string() }).map_err(io)?;
    match prepfs_wire::read_frame_after::<Reply>(&mut stream, Vec::new()).map_err(io)? {
        Reply::JobReset { .. } => Ok(()),
        Reply::Error { message } => Err(JobError::Refused(message)),
        other => Err(JobError::Refused(format!("unexpected answer {other:?}"))),
    }
}
