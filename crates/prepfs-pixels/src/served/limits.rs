//! The descriptors output files may take: the process's open-file limit, raised to its hard
//! limit at mount, and the budget it leaves for files made ahead of an open.

/// How many output files may be made ahead of an open: half the descriptors the process may
/// open (`RLIMIT_NOFILE`'s soft limit; the mount raises it to the hard limit before serving),
/// the other half left for source files, handles and sockets.
pub(super) fn fd_budget() -> usize {
    nofile_limits().map_or(0, |(soft, _)| (soft / 2) as usize)
}

/// Raises the soft limit on open descriptors to the hard limit, so the cache may hold outputs in
/// files. Returns the soft limit now.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let (soft, hard) = nofile_limits()?;
    if soft < hard {
        let raised = libc::rlimit { rlim_cur: hard, rlim_max: hard };
        // SAFETY: setrlimit with a valid, initialised struct.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        return Ok(hard);
    }
    Ok(soft)
}

pub(super) fn nofile_limits() -> std::io::Result<(u64, u64)> {
    let mut now = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((now.rlim_cur, now.rlim_max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_budget_is_half_the_open_file_limit() {
        let (soft, _) = nofile_limits().expect("getrlimit");
        assert_eq!(fd_budget() as u64, soft / 2);
    }
}
