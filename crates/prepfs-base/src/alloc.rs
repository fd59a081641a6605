//! The daemon's memory allocator: which allocations get pages of their own, and which reuse the
//! heap's.
//!
//! Two kinds of large buffer pass through the daemon. The cache's own (decoded pixels, sample
//! bytes, outputs: Rust allocations that live until eviction) must go back to the system whole
//! when freed, or glibc's arenas keep them and the daemon's memory creeps past the budget the
//! cache charges. The decoders' scratch (libjpeg-turbo's per-image pools, a progressive JPEG's
//! coefficient arrays: C allocations freed at the end of each decode) is the opposite: mapped
//! afresh at every decode, each of its pages costs a fault, a clearing and a charge (about 2 us
//! a page on this kind of virtual machine: 286 us for 562 KB, against 5 us to rewrite memory
//! already in place), 20 faults per region decode on average on ImageNet-like data.
//!
//! So [`MapLarge`], the global allocator of the `prepfs` binary, maps every Rust allocation of
//! [`LARGE`] or more itself and unmaps it on free, as glibc did with a 128 KiB mmap threshold;
//! [`tune_malloc`] then raises glibc's threshold, so that what is left to malloc above 128 KiB
//! (the C decoders' per-image memory) is reused from the heap. A fresh buffer about to be
//! written whole (a full decode's pixels, which the cache keeps) has its pages faulted in by
//! one call, [`populate`]: not every zeroed allocation, since some are mostly never touched
//! (fuser's 16 MiB request buffers).

use std::alloc::{GlobalAlloc, Layout, System};

/// Rust allocations of this size and more are mapped on their own (see the module
/// documentation).
pub(crate) const LARGE: usize = 128 << 10;

/// glibc allocations below this come from (and go back to) the heap: the C decoders' pools
/// of images up to about 1.4 megapixels (a progressive 500x375 JPEG's coefficients are 575 KB).
const MALLOC_MMAP_THRESHOLD: i32 = 4 << 20;

/// A free heap top above this is given back to the system: above one decode's pools, so they
/// stay for the next, and small beside the 8 MiB of slack the memory bound allows (docs/cache-and-planner.md, "Memory bound").
const MALLOC_TRIM_THRESHOLD: i32 = 2 << 20;

const PAGE: usize = 4096;

/// See the module documentation. Allocations whose alignment exceeds a page go to the system
/// allocator whatever their size.
pub struct MapLarge;

fn mapped(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

fn pages(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

/// A fresh private mapping of `size` bytes (zeroed by the kernel); null if the system refuses.
fn map(size: usize) -> *mut u8 {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no memory
    // of ours.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), pages(size), libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED { std::ptr::null_mut() } else { p.cast() }
}

/// Faults in, by one call, the whole pages of `buf` not yet in memory, for a fresh buffer the
/// caller is about to write whole: one `MADV_POPULATE_WRITE` instead of a fault per 4 KiB
/// (286 us against 175 us for 562 KB here). Pages `buf` shares with other data (its first and
/// last, if not page-aligned) are left alone; a kernel without it (before 5.14) faults as usual.
pub fn populate(buf: &mut [u8]) {
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    let start = (buf.as_mut_ptr() as usize).next_multiple_of(PAGE);
    let end = (buf.as_mut_ptr() as usize + buf.len()) / PAGE * PAGE;
    if end > start {
        // SAFETY: the span lies within `buf`, which the caller holds mutably; populating writes
        // nothing a reader could see (a present page keeps its bytes, an absent one reads zero
        // before and after).
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, MADV_POPULATE_WRITE) };
    }
}

/// A shared buffer of `len` zero bytes, allocated in place (no copy from a `Vec`), for bytes
/// written once and then shared: a served output, a sample's source bytes.
pub fn zeroed_shared(len: usize) -> std::sync::Arc<[u8]> {
    // SAFETY: zeroed memory is a valid `u8` slice.
    unsafe { std::sync::Arc::<[u8]>::new_zeroed_slice(len).assume_init() }
}

// SAFETY: every block is either the system allocator's or a mapping of `pages(size)` bytes,
// told apart by its layout alone (`mapped`), which Rust passes unchanged to `dealloc` and
// `realloc`; a mapping is page-aligned, so it meets any alignment up to a page.
unsafe impl GlobalAlloc for MapLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) {
            map(layout.size())
        } else {
            // SAFETY: forwarded as given.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) {
            map(layout.size()) // the kernel's pages read zero
        } else {
            // SAFETY: forwarded as given.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(layout) {
            // SAFETY: `ptr` is a mapping of `pages(layout.size())` bytes made by `map`.
            unsafe { libc::munmap(ptr.cast(), pages(layout.size())) };
        } else {
            // SAFETY: forwarded as given.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (whole body): the caller guarantees `layout` is `ptr`'s and that `new_size`
        // with `layout.align()` is a valid layout.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (mapped(layout), mapped(new_layout)) {
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                let p = unsafe { libc::mremap(ptr.cast(), pages(layout.size()), pages(new_size), libc::MREMAP_MAYMOVE) };
                if p == libc::MAP_FAILED { std::ptr::null_mut() } else { p.cast() }
            }
            _ => {
                let new = unsafe { self.alloc(new_layout) };
                if !new.is_null() {
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                new
            }
        }
    }
}

/// Tunes glibc's malloc for a daemon whose large Rust buffers [`MapLarge`] maps: at most two
/// arenas (per-thread arenas otherwise hold freed memory of every thread that ever decoded),
/// the C decoders' per-image memory reused from the heap up to [`MALLOC_MMAP_THRESHOLD`], and
/// free heap tops above [`MALLOC_TRIM_THRESHOLD`] given back. Call it before starting threads.
pub fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes glibc's allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD);
    }
}

/// Gives the heap's free pages back to the system, wherever they lie (glibc's `malloc_trim`;
/// elsewhere nothing): for after a one-off build that frees far more than it keeps, such as the
/// catalog of millions of listed keys, whose scratch would otherwise stay in the daemon's
/// resident memory for the mount's life.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own free lists; it is given no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).expect("layout")
    }

    #[test]
    fn a_large_block_is_a_mapping_of_its_own_and_a_small_one_the_heaps() {
        let a = MapLarge;
        for (size, align, own) in [(LARGE, 8, true), (LARGE - 1, 8, false), (3 << 20, 64, true), (LARGE, 8192, false), (16, 8, false)] {
            let l = layout(size, align);
            // SAFETY: a non-zero layout; the block is freed with it.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null(), "{size}");
                assert_eq!(p as usize % align, 0, "{size} aligned to {align}");
                assert_eq!(mapped(l), own, "{size}");
                if own {
                    assert_eq!(p as usize % PAGE, 0, "a mapping starts a page");
                }
                std::ptr::write_bytes(p, 0xAB, size);
                assert_eq!(*p.add(size - 1), 0xAB);
                a.dealloc(p, l);
            }
        }
    }

    #[test]
    fn a_zeroed_block_reads_zero_at_every_size() {
        let a = MapLarge;
        for size in [100, LARGE - 8, LARGE, LARGE + 1, 1 << 20] {
            let l = layout(size, 8);
            // SAFETY: as above.
            unsafe {
                let p = a.alloc_zeroed(l);
                assert!(!p.is_null());
                assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0), "{size}");
                a.dealloc(p, l);
            }
        }
    }

    #[test]
    fn growing_and_shrinking_across_the_threshold_keeps_the_bytes() {
        let a = MapLarge;
        // small -> large -> larger (mremap) -> small, the first bytes checked at each step.
        let sizes = [1000, LARGE + 10, 5 << 20, 2 * LARGE, 700, 64];
        // SAFETY: each step passes the block's current layout.
        unsafe {
            let mut l = layout(sizes[0], 8);
            let mut p = a.alloc(l);
            for i in 0..sizes[0] {
                *p.add(i) = (i % 251) as u8;
            }
            for &next in &sizes[1..] {
                p = a.realloc(p, l, next);
                assert!(!p.is_null(), "{next}");
                let kept = sizes[0].min(next);
                assert!((0..kept).all(|i| *p.add(i) == (i % 251) as u8), "bytes kept growing or shrinking to {next}");
                l = layout(next, 8);
                *p.add(next - 1) = 7; // the whole new size is writable
            }
            a.dealloc(p, l);
        }
    }

    #[test]
    fn populating_a_buffer_keeps_its_bytes_and_faults_in_its_pages() {
        /// How many of the pages of `len` bytes at page-aligned `p` are in memory (`mincore`).
        fn resident(p: *mut u8, len: usize) -> usize {
            let mut vec = vec![0u8; len.div_ceil(PAGE)];
            // SAFETY: `p` is a mapping of at least `len` bytes; `vec` has a byte per page.
            let rc = unsafe { libc::mincore(p.cast(), len, vec.as_mut_ptr()) };
            assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
            vec.iter().filter(|&&b| b & 1 == 1).count()
        }
        let a = MapLarge;
        let size = 1 << 20;
        let l = layout(size, 8);
        // SAFETY: as above; the slice is the block's own.
        unsafe {
            let p = a.alloc_zeroed(l);
            let buf = std::slice::from_raw_parts_mut(p, size);
            buf[..5].copy_from_slice(b"kept!");
            assert_eq!(resident(p, size), 1, "only the page written is in memory");
            // An unaligned part of it, and an empty slice: no whole page, nothing faulted in.
            populate(&mut buf[1..PAGE + 1]);
            populate(&mut []);
            assert_eq!(resident(p, size), 1);
            populate(&mut buf[PAGE / 2..]);
            assert_eq!(resident(p, size), size / PAGE, "every page in memory after one call");
            assert_eq!(&buf[..5], b"kept!");
            assert!(buf[5..].iter().all(|&b| b == 0));
            a.dealloc(p, l);
        }
    }
}
