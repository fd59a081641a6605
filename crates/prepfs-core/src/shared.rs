//! Small types and helpers that more than one subsystem uses, kept here rather than in whichever
//! module needed them first: the forms a sample is served in, an image size, decoded pixels,
//! the stable hash, the random draw of one augmentation, and a thread's CPU and waiting times.

use rand_pcg::Pcg64Mcg;


/// The three forms a sample is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Form {
    /// The source bytes, byte for byte.
    Encoded,
    /// The full-resolution RGB decode.
    Decoded,
    /// A fresh augmentation at every open.
    Augmented,
}

impl Form {
    pub(crate) const ALL: [Form; 3] = [Form::Encoded, Form::Decoded, Form::Augmented];

    /// The view's directory name.
    pub(crate) fn dir_name(self) -> &'static str {
        match self {
            Form::Encoded => "encoded",
            Form::Decoded => "decoded",
            Form::Augmented => "augmented",
        }
    }

    /// The form's number in inode numbers.
    pub(crate) fn index(self) -> u64 {
        match self {
            Form::Encoded => 0,
            Form::Decoded => 1,
            Form::Augmented => 2,
        }
    }

    /// The form numbered `i` by [`Form::index`].
    pub(crate) fn from_index(i: u64) -> Option<Form> {
        Form::ALL.get(i as usize).copied()
    }

    /// The best [`crate::cache::SampleCache::rank`] a sample can have in this form's view.
    pub(crate) fn top_rank(self) -> Rank {
        match self {
            Form::Encoded => 1,
            Form::Decoded => 2,
            Form::Augmented => 3,
        }
    }
}

/// A preference for a sample in some view: 0 not cached, higher is cheaper to serve (what
/// sampling orders and substitutes by).
pub(crate) type Rank = u8;

/// A width and a height in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Size2 {
    pub width: u32,
    pub height: u32,
}

impl Size2 {
    pub(crate) fn new(width: u32, height: u32) -> Self {
        Size2 { width, height }
    }
    /// Pixels in the image.
    pub fn area(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }
}

/// A decoded RGB image, 3 bytes a pixel, rows packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

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

/// The random generator of one draw: a pure function of (seed, job, epoch, sample).
pub fn draw_rng(seed: u64, job: u64, epoch: u64, sample: u64) -> Pcg64Mcg {
    let mut h = splitmix64(seed ^ 0x7072_6570_6673);
    for part in [job, epoch, sample] {
        h = splitmix64(h ^ part);
    }
    Pcg64Mcg::new(u128::from(h) << 64 | u128::from(splitmix64(h)))
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// CPU time the calling thread has used, nanoseconds.
pub(crate) fn thread_cpu_nanos() -> u64 {
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
pub(crate) fn thread_sched_nanos() -> (u64, u64) {
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
