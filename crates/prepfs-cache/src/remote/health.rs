//! The tier's health and its connections: up, or down since when (one probe per
//! [`RETRY_EVERY`](super::RETRY_EVERY) while down), the pool of idle connections, and what
//! counts as an outage rather than a server's reply.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use prepfs_base::sync::LockExt;

use super::server::Conn;
use super::{Inner, RETRY_EVERY};

/// Idle connections kept for lookups.
pub(super) const POOL_MAX: usize = 32;

/// Whether an error is the connection's (an outage) rather than the server's reply.
pub(super) fn is_outage(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_unrecoverable_error()
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub(super) fn utc(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

impl Inner {
    /// Whether a call may go out now: always while up; while down, for one caller per
    /// [`RETRY_EVERY`] (the probe).
    pub(super) fn usable(&self) -> bool {
        if !self.down.load(Ordering::Acquire) {
            return true;
        }
        let now = self.now_ms();
        let next = self.next_try_ms.load(Ordering::Acquire);
        now >= next
            && self
                .next_try_ms
                .compare_exchange(next, now + RETRY_EVERY.as_millis() as u64, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    pub(super) fn mark_up(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            let since = self.down_since.lock_or_recover().take();
            let secs = since.and_then(|s| s.elapsed().ok()).map_or(0.0, |d| d.as_secs_f64());
            tracing::info!(url = %self.url, down_for_s = secs, "remote cache tier is back");
        }
    }

    pub(super) fn mark_down(&self, e: &redis::RedisError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.next_try_ms.store(self.now_ms() + RETRY_EVERY.as_millis() as u64, Ordering::Release);
        let stale = std::mem::take(&mut *self.pool.lock_or_recover());
        drop(stale);
        if !self.down.swap(true, Ordering::AcqRel) {
            *self.down_since.lock_or_recover() = Some(SystemTime::now());
            self.outages.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                url = %self.url,
                error = %e,
                "remote cache tier is down; serving from the local tiers and the source, retrying once a second"
            );
        }
    }

    /// Runs `call` on a pooled (or new) connection if the tier is usable now. `None`: skipped
    /// (down) or failed (counted; an outage marks the tier down).
    pub(super) fn with_conn<T>(&self, call: impl FnOnce(&mut Conn) -> redis::RedisResult<T>) -> Option<T> {
        if !self.usable() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let pooled = self.pool.lock_or_recover().pop();
        let (generation, mut conn) = match pooled {
            Some(c) => c,
            None => {
                let generation = self.generation.load(Ordering::Acquire);
                match self.server.connect() {
                    Ok(conn) => (generation, conn),
                    Err(e) => {
                        self.mark_down(&e);
                        return None;
                    }
                }
            }
        };
        match call(&mut conn) {
            Ok(v) => {
                self.mark_up();
                self.give_back(generation, conn);
                Some(v)
            }
            Err(e) if is_outage(&e) => {
                self.mark_down(&e);
                None
            }
            Err(e) => {
                // The server answered (an error reply): the connection is sound.
                self.errors.fetch_add(1, Ordering::Relaxed);
                prepfs_base::warn_limited!("remote-reply", url = %self.url, error = %e, "remote cache tier refused a call");
                self.give_back(generation, conn);
                None
            }
        }
    }

    pub(super) fn give_back(&self, generation: u64, conn: Conn) {
        if generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        let mut pool = self.pool.lock_or_recover();
        if pool.len() < POOL_MAX {
            pool.push((generation, conn));
        }
    }
}
