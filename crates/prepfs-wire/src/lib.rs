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
//! 4. `Resume` (instead of the first `Begin`: a loader restarted from its saved state, or one
//!    that reconnected to a restarted daemon) → `Epoch`: the job's epoch is set to the one named,
//!    with exactly the samples named served in it ([`served`]); the walk then serves the rest.
//!
//! Each batch names its samples by *index*: a sample's place among the dataset's samples in the
//! daemon's catalog order (the `samples` of the welcome, counted from 0). The welcome's `dataset`
//! fingerprints those samples (their paths, in that order), so a saved state is only resumed
//! over the dataset it was taken on.
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
    /// Resumes the job's epoch `epoch` (from 1) with exactly the samples `served` names served in
    /// it (the job's owner or root only), and begins this loader's walk there: the samples not
    /// in `served` are the rest of the epoch. Sent instead of the connection's first `Begin`
    /// (refused after one). `job`, `view` and `dataset` must be the hello's and the welcome's
    /// (a state of another job, view or dataset is refused). Where another loader of the job
    /// is walking that very epoch (ranks resuming one after the other), `served` is added to
    /// what the epoch has served rather than replacing it. A `served` holding every sample
    /// begins the next epoch, whole. Answered by `Epoch` with the epoch the walk walks.
    Resume {
        version: u32,
        job: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        view: Option<String>,
        /// The welcome's `dataset`.
        dataset: String,
        epoch: u64,
        /// The samples served in the epoch, by index: [`served::encode`].
        served: String,
    },
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
        /// The dataset's fingerprint: its samples' paths in index order, hashed (16 hex digits).
        #[serde(default)]
        dataset: String,
    },
    /// An epoch of this loader begins (the job's epoch number, from 1).
    Epoch { epoch: u64 },
    /// A batch in `slot`: `labels.len()` samples, each `height * width * 3` bytes in turn.
    Batch {
        slot: u32,
        labels: Vec<i64>,
        /// The samples' paths relative to the source (for logs and tests).
        names: Vec<String>,
        /// The samples' indices (see the module documentation), in the batch's order.
        #[serde(default)]
        ids: Vec<u64>,
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
/// the daemon reads a connection's first request within this ([`read_frame_within`]).
pub const MAX_REQUEST: usize = 64 << 10;

/// The longest request after the hello: a `Resume` carries a bitset of the dataset's samples
/// (compressed; at worst 4/3 of a byte per 8 samples, about 45 million samples within this).
pub const MAX_RESUME: usize = 8 << 20;

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

/// The samples of an epoch a loader was served (yielded to its caller), as [`Request::Resume`]
/// and a loader's saved state (`prepfs.Loader.state_dict()`) carry them: a bitset over the
/// samples' indices, sample `i` at bit `i % 8` of byte `i / 8`, `(samples + 7) / 8` bytes,
/// compressed with zlib (RFC 1950) and written in base64 (RFC 4648, with padding). In Python:
/// `zlib.decompress(base64.b64decode(text))`.
pub mod served {
    use base64::Engine;
    use std::io::{Read, Write};

    /// Bytes of the bitset of `samples` samples.
    pub fn bitset_len(samples: u64) -> usize {
        samples.div_ceil(8) as usize
    }

    /// Whether sample `i` is in `bits`.
    pub fn has(bits: &[u8], i: u64) -> bool {
        bits.get((i / 8) as usize).is_some_and(|b| b >> (i % 8) & 1 == 1)
    }

    /// Puts sample `i` in `bits`; returns whether it was not there (false past the end, too).
    pub fn put(bits: &mut [u8], i: u64) -> bool {
        match bits.get_mut((i / 8) as usize) {
            Some(b) if *b >> (i % 8) & 1 == 0 => {
                *b |= 1 << (i % 8);
                true
            }
            _ => false,
        }
    }

    /// Samples in `bits`.
    pub fn count(bits: &[u8]) -> u64 {
        bits.iter().map(|b| u64::from(b.count_ones())).sum()
    }

    /// The text of a bitset.
    pub fn encode(bits: &[u8]) -> String {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        // Writing into a Vec cannot fail.
        let _ = z.write_all(bits);
        let compressed = z.finish().unwrap_or_default();
        base64::engine::general_purpose::STANDARD.encode(compressed)
    }

    /// The bitset of `samples` samples a text holds, or why it holds none: not base64, not
    /// zlib, or not exactly that many samples' bits (a sample past the end set, or another
    /// length: a state of another dataset). Never inflates more than the bitset's length.
    pub fn decode(text: &str, samples: u64) -> Result<Vec<u8>, String> {
        let compressed = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|e| format!("the served samples are not base64: {e}"))?;
        let want = bitset_len(samples);
        let mut bits = Vec::with_capacity(want.min(crate::MAX_FRAME));
        flate2::read::ZlibDecoder::new(&compressed[..])
            .take(want as u64 + 1)
            .read_to_end(&mut bits)
            .map_err(|e| format!("the served samples are not zlib data: {e}"))?;
        if bits.len() != want {
            return Err(format!(
                "the served samples hold {} bytes of bits, not the {want} of {samples} samples (a state of another dataset?)",
                if bits.len() > want { format!("more than {want}") } else { bits.len().to_string() }
            ));
        }
        let spare = (want as u64 * 8 - samples) as u32;
        if spare > 0 && bits[want - 1] >> (8 - spare) != 0 {
            return Err(format!("the served samples name a sample past the dataset's {samples}"));
        }
        Ok(bits)
    }
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
        let reply = Reply::Welcome { samples: 1, height: 2, width: 3, classes: names, slots: 1, slot_bytes: 9, batch_size: 1, dataset: "0123456789abcdef".into() };
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

    #[test]
    fn a_served_bitset_round_trips_and_one_of_another_length_or_with_a_sample_past_the_end_is_refused() {
        let samples = 1_000_004u64;
        let mut bits = vec![0u8; served::bitset_len(samples)];
        for i in (0..samples).filter(|i| i % 3 == 0 || *i == samples - 1) {
            assert!(served::put(&mut bits, i));
        }
        assert!(!served::put(&mut bits, 0), "already there");
        assert!(!served::put(&mut bits, samples + 8), "past the end");
        let text = served::encode(&bits);
        assert!(text.len() < bits.len() / 4, "a regular set compresses: {} of {}", text.len(), bits.len());
        let back = served::decode(&text, samples).expect("decodes");
        assert_eq!(back, bits);
        assert!(served::has(&back, samples - 1) && served::has(&back, 3) && !served::has(&back, 4));
        assert_eq!(served::count(&back), samples.div_ceil(3) + 1);
        // Another dataset's length, either way.
        assert!(served::decode(&text, samples + 8).expect_err("longer").contains("not the"));
        assert!(served::decode(&text, samples - 8).expect_err("shorter").contains("more than"));
        // The same bytes, but the last sample is past a dataset of one fewer.
        assert!(served::decode(&text, samples - 1).expect_err("past the end").contains("past the dataset"));
        assert!(served::decode("not base64!", 8).expect_err("text").contains("base64"));
        assert!(served::decode("aGVsbG8=", 8).expect_err("not zlib").contains("zlib"));
        // An empty set of no samples.
        assert_eq!(served::decode(&served::encode(&[]), 0).expect("empty"), Vec::<u8>::new());
    }

    #[test]
    fn a_resume_travels_within_its_bound_and_batches_of_older_daemons_read_without_ids() {
        let samples = 1_300_000u64;
        // The worst case: a set that does not compress (about half the samples, at random).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let bits: Vec<u8> = (0..served::bitset_len(samples))
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let resume = Request::Resume {
            version: VERSION,
            job: "train".into(),
            view: None,
            dataset: "0123456789abcdef".into(),
            epoch: 7,
            served: served::encode(&bits),
        };
        let mut frame = Vec::new();
        write_frame(&mut frame, &resume).expect("write");
        assert!(frame.len() > MAX_REQUEST && frame.len() < MAX_RESUME, "{} bytes", frame.len());
        assert_eq!(read_frame_within::<Request>(&mut &frame[..], MAX_RESUME).expect("read"), resume);
        let old: Reply = serde_json::from_str(r#"{"op":"batch","slot":1,"labels":[0],"names":["c/a.jpg"],"end":false}"#).expect("parse");
        assert_eq!(old, Reply::Batch { slot: 1, labels: vec![0], names: vec!["c/a.jpg".into()], ids: vec![], end: false });
    }
}
