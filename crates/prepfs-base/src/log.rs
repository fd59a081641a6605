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

/// The levels `--log-level` and `PREPFS_LOG` take as a whole filter or per target.
const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Parses `--log-level` or `PREPFS_LOG`: a level (`error`, `warn`, `info`, `debug`, `trace`,
/// `off`) or a tracing filter of comma-separated directives, each a level or `TARGET=LEVEL`
/// (`prepfs=debug,fuser=warn`). A bare word that is no level is refused: tracing would take it
/// for a target name and log nothing of prepfs, which is never what `verbose` meant.
pub fn parse_filter(text: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    let expected = "expected error, warn, info, debug or trace, or a filter such as `prepfs=debug,fuser=warn`";
    for directive in text.split(',').map(str::trim) {
        if directive.is_empty() {
            return Err(format!("an empty directive; {expected}"));
        }
        let level = match directive.rsplit_once('=') {
            Some((target, level)) if !target.is_empty() => level,
            Some(_) => return Err(format!("`{directive}` names no target; {expected}")),
            None => directive,
        };
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
            return Err(format!("`{level}` is not a log level; {expected}"));
        }
    }
    tracing_subscriber::EnvFilter::builder().parse(text).map_err(|e| format!("{e}; {expected}"))
}

/// Opens the `--log-file` for appending, creating it with mode 0600 if missing; through no
/// link, in a directory no other user can redirect ([`crate::private_dir::open_append`]).
pub fn open_log_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    crate::private_dir::open_append(path)
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

    #[test]
    fn log_levels_and_filters_parse_and_other_words_are_refused() {
        for good in ["info", "DEBUG", "off", "prepfs=debug", "prepfs=debug,fuser=warn", "warn,prepfs::mount=trace"] {
            assert!(parse_filter(good).is_ok(), "{good}");
        }
        for bad in ["verbose", "loud", "", "prepfs=loud", "info,", "=debug"] {
            assert!(parse_filter(bad).is_err(), "{bad}");
        }
    }
}
