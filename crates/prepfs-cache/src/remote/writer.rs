//! The background writer: the write queue's jobs, the budget (`size` against what this mount
//! wrote and the server's `used_memory`), one pipeline of `SET NX` per batch, and the loop that
//! also probes a down tier and reads the shared indexes.

use std::sync::atomic::Ordering;

use crate::lower::Payload;
use crate::queue::{self, Jobs, Taken};
use prepfs_source::catalog::FileId;

use super::server::Server;
use super::value::{encode_value, RemoteKind, HEADER_LEN};
use super::{Inner, RETRY_EVERY};

/// The writer's queue: at most this many jobs ...
pub(super) const QUEUE_JOBS: usize = 256;
/// ... holding at most this many payload bytes.
pub(super) const QUEUE_BYTES: u64 = 64 << 20;
/// One pipeline of writes carries at most this many payload bytes.
pub(super) const BATCH_BYTES: u64 = 8 << 20;

pub(super) struct WriteJob {
    /// The sample (its catalog id: the same on every mount of the dataset).
    pub(super) id: FileId,
    pub(super) kind: RemoteKind,
    pub(super) key: Vec<u8>,
    pub(super) payload: Payload,
}

impl queue::Job for WriteJob {
    fn bytes(&self) -> u64 {
        self.payload.data().len() as u64
    }
}

impl Inner {
    /// The server's `used_memory`, sampled at most once a second (0 when unknown, and with a
    /// cluster, whose nodes each have their own).
    pub(super) fn server_used(&self) -> u64 {
        if matches!(self.server, Server::Cluster(_)) {
            return 0;
        }
        let now = self.now_ms().max(1);
        let at = self.server_used_at_ms.load(Ordering::Relaxed);
        if at == 0 || now.saturating_sub(at) >= 1000 {
            self.server_used_at_ms.store(now, Ordering::Relaxed);
            let info = self.with_conn(|c| redis::cmd("INFO").arg("memory").query::<String>(c));
            let used = info.as_deref().and_then(|text| {
                text.lines().find_map(|l| l.strip_prefix("used_memory:")).and_then(|v| v.trim().parse::<u64>().ok())
            });
            if let Some(used) = used {
                self.server_used.store(used, Ordering::Relaxed);
            }
        }
        self.server_used.load(Ordering::Relaxed)
    }

    /// Whether `len` more bytes keep within `size`.
    pub(super) fn fits(&self, len: u64) -> bool {
        let own = self.bytes_written.load(Ordering::Relaxed).saturating_sub(self.bytes_freed.load(Ordering::Relaxed));
        own.max(self.server_used()).saturating_add(len) <= self.size
    }

    /// Writes one batch in one pipeline: `SET key value NX` each, within the budget.
    pub(super) fn write_batch(&self, batch: &[Taken<WriteJob>]) {
        let mut items = Vec::with_capacity(batch.len());
        let mut lens = Vec::with_capacity(batch.len());
        let mut ids = Vec::with_capacity(batch.len());
        let mut kinds = Vec::with_capacity(batch.len());
        for job in batch {
            let data = job.payload.data();
            let len = (HEADER_LEN + data.len()) as u64;
            if !self.fits(len + lens.iter().sum::<u64>()) {
                self.over_size.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let value = encode_value(&self.value_key, job.kind, &job.key, data, job.payload.dims());
            items.push((&job.key[..], value));
            lens.push(len);
            ids.push(job.id);
            kinds.push(job.kind);
        }
        if lens.is_empty() {
            return;
        }
        match self.with_conn(|c| c.set_nx_all(&items)) {
            Some(replies) => {
                let (mut held, mut waiting) = (Vec::new(), Vec::new());
                for (((reply, len), id), kind) in replies.iter().zip(&lens).zip(ids).zip(kinds) {
                    if !matches!(reply, redis::Value::Nil) {
                        self.writes.fetch_add(1, Ordering::Relaxed);
                        self.bytes_written.fetch_add(*len, Ordering::Relaxed);
                        if kind != RemoteKind::Augmented {
                            self.saw_entry(*len, kind == RemoteKind::Decoded);
                        }
                        if kind == RemoteKind::Augmented {
                            waiting.push(id);
                        }
                    }
                    if kind != RemoteKind::Augmented {
                        held.push(id);
                    }
                }
                self.index_held(held);
                self.index_waiting(waiting);
            }
            None => {
                self.dropped_writes.fetch_add(lens.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// The writer: sends what is queued, in batches; while the tier is down and nothing is
    /// queued it probes (PING) once per [`RETRY_EVERY`], so the tier comes back by itself even
    /// while every request hits memory. Ends when the queue is closed and drained.
    pub(super) fn run_writer(&self, jobs: Jobs<WriteJob>) {
        use std::sync::mpsc::RecvTimeoutError;
        loop {
            let first = match jobs.recv_timeout(RETRY_EVERY) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    if self.down.load(Ordering::Acquire) {
                        self.with_conn(|c| redis::cmd("PING").query::<String>(c));
                    } else {
                        self.read_held();
                        self.tick_network();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut batch = vec![first];
            let mut bytes = batch[0].payload.data().len() as u64;
            while bytes < BATCH_BYTES {
                let Some(job) = jobs.try_recv() else { break };
                bytes += job.payload.data().len() as u64;
                batch.push(job);
            }
            self.write_batch(&batch);
            if !self.down.load(Ordering::Acquire) {
                self.read_held();
                self.tick_network();
            }
            // The batch is pending until here (a flush waits for the index it updated too).
            drop(batch);
        }
    }
}
