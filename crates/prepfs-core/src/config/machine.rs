//! What the machine has, probed once at validation: its physical memory (the ceiling of a
//! memory budget) and, for the tests, the default cache size (`crate::machine_memory`'s share).

/// This machine's physical memory in bytes: `/proc/meminfo`'s `MemTotal`, else
/// `sysconf(_SC_PHYS_PAGES)` pages of `sysconf(_SC_PAGESIZE)`; `None` where neither answers.
pub(crate) fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let total_kib = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(kib) = total_kib {
        return Some(kib.saturating_mul(1024));
    }
    // SAFETY: sysconf has no preconditions.
    let (pages, page_size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    match (u64::try_from(pages), u64::try_from(page_size)) {
        (Ok(pages), Ok(size)) if pages > 0 && size > 0 => Some(pages.saturating_mul(size)),
        _ => None,
    }
}

/// `cache.memory: auto` (the default): this mount's share of the machine-wide budget of all
/// prepfs mounts (src/machine_memory.rs; a quarter of the memory available now when no other
/// mount runs). The planner gives each form no more than the set needs in it, so a small set
/// takes only what it needs.
#[cfg(test)]
pub(crate) fn auto_cache_memory() -> u64 {
    crate::machine_memory::auto_share().memory
}
