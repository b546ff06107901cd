//! Transactional messages: a half message is stored hidden until EndTransaction commits it
//! (it then enters its queue) or rolls it back (discarded). Half messages left unresolved are
//! checked back: after `transaction_check_delay`, and every `transaction_check_interval`, the
//! broker pushes a `RecoverOrphanedTransactionCommand` to a producer of the topic over Telemetry;
//! after `transaction_check_max` checks the message is discarded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::store::{Queue, Topic};
use crate::proto;

/// The user property that carries a transactional message's transaction id.
pub const TRANSACTION_ID_PROPERTY: &str = "__transactionId__";
/// The user property that counts the check-backs of a half message.
pub const CHECK_TIMES_PROPERTY: &str = "TRANSACTION_CHECK_TIMES";

/// A half message.
#[derive(Debug, Clone)]
pub struct Half {
    /// Its topic.
    pub topic: Arc<Topic>,
    /// The queue it enters on commit.
    pub queue: Arc<Queue>,
    /// The message.
    pub msg: proto::Message,
    /// The producer that sent it.
    pub producer: String,
    /// The endpoint it was sent to.
    pub endpoint: usize,
    /// When it was sent.
    pub created: Instant,
    /// Check-backs sent so far.
    pub checks: u32,
    /// When the next check-back is due.
    pub next_check: Instant,
}

/// Transaction counters, for stats.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxCounts {
    /// Half messages waiting.
    pub pending: u64,
    /// Committed.
    pub committed: u64,
    /// Rolled back.
    pub rolled_back: u64,
    /// Check-backs sent.
    pub checks: u64,
    /// Discarded after too many checks.
    pub discarded: u64,
}

/// The half messages of the broker, by transaction id.
#[derive(Debug, Default)]
pub struct Transactions {
    halves: Mutex<HashMap<String, Half>>,
    seq: AtomicU64,
    /// Committed so far.
    pub committed: AtomicU64,
    /// Rolled back so far.
    pub rolled_back: AtomicU64,
    /// Check-backs sent so far.
    pub checks: AtomicU64,
    /// Discarded so far.
    pub discarded: AtomicU64,
}

impl Transactions {
    /// Store a half message; returns its transaction id: as on a proxy, the message id (with a
    /// sequence number after it if that id is already pending, e.g. a resent message). The
    /// message carries it in its `__transactionId__` property, which the check-back and, once
    /// committed, the consumers see.
    pub fn add(&self, mut half: Half) -> String {
        let message_id = half
            .msg
            .system_properties
            .as_ref()
            .map_or(String::new(), |s| s.message_id.clone());
        let mut halves = self.halves.lock();
        let id = if message_id.is_empty() || halves.contains_key(&message_id) {
            let seq = self.seq.fetch_add(1, Ordering::Relaxed);
            format!("{message_id}{seq:016X}")
        } else {
            message_id
        };
        half.msg
            .user_properties
            .insert(TRANSACTION_ID_PROPERTY.to_string(), id.clone());
        halves.insert(id.clone(), half);
        id
    }

    /// Resolve a transaction: the half message, if `transaction_id` is pending for
    /// `message_id`.
    pub fn take(&self, transaction_id: &str, message_id: &str) -> Option<Half> {
        let mut halves = self.halves.lock();
        let ok = halves.get(transaction_id).is_some_and(|h| {
            h.msg
                .system_properties
                .as_ref()
                .is_some_and(|s| s.message_id == message_id)
        });
        if ok {
            halves.remove(transaction_id)
        } else {
            None
        }
    }

    /// Put a half message back (a resolution that could not be applied).
    pub fn add_back(&self, transaction_id: String, half: Half) {
        self.halves.lock().insert(transaction_id, half);
    }

    /// A copy of a pending half message.
    pub fn get(&self, transaction_id: &str) -> Option<Half> {
        self.halves.lock().get(transaction_id).cloned()
    }

    /// Half messages due for a check-back at `now` (their counters are advanced), and those to
    /// discard after `max` checks.
    pub fn due(
        &self,
        now: Instant,
        interval: std::time::Duration,
        max: u32,
    ) -> (Vec<(String, Half)>, Vec<Half>) {
        let mut halves = self.halves.lock();
        let mut check = Vec::new();
        let mut gone = Vec::new();
        halves.retain(|id, h| {
            if h.next_check > now {
                return true;
            }
            if h.checks >= max {
                gone.push(h.clone());
                return false;
            }
            h.checks += 1;
            // As the proxy: the check-back (and the message, if the producer commits it)
            // tells how many checks there were.
            h.msg
                .user_properties
                .insert(CHECK_TIMES_PROPERTY.to_string(), h.checks.to_string());
            h.next_check = crate::duration::deadline(now, interval);
            check.push((id.clone(), h.clone()));
            true
        });
        self.discarded
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        (check, gone)
    }

    /// Counters.
    pub fn counts(&self) -> TxCounts {
        TxCounts {
            pending: self.halves.lock().len() as u64,
            committed: self.committed.load(Ordering::Relaxed),
            rolled_back: self.rolled_back.load(Ordering::Relaxed),
            checks: self.checks.load(Ordering::Relaxed),
            discarded: self.discarded.load(Ordering::Relaxed),
        }
    }

    /// Pending transaction ids with their topic and message id.
    pub fn pending(&self) -> Vec<(String, String, String)> {
        let mut v: Vec<_> = self
            .halves
            .lock()
            .iter()
            .map(|(id, h)| {
                (
                    id.clone(),
                    h.topic.name.to_string(),
                    h.msg
                        .system_properties
                        .as_ref()
                        .map_or(String::new(), |s| s.message_id.clone()),
                )
            })
            .collect();
        v.sort();
        v
    }
}

/// The command a producer gets to resolve an orphaned transaction.
pub(crate) fn recover_command(
    tx_id: &str,
    msg: &proto::Message,
) -> proto::telemetry_command::Command {
    proto::telemetry_command::Command::RecoverOrphanedTransactionCommand(
        proto::RecoverOrphanedTransactionCommand {
            message: Some(msg.clone()),
            transaction_id: tx_id.to_string(),
        },
    )
}
