//! The entry codec of the tiers below memory: the 40-byte header every disk entry and remote
//! value carries, its checksum, and the damage rules. The disk tier (`disk.rs`) and the remote
//! tier (`remote/`) frame their payloads with it; what surrounds the header (a file's name, a
//! Redis key, the remote value's MAC in `remote/auth.rs`) stays theirs.
//!
//! - **Header** (little-endian): `0..4` the tier's magic, `4..6` its format version, `6` kind
//!   ([`Kind`]: 1 encoded, 2 decoded, 3 augmented), `7` zero, `8..16` the entry's key field (the
//!   disk key itself; the remote tier's FNV-1a 64 of its Redis key), `16..24` payload length,
//!   `24..28` width, `28..32` height (decoded pixels; 0 for any other kind), `32..36` CRC-32
//!   (IEEE) over header bytes `0..32` and the payload, `36..40` zero. Each tier's [`Format`] names
//!   its magic and version: the bytes are what `disk.rs` and `remote/` wrote before this module
//!   (disk `PFDC` 1, remote `PFRM` 2), so entries already stored stay readable.
//! - **Damage rules.** An entry is damaged when it is shorter than its header, has another
//!   magic or version, another kind (or a reserved byte set), another key, a length other than
//!   its payload's, dimensions that do not fill a decoded payload exactly (or any on another
//!   kind), or a CRC that does not match ([`Damage`]; an unreadable file is damage too, and a
//!   remote value failing its MAC is [`Damage::Forged`]). A damaged entry is never served: the
//!   tier deletes it where it lies, counts it ([`Dropped`]: damaged and forged apart), logs it,
//!   and answers a miss.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the header before every payload (the remote tier's MAC follows it).
pub const HEADER_LEN: usize = 40;
/// The header bytes the CRC covers (with the payload).
const CRC_COVERS: usize = 32;

/// A tier's header: its magic and format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    pub magic: [u8; 4],
    pub version: u16,
}

/// The forms an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Encoded,
    Decoded,
    Augmented,
}

impl Kind {
    /// The kind's byte in the header.
    pub fn code(self) -> u8 {
        match self {
            Kind::Encoded => 1,
            Kind::Decoded => 2,
            Kind::Augmented => 3,
        }
    }
}

/// Why an entry is refused (see the module documentation).
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    #[error("shorter than its header")]
    Short,
    #[error("bad magic")]
    Magic,
    #[error("format version {found}, expected {expected}")]
    Version { found: u16, expected: u16 },
    #[error("kind byte {found} (or a reserved byte set), expected {expected}")]
    Kind { found: u8, expected: u8 },
    #[error("key in the header does not match where it is stored")]
    Key,
    #[error("{actual} payload bytes, the header says {expected}")]
    Length { actual: u64, expected: u64 },
    #[error("{width}x{height} pixels do not fill {len} payload bytes")]
    Dims { width: u32, height: u32, len: u64 },
    #[error("checksum mismatch")]
    Checksum,
    /// Intact, but not written with this deployment's secret: forged, or another deployment's.
    #[error("its MAC fails: forged, or written with another secret")]
    Forged,
    #[error("unreadable: {0}")]
    Io(io::Error),
}

/// A header that passed its checks: the payload's length, and its width and height (0 but for
/// decoded pixels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: u64,
    pub width: u32,
    pub height: u32,
    crc: u32,
}

impl Header {
    /// Checks the payload against the header's CRC (read whole, every time).
    pub(crate) fn check_payload(&self, head: &[u8; HEADER_LEN], payload: &[u8]) -> Result<(), Damage> {
        if payload.len() as u64 != self.len {
            return Err(Damage::Length { actual: payload.len() as u64, expected: self.len });
        }
        if crc(head, payload) != self.crc {
            return Err(Damage::Checksum);
        }
        Ok(())
    }
}

fn crc(head: &[u8; HEADER_LEN], payload: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(&head[..CRC_COVERS]);
    c.update(payload);
    c.finalize()
}

fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// The header of an entry of `kind` under `key` holding `payload` (pixels of `width` x
/// `height`; (0, 0) for anything else), its CRC filled in.
pub fn header(format: Format, kind: Kind, key: u64, payload: &[u8], (width, height): (u32, u32)) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&format.magic);
    h[4..6].copy_from_slice(&format.version.to_le_bytes());
    h[6] = kind.code();
    h[8..16].copy_from_slice(&key.to_le_bytes());
    h[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    h[24..28].copy_from_slice(&width.to_le_bytes());
    h[28..32].copy_from_slice(&height.to_le_bytes());
    let sum = crc(&h, payload);
    h[32..36].copy_from_slice(&sum.to_le_bytes());
    h
}

/// The header at the front of `bytes`, or [`Damage::Short`].
pub(crate) fn head_of(bytes: &[u8]) -> Result<&[u8; HEADER_LEN], Damage> {
    bytes.get(..HEADER_LEN).and_then(|h| h.try_into().ok()).ok_or(Damage::Short)
}

/// Checks a header against what the tier expects of it (its format, the kind and key where it
/// is stored) and the `payload_len` stored after it; the payload's CRC is
/// [`Header::check_payload`]'s.
pub fn check_header(h: &[u8; HEADER_LEN], format: Format, kind: Kind, key: u64, payload_len: u64) -> Result<Header, Damage> {
    if h[0..4] != format.magic {
        return Err(Damage::Magic);
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != format.version {
        return Err(Damage::Version { found: version, expected: format.version });
    }
    if h[6] != kind.code() || h[7] != 0 || h[36..40] != [0; 4] {
        return Err(Damage::Kind { found: h[6], expected: kind.code() });
    }
    if le_u64(&h[8..16]) != key {
        return Err(Damage::Key);
    }
    let len = le_u64(&h[16..24]);
    if payload_len != len {
        return Err(Damage::Length { actual: payload_len, expected: len });
    }
    let (width, height) = (le_u32(&h[24..28]), le_u32(&h[28..32]));
    let dims_ok = match kind {
        Kind::Decoded => u64::from(width) * u64::from(height) * 3 == len,
        Kind::Encoded | Kind::Augmented => width == 0 && height == 0,
    };
    if !dims_ok {
        return Err(Damage::Dims { width, height, len });
    }
    Ok(Header { len, width, height, crc: le_u32(&h[32..36]) })
}

/// Checks a whole entry held in memory (`head` then `payload`), header and CRC.
pub fn check(head: &[u8; HEADER_LEN], payload: &[u8], format: Format, kind: Kind, key: u64) -> Result<Header, Damage> {
    let header = check_header(head, format, kind, key, payload.len() as u64)?;
    header.check_payload(head, payload)?;
    Ok(header)
}

/// The count of entries a tier dropped, by the damage rules: damaged, and forged apart.
#[derive(Default)]
pub struct Dropped {
    damaged: AtomicU64,
    forged: AtomicU64,
}

impl Dropped {
    /// Counts one dropped entry.
    pub fn count(&self, why: &Damage) {
        let counter = if matches!(why, Damage::Forged) { &self.forged } else { &self.damaged };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Entries dropped as damaged (anything but forged).
    pub fn damaged(&self) -> u64 {
        self.damaged.load(Ordering::Relaxed)
    }

    /// Entries dropped as forged (intact, failing their MAC).
    pub fn forged(&self) -> u64 {
        self.forged.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT: Format = Format { magic: *b"TEST", version: 3 };

    fn entry(kind: Kind, key: u64, payload: &[u8], dims: (u32, u32)) -> ([u8; HEADER_LEN], Vec<u8>) {
        (header(FORMAT, kind, key, payload, dims), payload.to_vec())
    }

    fn pixels() -> Vec<u8> {
        (0..4 * 3 * 3).map(|i| i as u8).collect()
    }

    #[test]
    fn an_intact_entry_passes_and_gives_its_length_and_dimensions() {
        let (h, p) = entry(Kind::Decoded, 7, &pixels(), (4, 3));
        let header = check(&h, &p, FORMAT, Kind::Decoded, 7).expect("intact");
        assert_eq!((header.len, header.width, header.height), (36, 4, 3));
        let (h, p) = entry(Kind::Encoded, 7, b"bytes", (0, 0));
        assert!(check(&h, &p, FORMAT, Kind::Encoded, 7).is_ok());
        assert_eq!(head_of(&[0; HEADER_LEN + 1]).map(|h| h.len()).ok(), Some(HEADER_LEN));
    }

    #[test]
    fn the_crc_is_the_standard_one_over_the_header_and_the_payload() {
        let (h, p) = entry(Kind::Encoded, 1, b"123456789", (0, 0));
        let mut c = crc32fast::Hasher::new();
        c.update(&h[..32]);
        c.update(&p);
        assert_eq!(le_u32(&h[32..36]), c.finalize());
        let mut reference = crc32fast::Hasher::new();
        reference.update(b"123456789");
        assert_eq!(reference.finalize(), 0xCBF4_3926, "CRC-32 (IEEE), as zlib's crc32");
    }

    #[test]
    fn the_layout_is_the_one_stored_before_the_codec_was_shared() {
        // A disk entry as disk.rs wrote it: PFDC, version 1, encoded, key 0x0102, 3 bytes.
        let disk = Format { magic: *b"PFDC", version: 1 };
        let h = header(disk, Kind::Encoded, 0x0102, b"abc", (0, 0));
        assert_eq!(&h[0..8], b"PFDC\x01\x00\x01\x00");
        assert_eq!(&h[8..16], &0x0102u64.to_le_bytes());
        assert_eq!(&h[16..24], &3u64.to_le_bytes());
        assert_eq!(&h[24..32], &[0; 8]);
        assert_eq!(&h[36..40], &[0; 4]);
    }

    #[test]
    fn every_kind_of_damage_is_told_apart() {
        let (h, p) = entry(Kind::Decoded, 7, &pixels(), (4, 3));
        let with = |at: usize, byte: u8| {
            let mut h = h;
            h[at] = byte;
            h
        };
        assert!(matches!(head_of(&h[..HEADER_LEN - 1]), Err(Damage::Short)));
        assert!(matches!(check(&with(0, b'X'), &p, FORMAT, Kind::Decoded, 7), Err(Damage::Magic)));
        assert!(matches!(check(&with(4, 9), &p, FORMAT, Kind::Decoded, 7), Err(Damage::Version { found: 9, expected: 3 })));
        assert!(matches!(check(&h, &p, FORMAT, Kind::Encoded, 7), Err(Damage::Kind { found: 2, expected: 1 })));
        assert!(matches!(check(&with(7, 1), &p, FORMAT, Kind::Decoded, 7), Err(Damage::Kind { .. })), "a reserved byte set");
        assert!(matches!(check(&with(38, 1), &p, FORMAT, Kind::Decoded, 7), Err(Damage::Kind { .. })), "a reserved byte set");
        assert!(matches!(check(&h, &p, FORMAT, Kind::Decoded, 8), Err(Damage::Key)));
        assert!(matches!(check(&h, &p[..p.len() - 1], FORMAT, Kind::Decoded, 7), Err(Damage::Length { actual: 35, expected: 36 })));
        assert!(matches!(check(&with(24, 5), &p, FORMAT, Kind::Decoded, 7), Err(Damage::Dims { width: 5, height: 3, len: 36 })));
        let (e, b) = entry(Kind::Encoded, 7, b"bytes", (1, 1));
        assert!(matches!(check(&e, &b, FORMAT, Kind::Encoded, 7), Err(Damage::Dims { .. })), "dimensions on bytes");
        let mut flipped = p.clone();
        flipped[5] ^= 0x10;
        assert!(matches!(check(&h, &flipped, FORMAT, Kind::Decoded, 7), Err(Damage::Checksum)));
        assert!(matches!(check(&with(1, b'x'), &p, FORMAT, Kind::Decoded, 7), Err(Damage::Magic)));
        // A header byte the CRC covers, changed where no other rule looks: the width and height
        // swapped still fill the payload.
        let mut swapped = h;
        swapped[24..28].copy_from_slice(&3u32.to_le_bytes());
        swapped[28..32].copy_from_slice(&4u32.to_le_bytes());
        assert!(matches!(check(&swapped, &p, FORMAT, Kind::Decoded, 7), Err(Damage::Checksum)));
    }

    #[test]
    fn dropped_entries_are_counted_damaged_and_forged_apart() {
        let dropped = Dropped::default();
        dropped.count(&Damage::Checksum);
        dropped.count(&Damage::Short);
        dropped.count(&Damage::Forged);
        assert_eq!((dropped.damaged(), dropped.forged()), (2, 1));
    }
}
