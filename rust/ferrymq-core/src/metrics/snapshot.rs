//! The clients' metrics as plain data: [`MetricsSnapshot`] (every series, for exporters) and
//! [`MetricsSummary`] (per operation, for `stats()`), made by [`super::ClientMetrics`].

use super::{ClientIdentity, Durations, Operation, RocketMqSeriesSnapshot};

/// Durations of one series as plain data (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct DurationSnapshot {
    /// Durations recorded (= the series' operations).
    pub count: u64,
    /// Their exact sum.
    pub sum: f64,
    /// The shortest (`0` when empty).
    pub min: f64,
    /// The longest (`0` when empty).
    pub max: f64,
    /// Non-cumulative counts per bucket of [`DURATION_BUCKETS`], then the count above the last
    /// boundary: the explicit-bucket histogram of the conventions, exact.
    pub buckets: [u64; 15],
    /// The 50th, 90th and 99th percentiles (`0` when empty), within one part in a hundred.
    pub p50: f64,
    /// See `p50`.
    pub p90: f64,
    /// See `p50`.
    pub p99: f64,
}

impl DurationSnapshot {
    pub(super) fn of(d: &Durations) -> Self {
        let h = &d.histogram;
        let s = |ns: Option<u64>| ns.unwrap_or(0) as f64 / 1e9;
        // The percentiles are constants within 0..=100: they cannot fail.
        let p = |q: f64| s(h.percentile(q).ok().flatten());
        Self {
            count: h.count(),
            sum: h.sum() as f64 / 1e9,
            min: s(h.min()),
            max: s(h.max()),
            buckets: d.buckets,
            p50: p(50.0),
            p90: p(90.0),
            p99: p(99.0),
        }
    }
}

/// One series as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSnapshot {
    /// `messaging.operation.name` (and, through [`Operation::kind`], its type).
    pub operation: Operation,
    /// `messaging.destination.name`; `None` for an overflow series.
    pub destination: Option<String>,
    /// `error.type`; `None` for successes.
    pub error_type: Option<&'static str>,
    /// Records folded here because the client had [`MAX_SERIES`] series already.
    pub overflow: bool,
    /// Operations recorded.
    pub operations: u64,
    /// Messages they carried (`messaging.client.sent.messages`,
    /// `messaging.client.consumed.messages`).
    pub messages: u64,
    /// Their durations (`messaging.client.operation.duration`, `messaging.process.duration`).
    pub duration: DurationSnapshot,
}

/// Every series of a client, as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// Who recorded.
    pub identity: ClientIdentity,
    /// The series, by operation, destination and error type.
    pub series: Vec<SeriesSnapshot>,
    /// Records folded into an overflow series.
    pub overflowed: u64,
    /// Operations in flight, per operation.
    pub in_flight: Vec<(Operation, u64)>,
    /// Attempts beyond the first (retries), per operation.
    pub retried: Vec<(Operation, u64)>,
    /// The Java client's histograms (RocketMQ clients; empty for others).
    pub rocketmq: Vec<RocketMqSeriesSnapshot>,
    /// Records of those histograms not kept (too many series).
    pub rocketmq_overflowed: u64,
}

/// Durations of one operation in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencySummary {
    /// The mean (exact).
    pub mean: f64,
    /// The shortest (exact).
    pub min: f64,
    /// The longest (exact).
    pub max: f64,
    /// `(q, value)` for each percentile asked for, in the order asked.
    pub percentiles: Vec<(f64, f64)>,
}

/// One operation over every destination and error type.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationSummary {
    /// Which.
    pub operation: Operation,
    /// Operations recorded, successes and failures.
    pub operations: u64,
    /// Messages they carried.
    pub messages: u64,
    /// Operations that failed.
    pub failed: u64,
    /// Messages of operations that failed.
    pub failed_messages: u64,
    /// Failed operations per error type, by type.
    pub errors: Vec<(&'static str, u64)>,
    /// Operations started and not finished.
    pub in_flight: u64,
    /// Attempts beyond the first (retries; a retried operation is recorded once).
    pub retried: u64,
    /// Durations; `None` before the first record.
    pub latency_ms: Option<LatencySummary>,
}

impl OperationSummary {
    pub(super) fn empty(operation: Operation) -> Self {
        Self {
            operation,
            operations: 0,
            messages: 0,
            failed: 0,
            failed_messages: 0,
            errors: Vec::new(),
            in_flight: 0,
            retried: 0,
            latency_ms: None,
        }
    }

    /// Messages of the operations that succeeded.
    pub fn ok_messages(&self) -> u64 {
        self.messages - self.failed_messages
    }
}

/// What `stats()` shows of a client's metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSummary {
    /// Per operation, in [`Operation`] order; those never recorded nor in flight left out.
    pub operations: Vec<OperationSummary>,
    /// Records folded into an overflow series.
    pub overflowed: u64,
}

impl MetricsSummary {
    /// The summary of `operation`, if recorded.
    pub fn get(&self, operation: Operation) -> Option<&OperationSummary> {
        self.operations.iter().find(|s| s.operation == operation)
    }

    /// Messages of the successful operations of `operation`.
    pub fn ok_messages(&self, operation: Operation) -> u64 {
        self.get(operation).map_or(0, OperationSummary::ok_messages)
    }

    /// Failed operations, all operations together.
    pub fn failed(&self) -> u64 {
        self.operations.iter().map(|s| s.failed).sum()
    }

    /// Operations in flight, all operations together.
    pub fn in_flight(&self) -> u64 {
        self.operations.iter().map(|s| s.in_flight).sum()
    }

    /// Retries (attempts beyond the first), all operations together.
    pub fn retried(&self) -> u64 {
        self.operations.iter().map(|s| s.retried).sum()
    }
}
