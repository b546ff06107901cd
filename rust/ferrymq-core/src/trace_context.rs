//! W3C Trace Context on the wire: the `traceparent` value a message carries (optionally with its
//! `tracestate`), checked once when a message is built, and the names each protocol carries them
//! under.
//!
//! | protocol | `traceparent` | `tracestate` |
//! | --- | --- | --- |
//! | RocketMQ 5 (gRPC) | `SystemProperties.trace_context` (a proxy stores it as the property `TRACE_CONTEXT` and repeats it among the user properties it delivers) | user property `tracestate` |
//! | RocketMQ remoting | property `traceparent` (as the OpenTelemetry instrumentation of the 4.x Java client) | property `tracestate` |
//! | NATS JetStream | header `traceparent` | header `tracestate` |
//! | JMQ4 | attribute `traceparent` | attribute `tracestate` |
//!
//! On receive, the RocketMQ system field (or a `TRACE_CONTEXT` property) is read first, then a
//! `traceparent` property (what the OpenTelemetry instrumentation of the Java clients writes).
//! A leaf module: it imports only the error type.

use crate::error::{Error, Result};

/// Property / header name of the W3C `traceparent` value.
pub const TRACEPARENT: &str = "traceparent";
/// Property / header name of the W3C `tracestate` value.
pub const TRACESTATE: &str = "tracestate";
/// The property a RocketMQ broker stores the gRPC `trace_context` field under.
pub const ROCKETMQ_TRACE_CONTEXT: &str = "TRACE_CONTEXT";
/// Longest `tracestate` accepted (W3C: at most 32 list members; 512 characters is what a
/// vendor must be able to propagate).
pub const MAX_TRACE_STATE_LEN: usize = 512;
/// Length of a version-00 `traceparent`: `00-` + 32 + `-` + 16 + `-` + 2.
pub const TRACEPARENT_LEN: usize = 55;

/// The trace context of a message: a valid W3C `traceparent` and, optionally, its `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    parent: String,
    state: Option<String>,
}

impl TraceContext {
    /// Check both values (errors name `trace_context` and `trace_state`).
    pub fn new(parent: String, state: Option<String>) -> Result<Self> {
        validate_traceparent(&parent)?;
        if let Some(s) = &state {
            validate_tracestate(s)?;
        }
        Ok(Self { parent, state })
    }
    /// The `traceparent` value.
    pub fn parent(&self) -> &str {
        &self.parent
    }
    /// The `tracestate` value, if any.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }
    /// The `(name, value)` pairs of a text carrier (headers, properties, attributes):
    /// `traceparent`, then `tracestate` when set.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> {
        std::iter::once((TRACEPARENT, self.parent.as_str()))
            .chain(self.state.as_deref().map(|s| (TRACESTATE, s)))
    }
}

/// The properties of a received message (a map, or the `(name, value)` pairs of a row) that its
/// trace context is taken out of by [`take_received`].
pub trait ReceivedProperties {
    /// A value taken out.
    type Value: AsRef<str>;
    /// Whether there are no properties.
    fn is_empty(&self) -> bool;
    /// The value of `name`, if present.
    fn value_of(&self, name: &str) -> Option<&str>;
    /// Remove `name`, returning its value.
    fn take(&mut self, name: &str) -> Option<Self::Value>;
}

impl ReceivedProperties for std::collections::HashMap<String, String> {
    type Value = String;
    fn is_empty(&self) -> bool {
        self.is_empty()
    }
    fn value_of(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
    fn take(&mut self, name: &str) -> Option<String> {
        self.remove(name)
    }
}

impl<'a> ReceivedProperties for Vec<(&'a str, &'a str)> {
    type Value = &'a str;
    fn is_empty(&self) -> bool {
        <[_]>::is_empty(self)
    }
    fn value_of(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
    fn take(&mut self, name: &str) -> Option<&'a str> {
        let at = self.iter().position(|(k, _)| *k == name)?;
        Some(self.remove(at).1)
    }
}

/// The trace context of a received message and its `tracestate`: the RocketMQ system field
/// first, else a `traceparent` property (JetStream headers, JMQ4 attributes, remoting
/// properties, and what the OpenTelemetry instrumentation of the Java clients writes). What was
/// taken leaves the properties: the `traceparent` used, a proxy's repeat of the system field as
/// `TRACE_CONTEXT`, and the `tracestate` (only together with a trace context). Messages without
/// properties cost no lookup. Message views and the readers' columns both take it this way.
pub fn take_received<P: ReceivedProperties>(
    system: Option<P::Value>,
    props: &mut P,
) -> (Option<P::Value>, Option<P::Value>) {
    let system = system.filter(|s| !s.as_ref().is_empty());
    if props.is_empty() {
        return (system, None);
    }
    let parent = match system {
        Some(s) => {
            if props.value_of(ROCKETMQ_TRACE_CONTEXT) == Some(s.as_ref()) {
                props.take(ROCKETMQ_TRACE_CONTEXT);
            }
            Some(s)
        }
        None => props.take(TRACEPARENT),
    };
    let state = if parent.is_some() {
        props.take(TRACESTATE)
    } else {
        None
    };
    (parent, state)
}

/// Whether a property or header name is one the trace context travels under (`traceparent`,
/// `tracestate`, in any case, or RocketMQ's `TRACE_CONTEXT`); such names are not user
/// properties.
pub fn is_carrier(name: &str) -> bool {
    name.eq_ignore_ascii_case(TRACEPARENT)
        || name.eq_ignore_ascii_case(TRACESTATE)
        || name == ROCKETMQ_TRACE_CONTEXT
}

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Check a W3C `traceparent`: `version-traceid-parentid-flags` in lower-case hex, 2-32-16-2
/// digits; version `ff` and all-zero trace or parent ids are invalid. A version above `00` may
/// carry more fields after a `-` (the W3C rule for future versions).
pub fn validate_traceparent(v: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::invalid(
            "trace_context",
            format!(
                "{v:?} is not a W3C traceparent ({why}); expected \
                 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"
            ),
        ))
    };
    if v.len() < TRACEPARENT_LEN || !v.is_ascii() {
        return bad("too short or not ASCII");
    }
    let (head, rest) = v.split_at(TRACEPARENT_LEN);
    let fields: Vec<&str> = head.split('-').collect();
    if fields.len() != 4 || fields.iter().map(|f| f.len()).ne([2, 32, 16, 2]) {
        return bad("wrong field lengths");
    }
    if !fields.iter().all(|f| lower_hex(f)) {
        return bad("not lower-case hex");
    }
    let version = fields[0];
    if version == "ff" {
        return bad("version ff is invalid");
    }
    if version == "00" && !rest.is_empty() {
        return bad("version 00 has exactly four fields");
    }
    if !rest.is_empty() && !rest.starts_with('-') {
        return bad("fields of a later version follow a '-'");
    }
    if fields[1].bytes().all(|b| b == b'0') {
        return bad("the trace id is all zeros");
    }
    if fields[2].bytes().all(|b| b == b'0') {
        return bad("the span id is all zeros");
    }
    Ok(())
}

/// Check a W3C `tracestate`: not blank, at most [`MAX_TRACE_STATE_LEN`] characters of printable
/// ASCII (it travels as a header and a property).
pub fn validate_tracestate(v: &str) -> Result<()> {
    if v.trim().is_empty() {
        return Err(Error::invalid("trace_state", "must not be blank"));
    }
    if v.len() > MAX_TRACE_STATE_LEN {
        return Err(Error::invalid(
            "trace_state",
            format!(
                "{} characters, more than the W3C limit of {MAX_TRACE_STATE_LEN}",
                v.len()
            ),
        ));
    }
    if !v.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(Error::invalid(
            "trace_state",
            "must be printable ASCII (list-members key=value, separated by commas)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    const OK: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_rows_pairs_give_up_the_trace_context_as_a_map_does() {
        // The map form is pinned by the message view's tests; the pairs follow the same rule.
        let mut p = vec![("a", "1"), (TRACEPARENT, OK), (TRACESTATE, "v=1")];
        assert_eq!(take_received(None, &mut p), (Some(OK), Some("v=1")));
        assert_eq!(p, [("a", "1")]);
        // The system field wins; the proxy's repeat of it goes, a differing traceparent stays.
        let mut p = vec![(ROCKETMQ_TRACE_CONTEXT, OK), (TRACEPARENT, "other")];
        assert_eq!(take_received(Some(OK), &mut p), (Some(OK), None));
        assert_eq!(p, [(TRACEPARENT, "other")]);
        // A tracestate alone is left where it is; an empty system field is none.
        let mut p = vec![(TRACESTATE, "v=1")];
        assert_eq!(take_received(Some(""), &mut p), (None, None));
        assert_eq!(p, [(TRACESTATE, "v=1")]);
    }

    #[test]
    fn valid_traceparents() {
        validate_traceparent(OK).unwrap();
        // A later version may add fields after a '-'.
        validate_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra")
            .unwrap();
        validate_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
    }

    #[test]
    fn invalid_traceparents_name_trace_context() {
        for v in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01",
        ] {
            let e = validate_traceparent(v).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.message().starts_with("trace_context:"), "{v:?}: {e}");
        }
    }

    #[test]
    fn tracestate_checks_and_pairs() {
        let tc = TraceContext::new(OK.into(), Some("a=1,b=2".into())).unwrap();
        let pairs: Vec<_> = tc.pairs().collect();
        assert_eq!(pairs, [(TRACEPARENT, OK), (TRACESTATE, "a=1,b=2")]);
        let tc = TraceContext::new(OK.into(), None).unwrap();
        assert_eq!(tc.pairs().count(), 1);
        for v in [" ", "a=\n", &"k".repeat(MAX_TRACE_STATE_LEN + 1)] {
            let e = TraceContext::new(OK.into(), Some(v.to_string())).unwrap_err();
            assert!(e.message().starts_with("trace_state:"), "{e}");
        }
        assert!(is_carrier("traceparent") && is_carrier("TraceState"));
        assert!(is_carrier("TRACE_CONTEXT") && !is_carrier("trace"));
    }
}
