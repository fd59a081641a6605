//! The stable hash of names and identities (disk-tier keys, kept files' names, inode numbers
//! of S3 objects): FNV-1a, the same on every build, so what one mount wrote another finds.

/// FNV-1a, 64 bits: stable across builds and Rust versions (unlike `DefaultHasher`).
pub fn fnv1a64(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}
