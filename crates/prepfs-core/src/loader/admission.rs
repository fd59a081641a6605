//! What loader connections may hold, per user and in all: places (connections served at once)
//! and ring memory (the shared memory each connection's ring takes). Both are reserved before a
//! connection is served and given back when it ends (the reservation's `Drop`).
//!
//! The rule is the job slots' (`sampling::registry`): a user other than root and the mount's
//! owner holds at most a per-user share and never takes the last share kept for root and the
//! owner, so one user, however many connections they open or however large the rings they ask
//! for, cannot lock anyone else out or make the daemon hold more than the budget.

use std::collections::HashMap;
use std::sync::Arc;

use prepfs_base::sync::{LockExt, Mutex};

/// Connections served at once, in all.
pub(crate) const MAX_CONNECTIONS: usize = 32;
/// Connections one user other than root and the mount's owner may hold at once.
pub(crate) const PER_USER_CONNECTIONS: usize = 8;
/// Places only root and the mount's owner take: other users never take the last ones.
const KEPT_CONNECTIONS: usize = 4;

/// Why a connection or a ring is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("the mount serves {MAX_CONNECTIONS} loaders at once; try again later")]
    Full,
    #[error("user {uid} holds {held} loader connections, the most one user may; close one")]
    UserPlaces { uid: u32, held: usize },
    #[error("a ring of {asked} bytes does not fit the loaders' memory ({free} of {budget} bytes free; loader.ring_memory); ask for fewer slots or smaller batches")]
    Memory { asked: u64, free: u64, budget: u64 },
    #[error("user {uid}'s rings would take {total} bytes, more than loader.ring_memory_per_user ({per_user}); ask for fewer slots or smaller batches, or close a loader")]
    UserMemory { uid: u32, total: u64, per_user: u64 },
}

#[derive(Default)]
struct Held {
    places: usize,
    bytes: u64,
    by_user: HashMap<u32, (usize, u64)>,
}

/// The places and ring memory of every live connection.
pub(crate) struct Admission {
    /// Ring memory in all (`loader.ring_memory`).
    budget: u64,
    /// Ring memory one unprivileged user may hold (`loader.ring_memory_per_user`); the same
    /// amount of the budget is kept for root and the mount's owner.
    per_user: u64,
    held: Mutex<Held>,
}

/// A place, and the ring memory reserved with it; given back on drop.
pub(crate) struct Reservation {
    admission: Arc<Admission>,
    uid: u32,
    bytes: u64,
}

impl Admission {
    pub(crate) fn new(budget: u64, per_user: u64) -> Arc<Admission> {
        Arc::new(Admission { budget, per_user: per_user.min(budget), held: Mutex::default() })
    }

    /// A place for a connection of `uid` (`privileged`: root or the mount's owner).
    pub(crate) fn place(self: &Arc<Self>, uid: u32, privileged: bool) -> Result<Reservation, Refusal> {
        let mut held = self.held.lock_or_recover();
        if held.places >= MAX_CONNECTIONS {
            return Err(Refusal::Full);
        }
        let (places, _) = held.by_user.get(&uid).copied().unwrap_or_default();
        if !privileged {
            if places >= PER_USER_CONNECTIONS {
                return Err(Refusal::UserPlaces { uid, held: places });
            }
            if held.places + KEPT_CONNECTIONS >= MAX_CONNECTIONS {
                return Err(Refusal::Full);
            }
        }
        held.places += 1;
        held.by_user.entry(uid).or_default().0 += 1;
        Ok(Reservation { admission: Arc::clone(self), uid, bytes: 0 })
    }

    /// Ring memory in use now, in all.
    #[cfg(test)]
    fn bytes_held(&self) -> u64 {
        self.held.lock_or_recover().bytes
    }
}

impl Reservation {
    /// Reserves `bytes` of ring memory more for this connection (`privileged`: as for
    /// [`Admission::place`]).
    pub(crate) fn reserve(&mut self, bytes: u64, privileged: bool) -> Result<(), Refusal> {
        let admission = &self.admission;
        let mut held = admission.held.lock_or_recover();
        // Unprivileged users leave `per_user` of the budget to root and the owner.
        let usable = if privileged { admission.budget } else { admission.budget - admission.per_user };
        let free = usable.saturating_sub(held.bytes);
        if bytes > free {
            return Err(Refusal::Memory { asked: bytes, free: admission.budget.saturating_sub(held.bytes), budget: admission.budget });
        }
        let user = held.by_user.get(&self.uid).map_or(0, |&(_, b)| b);
        if !privileged && user + bytes > admission.per_user {
            return Err(Refusal::UserMemory { uid: self.uid, total: user + bytes, per_user: admission.per_user });
        }
        held.bytes += bytes;
        held.by_user.entry(self.uid).or_default().1 += bytes;
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.admission.held.lock_or_recover();
        held.places -= 1;
        held.bytes -= self.bytes;
        if let Some(user) = held.by_user.get_mut(&self.uid) {
            user.0 -= 1;
            user.1 -= self.bytes;
            if user.0 == 0 {
                held.by_user.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_user_holds_at_most_their_places_and_root_still_finds_one() {
        let admission = Admission::new(1 << 30, 1 << 28);
        let mine: Vec<_> = (0..PER_USER_CONNECTIONS).map(|_| admission.place(1000, false).expect("a place")).collect();
        assert_eq!(admission.place(1000, false).err(), Some(Refusal::UserPlaces { uid: 1000, held: PER_USER_CONNECTIONS }));
        // Other users fill what is left but the kept places.
        let mut others = Vec::new();
        for uid in 2000.. {
            match admission.place(uid, false) {
                Ok(r) => others.push(r),
                Err(e) => {
                    assert_eq!(e, Refusal::Full);
                    break;
                }
            }
        }
        assert_eq!(mine.len() + others.len(), MAX_CONNECTIONS - KEPT_CONNECTIONS);
        let root: Vec<_> = (0..KEPT_CONNECTIONS).map(|_| admission.place(0, true).expect("root's place")).collect();
        assert_eq!(admission.place(0, true).err(), Some(Refusal::Full));
        drop(root);
        drop(mine);
        assert!(admission.place(1000, false).is_ok(), "places are given back when connections end");
    }

    #[test]
    fn ring_memory_is_bounded_per_user_and_in_all_and_given_back() {
        let admission = Admission::new(1000, 300);
        let mut a = admission.place(1000, false).expect("a place");
        a.reserve(200, false).expect("within the user's share");
        let mut b = admission.place(1000, false).expect("a place");
        assert!(matches!(b.reserve(200, false), Err(Refusal::UserMemory { uid: 1000, total: 400, per_user: 300 })));
        b.reserve(100, false).expect("the rest of the share");
        // Other users together leave the owner's share: 1000 - 300 usable.
        let mut c = admission.place(2000, false).expect("a place");
        c.reserve(300, false).expect("another user's share");
        let mut d = admission.place(3000, false).expect("a place");
        assert!(matches!(d.reserve(200, false), Err(Refusal::Memory { .. })), "unprivileged users never take the kept share");
        d.reserve(100, false).expect("what is left of the usable budget");
        assert_eq!(admission.bytes_held(), 700);
        let mut root = admission.place(0, true).expect("root's place");
        root.reserve(300, true).expect("root takes the kept share");
        assert!(root.reserve(1, true).is_err(), "no one passes the budget");
        drop((a, b, c, d, root));
        assert_eq!(admission.bytes_held(), 0);
    }
}
