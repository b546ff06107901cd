//! The push consumer's counters: [`ConsumerStats`] (live cache figures, high-water marks and
//! counters that only grow, shared by every task of one consumer) and its point-in-time copy
//! [`StatsSnapshot`].
//!
//! The bottom of the push consumer: it imports nothing else from [`super`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::rocketmq::listener::ConsumeResult;

/// States each counter that only grows once: its doc, its field (the same name in
/// [`ConsumerStats`] and [`StatsSnapshot`]) and the method that adds to it.
macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident, $on:ident;)*) => {
        /// Counters of a consumer. Cache figures are live; the rest only grow.
        #[derive(Debug, Default)]
        pub struct ConsumerStats {
            cached_messages: AtomicUsize,
            cached_bytes: AtomicUsize,
            reserved: AtomicUsize,
            max_cached_messages: AtomicUsize,
            max_cached_bytes: AtomicUsize,
            pub(super) process_queues: AtomicUsize,
            $($name: AtomicU64,)*
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
            $($(#[$doc])* pub $name: u64,)*
            /// Deliveries waiting for a consumption thread.
            pub listener_queued: usize,
            /// Listener calls running.
            pub listener_running: usize,
        }

        impl ConsumerStats {
            $(pub(crate) fn $on(&self, n: usize) {
                self.$name.fetch_add(n as u64, Ordering::Relaxed);
            })*

            /// Copy the counters.
            pub fn snapshot(&self) -> StatsSnapshot {
                StatsSnapshot {
                    process_queues: self.process_queues.load(Ordering::Relaxed),
                    cached_messages: self.cached_messages.load(Ordering::Acquire),
                    cached_bytes: self.cached_bytes.load(Ordering::Acquire),
                    max_cached_messages: self.max_cached_messages.load(Ordering::Acquire),
                    max_cached_bytes: self.max_cached_bytes.load(Ordering::Acquire),
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    listener_queued: 0,
                    listener_running: 0,
                }
            }
        }
    };
}

counters! {
    /// Messages received.
    received, on_received;
    /// Listener calls that returned SUCCESS.
    consumed_ok, on_consumed_ok;
    /// Listener calls that returned FAILURE or raised.
    consumed_failed, on_consumed_failed;
    /// FIFO messages consumed again locally after a failure.
    local_retries, on_local_retry;
    /// Messages acknowledged.
    acked, on_acked;
    /// Messages made invisible again after a failure.
    nacked, on_nacked;
    /// FIFO messages forwarded to the dead-letter queue.
    dead_lettered, on_dead_lettered;
    /// Settle operations refused with `INVALID_RECEIPT_HANDLE`.
    invalid_receipt_handles, on_invalid_handle;
    /// Settle operations retried.
    settle_retries, on_settle_retry;
    /// Settle operations given up at the shutdown deadline.
    settle_abandoned, on_settle_abandoned;
    /// FIFO messages dropped from the cache unconsumed because the broker redelivers them
    /// (it refused the result of an earlier message received with them, or a redelivered copy
    /// arrived): the redelivered copies are consumed instead, in order.
    left_for_redelivery, on_left_for_redelivery;
    /// Receives that failed.
    receive_failures, on_receive_failed;
    /// Receives the broker throttled.
    receive_throttled, on_receive_throttled;
    /// Times a receive loop waited because the cache was full.
    cache_full_waits, on_cache_full;
    /// Process queues dropped (and created again) because their receive loop was idle too long.
    expired_process_queues, on_queue_expired;
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

    pub(crate) fn on_consumed(&self, r: ConsumeResult) {
        match r {
            ConsumeResult::Success => self.on_consumed_ok(1),
            ConsumeResult::Failure => self.on_consumed_failed(1),
        }
    }
}
