//! A thread's own clocks: the CPU time it used and the time it waited for a core, read where
//! work is measured (the planner's calibration, the source's reads, pixel work).

/// CPU time the calling thread has used, nanoseconds.
pub fn thread_cpu_nanos() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if ok {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    }
}

/// The calling thread's CPU time and its time runnable but waiting for a core, nanoseconds
/// since it started: the CPU clock, and the wait from `/proc/thread-self/schedstat` (kept open
/// per thread; its CPU field lags up to a tick for a running thread, the wait is current), or
/// no wait where the kernel does not keep it. A read's time off both is its time blocked on the
/// storage: on a busy machine a read from the page cache can take 20 ms of wall time, nearly all
/// of it waiting for a core, which the storage did not cost.
pub fn thread_sched_nanos() -> (u64, u64) {
    use std::cell::RefCell;
    use std::os::unix::fs::FileExt;
    thread_local! {
        static SCHEDSTAT: RefCell<Option<std::fs::File>> = RefCell::new(std::fs::File::open("/proc/thread-self/schedstat").ok());
    }
    let waited = SCHEDSTAT.with(|f| {
        let f = f.borrow();
        let mut buf = [0u8; 96];
        let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().nth(1)?.parse::<u64>().ok()
    });
    (thread_cpu_nanos(), waited.unwrap_or(0))
}
