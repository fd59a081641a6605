//! What the tiers below memory (disk, remote) hold of a sample and take to write: one pair of
//! types for both.

use std::sync::Arc;

use crate::shared::Rgb;

/// What a lookup in a lower tier found.
pub enum LowerHit {
    /// Full-resolution pixels.
    Pixels(Rgb),
    /// The source bytes.
    Bytes(Vec<u8>),
}

/// A payload queued for writing to a lower tier (shared with the memory tier: nothing is copied
/// until the writer runs).
pub(crate) enum Payload {
    Bytes(Arc<[u8]>),
    Pixels(Arc<Rgb>),
}

impl Payload {
    /// The bytes written.
    pub(crate) fn data(&self) -> &[u8] {
        match self {
            Payload::Bytes(b) => b,
            Payload::Pixels(p) => &p.pixels,
        }
    }

    /// Width and height of pixels; (0, 0) for source bytes.
    pub(crate) fn dims(&self) -> (u32, u32) {
        match self {
            Payload::Bytes(_) => (0, 0),
            Payload::Pixels(p) => (p.width, p.height),
        }
    }
}
