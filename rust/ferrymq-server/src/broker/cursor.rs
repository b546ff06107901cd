//! The POP state of one consumer group on one queue: a [`Cursor`] and its per-offset slots.
//!
//! `low` (everything below is done), `next` (nothing at or above was delivered yet) and one
//! slot per offset in between. The queue state in [`store`](super::store) keeps one cursor per
//! group; what a receive, an ack or a new invisible duration does to a cursor is in
//! [`pop`](super::pop). This module imports neither of them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Whether the client that received an auto-renewed message is still around.
#[derive(Debug)]
pub struct Liveness {
    alive: AtomicBool,
}

impl Liveness {
    /// A live marker.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            alive: AtomicBool::new(true),
        })
    }
    /// Mark the client gone (termination, endpoint restart).
    pub fn kill(&self) {
        self.alive.store(false, Ordering::Release);
    }
    /// Whether the client is still around.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

/// The state of one offset for one group.
#[derive(Debug, Clone)]
pub(super) enum Slot {
    /// Acked, dead-lettered or filtered out.
    Done,
    /// Waiting for (re)delivery; only FIFO groups skip messages this way.
    Ready { attempts: u32 },
    /// Delivered and invisible until `visible_at`.
    Inflight(Inflight),
}

#[derive(Debug, Clone)]
pub(super) struct Inflight {
    pub(super) nonce: u32,
    pub(super) attempts: u32,
    pub(super) visible_at: Instant,
    pub(super) held_since: Instant,
    pub(super) renew: Option<Arc<Liveness>>,
    /// The connection the receive was answered on: auto-renewal stops when it closes (a
    /// message written to a connection that died may never have reached the client).
    pub(super) conn: Option<Arc<Liveness>>,
}

impl Inflight {
    /// Whether the broker may still renew this message for its client.
    pub(super) fn renewable(&self) -> bool {
        self.renew.as_ref().is_some_and(|l| l.is_alive())
            && self.conn.as_ref().is_none_or(|c| c.is_alive())
    }
}

/// POP state of one consumer group on one queue.
#[derive(Debug)]
pub struct Cursor {
    pub(super) low: u64,
    pub(super) next: u64,
    pub(super) slots: VecDeque<Slot>,
    pub(super) expiry: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    pub(super) inflight: usize,
}

impl Cursor {
    pub(super) fn new(start: u64) -> Self {
        Self {
            low: start,
            next: start,
            slots: VecDeque::new(),
            expiry: BinaryHeap::new(),
            inflight: 0,
        }
    }

    /// Everything below this offset is done.
    pub fn low(&self) -> u64 {
        self.low
    }

    /// Messages delivered and not yet acked.
    pub fn inflight(&self) -> usize {
        self.inflight
    }

    /// Offsets at or above this were never delivered.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Forget offsets evicted from the queue.
    pub(super) fn sync(&mut self, base: u64) {
        while self.low < base {
            if let Some(Slot::Inflight(_)) = self.slots.pop_front() {
                self.inflight -= 1;
            }
            self.low += 1;
        }
        self.next = self.next.max(base);
    }

    pub(super) fn compact(&mut self) {
        while let Some(Slot::Done) = self.slots.front() {
            self.slots.pop_front();
            self.low += 1;
        }
        if self.expiry.len() > 1024 && self.expiry.len() > 4 * self.inflight {
            let live: Vec<_> = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, s)| match s {
                    Slot::Inflight(f) => {
                        Some(Reverse((f.visible_at, self.low + i as u64, f.nonce)))
                    }
                    _ => None,
                })
                .collect();
            self.expiry = live.into();
        }
    }

    pub(super) fn slot_mut(&mut self, offset: u64) -> Option<&mut Slot> {
        offset
            .checked_sub(self.low)
            .and_then(|i| self.slots.get_mut(i as usize))
    }
}
