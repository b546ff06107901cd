//! Where a consumer connects: the one [`ConsumerTarget`] both `SimpleConsumer` and
//! `PushConsumer` build from their arguments (RocketMQ 5 client options, `jmq=` settings, or
//! `nats=` a `ferrymq.JetStream` with the durable consumers' stream and `ack_wait`), and how
//! each is shown in a `repr`.

use std::time::Duration;

use ferrymq_core::consumer_backend::ConsumerTarget;
use ferrymq_core::jmq::consumer::{check_ack_timeout, ConsumeMode, ConsumerOptions};
use ferrymq_core::jmq::consumer_rpc::JmqRpc;
use ferrymq_core::nats::consumer_rpc::JsConsumerOptions;
use ferrymq_core::rocketmq::filter::FilterExpression;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::client_options::client_options;
use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::nats::PyJetStream;

/// The arguments every consumer takes to say where it connects.
pub(super) struct TargetArgs<'a, 'py> {
    pub endpoints: &'a Bound<'py, PyAny>,
    pub group: &'a str,
    pub subscriptions: &'a [(String, FilterExpression)],
    pub credentials: Option<&'a Bound<'py, PyAny>>,
    pub namespace: Option<String>,
    pub tls: Option<&'a Bound<'py, PyAny>>,
    pub request_timeout: Option<&'a Bound<'py, PyAny>>,
    pub route_refresh_interval: Option<&'a Bound<'py, PyAny>>,
    pub settings_sync_interval: Option<&'a Bound<'py, PyAny>>,
    pub jmq: Option<&'a Bound<'py, PyAny>>,
    pub nats: Option<&'a Bound<'py, PyAny>>,
    pub nats_stream: Option<String>,
    pub nats_ack_wait: Option<&'a Bound<'py, PyAny>>,
}

/// The names a `jmq=` mapping may hold besides `app` and `token`.
const JMQ_OPTIONS: [&str; 7] = [
    "mode",
    "region",
    "ack_timeout",
    "long_poll",
    "session_timeout",
    "metadata_refresh",
    "client_ip",
];

impl TargetArgs<'_, '_> {
    /// The target: JMQ4 with `jmq`, JetStream with `nats`, else RocketMQ 5.
    pub fn target(self) -> PyResult<ConsumerTarget> {
        let jmq = self.jmq.filter(|j| !j.is_none());
        let nats = self.nats.filter(|n| !n.is_none());
        super::validate_topics(self.subscriptions, nats.is_some())?;
        match (jmq, nats) {
            (Some(_), Some(_)) => Err(invalid("nats", "give jmq or nats, not both")),
            (None, Some(n)) => {
                let js = n
                    .cast::<PyJetStream>()
                    .map_err(|_| invalid("nats", "must be a ferrymq.JetStream"))?;
                let mut options = JsConsumerOptions::new(self.group);
                options.stream = self.nats_stream;
                options.ack_wait = durations::or(
                    "ack_wait",
                    self.nats_ack_wait,
                    Lower::Positive,
                    options.ack_wait,
                )?;
                Ok(ConsumerTarget::Nats(js.get().options(), options))
            }
            (Some(j), None) => {
                let j = j
                    .cast::<PyDict>()
                    .map_err(|_| invalid("jmq", "must be a dict of JMQ4 settings"))?;
                self.jmq_target(j)
            }
            (None, None) => Ok(ConsumerTarget::RocketMq(client_options(
                self.endpoints,
                self.credentials,
                self.namespace,
                self.tls,
                self.request_timeout,
                None,
                None,
                self.route_refresh_interval,
                self.settings_sync_interval,
            )?)),
        }
    }

    /// A JMQ4 cluster at `endpoints` (`jmq://host:port`) for the app and token in `jmq`, with
    /// the consumer options it names (the topics are the subscriptions, set at connection).
    fn jmq_target(self, jmq: &Bound<'_, PyDict>) -> PyResult<ConsumerTarget> {
        JmqRpc::topics(self.subscriptions).map_err(to_pyerr)?;
        for key in jmq.keys() {
            let key: String = key.extract()?;
            if !["app", "token"].contains(&key.as_str()) && !JMQ_OPTIONS.contains(&key.as_str()) {
                return Err(invalid(
                    "jmq_options",
                    format!("unknown option {key:?} (known: {})", JMQ_OPTIONS.join(", ")),
                ));
            }
        }
        let item = |k: &str| jmq.get_item(k).map(|v| v.filter(|v| !v.is_none()));
        let text = |k: &str| -> PyResult<Option<String>> {
            item(k)?
                .map(|v| v.extract().map_err(|_| invalid(k, "must be a str")))
                .transpose()
        };
        let endpoint: String = self
            .endpoints
            .extract()
            .map_err(|_| invalid("endpoints", "must be a str (\"jmq://host:port\")"))?;
        let cluster = crate::jmq::cluster_options(
            &endpoint,
            text("app")?.ok_or_else(|| invalid("app", "is required for JMQ4"))?,
            text("token")?.ok_or_else(|| invalid("token", "is required for JMQ4"))?,
            text("region")?,
            self.namespace,
            text("client_ip")?,
            self.request_timeout,
            item("metadata_refresh")?.as_ref(),
        )?;
        let mode = text("mode")?;
        let ack_timeout = durations::optional(
            "ack_timeout",
            item("ack_timeout")?.as_ref(),
            Lower::Positive,
        )?;
        if let Some(d) = ack_timeout {
            check_ack_timeout("ack_timeout", d).map_err(to_pyerr)?;
        }
        let options = ConsumerOptions {
            mode: ConsumeMode::parse(mode.as_deref().unwrap_or("clustering")).map_err(to_pyerr)?,
            ack_timeout: ack_timeout.unwrap_or(Duration::from_secs(30)),
            long_poll: durations::or(
                "long_poll",
                item("long_poll")?.as_ref(),
                Lower::NonNegative,
                Duration::from_secs(5),
            )?,
            session_timeout: durations::timeout_or(
                "session_timeout",
                item("session_timeout")?.as_ref(),
                Duration::from_secs(60),
            )?,
            ..ConsumerOptions::default()
        };
        Ok(ConsumerTarget::Jmq(cluster, options))
    }
}

/// The protocol of `target` as a message names it, when it has no message groups.
pub(super) fn without_groups(target: &ConsumerTarget) -> Option<&'static str> {
    match target {
        ConsumerTarget::RocketMq(_) => None,
        ConsumerTarget::Jmq(..) => Some("JMQ4 has no message groups"),
        ConsumerTarget::Nats(..) => Some("JetStream has no message groups"),
    }
}

/// The endpoints of `target` for a `repr` (no credentials).
pub(super) fn endpoints_repr(target: &ConsumerTarget) -> String {
    match target {
        ConsumerTarget::RocketMq(o) => format!("{:?}", o.endpoints),
        ConsumerTarget::Jmq(c, _) => format!("{:?}", format!("jmq://{}", c.bootstrap)),
        ConsumerTarget::Nats(n, _) => format!(
            "{:?}",
            n.endpoints
                .iter()
                .map(|e| ferrymq_core::nats::redact(e))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}
