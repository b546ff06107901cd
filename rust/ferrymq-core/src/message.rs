//! The message model shared by every backend (RocketMQ v2, JMQ4, NATS JetStream).
//!
//! A [`Message`] is validated once, when it is built; producers only check what depends on the
//! broker (body size limits, topic types).

use std::collections::BTreeMap;
use std::time::SystemTime;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::trace_context::{self, TraceContext};

/// Longest topic name accepted (RocketMQ's limit).
pub const MAX_TOPIC_LEN: usize = 127;
/// Largest total size of user properties (keys + values), in bytes.
pub const MAX_PROPERTIES_BYTES: usize = 16 * 1024;
/// Largest size of a single key, tag or message group, in bytes.
pub const MAX_SHORT_FIELD_BYTES: usize = 1024;

/// Property names RocketMQ reserves for system use; a user property may not use them.
pub const RESERVED_PROPERTIES: &[&str] = &[
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "RETRY_TOPIC",
    "REAL_TOPIC",
    "REAL_QID",
    "TRAN_MSG",
    "PGROUP",
    "MIN_OFFSET",
    "MAX_OFFSET",
    "BUYER_ID",
    "ORIGIN_MESSAGE_ID",
    "TRANSFER_FLAG",
    "CORRECTION_FLAG",
    "MQ2_FLAG",
    "RECONSUME_TIME",
    "MSG_REGION",
    "TRACE_ON",
    "UNIQ_KEY",
    "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME",
    "POP_CK",
    "POP_CK_OFFSET",
    "1ST_POP_TIME",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "DUP_INFO",
    "EXTEND_UNIQ_INFO",
    "INSTANCE_ID",
    "CORRELATION_ID",
    "REPLY_TO_CLIENT",
    "TTL",
    "ARRIVE_TIME",
    "PUSH_REPLY_TIME",
    "CLUSTER",
    "MSG_TYPE",
    "__SHARDINGKEY",
    "__STARTDELIVERTIME",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "__BORNHOST",
];

/// The kind of a message, which must match the type its topic accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// No group, no delivery time, no priority.
    Normal,
    /// Has a message group: delivered in order within the group.
    Fifo,
    /// Has a delivery time.
    Delay,
    /// Sent inside a transaction (decided by the send path, not by the message).
    Transaction,
    /// Has a priority.
    Priority,
}

impl MessageKind {
    /// The upper-case name used by RocketMQ (`"NORMAL"`, `"FIFO"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::Normal => "NORMAL",
            MessageKind::Fifo => "FIFO",
            MessageKind::Delay => "DELAY",
            MessageKind::Transaction => "TRANSACTION",
            MessageKind::Priority => "PRIORITY",
        }
    }

    /// Parse an upper- or lower-case name.
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "NORMAL" => Ok(MessageKind::Normal),
            "FIFO" => Ok(MessageKind::Fifo),
            "DELAY" => Ok(MessageKind::Delay),
            "TRANSACTION" => Ok(MessageKind::Transaction),
            "PRIORITY" => Ok(MessageKind::Priority),
            other => Err(Error::invalid(
                "message_type",
                format!("{other:?} is not one of NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY"),
            )),
        }
    }
}

/// A message to publish. Immutable once built; cheap to clone (the body is shared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    topic: String,
    body: Bytes,
    keys: Vec<String>,
    tag: Option<String>,
    properties: BTreeMap<String, String>,
    message_group: Option<String>,
    delivery_time: Option<SystemTime>,
    priority: Option<i32>,
    /// Boxed: a message without one stays as small as before.
    trace_context: Option<Box<TraceContext>>,
}

impl Message {
    /// Start building a message for `topic` with `body`.
    pub fn builder(topic: impl Into<String>, body: impl Into<Bytes>) -> MessageBuilder {
        MessageBuilder {
            msg: Message {
                topic: topic.into(),
                body: body.into(),
                keys: Vec::new(),
                tag: None,
                properties: BTreeMap::new(),
                message_group: None,
                delivery_time: None,
                priority: None,
                trace_context: None,
            },
            trace_parent: None,
            trace_state: None,
        }
    }

    /// The topic (or subject) the message is published to.
    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// The payload.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    /// Business keys, for lookup and de-duplication.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }
    /// The tag used by consumer filters.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }
    /// User properties.
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.properties
    }
    /// The FIFO message group.
    pub fn message_group(&self) -> Option<&str> {
        self.message_group.as_deref()
    }
    /// When a delayed message becomes visible.
    pub fn delivery_time(&self) -> Option<SystemTime> {
        self.delivery_time
    }
    /// Delivery time in milliseconds since the Unix epoch.
    pub fn delivery_time_millis(&self) -> Option<i64> {
        self.delivery_time.map(crate::duration::unix_ms)
    }
    /// The priority of a PRIORITY message.
    pub fn priority(&self) -> Option<i32> {
        self.priority
    }

    /// The W3C trace context (`traceparent`, and `tracestate` if any) the message carries.
    pub fn trace_context(&self) -> Option<&TraceContext> {
        self.trace_context.as_deref()
    }

    /// The same message carrying `context` (replacing any it had): what a tracing send puts
    /// on the wire.
    #[must_use]
    pub fn with_trace_context(mut self, context: TraceContext) -> Self {
        self.trace_context = Some(Box::new(context));
        self
    }

    /// The kind implied by the message's fields (a transaction is decided by the send path).
    pub fn kind(&self) -> MessageKind {
        if self.message_group.is_some() {
            MessageKind::Fifo
        } else if self.delivery_time.is_some() {
            MessageKind::Delay
        } else if self.priority.is_some() {
            MessageKind::Priority
        } else {
            MessageKind::Normal
        }
    }
}

/// Builder for [`Message`]; [`MessageBuilder::build`] validates every field.
#[derive(Debug, Clone)]
pub struct MessageBuilder {
    msg: Message,
    trace_parent: Option<String>,
    trace_state: Option<String>,
}

impl MessageBuilder {
    /// Add business keys.
    #[must_use]
    pub fn keys<I, S>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.msg.keys.extend(keys.into_iter().map(Into::into));
        self
    }
    /// Set the tag.
    #[must_use]
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.msg.tag = Some(tag.into());
        self
    }
    /// Set one user property.
    #[must_use]
    pub fn property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.msg.properties.insert(key.into(), value.into());
        self
    }
    /// Set the FIFO message group.
    #[must_use]
    pub fn message_group(mut self, group: impl Into<String>) -> Self {
        self.msg.message_group = Some(group.into());
        self
    }
    /// Set the delivery time of a delayed message.
    #[must_use]
    pub fn delivery_time(mut self, at: SystemTime) -> Self {
        self.msg.delivery_time = Some(at);
        self
    }
    /// Set the priority.
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.msg.priority = Some(priority);
        self
    }

    /// Set the W3C `traceparent` the message carries.
    #[must_use]
    pub fn trace_context(mut self, traceparent: impl Into<String>) -> Self {
        self.trace_parent = Some(traceparent.into());
        self
    }
    /// Set the W3C `tracestate` that goes with the trace context.
    #[must_use]
    pub fn trace_state(mut self, tracestate: impl Into<String>) -> Self {
        self.trace_state = Some(tracestate.into());
        self
    }

    /// Validate and build.
    pub fn build(self) -> Result<Message> {
        let mut m = self.msg;
        m.trace_context = match (self.trace_parent, self.trace_state) {
            (Some(p), state) => Some(Box::new(TraceContext::new(p, state)?)),
            (None, Some(_)) => {
                return Err(Error::invalid(
                    "trace_state",
                    "a tracestate needs a trace_context (traceparent) to go with it",
                ))
            }
            (None, None) => None,
        };
        validate_topic(&m.topic)?;
        for k in &m.keys {
            check_short("keys", k)?;
        }
        if let Some(tag) = &m.tag {
            check_short("tag", tag)?;
            if tag.contains('|') {
                return Err(Error::invalid("tag", "must not contain '|'"));
            }
        }
        if let Some(g) = &m.message_group {
            check_short("message_group", g)?;
        }
        let mut total = 0usize;
        for (k, v) in &m.properties {
            if k.trim().is_empty() {
                return Err(Error::invalid(
                    "properties",
                    "property names must not be blank",
                ));
            }
            if trace_context::is_carrier(k) {
                return Err(Error::invalid(
                    "properties",
                    format!("{k:?} carries the trace context; set trace_context / trace_state"),
                ));
            }
            if RESERVED_PROPERTIES.contains(&k.as_str()) {
                return Err(Error::invalid(
                    "properties",
                    format!("{k:?} is reserved for system use"),
                ));
            }
            if k.chars().any(char::is_control) || v.contains('\u{0}') {
                return Err(Error::invalid(
                    "properties",
                    format!("{k:?} contains control characters"),
                ));
            }
            total += k.len() + v.len();
        }
        if total > MAX_PROPERTIES_BYTES {
            return Err(Error::invalid(
                "properties",
                format!("{total} bytes in total, more than the limit of {MAX_PROPERTIES_BYTES}"),
            ));
        }
        let set = [
            m.message_group.is_some(),
            m.delivery_time.is_some(),
            m.priority.is_some(),
        ];
        if set.iter().filter(|b| **b).count() > 1 {
            return Err(Error::invalid(
                "message",
                "message_group, delivery_time and priority are mutually exclusive \
                 (a message is FIFO, DELAY or PRIORITY, not several)",
            ));
        }
        if let Some(p) = m.priority {
            if p < 0 {
                return Err(Error::invalid("priority", format!("{p} is negative")));
            }
        }
        Ok(m)
    }
}

/// Check a topic name: non-empty, at most 127 characters of `[A-Za-z0-9_%|.-]`.
pub fn validate_topic(topic: &str) -> Result<()> {
    if topic.is_empty() {
        return Err(Error::invalid("topic", "must not be empty"));
    }
    if topic.len() > MAX_TOPIC_LEN {
        return Err(Error::invalid(
            "topic",
            format!("{} characters, longer than {MAX_TOPIC_LEN}", topic.len()),
        ));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '%' | '|' | '.')))
    {
        return Err(Error::invalid(
            "topic",
            format!("{topic:?} contains {c:?}; allowed are letters, digits and _ - % | ."),
        ));
    }
    Ok(())
}

fn check_short(field: &str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "must not be blank"));
    }
    if value.len() > MAX_SHORT_FIELD_BYTES {
        return Err(Error::invalid(
            field,
            format!("{} bytes, longer than {MAX_SHORT_FIELD_BYTES}", value.len()),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, "contains control characters"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn kinds_follow_fields() {
        let m = Message::builder("t", "x").build().unwrap();
        assert_eq!(m.kind(), MessageKind::Normal);
        let m = Message::builder("t", "x")
            .message_group("g")
            .build()
            .unwrap();
        assert_eq!(m.kind(), MessageKind::Fifo);
        let m = Message::builder("t", "x")
            .delivery_time(SystemTime::now())
            .build()
            .unwrap();
        assert_eq!(m.kind(), MessageKind::Delay);
        let m = Message::builder("t", "x").priority(3).build().unwrap();
        assert_eq!(m.kind(), MessageKind::Priority);
    }

    #[test]
    fn invalid_fields_are_named() {
        let e = Message::builder("", "x").build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().starts_with("topic:"), "{e}");
        let e = Message::builder("t", "x")
            .property("UNIQ_KEY", "1")
            .build()
            .unwrap_err();
        assert!(e.message().contains("reserved"), "{e}");
        let e = Message::builder("t", "x").tag("a|b").build().unwrap_err();
        assert!(e.message().starts_with("tag:"), "{e}");
        let e = Message::builder("t", "x")
            .message_group("g")
            .priority(1)
            .build()
            .unwrap_err();
        assert!(e.message().contains("mutually exclusive"), "{e}");
        let big = "v".repeat(MAX_PROPERTIES_BYTES);
        let e = Message::builder("t", "x")
            .property("k", big)
            .build()
            .unwrap_err();
        assert!(e.message().contains("limit"), "{e}");
    }

    #[test]
    fn with_trace_context_replaces_the_context_and_keeps_the_rest() {
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        const TP2: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let m = Message::builder("t", "body")
            .tag("a")
            .trace_context(TP)
            .trace_state("x=1")
            .build()
            .unwrap();
        let ctx = TraceContext::new(TP2.to_string(), None).unwrap();
        let m2 = m.clone().with_trace_context(ctx);
        let tc = m2.trace_context().unwrap();
        assert_eq!((tc.parent(), tc.state()), (TP2, None));
        assert_eq!(
            (m2.topic(), m2.body(), m2.tag()),
            (m.topic(), m.body(), m.tag())
        );
        assert_eq!(m.trace_context().unwrap().parent(), TP);
    }

    #[test]
    fn trace_context_is_checked_and_kept() {
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let m = Message::builder("t", "x").build().unwrap();
        assert!(m.trace_context().is_none());
        let m = Message::builder("t", "x")
            .trace_context(TP)
            .trace_state("a=1")
            .build()
            .unwrap();
        let tc = m.trace_context().unwrap();
        assert_eq!((tc.parent(), tc.state()), (TP, Some("a=1")));
        let e = Message::builder("t", "x")
            .trace_context("00-0-0-0")
            .build()
            .unwrap_err();
        assert!(e.message().starts_with("trace_context:"), "{e}");
        let e = Message::builder("t", "x")
            .trace_state("a=1")
            .build()
            .unwrap_err();
        assert!(e.message().starts_with("trace_state:"), "{e}");
        for name in ["traceparent", "Tracestate", "TRACE_CONTEXT"] {
            let e = Message::builder("t", "x")
                .property(name, TP)
                .build()
                .unwrap_err();
            assert!(e.message().contains("trace_context"), "{e}");
        }
    }
}
