//! The clients' metrics as Python sees them: the `percentiles` argument of `stats()` and the
//! one converter of a client's [`ClientMetrics`] into the dict `stats()` returns (every
//! client, every protocol; nothing is computed here, the core summarises).

use ferrymq_core::metrics::{
    check_percentiles, ClientMetrics, MetricsSummary, Operation, DEFAULT_PERCENTILES,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::errors::{invalid, to_pyerr};

/// The `percentiles` argument of `stats()`: None = p50, p90, p99; otherwise a sequence of
/// numbers, each above 0 and below 100 (checked by the core).
pub(crate) fn percentiles_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<f64>> {
    let qs = match v {
        None => DEFAULT_PERCENTILES.to_vec(),
        Some(v) if v.is_instance_of::<PyString>() => {
            return Err(invalid(
                "percentiles",
                "must be a sequence of numbers, not a str",
            ));
        }
        Some(v) => v
            .extract::<Vec<f64>>()
            .map_err(|_| invalid("percentiles", "must be a sequence of numbers"))?,
    };
    check_percentiles(&qs).map_err(to_pyerr)?;
    Ok(qs)
}

/// The one converter of a client's metrics (every client, every protocol): adds `client`
/// (system, client id, server address and port, group; None before the start), `failed`,
/// `in_flight`, `overflowed` and `operations` (per operation name: `type`, `calls`,
/// `messages`, `failed`, `failed_messages`, `errors` by error type, `in_flight`, `retried`,
/// `latency_ms` with `mean`, `min`, `max` and a `p<q>` per percentile, None before the first
/// record) to `d`. Returns the summary for the caller's own keys.
pub(crate) fn metrics_into(
    d: &Bound<'_, PyDict>,
    metrics: Option<&ClientMetrics>,
    percentiles: &[f64],
) -> PyResult<MetricsSummary> {
    let py = d.py();
    let summary = match metrics {
        Some(m) => m.summary(percentiles).map_err(to_pyerr)?,
        None => MetricsSummary {
            operations: Vec::new(),
            overflowed: 0,
        },
    };
    match metrics.map(ClientMetrics::identity) {
        Some(id) => {
            let c = PyDict::new(py);
            c.set_item("system", id.system.as_str())?;
            c.set_item("client_id", &id.client_id)?;
            c.set_item("server_address", &id.server_address)?;
            c.set_item("server_port", id.server_port)?;
            c.set_item("group", &id.consumer_group)?;
            d.set_item("client", c)?;
        }
        None => d.set_item("client", py.None())?,
    }
    d.set_item("failed", summary.failed())?;
    d.set_item("in_flight", summary.in_flight())?;
    d.set_item("overflowed", summary.overflowed)?;
    let ops = PyDict::new(py);
    for s in &summary.operations {
        let o = PyDict::new(py);
        o.set_item("type", s.operation.kind().as_str())?;
        o.set_item("calls", s.operations)?;
        o.set_item("messages", s.messages)?;
        o.set_item("failed", s.failed)?;
        o.set_item("failed_messages", s.failed_messages)?;
        let errors = PyDict::new(py);
        for (t, n) in &s.errors {
            errors.set_item(*t, n)?;
        }
        o.set_item("errors", errors)?;
        o.set_item("in_flight", s.in_flight)?;
        o.set_item("retried", s.retried)?;
        match &s.latency_ms {
            Some(l) => {
                let lat = PyDict::new(py);
                lat.set_item("mean", l.mean)?;
                lat.set_item("min", l.min)?;
                lat.set_item("max", l.max)?;
                for (q, v) in &l.percentiles {
                    lat.set_item(format!("p{q}"), v)?;
                }
                o.set_item("latency_ms", lat)?;
            }
            None => o.set_item("latency_ms", py.None())?,
        }
        ops.set_item(s.operation.name(), o)?;
    }
    d.set_item("operations", ops)?;
    Ok(summary)
}

/// The one converter of a client's metrics into the plain data `metrics_snapshot()` returns
/// to exporters (`ferrymq.telemetry`): `closed` (the client was closed: these are its final
/// figures), the identity (`system`, `client_id`,
/// `server_address`, `server_port`, `group`), `series` (one dict per series: `operation`,
/// `type`, `destination`, `error_type`, `overflow`, `calls`, `messages`, and the durations in
/// seconds: `count`, `sum`, `min`, `max`, `buckets`, the 15 non-cumulative counts of the
/// conventions' explicit buckets), `overflowed` and `gauges` (`gauges`: the caller's current
/// values by name). Nothing is computed here; the cost is per series, never per message.
pub(crate) fn snapshot_dict<'py>(
    py: Python<'py>,
    metrics: &ClientMetrics,
    closed: bool,
    gauges: &[(&str, u64)],
) -> PyResult<Bound<'py, PyDict>> {
    let snap = metrics.snapshot();
    let d = PyDict::new(py);
    d.set_item("closed", closed)?;
    let id = &snap.identity;
    d.set_item("system", id.system.as_str())?;
    d.set_item("client_id", &id.client_id)?;
    d.set_item("server_address", &id.server_address)?;
    d.set_item("server_port", id.server_port)?;
    d.set_item("group", &id.consumer_group)?;
    let series = PyList::empty(py);
    for s in &snap.series {
        let o = PyDict::new(py);
        o.set_item("operation", s.operation.name())?;
        o.set_item("type", s.operation.kind().as_str())?;
        o.set_item("destination", &s.destination)?;
        o.set_item("error_type", s.error_type)?;
        o.set_item("overflow", s.overflow)?;
        o.set_item("calls", s.operations)?;
        o.set_item("messages", s.messages)?;
        let t = &s.duration;
        o.set_item("count", t.count)?;
        o.set_item("sum", t.sum)?;
        o.set_item("min", t.min)?;
        o.set_item("max", t.max)?;
        o.set_item("buckets", PyTuple::new(py, t.buckets)?)?;
        series.append(o)?;
    }
    d.set_item("series", series)?;
    d.set_item("overflowed", snap.overflowed)?;
    let rocketmq = PyList::empty(py);
    for s in &snap.rocketmq {
        let o = PyDict::new(py);
        o.set_item("name", s.histogram.name())?;
        o.set_item("topic", &s.topic)?;
        o.set_item(
            "status",
            s.success.map(|ok| if ok { "success" } else { "failure" }),
        )?;
        o.set_item("consumer", s.histogram.is_consumer_side())?;
        o.set_item("bounds", PyTuple::new(py, s.histogram.bounds_ms())?)?;
        o.set_item("buckets", PyTuple::new(py, &s.buckets)?)?;
        o.set_item("count", s.count)?;
        o.set_item("sum", s.sum_ms)?;
        o.set_item("min", s.min_ms)?;
        o.set_item("max", s.max_ms)?;
        rocketmq.append(o)?;
    }
    d.set_item("rocketmq", rocketmq)?;
    let g = PyDict::new(py);
    for (name, v) in gauges {
        g.set_item(*name, v)?;
    }
    d.set_item("gauges", g)?;
    Ok(d)
}

/// The `stats()` dict of a producer (every protocol) or of the managed publisher over one:
/// [`metrics_into`] plus `sent` (messages of the successful sends), `retried` (attempts beyond
/// the first) and, where there is a produce path, `pending` (messages produced and not yet
/// reported).
pub(crate) fn producer_stats<'py>(
    py: Python<'py>,
    metrics: Option<&ClientMetrics>,
    percentiles: &[f64],
    pending: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let summary = metrics_into(&d, metrics, percentiles)?;
    d.set_item("sent", summary.ok_messages(Operation::Send))?;
    d.set_item("retried", summary.retried())?;
    if let Some(n) = pending {
        d.set_item("pending", n)?;
    }
    Ok(d)
}
