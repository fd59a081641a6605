//! Progress of the mount's long work (the source scan, validation, calibration): a bar on the
//! terminal when stderr is one, else a plain log line when the work starts, every
//! [`LOG_EVERY`] while it runs, and when it ends, so a log file or the journal shows it too.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use prepfs_base::sync::{LockExt, Mutex};

/// How often a log line reports work in progress when stderr is no terminal.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// One piece of long work: see the module documentation.
pub struct Progress {
    what: &'static str,
    /// The units of work, when known (else a running count).
    total: Option<u64>,
    done: AtomicU64,
    bar: Option<ProgressBar>,
    started: Instant,
    /// When the last log line was written (no bar only).
    logged: Mutex<Instant>,
}

impl Progress {
    /// Starts reporting `what` (e.g. "validating"), of `total` units if known.
    pub fn start(what: &'static str, unit: &'static str, total: Option<u64>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let template = match total {
                Some(_) => format!("{{spinner}} {what} {{bar:30}} {{pos}}/{{len}} {unit} ({{elapsed}}, {{eta}} left)"),
                None => format!("{{spinner}} {what} {{pos}} {unit} ({{elapsed}})"),
            };
            let bar = total.map_or_else(ProgressBar::new_spinner, ProgressBar::new);
            bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_spinner()));
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        if bar.is_none() {
            match total {
                Some(n) => tracing::info!("{what}: {n} {unit}"),
                None => tracing::info!("{what}"),
            }
        }
        let now = Instant::now();
        Progress { what, total, done: AtomicU64::new(0), bar, started: now, logged: Mutex::new(now) }
    }

    /// Sets the units done so far.
    pub fn set(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
        self.show(done);
    }

    /// Counts `n` more units done.
    pub fn add(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        self.show(done);
    }

    fn show(&self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            return;
        }
        let due = {
            let mut logged = self.logged.lock_or_recover();
            let due = logged.elapsed() >= LOG_EVERY;
            if due {
                *logged = Instant::now();
            }
            due
        };
        if due {
            match self.total {
                Some(n) => tracing::info!("{}: {done}/{n} ({:.0} s)", self.what, self.started.elapsed().as_secs_f64()),
                None => tracing::info!("{}: {done} ({:.0} s)", self.what, self.started.elapsed().as_secs_f64()),
            }
        }
    }

    /// Ends the report: the bar is cleared (the caller logs the outcome).
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
