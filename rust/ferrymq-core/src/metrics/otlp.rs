//! OTLP export of the RocketMQ Java client's histograms to the collector a RocketMQ server
//! announces in its settings (`Settings.metric`: on, and its endpoints), as the Java client
//! does: OTLP/gRPC `MetricsService/Export`, cumulative, every [`EXPORT_INTERVAL`] while the
//! server says so, and once more when the client closes.
//!
//! The OTLP messages are declared here (the subset of `opentelemetry/proto/metrics/v1` and its
//! collector service a metrics export needs; field numbers are the protocol's), so no protobuf
//! compiler runs for them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::{ClientMetrics, RocketMqSeriesSnapshot};
use crate::error::{Error, Result};

/// How often a client exports while its server asks for metrics (the Java client's period).
pub const EXPORT_INTERVAL: Duration = Duration::from_secs(60);
/// Deadline of one export.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);
/// The gRPC path of an OTLP metrics export.
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// `ExportMetricsServiceRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

/// `ExportMetricsServiceResponse` (its partial-success report is not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExportMetricsServiceResponse {}

/// `ResourceMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// `Resource`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

/// `ScopeMetrics`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

/// `InstrumentationScope`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `Metric` with its histogram data (the only kind exported).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(message, optional, tag = "9")]
    pub histogram: Option<Histogram>,
}

/// `Histogram`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<HistogramDataPoint>,
    /// `AggregationTemporality`: 2 is cumulative.
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

/// `AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE`.
pub const CUMULATIVE: i32 = 2;

/// `HistogramDataPoint`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramDataPoint {
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
    #[prost(fixed64, repeated, tag = "6")]
    pub bucket_counts: Vec<u64>,
    #[prost(double, repeated, tag = "7")]
    pub explicit_bounds: Vec<f64>,
    #[prost(double, optional, tag = "11")]
    pub min: Option<f64>,
    #[prost(double, optional, tag = "12")]
    pub max: Option<f64>,
}

/// `KeyValue` with a string value (every attribute exported is one).
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

/// `AnyValue` holding a string.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnyValue {
    #[prost(string, tag = "1")]
    pub string_value: String,
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            string_value: value.to_owned(),
        }),
    }
}

fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What the Java client's histograms measure (their OTLP descriptions).
fn description(name: &str) -> &'static str {
    match name {
        "rocketmq_send_cost_time" => "Time of each send, per message.",
        "rocketmq_delivery_latency" => "From the broker's delivery to the end of the receive.",
        "rocketmq_await_time" => "From a message's receive to its listener call.",
        _ => "Time of each listener call.",
    }
}

/// The export request of `metrics`' Java-client histograms, cumulative since `start`; `None`
/// when there is nothing to export.
pub fn request(metrics: &ClientMetrics, start: SystemTime) -> Option<ExportMetricsServiceRequest> {
    let snap = metrics.snapshot();
    if snap.rocketmq.is_empty() {
        return None;
    }
    let (start, now) = (unix_nanos(start), unix_nanos(SystemTime::now()));
    let identity = &snap.identity;
    let mut out: Vec<Metric> = Vec::new();
    for s in &snap.rocketmq {
        let name = s.histogram.name();
        let point = data_point(s, identity, start, now);
        match out.iter_mut().find(|m| m.name == name) {
            Some(m) => m
                .histogram
                .get_or_insert_with(Histogram::default)
                .data_points
                .push(point),
            None => out.push(Metric {
                name: name.to_owned(),
                description: description(name).to_owned(),
                unit: "ms".to_owned(),
                histogram: Some(Histogram {
                    data_points: vec![point],
                    aggregation_temporality: CUMULATIVE,
                }),
            }),
        }
    }
    Some(ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("telemetry.sdk.name", "ferrymq"),
                    kv("telemetry.sdk.version", env!("CARGO_PKG_VERSION")),
                    kv("messaging.client.id", &identity.client_id),
                ],
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "ferrymq".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                }),
                metrics: out,
            }],
        }],
    })
}

fn data_point(
    s: &RocketMqSeriesSnapshot,
    identity: &super::ClientIdentity,
    start: u64,
    now: u64,
) -> HistogramDataPoint {
    let mut attributes = vec![kv("topic", &s.topic), kv("client_id", &identity.client_id)];
    if s.histogram.is_consumer_side() {
        if let Some(g) = &identity.consumer_group {
            attributes.push(kv("consumer_group", g));
        }
    }
    if let Some(ok) = s.success {
        attributes.push(kv(
            "invocation_status",
            if ok { "success" } else { "failure" },
        ));
    }
    HistogramDataPoint {
        attributes,
        start_time_unix_nano: start,
        time_unix_nano: now,
        count: s.count,
        sum: Some(s.sum_ms),
        bucket_counts: s.buckets.clone(),
        explicit_bounds: s.histogram.bounds_ms().to_vec(),
        min: Some(s.min_ms),
        max: Some(s.max_ms),
    }
}

/// Send `request` to the OTLP/gRPC collector at `target` (`host:port`, plain HTTP/2).
pub async fn export(target: &str, request: ExportMetricsServiceRequest) -> Result<()> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{target}"))
        .map_err(|e| Error::invalid("metric endpoint", e))?
        .connect_timeout(EXPORT_TIMEOUT)
        .timeout(EXPORT_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| Error::connection(format!("metric collector {target}: {e}")))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Error::connection(format!("metric collector {target}: {e}")))?;
    let codec =
        tonic_prost::ProstCodec::<ExportMetricsServiceRequest, ExportMetricsServiceResponse>::default();
    grpc.unary(
        tonic::Request::new(request),
        http::uri::PathAndQuery::from_static(EXPORT_PATH),
        codec,
    )
    .await
    .map(drop)
    .map_err(|s| Error::connection(format!("metric collector {target}: {s}")))
}

/// Export `metrics` to the collector `collector()` names (`None`: the server asks for none)
/// every `interval` and once more when `stop` is cancelled; runs until then. Failures are
/// logged at debug level (metrics are best effort, as the Java client's).
pub async fn run_exporter(
    metrics: ClientMetrics,
    collector: impl Fn() -> Option<String> + Send,
    interval: Duration,
    stop: CancellationToken,
) {
    let start = SystemTime::now();
    loop {
        let last = tokio::select! {
            () = stop.cancelled() => true,
            () = tokio::time::sleep(interval) => false,
        };
        if let Some(target) = collector() {
            if let Some(request) = request(&metrics, start) {
                if let Err(e) = export(&target, request).await {
                    tracing::debug!(target: "ferrymq::metrics", "OTLP export failed: {e}");
                }
            }
        }
        if last {
            return;
        }
    }
}

/// A client's exporter task: started with the client, finished (one last export) when it
/// closes.
#[derive(Debug)]
pub struct Exporter {
    stop: CancellationToken,
    task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Exporter {
    /// Start exporting `metrics` to whatever collector `collector()` names at each export.
    /// Must be called inside the tokio runtime.
    pub fn start(
        metrics: ClientMetrics,
        collector: impl Fn() -> Option<String> + Send + 'static,
    ) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run_exporter(
            metrics,
            collector,
            EXPORT_INTERVAL,
            stop.clone(),
        ));
        Self {
            stop,
            task: parking_lot::Mutex::new(Some(task)),
        }
    }

    /// Export once more and stop (waits for that export, up to its deadline). Idempotent.
    pub async fn finish(&self) {
        self.stop.cancel();
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(EXPORT_TIMEOUT * 2, task).await;
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
