//! The loader protocol, written once: the daemon (`prepfs_core::loader`) and the Python
//! extension (`python/`) both depend on this crate and speak it.
//!
//! A Unix stream socket carries frames: a 4-byte little-endian length, then that many bytes of
//! JSON, one [`Request`] or [`Reply`]. Pixels never travel in frames: the daemon writes them into
//! a ring of slots in one anonymous memory file, passed with the [`Reply::Welcome`] frame
//! (`SCM_RIGHTS`), which the loader maps. The loader names the slot each batch goes into and
//! holds a slot until the last tensor viewing it is dropped; the daemon writes only the slot it
//! is asked to fill.
//!
//! 1. `Hello` (the job, the batch size, how many slots, the view: `augmented/` or a recipe's)
//!    → `Welcome` (the dataset's facts, the
//!    ring's layout; the ring's descriptor rides with it) or `Error`.
//! 2. `Begin` (an epoch of this loader) → `Epoch`: waits, boundedly, until the job's previous
//!    epoch is over, so loaders of one job start each epoch together.
//! 3. `Next` (a free slot) → `Batch`: up to `batch_size` samples written as HWC uint8 into the
//!    slot, with their labels; `end` once this loader's share of the epoch is served.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// The protocol's version; a `Hello` of another is refused.
pub const VERSION: u32 = 1;
/// The longest frame either side accepts.
pub const MAX_FRAME: usize = 16 << 20;

/// What a loader asks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Hello {
        version: u32,
        job: String,
        batch_size: u32,
        slots: u32,
        /// The view walked: `augmented` (the default, also when absent) or a recipe's name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        view: Option<String>,
    },
    Begin,
    Next { slot: u32 },
}

/// What the daemon answers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Reply {
    /// The dataset and the ring (its descriptor rides with this frame).
    Welcome {
        samples: u64,
        height: u32,
        width: u32,
        /// Class names in ImageFolder's order (sorted): a label is an index into them.
        classes: Vec<String>,
        slots: u32,
        slot_bytes: u64,
        batch_size: u32,
    },
    /// An epoch of this loader begins (the job's epoch number, from 1).
    Epoch { epoch: u64 },
    /// A batch in `slot`: `labels.len()` samples, each `height * width * 3` bytes in turn.
    Batch {
        slot: u32,
        labels: Vec<i64>,
        /// The samples' paths relative to the source (for logs and tests).
        names: Vec<String>,
        /// This loader's share of the epoch is served (this batch may hold the last samples).
        end: bool,
    },
    Error { message: String },
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, message: &impl Serialize) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)
}

/// The frame that follows `head` (bytes already read of it, possibly none), read to its end.
pub fn read_frame_after<T: for<'de> Deserialize<'de>>(r: &mut impl Read, mut head: Vec<u8>) -> io::Result<T> {
    while head.len() < 4 {
        let mut b = [0u8; 4];
        let n = r.read(&mut b[..4 - head.len()])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the other side closed the connection"));
        }
        head.extend_from_slice(&b[..n]);
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {len} bytes, more than {MAX_FRAME}")));
    }
    let mut body = head.split_off(4);
    if body.len() > len {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bytes past the frame"));
    }
    let have = body.len();
    body.resize(len, 0);
    r.read_exact(&mut body[have..])?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads one frame.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<T> {
    read_frame_after(r, Vec::new())
}
