//! The RocketMQ Java client's own histograms, under its names, units (milliseconds), bucket
//! boundaries and attributes, for dashboards made for that client: kept beside the
//! conventions' series by every RocketMQ client (gRPC and remoting alike).
//!
//! | histogram | what | attributes |
//! | --- | --- | --- |
//! | `rocketmq_send_cost_time` | each send call, per message it carried | `topic`, `client_id`, `invocation_status` |
//! | `rocketmq_delivery_latency` | from the broker's delivery to the receive's end, per message | `topic`, `consumer_group`, `client_id` |
//! | `rocketmq_await_time` | from a message's receive to its listener call (push) | `topic`, `consumer_group`, `client_id` |
//! | `rocketmq_process_time` | each listener call, per message | `topic`, `consumer_group`, `client_id`, `invocation_status` |
//!
//! `invocation_status` is `success` or `failure`. Series are kept per (histogram, topic,
//! status), at most [`super::MAX_SERIES`]; records beyond go uncounted into
//! [`RocketMqTable::overflowed`] (these mirror the main series, which fold such records into
//! an overflow series).

use std::time::Duration;

/// One of the Java client's histograms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RocketMqHistogram {
    /// `rocketmq_send_cost_time`.
    SendCostTime,
    /// `rocketmq_delivery_latency`.
    DeliveryLatency,
    /// `rocketmq_await_time`.
    AwaitTime,
    /// `rocketmq_process_time`.
    ProcessTime,
}

/// Boundaries of the send cost and the delivery latency, in milliseconds.
const SEND_BOUNDS: [f64; 7] = [1.0, 5.0, 10.0, 20.0, 50.0, 200.0, 500.0];
/// Boundaries of the await time, in milliseconds.
const AWAIT_BOUNDS: [f64; 7] = [1.0, 5.0, 20.0, 100.0, 1000.0, 5000.0, 10000.0];
/// Boundaries of the process time, in milliseconds.
const PROCESS_BOUNDS: [f64; 6] = [1.0, 5.0, 10.0, 100.0, 10000.0, 60000.0];

impl RocketMqHistogram {
    /// Its metric name.
    pub fn name(self) -> &'static str {
        match self {
            Self::SendCostTime => "rocketmq_send_cost_time",
            Self::DeliveryLatency => "rocketmq_delivery_latency",
            Self::AwaitTime => "rocketmq_await_time",
            Self::ProcessTime => "rocketmq_process_time",
        }
    }

    /// Its explicit bucket boundaries in milliseconds (a bucket counts `prev < v <= bound`, one
    /// more counts values above the last).
    pub fn bounds_ms(self) -> &'static [f64] {
        match self {
            Self::SendCostTime | Self::DeliveryLatency => &SEND_BOUNDS,
            Self::AwaitTime => &AWAIT_BOUNDS,
            Self::ProcessTime => &PROCESS_BOUNDS,
        }
    }

    /// Whether its points carry `invocation_status`.
    pub fn has_status(self) -> bool {
        matches!(self, Self::SendCostTime | Self::ProcessTime)
    }

    /// Whether its points carry `consumer_group`.
    pub fn is_consumer_side(self) -> bool {
        !matches!(self, Self::SendCostTime)
    }
}

/// One series as plain data.
#[derive(Debug, Clone, PartialEq)]
pub struct RocketMqSeriesSnapshot {
    /// Which histogram.
    pub histogram: RocketMqHistogram,
    /// The `topic` attribute.
    pub topic: String,
    /// `invocation_status` (`Some(true)`: success) where the histogram has it.
    pub success: Option<bool>,
    /// Values recorded.
    pub count: u64,
    /// Their sum in milliseconds.
    pub sum_ms: f64,
    /// The smallest (`0` when empty).
    pub min_ms: f64,
    /// The largest (`0` when empty).
    pub max_ms: f64,
    /// Non-cumulative counts per boundary of [`RocketMqHistogram::bounds_ms`], then the count
    /// above the last.
    pub buckets: Vec<u64>,
}

#[derive(Debug)]
struct Series {
    histogram: RocketMqHistogram,
    topic: String,
    success: Option<bool>,
    count: u64,
    sum_ms: f64,
    min_ms: f64,
    max_ms: f64,
    buckets: Vec<u64>,
}

impl Series {
    fn add(&mut self, ms: f64, n: u64) {
        let bounds = self.histogram.bounds_ms();
        let i = bounds.partition_point(|&b| b < ms);
        self.buckets[i] += n;
        if self.count == 0 || ms < self.min_ms {
            self.min_ms = ms;
        }
        if self.count == 0 || ms > self.max_ms {
            self.max_ms = ms;
        }
        self.count += n;
        #[allow(clippy::cast_precision_loss)]
        {
            self.sum_ms += ms * n as f64;
        }
    }
}

/// The Java client's histograms of one client (kept under the metrics' lock).
#[derive(Debug, Default)]
pub(super) struct RocketMqTable {
    series: Vec<Series>,
    /// Records not kept: the client had its most series already.
    pub(super) overflowed: u64,
}

impl RocketMqTable {
    /// Record `n` values of `elapsed` in `histogram` for `topic` (`success` where it has a
    /// status); `max_series` bounds the series.
    pub(super) fn record(
        &mut self,
        histogram: RocketMqHistogram,
        topic: &str,
        success: bool,
        elapsed: Duration,
        n: u64,
        max_series: usize,
    ) {
        if n == 0 {
            return;
        }
        let success = histogram.has_status().then_some(success);
        let ms = elapsed.as_secs_f64() * 1e3;
        if let Some(s) = self
            .series
            .iter_mut()
            .find(|s| s.histogram == histogram && s.success == success && s.topic == topic)
        {
            s.add(ms, n);
            return;
        }
        if self.series.len() >= max_series {
            self.overflowed += n;
            return;
        }
        let mut s = Series {
            histogram,
            topic: topic.to_owned(),
            success,
            count: 0,
            sum_ms: 0.0,
            min_ms: 0.0,
            max_ms: 0.0,
            buckets: vec![0; histogram.bounds_ms().len() + 1],
        };
        s.add(ms, n);
        self.series.push(s);
    }

    /// Every series as plain data, by histogram, topic and status.
    pub(super) fn snapshot(&self) -> Vec<RocketMqSeriesSnapshot> {
        let mut out: Vec<RocketMqSeriesSnapshot> = self
            .series
            .iter()
            .map(|s| RocketMqSeriesSnapshot {
                histogram: s.histogram,
                topic: s.topic.clone(),
                success: s.success,
                count: s.count,
                sum_ms: s.sum_ms,
                min_ms: s.min_ms,
                max_ms: s.max_ms,
                buckets: s.buckets.clone(),
            })
            .collect();
        out.sort_by(|a, b| {
            (a.histogram, &a.topic, a.success).cmp(&(b.histogram, &b.topic, b.success))
        });
        out
    }
}
