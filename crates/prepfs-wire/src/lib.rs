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
//!
//! Apart: `ResetJob` as a connection's first frame (`prepfs job reset`) → `JobReset` or `Error`,
//! then the daemon closes it. It works where the mount is read-only, which refuses `rmdir`.

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
    /// Ends the job's state as `rmdir jobs/<job>` does: the job's owner or root only.
    ResetJob { version: u32, job: String },
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
    /// The job was reset (its next open or loader begins a fresh epoch 1).
    JobReset { job: String },
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

/// The longest request a loader sends (`Hello`, `Begin`, `Next`: a few hundred bytes of JSON);
/// the daemon reads its requests within this ([`read_frame_within`]).
pub const MAX_REQUEST: usize = 64 << 10;

/// A frame's body is read in pieces of at most this many bytes, its buffer growing only as they
/// arrive: a length declared but never sent costs nothing.
const READ_CHUNK: usize = 64 << 10;

/// The frame that follows `head` (bytes already read of it, possibly none), read to its end.
pub fn read_frame_after<T: for<'de> Deserialize<'de>>(r: &mut impl Read, head: Vec<u8>) -> io::Result<T> {
    read_frame_after_within(r, head, MAX_FRAME)
}

/// [`read_frame_after`] refusing a frame longer than `max` bytes (at most [`MAX_FRAME`]). The
/// body's buffer holds only the bytes that came, read [`READ_CHUNK`] at a time: never the
/// length the frame declares before its bytes arrive. It is dropped once the frame is parsed.
pub fn read_frame_after_within<T: for<'de> Deserialize<'de>>(r: &mut impl Read, mut head: Vec<u8>, max: usize) -> io::Result<T> {
    let max = max.min(MAX_FRAME);
    while head.len() < 4 {
        let mut b = [0u8; 4];
        let n = r.read(&mut b[..4 - head.len()])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the other side closed the connection"));
        }
        head.extend_from_slice(&b[..n]);
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {len} bytes, more than {max}")));
    }
    let mut body = head.split_off(4);
    if body.len() > len {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "bytes past the frame"));
    }
    let mut chunk = [0u8; 4096];
    let mut piece = Vec::new();
    while body.len() < len {
        let want = (len - body.len()).min(READ_CHUNK);
        // Small reads go through the stack; larger ones into a piece sized to what is asked,
        // so no buffer ever exceeds what was read plus one piece.
        let n = if want <= chunk.len() {
            let n = read_some(r, &mut chunk[..want])?;
            body.extend_from_slice(&chunk[..n]);
            n
        } else {
            piece.resize(want, 0);
            let n = read_some(r, &mut piece)?;
            body.extend_from_slice(&piece[..n]);
            n
        };
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the other side closed the connection mid-frame"));
        }
    }
    drop(piece);
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// One `read`, retried when a signal interrupts it.
fn read_some(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Reads one frame of at most `max` bytes ([`read_frame_after_within`]).
pub fn read_frame_within<T: for<'de> Deserialize<'de>>(r: &mut impl Read, max: usize) -> io::Result<T> {
    read_frame_after_within(r, Vec::new(), max)
}

/// Reads one frame.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<T> {
    read_frame_after(r, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that gives its bytes and then blocks forever would hang a test; this one says
    /// how large a buffer it was ever asked to fill, then ends.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        largest_ask: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.largest_ask = self.largest_ask.max(buf.len());
            let n = buf.len().min(self.bytes.len() - self.at).min(1000);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn a_declared_length_is_never_allocated_before_its_bytes_come() {
        // 16 MiB declared, 10 bytes sent, then the end: the reader was never asked to fill
        // more than one piece, and the frame fails as cut short.
        let mut bytes = (MAX_FRAME as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(b"{\"op\":\"be");
        let mut r = Trickle { bytes, at: 0, largest_ask: 0 };
        let err = read_frame::<Request>(&mut r).expect_err("cut short");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        assert!(r.largest_ask <= READ_CHUNK, "asked to fill {} bytes at once", r.largest_ask);
    }

    #[test]
    fn frames_read_whole_in_pieces_and_requests_are_held_to_their_bound() {
        let names: Vec<String> = (0..20_000).map(|i| format!("class-{i}")).collect();
        let reply = Reply::Welcome { samples: 1, height: 2, width: 3, classes: names, slots: 1, slot_bytes: 9, batch_size: 1 };
        let mut frame = Vec::new();
        write_frame(&mut frame, &reply).expect("write");
        assert!(frame.len() > 3 * READ_CHUNK);
        let mut r = Trickle { bytes: frame.clone(), at: 0, largest_ask: 0 };
        assert_eq!(read_frame::<Reply>(&mut r).expect("read"), reply);
        let mut r = Trickle { bytes: frame, at: 0, largest_ask: 0 };
        let err = read_frame_within::<Reply>(&mut r, MAX_REQUEST).expect_err("too long for a request");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let mut hello = Vec::new();
        write_frame(&mut hello, &Request::Next { slot: 3 }).expect("write");
        assert_eq!(read_frame_within::<Request>(&mut &hello[..], MAX_REQUEST).expect("read"), Request::Next { slot: 3 });
    }
}
