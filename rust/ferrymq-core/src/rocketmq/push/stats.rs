//! The push consumer's counters: [`ConsumerStats`] (live cache figures, high-water marks and
//! counters that only grow, shared by every task of one consumer) and its point-in-time copy
//! [`StatsSnapshot`].
//!
//! The bottom of the push consumer: it imports nothing else from [`super`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::rocketmq::listener::ConsumeResult;

/// Counters of a consumer. Cache figures are live; the rest only grow.
#[derive(Debug, Default)]
pub struct ConsumerStats {
    cached_messages: AtomicUsize,
    cached_bytes: AtomicUsize,
    reserved: AtomicUsize,
    max_cached_messages: AtomicUsize,
    max_cached_bytes: AtomicUsize,
    pub(super) process_queues: AtomicUsize,
    received: AtomicU64,
    consumed_ok: AtomicU64,
    consumed_failed: AtomicU64,
    local_retries: AtomicU64,
    acked: AtomicU64,
    nacked: AtomicU64,
    dead_lettered: AtomicU64,
    invalid_handles: AtomicU64,
    settle_retries: AtomicU64,
    settle_abandoned: AtomicU64,
    left_for_redelivery: AtomicU64,
    receive_failures: AtomicU64,
    receive_throttled: AtomicU64,
    cache_full: AtomicU64,
    expired_queues: AtomicU64,
    changed: Notify,
}

/// A point-in-time copy of [`ConsumerStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Assigned queues being received from.
    pub process_queues: usize,
    /// Messages received and not yet settled.
    pub cached_messages: usize,
    /// Approximate bytes of those messages.
    pub cached_bytes: usize,
    /// Highest `cached_messages` seen.
    pub max_cached_messages: usize,
    /// Highest `cached_bytes` seen.
    pub max_cached_bytes: usize,
    /// Messages received.
    pub received: u64,
    /// Listener calls that returned SUCCESS.
    pub consumed_ok: u64,
    /// Listener calls that returned FAILURE or raised.
    pub consumed_failed: u64,
    /// FIFO messages consumed again locally after a failure.
    pub local_retries: u64,
    /// Messages acknowledged.
    pub acked: u64,
    /// Messages made invisible again after a failure.
    pub nacked: u64,
    /// FIFO messages forwarded to the dead-letter queue.
    pub dead_lettered: u64,
    /// Settle operations refused with `INVALID_RECEIPT_HANDLE`.
    pub invalid_receipt_handles: u64,
    /// Settle operations retried.
    pub settle_retries: u64,
    /// Settle operations given up at the shutdown deadline.
    pub settle_abandoned: u64,
    /// FIFO messages dropped from the cache unconsumed because the broker redelivers them
    /// (it refused the result of an earlier message received with them, or a redelivered copy
    /// arrived): the redelivered copies are consumed instead, in order.
    pub left_for_redelivery: u64,
    /// Receives that failed.
    pub receive_failures: u64,
    /// Receives the broker throttled.
    pub receive_throttled: u64,
    /// Times a receive loop waited because the cache was full.
    pub cache_full_waits: u64,
    /// Process queues dropped (and created again) because their receive loop was idle too long.
    pub expired_process_queues: u64,
    /// Deliveries waiting for a consumption thread.
    pub listener_queued: usize,
    /// Listener calls running.
    pub listener_running: usize,
}

impl ConsumerStats {
    /// Reserve up to `want` cache slots before a receive, within the consumer-wide limits.
    pub(crate) fn reserve(&self, want: usize, max_messages: usize, max_bytes: usize) -> usize {
        if self.cached_bytes.load(Ordering::Acquire) >= max_bytes {
            return 0;
        }
        let mut reserved = self.reserved.load(Ordering::Acquire);
        loop {
            let used = reserved + self.cached_messages.load(Ordering::Acquire);
            let grant = want.min(max_messages.saturating_sub(used));
            if grant == 0 {
                return 0;
            }
            match self.reserved.compare_exchange_weak(
                reserved,
                reserved + grant,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return grant,
                Err(now) => reserved = now,
            }
        }
    }

    pub(crate) fn unreserve(&self, n: usize) {
        self.reserved.fetch_sub(n, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    pub(crate) fn on_cached(&self, messages: usize, bytes: usize, reserved: usize) {
        // Count first, then release the reservation: the sum never drops below the truth.
        let m = self.cached_messages.fetch_add(messages, Ordering::AcqRel) + messages;
        let b = self.cached_bytes.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.reserved.fetch_sub(reserved, Ordering::AcqRel);
        self.max_cached_messages.fetch_max(m, Ordering::AcqRel);
        self.max_cached_bytes.fetch_max(b, Ordering::AcqRel);
    }

    pub(crate) fn on_evicted(&self, bytes: usize) {
        self.cached_messages.fetch_sub(1, Ordering::AcqRel);
        self.cached_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Wake whoever waits for the cache to change (receive loops waiting for room, shutdown).
    pub(crate) fn notify_changed(&self) {
        self.changed.notify_waiters();
    }

    /// Resolves at the next change of the cache (arm it with `enable` before checking).
    pub(crate) fn cache_changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    pub(crate) fn cached(&self) -> usize {
        self.cached_messages.load(Ordering::Acquire)
    }

    pub(crate) fn on_received(&self, n: usize) {
        self.received.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn on_consumed(&self, r: ConsumeResult) {
        match r {
            ConsumeResult::Success => &self.consumed_ok,
            ConsumeResult::Failure => &self.consumed_failed,
        }
        .fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_local_retry(&self) {
        self.local_retries.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_acked(&self, n: usize) {
        self.acked.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn on_nacked(&self) {
        self.nacked.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_dead_lettered(&self) {
        self.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_invalid_handle(&self) {
        self.invalid_handles.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_settle_retry(&self, n: usize) {
        self.settle_retries.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn on_settle_abandoned(&self, n: usize) {
        self.settle_abandoned.fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn on_left_for_redelivery(&self, n: usize) {
        self.left_for_redelivery
            .fetch_add(n as u64, Ordering::Relaxed);
    }
    pub(crate) fn on_receive_failed(&self) {
        self.receive_failures.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_receive_throttled(&self) {
        self.receive_throttled.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_cache_full(&self) {
        self.cache_full.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn on_queue_expired(&self) {
        self.expired_queues.fetch_add(1, Ordering::Relaxed);
    }

    /// Copy the counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            process_queues: self.process_queues.load(Ordering::Relaxed),
            cached_messages: self.cached_messages.load(Ordering::Acquire),
            cached_bytes: self.cached_bytes.load(Ordering::Acquire),
            max_cached_messages: self.max_cached_messages.load(Ordering::Acquire),
            max_cached_bytes: self.max_cached_bytes.load(Ordering::Acquire),
            received: l(&self.received),
            consumed_ok: l(&self.consumed_ok),
            consumed_failed: l(&self.consumed_failed),
            local_retries: l(&self.local_retries),
            acked: l(&self.acked),
            nacked: l(&self.nacked),
            dead_lettered: l(&self.dead_lettered),
            invalid_receipt_handles: l(&self.invalid_handles),
            settle_retries: l(&self.settle_retries),
            settle_abandoned: l(&self.settle_abandoned),
            left_for_redelivery: l(&self.left_for_redelivery),
            receive_failures: l(&self.receive_failures),
            receive_throttled: l(&self.receive_throttled),
            cache_full_waits: l(&self.cache_full),
            expired_process_queues: l(&self.expired_queues),
            listener_queued: 0,
            listener_running: 0,
        }
    }
}
