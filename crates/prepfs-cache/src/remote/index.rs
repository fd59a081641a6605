//! The shared indexes: which samples the tier holds (a bitmap by catalog id, copied into this
//! mount's status bytes for opportunistic sampling) and which have an augmented output waiting.

use std::sync::atomic::Ordering;

use prepfs_source::catalog::FileId;

use super::{Inner, HELD_READ_EVERY};

impl Inner {
    /// Records in the shared index that the tier now holds `ids` (one pipeline of `SETBIT`s on
    /// one key: one node of a cluster), and in this mount's status bytes.
    pub(super) fn index_held(&self, ids: Vec<FileId>) {
        let Some(status) = &self.status else { return };
        if ids.is_empty() {
            return;
        }
        for &id in &ids {
            status.mark_remote(id);
        }
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("SETBIT").arg(&self.held_key[..]).arg(id).arg(1).ignore();
        }
        self.with_conn(|c| pipe.query::<()>(c));
    }

    /// Records in the shared index of waiting outputs that `ids` have one now (one pipeline of
    /// `SETBIT`s), and in this mount's copy.
    pub(super) fn index_waiting(&self, ids: Vec<FileId>) {
        let Some(waiting) = &self.waiting else { return };
        if ids.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for id in ids {
            waiting.set(id);
            pipe.cmd("SETBIT").arg(&self.waiting_key[..]).arg(id).arg(1).ignore();
        }
        self.with_conn(|c| pipe.query::<()>(c));
    }

    /// Copies the shared indexes into this mount's status bytes (what other mounts wrote) and
    /// its copy of the waiting outputs, at most once per [`HELD_READ_EVERY`]. A held bit is
    /// never cleared here: see [`HELD_REMOTE`]; a waiting bit follows the server's.
    pub(super) fn read_held(&self) {
        let Some(status) = &self.status else { return };
        let now = self.now_ms().max(1);
        let at = self.held_read_at_ms.load(Ordering::Relaxed);
        if at != 0 && now.saturating_sub(at) < HELD_READ_EVERY.as_millis() as u64 {
            return;
        }
        self.held_read_at_ms.store(now, Ordering::Relaxed);
        let got = self.with_conn(|c| {
            redis::cmd("MGET").arg(&self.held_key[..]).arg(&self.waiting_key[..]).query::<(Option<Vec<u8>>, Option<Vec<u8>>)>(c)
        });
        let Some((held, waiting)) = got else { return };
        let received = held.as_ref().map_or(0, Vec::len) + waiting.as_ref().map_or(0, Vec::len);
        self.network.bytes_received.fetch_add(received as u64, Ordering::Relaxed);
        // Redis numbers a bitmap's bits from the most significant bit of its first byte.
        let set_bits = |bitmap: &[u8], mut each: Box<dyn FnMut(FileId, bool) + '_>| {
            for (i, &byte) in bitmap.iter().enumerate() {
                for bit in 0..8 {
                    each((i * 8 + bit) as FileId, byte & (0x80 >> bit) != 0);
                }
            }
        };
        if let Some(bitmap) = held {
            set_bits(&bitmap, Box::new(|id, on| if on { status.mark_remote(id) }));
        }
        if let Some(mine) = &self.waiting {
            mine.clear_all();
            if let Some(bitmap) = waiting {
                set_bits(&bitmap, Box::new(|id, on| if on { mine.set(id); }));
            }
        }
    }
}
