//! The clients' metrics: what every producer, consumer and publisher records about its
//! operations, named and attributed by the OpenTelemetry messaging semantic conventions, kept
//! cheaply in Rust and read as plain data ([`ClientMetrics::snapshot`] for exporters,
//! [`ClientMetrics::summary`] for `stats()`).
//!
//! **Recording.** A client owns one [`ClientMetrics`] (a cheap `Clone` handle, one `Arc`) with
//! its [`ClientIdentity`]. It calls [`ClientMetrics::record`] (or times a call with
//! [`ClientMetrics::begin`]) once per RPC, or once per batch where the operation is a batch:
//! a receive of 32 messages is one record of 32 messages. A record takes one short mutex (no
//! allocation once its series exists) and never the GIL.
//!
//! **Series.** Records are kept per series, the attribute set of the conventions that varies
//! within one client: the [`Operation`] (`messaging.operation.name`, with its
//! `messaging.operation.type`), the destination (`messaging.destination.name`: a topic, a
//! subject) and the error type (`error.type`, absent on success). Per series: the operations,
//! their messages, and their durations in a [`LatencyHistogram::coarse`] (about 28 KB) beside
//! exact counts per [`DURATION_BUCKETS`] boundary (the conventions' explicit buckets of
//! `messaging.client.operation.duration` and `messaging.process.duration`, in seconds), sum,
//! min and max. A client keeps at most [`MAX_SERIES`] series; a record of a new attribute set
//! beyond that folds into the overflow series of its operation (destination absent, error
//! type [`OVERFLOW_ERROR_TYPE`] when it failed, [`SeriesSnapshot::overflow`] set: OpenTelemetry's
//! `otel.metric.overflow`), and [`MetricsSnapshot::overflowed`] counts those records. Nothing
//! is dropped.
//!
//! **Error types** ([`error_type`]): the broker's status name when the broker answered with
//! one (`INVALID_RECEIPT_HANDLE`, `TOO_MANY_REQUESTS`, a JMQ4 or a JetStream code name: bounded
//! sets), otherwise the error kind in snake case (`timeout`, `connection`, `protocol`,
//! `broker`, `flow_control`, `invalid_argument`, `closed`, `internal`); a listener that
//! returned FAILURE is [`PROCESS_FAILURE`].
//!
//! **Systems** ([`System`], `messaging.system`): `rocketmq` (a well-known value of the
//! conventions, for RocketMQ 5 gRPC and remoting alike), `jmq` (JMQ4 / JoyQueue, not listed by
//! the conventions) and `nats` (JetStream, not listed either).
//!
//! **RocketMQ's own histograms** ([`rocketmq`]): a RocketMQ client also keeps the Java
//! client's `rocketmq_*` histograms (milliseconds, its buckets and attributes), recorded by the
//! same calls for sends and listener calls, and by [`ClientMetrics::record_rocketmq`] for the
//! delivery latency and the await time.
//!
//! **Export** ([`otlp`]): a RocketMQ client whose server announces a metrics collector sends
//! those histograms there over OTLP/gRPC, as the Java client does.
//!
//! It imports [`crate::error`] and [`crate::histogram`] only (and `otlp` the gRPC transport).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{BrokerStatus, Error, ErrorKind, Result};
use crate::histogram::LatencyHistogram;

pub mod otlp;
pub mod rocketmq;
mod snapshot;

use rocketmq::RocketMqTable;
pub use rocketmq::{RocketMqHistogram, RocketMqSeriesSnapshot};
pub use snapshot::{
    DurationSnapshot, LatencySummary, MetricsSnapshot, MetricsSummary, OperationSummary,
    SeriesSnapshot,
};

/// The explicit bucket boundaries of the conventions' duration histograms, in seconds:
/// bucket `i` counts durations `d` with `DURATION_BUCKETS[i-1] < d <= DURATION_BUCKETS[i]`,
/// and one more bucket counts those above the last boundary.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// [`DURATION_BUCKETS`] in nanoseconds, compared exactly.
const BUCKETS_NS: [u64; 14] = [
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    75_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    750_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    7_500_000_000,
    10_000_000_000,
];

/// Most series a client keeps (see the module documentation); at most about 1.8 MB.
pub const MAX_SERIES: usize = 64;

/// The error type of a failed record folded into an overflow series.
pub const OVERFLOW_ERROR_TYPE: &str = "_OTHER";

/// The error type of a `process` whose listener returned FAILURE (or raised).
pub const PROCESS_FAILURE: &str = "consume_failure";

/// The percentiles [`ClientMetrics::summary`] reports unless asked for others.
pub const DEFAULT_PERCENTILES: [f64; 3] = [50.0, 90.0, 99.0];

/// Most percentiles one summary may ask for.
pub const MAX_PERCENTILES: usize = 16;

/// `messaging.system`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum System {
    /// RocketMQ 5 (gRPC) and classic RocketMQ remoting.
    RocketMq,
    /// JMQ4 (JoyQueue).
    Jmq,
    /// NATS JetStream.
    Nats,
}

impl System {
    /// The attribute value: `rocketmq`, `jmq` or `nats`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RocketMq => "rocketmq",
            Self::Jmq => "jmq",
            Self::Nats => "nats",
        }
    }
}

/// `messaging.operation.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationType {
    /// A message sent to a destination.
    Send,
    /// Messages pulled from the broker.
    Receive,
    /// Messages given to user code.
    Process,
    /// Messages acknowledged, released or forwarded.
    Settle,
}

impl OperationType {
    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Receive => "receive",
            Self::Process => "process",
            Self::Settle => "settle",
        }
    }
}

/// `messaging.operation.name`: what was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// Messages sent (one request: a message or a batch).
    Send,
    /// One receive call and the messages it returned.
    Receive,
    /// Acknowledgements (one request for its messages).
    Ack,
    /// A consumed message made visible again later (the push consumer's retry, a JMQ4 retry,
    /// a JetStream `-NAK`).
    Nack,
    /// A simple consumer's change of a message's invisible duration.
    ChangeInvisibleDuration,
    /// A message forwarded to the dead-letter queue (JetStream: terminated).
    DeadLetter,
    /// User code consuming messages (the push consumer's listener).
    Process,
    /// The end of a producer's transaction (commit or rollback of its half messages; one
    /// record per transaction carrying its messages): a send-side operation.
    EndTransaction,
}

/// Every operation, in [`Operation`] order.
pub const OPERATIONS: [Operation; 8] = [
    Operation::Send,
    Operation::Receive,
    Operation::Ack,
    Operation::Nack,
    Operation::ChangeInvisibleDuration,
    Operation::DeadLetter,
    Operation::Process,
    Operation::EndTransaction,
];

impl Operation {
    /// The attribute value (`send`, `receive`, `ack`, `nack`, `change_invisible_duration`,
    /// `dead_letter`, `process`, `end_transaction`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Receive => "receive",
            Self::Ack => "ack",
            Self::Nack => "nack",
            Self::ChangeInvisibleDuration => "change_invisible_duration",
            Self::DeadLetter => "dead_letter",
            Self::Process => "process",
            Self::EndTransaction => "end_transaction",
        }
    }

    /// Its `messaging.operation.type`.
    pub fn kind(self) -> OperationType {
        match self {
            Self::Send | Self::EndTransaction => OperationType::Send,
            Self::Receive => OperationType::Receive,
            Self::Process => OperationType::Process,
            Self::Ack | Self::Nack | Self::ChangeInvisibleDuration | Self::DeadLetter => {
                OperationType::Settle
            }
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The `error.type` of a failure (see the module documentation).
pub fn error_type(e: &Error) -> &'static str {
    if let Some(BrokerStatus { name, .. }) = e.status() {
        if !name.is_empty() {
            return name;
        }
    }
    match e.kind() {
        ErrorKind::Connection => "connection",
        ErrorKind::Timeout => "timeout",
        ErrorKind::Protocol => "protocol",
        ErrorKind::Broker => "broker",
        ErrorKind::FlowControl => "flow_control",
        ErrorKind::InvalidArgument => "invalid_argument",
        ErrorKind::Closed => "closed",
        ErrorKind::Internal => "internal",
    }
}

/// Who records: the attributes every series of one client shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// `messaging.system`.
    pub system: System,
    /// The client id the broker knows the client by (`messaging.client.id`).
    pub client_id: String,
    /// `server.address` (the access point, or the first of several).
    pub server_address: Option<String>,
    /// `server.port`.
    pub server_port: Option<u16>,
    /// `messaging.consumer.group.name`, for consumers.
    pub consumer_group: Option<String>,
}

impl ClientIdentity {
    /// A client of `system` known as `client_id`, server and group unknown.
    pub fn new(system: System, client_id: impl Into<String>) -> Self {
        Self {
            system,
            client_id: client_id.into(),
            server_address: None,
            server_port: None,
            consumer_group: None,
        }
    }

    /// The same with its server.
    #[must_use]
    pub fn with_server(mut self, address: impl Into<String>, port: u16) -> Self {
        self.server_address = Some(address.into());
        self.server_port = Some(port);
        self
    }

    /// The same with its server given as `host:port` (an IPv6 host in brackets, which are
    /// removed); the server stays unknown when `address` has no numeric port.
    #[must_use]
    pub fn with_address(self, address: &str) -> Self {
        match address.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() => match port.parse::<u16>() {
                Ok(port) => {
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    self.with_server(host, port)
                }
                Err(_) => self,
            },
            _ => self,
        }
    }

    /// The same with its consumer group.
    #[must_use]
    pub fn with_group(mut self, group: impl Into<String>) -> Self {
        self.consumer_group = Some(group.into());
        self
    }
}

/// Durations of one series.
#[derive(Debug, Clone)]
struct Durations {
    /// Non-cumulative counts per bucket of [`DURATION_BUCKETS`], plus the one above.
    buckets: [u64; 15],
    histogram: LatencyHistogram,
}

impl Durations {
    fn new() -> Self {
        Self {
            buckets: [0; 15],
            histogram: LatencyHistogram::coarse(),
        }
    }

    fn record(&mut self, ns: u64) {
        let i = BUCKETS_NS.partition_point(|&b| b < ns);
        self.buckets[i] += 1;
        self.histogram.record(ns);
    }
}

#[derive(Debug)]
struct Series {
    operation: Operation,
    error_type: Option<&'static str>,
    overflow: bool,
    operations: u64,
    messages: u64,
    durations: Durations,
}

impl Series {
    fn new(operation: Operation, error_type: Option<&'static str>, overflow: bool) -> Self {
        Self {
            operation,
            error_type,
            overflow,
            operations: 0,
            messages: 0,
            durations: Durations::new(),
        }
    }

    fn add(&mut self, messages: u64, ns: u64) {
        self.operations += 1;
        self.messages += messages;
        self.durations.record(ns);
    }
}

#[derive(Debug, Default)]
struct Table {
    /// Series by destination, then by (operation, error type) in a short list.
    by_destination: HashMap<Arc<str>, Vec<Series>>,
    /// The overflow series, by (operation, failed).
    overflow: Vec<Series>,
    series: usize,
    overflowed: u64,
    /// The Java client's histograms (RocketMQ clients only).
    rocketmq: RocketMqTable,
}

#[derive(Debug)]
struct Inner {
    identity: ClientIdentity,
    /// Whether the Java client's histograms are kept (a RocketMQ client).
    rocketmq: bool,
    table: Mutex<Table>,
    in_flight: [AtomicU64; OPERATIONS.len()],
    retried: [AtomicU64; OPERATIONS.len()],
    max_series: usize,
}

/// A client's metrics (see the module documentation): a cheap `Clone` handle.
#[derive(Debug, Clone)]
pub struct ClientMetrics {
    inner: Arc<Inner>,
}

/// An operation started with [`ClientMetrics::begin`]: counted in flight until it is
/// [finished](InFlight::finish) or dropped (a dropped one, cancelled by its caller, is not
/// recorded).
#[derive(Debug)]
#[must_use = "finish it to record the operation"]
pub struct InFlight {
    metrics: ClientMetrics,
    operation: Operation,
    started: Instant,
}

impl InFlight {
    /// Record the operation on `destination` with `messages` and its outcome, timed from
    /// [`ClientMetrics::begin`].
    pub fn finish(self, destination: &str, messages: u64, outcome: Result<(), &Error>) {
        self.metrics.record(
            self.operation,
            destination,
            messages,
            self.started.elapsed(),
            outcome,
        );
    }

    /// Record a call whose entries have outcomes of their own (an ack of several messages, a
    /// run of messages given to a listener): one record per distinct outcome, carrying the
    /// entries that had it. Nothing is recorded for no entries.
    pub fn finish_entries<'e>(
        self,
        destination: &str,
        outcomes: impl IntoIterator<Item = Option<&'e Error>>,
    ) {
        self.finish_types(destination, outcomes.into_iter().map(|o| o.map(error_type)));
    }

    /// [`finish_entries`](Self::finish_entries) with error types of the caller's (`None`:
    /// success).
    pub fn finish_types(
        self,
        destination: &str,
        outcomes: impl IntoIterator<Item = Option<&'static str>>,
    ) {
        let elapsed = self.started.elapsed();
        let mut counts: Vec<(Option<&'static str>, u64)> = Vec::new();
        for o in outcomes {
            match counts.iter_mut().find(|(t, _)| *t == o) {
                Some((_, n)) => *n += 1,
                None => counts.push((o, 1)),
            }
        }
        for (error, n) in counts {
            self.metrics
                .record_outcome(self.operation, destination, n, elapsed, error);
        }
    }

    /// The same with an error type of the caller's (`None`: success).
    pub fn finish_with(self, destination: &str, messages: u64, error_type: Option<&'static str>) {
        self.metrics.record_outcome(
            self.operation,
            destination,
            messages,
            self.started.elapsed(),
            error_type,
        );
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.inner.in_flight[self.operation.index()].fetch_sub(1, Ordering::Relaxed);
    }
}

impl ClientMetrics {
    /// Empty metrics of the client `identity`.
    pub fn new(identity: ClientIdentity) -> Self {
        Self::with_max_series(identity, MAX_SERIES)
    }

    /// The same keeping at most `max_series` series before the overflow series (at least 1).
    pub fn with_max_series(identity: ClientIdentity, max_series: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                rocketmq: identity.system == System::RocketMq,
                identity,
                table: Mutex::new(Table::default()),
                in_flight: Default::default(),
                retried: Default::default(),
                max_series: max_series.max(1),
            }),
        }
    }

    /// Who records.
    pub fn identity(&self) -> &ClientIdentity {
        &self.inner.identity
    }

    /// Start timing one `operation`: in flight until finished or dropped.
    pub fn begin(&self, operation: Operation) -> InFlight {
        self.inner.in_flight[operation.index()].fetch_add(1, Ordering::Relaxed);
        InFlight {
            metrics: self.clone(),
            operation,
            started: Instant::now(),
        }
    }

    /// Record one `operation` on `destination` that carried `messages` and took `elapsed`;
    /// `outcome` gives its error type ([`error_type`]) when it failed.
    pub fn record(
        &self,
        operation: Operation,
        destination: &str,
        messages: u64,
        elapsed: Duration,
        outcome: Result<(), &Error>,
    ) {
        let error = outcome.err().map(error_type);
        self.record_outcome(operation, destination, messages, elapsed, error);
    }

    /// [`record`](Self::record) with the error type given (`None`: success).
    pub fn record_outcome(
        &self,
        operation: Operation,
        destination: &str,
        messages: u64,
        elapsed: Duration,
        error_type: Option<&'static str>,
    ) {
        let mut table = self.inner.table.lock();
        self.record_locked(
            &mut table,
            operation,
            destination,
            messages,
            elapsed,
            error_type,
        );
    }

    /// [`record_outcome`](Self::record_outcome) with the table already locked.
    fn record_locked(
        &self,
        table: &mut Table,
        operation: Operation,
        destination: &str,
        messages: u64,
        elapsed: Duration,
        error_type: Option<&'static str>,
    ) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        if self.inner.rocketmq {
            let histogram = match operation {
                Operation::Send => Some(RocketMqHistogram::SendCostTime),
                Operation::Process => Some(RocketMqHistogram::ProcessTime),
                _ => None,
            };
            if let Some(h) = histogram {
                let ok = error_type.is_none();
                let max = self.inner.max_series;
                table
                    .rocketmq
                    .record(h, destination, ok, elapsed, messages, max);
            }
        }
        if let Some(list) = table.by_destination.get_mut(destination) {
            if let Some(s) = list
                .iter_mut()
                .find(|s| s.operation == operation && s.error_type == error_type)
            {
                s.add(messages, ns);
                return;
            }
        }
        if table.series < self.inner.max_series {
            table.series += 1;
            let mut series = Series::new(operation, error_type, false);
            series.add(messages, ns);
            match table.by_destination.get_mut(destination) {
                Some(list) => list.push(series),
                None => {
                    table
                        .by_destination
                        .insert(Arc::from(destination), vec![series]);
                }
            }
            return;
        }
        table.overflowed += 1;
        let error = error_type.map(|_| OVERFLOW_ERROR_TYPE);
        match table
            .overflow
            .iter_mut()
            .find(|s| s.operation == operation && s.error_type == error)
        {
            Some(s) => s.add(messages, ns),
            None => {
                let mut series = Series::new(operation, error, true);
                series.add(messages, ns);
                table.overflow.push(series);
            }
        }
    }

    /// Record `messages` values of `elapsed` in the Java client's `histogram` for `topic`
    /// (the delivery latency, the await time: those with no status); nothing for a client of
    /// another system.
    pub fn record_rocketmq(
        &self,
        histogram: RocketMqHistogram,
        topic: &str,
        elapsed: Duration,
        messages: u64,
    ) {
        if self.inner.rocketmq {
            let max = self.inner.max_series;
            self.inner
                .table
                .lock()
                .rocketmq
                .record(histogram, topic, true, elapsed, messages, max);
        }
    }

    /// One listener call of one message: its `process` record (`error_type`: its failure), and,
    /// for a RocketMQ client, its await time (`waited` before the call), under one lock.
    pub fn record_processed(
        &self,
        topic: &str,
        waited: Duration,
        elapsed: Duration,
        error_type: Option<&'static str>,
    ) {
        let mut table = self.inner.table.lock();
        if self.inner.rocketmq {
            let max = self.inner.max_series;
            table
                .rocketmq
                .record(RocketMqHistogram::AwaitTime, topic, true, waited, 1, max);
        }
        self.record_locked(
            &mut table,
            Operation::Process,
            topic,
            1,
            elapsed,
            error_type,
        );
    }

    /// Whether the Java client's histograms are kept (so their inputs are worth measuring).
    pub fn keeps_rocketmq(&self) -> bool {
        self.inner.rocketmq
    }

    /// Count `attempts` more attempts of `operation` beyond the first (a retried send): a
    /// relaxed atomic add, no lock.
    pub fn retried(&self, operation: Operation, attempts: u64) {
        if attempts > 0 {
            self.inner.retried[operation.index()].fetch_add(attempts, Ordering::Relaxed);
        }
    }

    /// Attempts of `operation` beyond the first, counted by [`retried`](Self::retried).
    pub fn retries(&self, operation: Operation) -> u64 {
        self.inner.retried[operation.index()].load(Ordering::Relaxed)
    }

    /// Operations started with [`begin`](Self::begin) and not finished yet.
    pub fn in_flight(&self, operation: Operation) -> u64 {
        self.inner.in_flight[operation.index()].load(Ordering::Relaxed)
    }

    /// Every series as plain data, for an exporter that reads it once per collection.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let table = self.inner.table.lock();
        let mut series: Vec<SeriesSnapshot> = table
            .by_destination
            .iter()
            .flat_map(|(d, list)| list.iter().map(move |s| (Some(d), s)))
            .chain(table.overflow.iter().map(|s| (None, s)))
            .map(|(d, s)| SeriesSnapshot {
                operation: s.operation,
                destination: d.map(|d| d.to_string()),
                error_type: s.error_type,
                overflow: s.overflow,
                operations: s.operations,
                messages: s.messages,
                duration: DurationSnapshot::of(&s.durations),
            })
            .collect();
        let overflowed = table.overflowed;
        let rocketmq = table.rocketmq.snapshot();
        let rocketmq_overflowed = table.rocketmq.overflowed;
        drop(table);
        series.sort_by(|a, b| {
            (a.operation, &a.destination, a.error_type).cmp(&(
                b.operation,
                &b.destination,
                b.error_type,
            ))
        });
        MetricsSnapshot {
            identity: self.inner.identity.clone(),
            series,
            overflowed,
            in_flight: OPERATIONS.map(|o| (o, self.in_flight(o))).to_vec(),
            retried: OPERATIONS.map(|o| (o, self.retries(o))).to_vec(),
            rocketmq,
            rocketmq_overflowed,
        }
    }

    /// Figures per operation over every destination and error type, with the duration
    /// `percentiles` (0 < q < 100; at most [`MAX_PERCENTILES`]): what `stats()` shows. An
    /// operation never recorded nor in flight is left out. A bad percentile is an
    /// invalid-argument error naming `percentiles`.
    pub fn summary(&self, percentiles: &[f64]) -> Result<MetricsSummary> {
        check_percentiles(percentiles)?;
        let mut merged: Vec<(Operation, OperationSummary, LatencyHistogram)> = Vec::new();
        {
            let table = self.inner.table.lock();
            for s in table
                .by_destination
                .values()
                .flatten()
                .chain(&table.overflow)
            {
                let i = match merged.iter().position(|(o, ..)| *o == s.operation) {
                    Some(i) => i,
                    None => {
                        merged.push((
                            s.operation,
                            OperationSummary::empty(s.operation),
                            LatencyHistogram::coarse(),
                        ));
                        merged.len() - 1
                    }
                };
                let (_, sum, hist) = &mut merged[i];
                sum.operations += s.operations;
                sum.messages += s.messages;
                if let Some(e) = s.error_type {
                    sum.failed += s.operations;
                    sum.failed_messages += s.messages;
                    match sum.errors.iter_mut().find(|(t, _)| *t == e) {
                        Some((_, n)) => *n += s.operations,
                        None => sum.errors.push((e, s.operations)),
                    }
                }
                // Both coarse: the merge cannot fail.
                hist.merge(&s.durations.histogram)?;
            }
        }
        let mut operations = Vec::new();
        for op in OPERATIONS {
            let in_flight = self.in_flight(op);
            let retried = self.retries(op);
            let (mut sum, hist) = match merged.iter().position(|(o, ..)| *o == op) {
                Some(i) => {
                    let (_, s, h) = merged.swap_remove(i);
                    (s, Some(h))
                }
                None if in_flight > 0 || retried > 0 => (OperationSummary::empty(op), None),
                None => continue,
            };
            sum.in_flight = in_flight;
            sum.retried = retried;
            sum.errors.sort_unstable();
            if let Some(h) = hist.filter(|h| h.count() > 0) {
                let ms = |ns: u64| ns as f64 / 1e6;
                sum.latency_ms = Some(LatencySummary {
                    mean: h.mean().unwrap_or(0.0) / 1e6,
                    min: ms(h.min().unwrap_or(0)),
                    max: ms(h.max().unwrap_or(0)),
                    percentiles: percentiles
                        .iter()
                        .map(|&q| Ok((q, ms(h.percentile(q)?.unwrap_or(0)))))
                        .collect::<Result<_>>()?,
                });
            }
            operations.push(sum);
        }
        let overflowed = self.inner.table.lock().overflowed;
        Ok(MetricsSummary {
            operations,
            overflowed,
        })
    }
}

/// Refuse percentiles [`ClientMetrics::summary`] cannot report (each above 0 and below 100,
/// at most [`MAX_PERCENTILES`]), naming `percentiles`.
pub fn check_percentiles(percentiles: &[f64]) -> Result<()> {
    if percentiles.len() > MAX_PERCENTILES {
        return Err(Error::invalid(
            "percentiles",
            format!(
                "{} percentiles asked for, at most {MAX_PERCENTILES}",
                percentiles.len()
            ),
        ));
    }
    for &q in percentiles {
        if !(q > 0.0 && q < 100.0) {
            return Err(Error::invalid(
                "percentiles",
                format!("{q} is not a percentile above 0 and below 100"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
