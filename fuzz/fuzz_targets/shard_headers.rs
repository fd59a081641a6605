//! A WebDataset shard's tar headers as the index walks them (`source::shards`'s header walk,
//! through `shards::walk_in_memory`): whatever the headers say, the walk neither panics nor
//! reads more than a header may hold, and what it serves lies inside the shard.
//!
//! Input: a flags byte, then the shard's first bytes. Flags bits 0-2 pick how long the shard
//! is (the bytes given, or that plus a few KiB up to 1 GiB of zeros after them, as a sparse
//! file reads), so a header declaring hundreds of megabytes can point at bytes that are there.
//!
//! Checked: every sample's bytes lie inside the shard; the walk in windows (as a shard in an
//! object store is read) finds what the walk of a read per header finds; no single read of the
//! direct walk is larger than an extension header may be ([`MAX_HEADER_BYTES`]), and all its
//! reads together stay within a few blocks per member (a header's body is never read past its
//! bound, file data never read); a header over the bound ends the walk as a problem.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prepfs_source::shards::{walk_in_memory, MAX_HEADER_BYTES};

/// The shard's length beyond the bytes given, by flags bits 0-2.
const PADS: [u64; 8] = [0, 0, 1024, 4096, 70 << 10, 1 << 20, 300 << 20, 1 << 30];

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else { return };
    let len = bytes.len() as u64 + PADS[usize::from(flags & 7)];
    let direct = walk_in_memory(bytes, len, 0);
    for &(_, _, offset, size, _) in &direct.samples {
        assert!(offset.checked_add(size).is_some_and(|end| end <= len), "a sample at {offset}+{size} past the shard's {len} bytes");
    }
    assert!(direct.largest_read <= MAX_HEADER_BYTES.max(512), "a read of {} bytes", direct.largest_read);
    // Each block of the input read as a header costs it and at most a bounded body (a label or
    // an extension header: 64 KiB at most); past the bytes given, one header of zeros ends the
    // walk: the zeros after them are never read in bulk.
    let headers = bytes.len() as u64 / 512 + 3;
    assert!(direct.bytes_read <= headers * (512 + MAX_HEADER_BYTES), "{} bytes read of a shard of {} given", direct.bytes_read, bytes.len());
    for window in [700, 1 << 20] {
        let windowed = walk_in_memory(bytes, len, window);
        assert_eq!((&windowed.samples, windowed.cut, &windowed.first_problem), (&direct.samples, direct.cut, &direct.first_problem), "in windows of {window}");
    }
});
