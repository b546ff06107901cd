//! Unit tests of [`super`]: counts, exact buckets, percentiles, overflow, concurrency.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::error::Protocol;

fn metrics() -> ClientMetrics {
    ClientMetrics::new(
        ClientIdentity::new(System::RocketMq, "client-1")
            .with_server("127.0.0.1", 8081)
            .with_group("g"),
    )
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn series<'a>(
    snap: &'a MetricsSnapshot,
    op: Operation,
    dest: Option<&str>,
    error: Option<&str>,
) -> &'a SeriesSnapshot {
    snap.series
        .iter()
        .find(|s| s.operation == op && s.destination.as_deref() == dest && s.error_type == error)
        .unwrap_or_else(|| panic!("no series {op:?} {dest:?} {error:?} in {snap:#?}"))
}

#[test]
fn operations_have_their_convention_names_and_types() {
    let names: Vec<_> = OPERATIONS
        .iter()
        .map(|o| (o.name(), o.kind().as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("send", "send"),
            ("receive", "receive"),
            ("ack", "settle"),
            ("nack", "settle"),
            ("change_invisible_duration", "settle"),
            ("dead_letter", "settle"),
            ("process", "process"),
            ("end_transaction", "send"),
        ]
    );
    assert_eq!(
        [System::RocketMq, System::Jmq, System::Nats].map(System::as_str),
        ["rocketmq", "jmq", "nats"]
    );
}

#[test]
fn a_record_counts_one_operation_and_its_messages_per_series() {
    let m = metrics();
    m.record(Operation::Receive, "t1", 32, ms(3), Ok(()));
    m.record(Operation::Receive, "t1", 0, ms(20), Ok(()));
    m.record(Operation::Receive, "t2", 5, ms(1), Ok(()));
    m.record(Operation::Ack, "t1", 32, ms(2), Ok(()));
    let snap = m.snapshot();
    assert_eq!(snap.series.len(), 3);
    assert_eq!(snap.identity.client_id, "client-1");
    assert_eq!(snap.identity.consumer_group.as_deref(), Some("g"));
    assert_eq!(snap.identity.server_port, Some(8081));
    let r1 = series(&snap, Operation::Receive, Some("t1"), None);
    assert_eq!((r1.operations, r1.messages), (2, 32));
    assert_eq!(r1.duration.count, 2);
    assert!(
        (r1.duration.sum - 0.023).abs() < 1e-12,
        "{}",
        r1.duration.sum
    );
    assert!((r1.duration.min - 0.003).abs() < 1e-12);
    assert!((r1.duration.max - 0.020).abs() < 1e-12);
    let r2 = series(&snap, Operation::Receive, Some("t2"), None);
    assert_eq!((r2.operations, r2.messages), (1, 5));
    assert!(!r2.overflow);
    assert_eq!(snap.overflowed, 0);
}

#[test]
fn buckets_are_exact_at_the_boundaries() {
    let m = metrics();
    // Each boundary exactly, and one nanosecond above it: upper bounds are inclusive.
    for ns in BUCKETS_NS {
        m.record(Operation::Send, "t", 1, Duration::from_nanos(ns), Ok(()));
        m.record(
            Operation::Send,
            "t",
            1,
            Duration::from_nanos(ns + 1),
            Ok(()),
        );
    }
    m.record(Operation::Send, "t", 1, Duration::ZERO, Ok(()));
    m.record(Operation::Send, "t", 1, Duration::from_secs(7200), Ok(()));
    let snap = m.snapshot();
    let b = series(&snap, Operation::Send, Some("t"), None)
        .duration
        .buckets;
    // Bucket 0: zero and 5 ms; each next bucket: the previous boundary + 1 ns and its own.
    let mut want = [2u64; 15];
    want[14] = 2; // 10 s + 1 ns and two hours
    assert_eq!(b, want);
    assert_eq!(b.iter().sum::<u64>(), 30);
    assert_eq!(DURATION_BUCKETS.len(), BUCKETS_NS.len());
    for (s, ns) in DURATION_BUCKETS.iter().zip(BUCKETS_NS) {
        assert_eq!((s * 1e9).round() as u64, ns);
    }
}

#[test]
fn percentiles_follow_the_recorded_durations() {
    let m = metrics();
    for i in 1..=1000u64 {
        m.record(
            Operation::Process,
            "t",
            1,
            Duration::from_micros(i * 100),
            Ok(()),
        );
    }
    let snap = m.snapshot();
    let d = &series(&snap, Operation::Process, Some("t"), None).duration;
    let near = |got: f64, want: f64| (got - want).abs() <= want * 0.01 + 1e-6;
    assert!(near(d.p50, 0.050), "{}", d.p50);
    assert!(near(d.p90, 0.090), "{}", d.p90);
    assert!(near(d.p99, 0.099), "{}", d.p99);
    assert!((d.max - 0.1).abs() < 1e-12);
    let sum = m.summary(&[50.0, 99.9]).unwrap();
    let lat = sum
        .get(Operation::Process)
        .unwrap()
        .latency_ms
        .clone()
        .unwrap();
    assert_eq!(lat.percentiles.len(), 2);
    assert!(near(lat.percentiles[0].1, 50.0), "{lat:?}");
    assert!(near(lat.percentiles[1].1, 99.9), "{lat:?}");
    assert!(lat.percentiles[0].1 <= lat.percentiles[1].1 && lat.percentiles[1].1 <= lat.max);
    assert!((lat.max - 100.0).abs() < 1e-9 && (lat.min - 0.1).abs() < 1e-9);
    assert!((lat.mean - 50.05).abs() < 1e-9);
}

#[test]
fn failures_are_their_own_series_named_by_status_or_kind() {
    let m = metrics();
    let handle = Error::rocketmq_status(crate::status::INVALID_RECEIPT_HANDLE, "expired");
    let timeout = Error::timeout("no answer");
    let jmq = Error::broker_status(
        BrokerStatus {
            protocol: Protocol::Jmq,
            code: 132,
            name: "FW_TOPIC_NOT_EXIST",
            retriable: false,
        },
        false,
        "x",
    );
    m.record(Operation::Ack, "t", 3, ms(1), Err(&handle));
    m.record(Operation::Ack, "t", 1, ms(1), Err(&handle));
    m.record(Operation::Ack, "t", 2, ms(1), Err(&timeout));
    m.record(Operation::Ack, "t", 4, ms(1), Err(&jmq));
    m.record(Operation::Ack, "t", 10, ms(1), Ok(()));
    m.record_outcome(Operation::Process, "t", 1, ms(1), Some(PROCESS_FAILURE));
    assert_eq!(error_type(&handle), "INVALID_RECEIPT_HANDLE");
    assert_eq!(error_type(&timeout), "timeout");
    assert_eq!(error_type(&Error::connection("x")), "connection");
    let snap = m.snapshot();
    let s = series(
        &snap,
        Operation::Ack,
        Some("t"),
        Some("INVALID_RECEIPT_HANDLE"),
    );
    assert_eq!((s.operations, s.messages), (2, 4));
    let sum = m.summary(&DEFAULT_PERCENTILES).unwrap();
    let ack = sum.get(Operation::Ack).unwrap();
    assert_eq!((ack.operations, ack.messages), (5, 20));
    assert_eq!(
        (ack.failed, ack.failed_messages, ack.ok_messages()),
        (4, 10, 10)
    );
    assert_eq!(
        ack.errors,
        [
            ("FW_TOPIC_NOT_EXIST", 1),
            ("INVALID_RECEIPT_HANDLE", 2),
            ("timeout", 1)
        ]
    );
    assert_eq!(sum.failed(), 5);
    assert_eq!(
        sum.get(Operation::Process).unwrap().errors,
        [(PROCESS_FAILURE, 1)]
    );
    assert!(sum.get(Operation::Receive).is_none());
}

#[test]
fn series_beyond_the_bound_fold_into_overflow_series_counted_not_dropped() {
    let m = ClientMetrics::with_max_series(ClientIdentity::new(System::Nats, "c"), 3);
    let e = Error::timeout("x");
    for t in 0..10 {
        m.record(Operation::Receive, &format!("t{t}"), 2, ms(1), Ok(()));
    }
    m.record(Operation::Receive, "t9", 1, ms(1), Err(&e));
    m.record(Operation::Ack, "t0", 7, ms(1), Ok(()));
    // An existing series still takes its records.
    m.record(Operation::Receive, "t0", 1, ms(1), Ok(()));
    let snap = m.snapshot();
    assert_eq!(snap.series.iter().filter(|s| !s.overflow).count(), 3);
    assert_eq!(snap.overflowed, 9);
    let over = series(&snap, Operation::Receive, None, None);
    assert!(over.overflow);
    assert_eq!((over.operations, over.messages), (7, 14));
    let over_err = series(&snap, Operation::Receive, None, Some(OVERFLOW_ERROR_TYPE));
    assert_eq!(over_err.operations, 1);
    assert_eq!(series(&snap, Operation::Ack, None, None).messages, 7);
    assert_eq!(
        series(&snap, Operation::Receive, Some("t0"), None).messages,
        3
    );
    let total: u64 = snap.series.iter().map(|s| s.operations).sum();
    assert_eq!(total, 13);
    let sum = m.summary(&DEFAULT_PERCENTILES).unwrap();
    assert_eq!(sum.overflowed, 9);
    assert_eq!(sum.get(Operation::Receive).unwrap().operations, 12);
    assert_eq!(
        sum.get(Operation::Receive).unwrap().errors,
        [(OVERFLOW_ERROR_TYPE, 1)]
    );
}

#[test]
fn in_flight_counts_begun_operations_until_finished_or_dropped() {
    let m = metrics();
    let a = m.begin(Operation::Receive);
    let b = m.begin(Operation::Receive);
    assert_eq!(m.in_flight(Operation::Receive), 2);
    let sum = m.summary(&DEFAULT_PERCENTILES).unwrap();
    let r = sum.get(Operation::Receive).unwrap();
    assert_eq!((r.in_flight, r.operations), (2, 0));
    assert!(r.latency_ms.is_none());
    a.finish("t", 4, Ok(()));
    drop(b);
    assert_eq!(m.in_flight(Operation::Receive), 0);
    let snap = m.snapshot();
    assert_eq!(
        series(&snap, Operation::Receive, Some("t"), None).messages,
        4
    );
    assert_eq!(snap.series.len(), 1);
    m.begin(Operation::Process)
        .finish_with("t", 1, Some(PROCESS_FAILURE));
    assert_eq!(
        m.summary(&[])
            .unwrap()
            .get(Operation::Process)
            .unwrap()
            .failed,
        1
    );
}

#[test]
fn retries_are_counted_per_operation_beside_its_records() {
    let m = metrics();
    m.retried(Operation::Send, 0);
    assert!(m.summary(&[]).unwrap().operations.is_empty());
    m.retried(Operation::Send, 2);
    let sum = m.summary(&[]).unwrap();
    let s = sum.get(Operation::Send).unwrap();
    assert_eq!((s.retried, s.operations), (2, 0));
    m.record(Operation::Send, "t", 1, ms(2), Ok(()));
    m.retried(Operation::Send, 1);
    let sum = m.summary(&[]).unwrap();
    assert_eq!(sum.retried(), 3);
    assert_eq!(sum.get(Operation::Send).unwrap().operations, 1);
    let snap = m.snapshot();
    assert!(snap.retried.contains(&(Operation::Send, 3)));
    assert!(snap.retried.contains(&(Operation::Receive, 0)));
}

#[test]
fn an_identity_takes_its_server_from_host_and_port() {
    let id = |a: &str| ClientIdentity::new(System::Nats, "c").with_address(a);
    let s = |i: ClientIdentity| (i.server_address, i.server_port);
    assert_eq!(s(id("h:4222")), (Some("h".into()), Some(4222)));
    assert_eq!(s(id("[::1]:80")), (Some("::1".into()), Some(80)));
    assert_eq!(s(id("h")), (None, None));
    assert_eq!(s(id("h:x")), (None, None));
    assert_eq!(s(id(":1")), (None, None));
}

#[test]
fn bad_percentiles_are_refused_naming_the_parameter() {
    let m = metrics();
    for bad in [&[0.0][..], &[100.0], &[-1.0], &[f64::NAN], &[50.0; 17]] {
        let e = m.summary(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().starts_with("percentiles: "), "{e}");
    }
}

#[test]
fn concurrent_records_are_all_counted() {
    let m = metrics();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..10_000u64 {
                    let dest = if i % 2 == 0 { "even" } else { "odd" };
                    m.record(
                        Operation::Ack,
                        dest,
                        2,
                        Duration::from_micros(t * 10 + i % 7),
                        Ok(()),
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let snap = m.snapshot();
    let ops: u64 = snap.series.iter().map(|s| s.operations).sum();
    let msgs: u64 = snap.series.iter().map(|s| s.messages).sum();
    assert_eq!((ops, msgs), (80_000, 160_000));
    for s in &snap.series {
        assert_eq!(s.duration.buckets.iter().sum::<u64>(), s.operations);
    }
    assert_eq!(Arc::strong_count(&m.inner), 1);
}

#[test]
fn rocketmq_clients_keep_the_java_clients_histograms() {
    let m = metrics();
    assert!(m.keeps_rocketmq());
    m.record(Operation::Send, "t", 3, ms(7), Ok(()));
    m.record(
        Operation::Send,
        "t",
        1,
        ms(600),
        Err(&Error::timeout("slow")),
    );
    m.record_outcome(Operation::Process, "t", 1, ms(5), Some(PROCESS_FAILURE));
    m.record(Operation::Receive, "t", 4, ms(1), Ok(()));
    m.record_rocketmq(RocketMqHistogram::DeliveryLatency, "t", ms(20), 4);
    m.record_rocketmq(RocketMqHistogram::AwaitTime, "t", Duration::ZERO, 1);
    let snap = m.snapshot();
    let get = |h: RocketMqHistogram, ok: Option<bool>| {
        snap.rocketmq
            .iter()
            .find(|s| s.histogram == h && s.success == ok)
            .cloned()
            .unwrap()
    };
    // Send cost: one value per message; a bucket counts prev < v <= bound.
    let ok = get(RocketMqHistogram::SendCostTime, Some(true));
    assert_eq!((ok.count, ok.topic.as_str()), (3, "t"));
    assert_eq!(ok.buckets, vec![0, 0, 3, 0, 0, 0, 0, 0]);
    assert!((ok.sum_ms - 21.0).abs() < 1e-6);
    let failed = get(RocketMqHistogram::SendCostTime, Some(false));
    assert_eq!(
        failed.buckets,
        vec![0, 0, 0, 0, 0, 0, 0, 1],
        "above the last bound"
    );
    assert_eq!(failed.max_ms, 600.0);
    let process = get(RocketMqHistogram::ProcessTime, Some(false));
    assert_eq!(
        process.buckets,
        vec![0, 1, 0, 0, 0, 0, 0],
        "5 ms is in (1, 5]"
    );
    let latency = get(RocketMqHistogram::DeliveryLatency, None);
    assert_eq!((latency.count, latency.buckets[3]), (4, 4));
    let waited = get(RocketMqHistogram::AwaitTime, None);
    assert_eq!(
        (waited.count, waited.buckets[0], waited.min_ms),
        (1, 1, 0.0)
    );
    // Receives and other operations have no Java histogram.
    assert_eq!(snap.rocketmq.len(), 5);
}

#[test]
fn other_systems_keep_no_java_histograms_and_series_are_bounded() {
    let jmq = ClientMetrics::new(ClientIdentity::new(System::Jmq, "app"));
    jmq.record(Operation::Send, "t", 1, ms(1), Ok(()));
    jmq.record_rocketmq(RocketMqHistogram::DeliveryLatency, "t", ms(1), 1);
    assert!(!jmq.keeps_rocketmq());
    assert!(jmq.snapshot().rocketmq.is_empty());

    let m = ClientMetrics::with_max_series(ClientIdentity::new(System::RocketMq, "c"), 2);
    for topic in ["a", "b", "c"] {
        m.record_rocketmq(RocketMqHistogram::AwaitTime, topic, ms(1), 2);
    }
    let snap = m.snapshot();
    assert_eq!(snap.rocketmq.len(), 2);
    assert_eq!(snap.rocketmq_overflowed, 2);
}

#[test]
fn the_otlp_request_holds_one_histogram_per_java_metric() {
    use super::otlp::{request, CUMULATIVE};
    let m = metrics();
    let start = std::time::SystemTime::now();
    assert!(
        request(&m, start).is_none(),
        "nothing recorded, nothing to export"
    );
    m.record(Operation::Send, "a", 2, ms(3), Ok(()));
    m.record(Operation::Send, "b", 1, ms(3), Ok(()));
    m.record_outcome(Operation::Process, "a", 1, ms(3), None);
    let req = request(&m, start).unwrap();
    let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["rocketmq_send_cost_time", "rocketmq_process_time"]);
    let send = metrics[0].histogram.as_ref().unwrap();
    assert_eq!(send.aggregation_temporality, CUMULATIVE);
    assert_eq!(send.data_points.len(), 2, "one point per topic");
    let process = &metrics[1].histogram.as_ref().unwrap().data_points[0];
    let keys: Vec<&str> = process
        .attributes
        .iter()
        .map(|kv| kv.key.as_str())
        .collect();
    assert_eq!(
        keys,
        ["topic", "client_id", "consumer_group", "invocation_status"]
    );
    assert_eq!(process.count, 1);
    assert_eq!(
        process.bucket_counts.len(),
        process.explicit_bounds.len() + 1
    );
}
