//! Log lines that cannot flood the log: at most one line per kind per second. The lines held
//! back meanwhile are counted and said (`held_back`) in the next line of that kind.
//!
//! Writing the log never fails the daemon: the `tracing` writer drops lines it cannot write
//! (a closed terminal or pipe), and prepfs writes nothing to stderr with `eprintln!`.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::sync::{LockExt, Mutex};

/// One line per kind per this long.
const EVERY: Duration = Duration::from_secs(1);

fn kinds() -> &'static Mutex<HashMap<&'static str, (Instant, u64)>> {
    static KINDS: OnceLock<Mutex<HashMap<&'static str, (Instant, u64)>>> = OnceLock::new();
    KINDS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Whether a line of `kind` may be written now: `Some(lines held back since the last one)`,
/// or `None` (this one is held back and counted).
pub fn allow(kind: &'static str) -> Option<u64> {
    let now = Instant::now();
    let mut kinds = kinds().lock_or_recover();
    match kinds.get_mut(kind) {
        Some((last, held)) if now.duration_since(*last) < EVERY => {
            *held += 1;
            None
        }
        Some((last, held)) => {
            *last = now;
            Some(std::mem::take(held))
        }
        None => {
            kinds.insert(kind, (now, 0));
            Some(0)
        }
    }
}

/// `tracing::warn!` at most once per second per `kind`, saying how many lines it held back.
#[macro_export]
macro_rules! warn_limited {
    ($kind:expr, $($arg:tt)+) => {
        if let Some(held) = $crate::log::allow($kind) {
            if held > 0 {
                tracing::warn!(held_back = held, $($arg)+);
            } else {
                tracing::warn!($($arg)+);
            }
        }
    };
}

/// Writes a line to stderr, dropping it if stderr is gone (never a panic, unlike `eprintln!`).
pub fn say(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_one_kind_writes_one_line_a_second_and_counts_the_rest() {
        assert_eq!(allow("test-flood"), Some(0));
        for _ in 0..5000 {
            assert_eq!(allow("test-flood"), None);
        }
        assert_eq!(allow("test-other-kind"), Some(0), "kinds are limited apart");
        std::thread::sleep(EVERY + Duration::from_millis(20));
        assert_eq!(allow("test-flood"), Some(5000));
    }
}
