//! NATS JetStream backend on the `async-nats` crate, targeting nats-server 2.9 semantics.
//!
//! * [`JetStream`]: a connection to `nats://` endpoints with a JetStream context: publish with
//!   `Nats-Msg-Id` (de-duplication within the stream's `duplicate_window`) and expectations,
//!   waiting for the JetStream ack; the [`PublishBackend`](crate::publisher::PublishBackend) of
//!   the managed publisher. Publishes are plain NATS publishes whose acks come back through one
//!   wildcard inbox subscription per connection ([`acks`]).
//! * [`stream`]: stream management (create with subjects, info, delete), mostly for tests.
//! * [`consumer`]: a pull consumer (fetch batches, ack / nak / term).
//! * [`consumer_rpc`]: [`ConsumerRpc`](crate::rocketmq::consumer_rpc::ConsumerRpc) over durable
//!   pull consumers, so the push engine and the simple consumer read JetStream too.
//! * [`error`]: the mapping of async-nats errors (JetStream codes keep their `err_code`).
//!
//! async-nats is built without its `server_2_10`+ features, so APIs nats-server 2.9 lacks
//! (multi-filter consumers, per-message TTL, batch publish, …) do not exist here.

mod acks;
pub mod consumer;
pub mod consumer_rpc;
pub mod error;
pub mod range;
pub mod stream;

use std::sync::Arc;
use std::time::Duration;

use async_nats::header::{
    HeaderMap, HeaderName, HeaderValue, NATS_EXPECTED_LAST_MESSAGE_ID, NATS_EXPECTED_LAST_SEQUENCE,
    NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, NATS_EXPECTED_STREAM, NATS_MESSAGE_ID,
};
use async_nats::jetstream;
use async_nats::{ConnectOptions, ServerAddr, Subject};
use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::OnceCell;

use crate::error::{Error, Result};
use crate::metrics::{ClientIdentity, ClientMetrics, Operation, System};
use crate::publisher::{
    AckFuture, AckSink, Flight, Outgoing, PublishAck, PublishBackend, PublishOptions, SendFuture,
    SendToFuture,
};

pub use consumer::{AckKind, DeliverPolicy, JsMessage, PullConsumer, PullConsumerConfig};
pub use consumer_rpc::{JsConsumerOptions, JsConsumerRpc};
pub use stream::{Retention, Storage, StreamConfig, StreamInfo};

/// How to connect to NATS.
#[derive(Clone)]
pub struct NatsOptions {
    /// `nats://host:port` endpoints (credentials may be given as `nats://user:pass@host`).
    pub endpoints: Vec<String>,
    /// The connection name shown by the server's monitoring.
    pub name: Option<String>,
    /// User name (with `password`).
    pub user: Option<String>,
    /// Password (with `user`). Never logged.
    pub password: Option<String>,
    /// Authentication token. Never logged.
    pub token: Option<String>,
    /// How long to wait for the connection to be established.
    pub connect_timeout: Duration,
    /// Timeout of JetStream API requests and of publish acks awaited through
    /// [`JetStream::publish`].
    pub request_timeout: Duration,
}

impl std::fmt::Debug for NatsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsOptions")
            .field("endpoints", &redact_endpoints(&self.endpoints))
            .field("name", &self.name)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            name: None,
            user: None,
            password: None,
            token: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// Parse `data` as the reply to a JetStream publish, as the publisher does (plain, and with
/// the status codes a reply can carry). For the decoder fuzz test: errors are expected,
/// panics are bugs.
#[doc(hidden)]
pub fn fuzz_decode_ack(data: &[u8]) {
    use async_nats::StatusCode;
    for status in [
        None,
        Some(StatusCode::NO_RESPONDERS),
        Some(StatusCode::TIMEOUT),
        Some(StatusCode::OK),
    ] {
        let _ = acks::decode(status, data);
    }
}

/// Split a comma-separated endpoint list and check that each is a `nats://` URL.
pub fn parse_endpoints(endpoints: &str) -> Result<Vec<String>> {
    let list: Vec<String> = endpoints
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if list.is_empty() {
        return Err(Error::invalid("endpoints", "no endpoint given"));
    }
    for e in &list {
        check_endpoint(e)?;
    }
    Ok(list)
}

fn check_endpoint(e: &str) -> Result<ServerAddr> {
    let Some(rest) = e.strip_prefix("nats://") else {
        return Err(Error::invalid(
            "endpoints",
            format!(
                "{:?} is not a nats:// endpoint (expected nats://host:port)",
                redact(e)
            ),
        ));
    };
    if rest.is_empty() || rest.starts_with(':') || rest.starts_with('/') {
        return Err(Error::invalid(
            "endpoints",
            format!("{:?} has no host", redact(e)),
        ));
    }
    e.parse::<ServerAddr>()
        .map_err(|err| Error::invalid("endpoints", format!("{:?}: {err}", redact(e))))
}

/// An endpoint with any `user:password@` removed.
pub fn redact(endpoint: &str) -> String {
    match (endpoint.find("://"), endpoint.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            format!("{}***@{}", &endpoint[..s + 3], &endpoint[at + 1..])
        }
        _ => endpoint.to_string(),
    }
}

fn redact_endpoints(endpoints: &[String]) -> String {
    endpoints
        .iter()
        .map(|e| redact(e))
        .collect::<Vec<_>>()
        .join(",")
}

/// Check a subject to publish to: non-empty tokens, no whitespace, no wildcards.
pub fn validate_publish_subject(subject: &str) -> Result<()> {
    if subject.is_empty() {
        return Err(Error::invalid("subject", "must not be empty"));
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            "subject",
            format!("{subject:?} contains whitespace or control characters"),
        ));
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Err(Error::invalid(
                "subject",
                format!("{subject:?} has an empty token"),
            ));
        }
        if token == "*" || token == ">" {
            return Err(Error::invalid(
                "subject",
                format!("{subject:?} contains a wildcard; publish to a concrete subject"),
            ));
        }
    }
    Ok(())
}

fn header_value(field: &str, v: &str) -> Result<HeaderValue> {
    v.parse::<HeaderValue>()
        .map_err(|_| Error::invalid(field, format!("{v:?} contains CR or LF")))
}

/// Refuse what a JetStream message cannot carry, rather than drop it: keys, a tag, a message
/// group and a delivery time are RocketMQ's (properties travel as headers).
pub fn check_message(m: &crate::message::Message) -> Result<()> {
    let refused = if !m.keys().is_empty() {
        Some("keys")
    } else if m.tag().is_some() {
        Some("tag")
    } else if m.message_group().is_some() {
        Some("message_group")
    } else if m.delivery_time().is_some() {
        Some("delivery_time")
    } else {
        None
    };
    match refused {
        Some(field) => Err(Error::invalid(
            field,
            "NATS JetStream messages have none; put it in the properties (sent as headers)",
        )),
        None => Ok(()),
    }
}

/// The headers a message is published with: its properties, then its trace context
/// (`traceparent`, `tracestate`).
pub fn message_headers(m: &crate::message::Message) -> Vec<(String, String)> {
    let pairs = m
        .trace_context()
        .into_iter()
        .flat_map(crate::trace_context::TraceContext::pairs);
    m.properties()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .chain(pairs.map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// Check user headers and options the way the wire needs them (no panics later).
pub fn validate_headers(headers: &[(String, String)], options: &PublishOptions) -> Result<()> {
    for (k, v) in headers {
        k.parse::<HeaderName>().map_err(|_| {
            Error::invalid(
                "headers",
                format!("{k:?} is not a valid header name (printable ASCII, no ':')"),
            )
        })?;
        header_value("headers", v)?;
    }
    if let Some(id) = &options.message_id {
        header_value("message_id", id)?;
    }
    if let Some(s) = &options.expected_stream {
        header_value("expected_stream", s)?;
    }
    if let Some(s) = &options.expected_last_msg_id {
        header_value("expected_last_msg_id", s)?;
    }
    Ok(())
}

fn build_headers(
    id: &str,
    headers: &[(String, String)],
    options: &PublishOptions,
) -> Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let name = k
            .parse::<HeaderName>()
            .map_err(|_| Error::invalid("headers", format!("{k:?} is not a valid header name")))?;
        map.append(name, header_value("headers", v)?);
    }
    map.insert(NATS_MESSAGE_ID, header_value("message_id", id)?);
    if let Some(s) = &options.expected_stream {
        map.insert(NATS_EXPECTED_STREAM, header_value("expected_stream", s)?);
    }
    if let Some(n) = options.expected_last_sequence {
        map.insert(NATS_EXPECTED_LAST_SEQUENCE, n.to_string());
    }
    if let Some(n) = options.expected_last_subject_sequence {
        map.insert(NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, n.to_string());
    }
    if let Some(s) = &options.expected_last_msg_id {
        map.insert(
            NATS_EXPECTED_LAST_MESSAGE_ID,
            header_value("expected_last_msg_id", s)?,
        );
    }
    Ok(map)
}

struct Inner {
    client: async_nats::Client,
    context: jetstream::Context,
    endpoints: String,
    request_timeout: Duration,
    /// The publish acks, set up by the first publish.
    acks: OnceCell<Arc<acks::AckMux>>,
    /// The subject published to last: publishers mostly repeat one, and a clone of a shared
    /// `Subject` is a reference count where a new one is an allocation and a copy.
    last_subject: parking_lot::Mutex<Option<async_nats::Subject>>,
    /// `close()` was called (the connection is drained once).
    closed: std::sync::atomic::AtomicBool,
    /// What the publishes record: one `send` per message, timed to its ack.
    metrics: ClientMetrics,
}

impl Inner {
    /// `subject` as an async-nats `Subject`, reusing the last one when it is the same.
    fn subject(&self, subject: &str) -> async_nats::Subject {
        let mut last = self.last_subject.lock();
        match &*last {
            Some(s) if s.as_str() == subject => s.clone(),
            _ => {
                let s = async_nats::Subject::from(subject);
                *last = Some(s.clone());
                s
            }
        }
    }

    /// The ack mux, subscribing to its inbox and starting its task on first use.
    async fn acks(&self) -> Result<&Arc<acks::AckMux>> {
        self.acks
            .get_or_try_init(|| async {
                let mux = acks::AckMux::new(
                    format!("{}.", self.client.new_inbox()),
                    self.request_timeout,
                );
                let sub = self
                    .client
                    .subscribe(mux.wildcard())
                    .await
                    .map_err(|e| error::map("publish: subscribe to the ack inbox", e))?;
                tokio::spawn(acks::run(Arc::clone(&mux), sub));
                Ok(mux)
            })
            .await
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Ends the ack task, which holds the subscription (and so the connection) open.
        if let Some(mux) = self.acks.get() {
            mux.close("the JetStream connection was dropped");
        }
    }
}

/// A JetStream connection. Cheap to clone.
#[derive(Clone)]
pub struct JetStream {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for JetStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JetStream")
            .field("endpoints", &self.inner.endpoints)
            .finish_non_exhaustive()
    }
}

impl JetStream {
    /// Connect to the endpoints of `opts`.
    pub async fn connect(opts: NatsOptions) -> Result<Self> {
        if opts.endpoints.is_empty() {
            return Err(Error::invalid("endpoints", "no endpoint given"));
        }
        let addrs = opts
            .endpoints
            .iter()
            .map(|e| check_endpoint(e))
            .collect::<Result<Vec<_>>>()?;
        Error::require_positive("connect_timeout", opts.connect_timeout)?;
        Error::require_positive("request_timeout", opts.request_timeout)?;
        let mut co = ConnectOptions::new()
            // Subjects are checked where ferrymq takes them (`validate_publish_subject`, with
            // errors that name the field); async-nats need not scan each one again.
            .skip_subject_validation(true)
            .connection_timeout(opts.connect_timeout)
            .request_timeout(Some(opts.request_timeout))
            .event_callback(|ev| async move {
                tracing::info!(target: "ferrymq::nats", "connection event: {ev}");
            });
        if let Some(name) = &opts.name {
            co = co.name(name);
        }
        match (&opts.user, &opts.password) {
            (Some(u), Some(p)) => co = co.user_and_password(u.clone(), p.clone()),
            (None, None) => {}
            _ => {
                return Err(Error::invalid(
                    "user",
                    "user and password must be given together",
                ))
            }
        }
        if let Some(t) = &opts.token {
            co = co.token(t.clone());
        }
        let endpoints = redact_endpoints(&opts.endpoints);
        let client = tokio::time::timeout(
            opts.connect_timeout + Duration::from_secs(1),
            co.connect(addrs.as_slice()),
        )
        .await
        .map_err(|_| Error::timeout(format!("connect to {endpoints}: timed out")))?
        .map_err(|e| error::map(&format!("connect to {endpoints}"), e))?;
        // The context serves the JetStream API (streams, consumers); publishes go through
        // `Inner::acks`.
        let context = jetstream::ContextBuilder::new()
            .timeout(opts.request_timeout)
            .build(client.clone());
        tracing::debug!(target: "ferrymq::nats", "connected to {endpoints}");
        let info = client.server_info();
        let identity = ClientIdentity::new(System::Nats, info.client_id.to_string())
            .with_server(info.host.clone(), info.port);
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                context,
                endpoints,
                request_timeout: opts.request_timeout,
                acks: OnceCell::new(),
                last_subject: parking_lot::Mutex::new(None),
                closed: std::sync::atomic::AtomicBool::new(false),
                metrics: ClientMetrics::new(identity),
            }),
        })
    }

    /// The endpoints, credentials removed.
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// The version the server reported when the connection was made (e.g. `"2.9.10"`).
    pub fn server_version(&self) -> String {
        self.inner.client.server_info().version
    }

    /// The underlying async-nats client. It is connected with `skip_subject_validation`:
    /// check subjects with [`validate_publish_subject`] before publishing through it.
    pub fn client(&self) -> &async_nats::Client {
        &self.inner.client
    }

    /// The underlying JetStream context.
    pub fn context(&self) -> &jetstream::Context {
        &self.inner.context
    }

    /// The connection's metrics: one `send` per published message (JetStream has no batch
    /// publish), timed from its hand-over to the connection to its ack; system `nats`, the
    /// client id the server gave the connection, the server connected to.
    pub fn metrics(&self) -> &ClientMetrics {
        &self.inner.metrics
    }

    /// Start one publish of `subject` with message id `id`: resolves once the message is handed
    /// to the connection, yielding the future of its JetStream ack (which fails with a time-out
    /// after `request_timeout`).
    pub fn send_raw(
        &self,
        subject: &str,
        id: &str,
        headers: &[(String, String)],
        body: Bytes,
        options: &PublishOptions,
    ) -> SendFuture {
        self.send_checked(subject, id, headers, body, options, true)
    }

    /// [`send_raw`](Self::send_raw), checking the subject only with `check_subject` (the
    /// managed publisher checked it when the message was accepted).
    fn send_checked(
        &self,
        subject: &str,
        id: &str,
        headers: &[(String, String)],
        body: Bytes,
        options: &PublishOptions,
        check_subject: bool,
    ) -> SendFuture {
        let prepared = self.prepare_publish(subject, id, headers, options, check_subject);
        let inner = Arc::clone(&self.inner);
        let id = id.to_string();
        async move {
            let (subject, headers) = prepared?;
            let op = inner.metrics.begin(Operation::Send);
            let mux = match inner.acks().await {
                Ok(m) => m,
                Err(e) => {
                    op.finish(subject.as_str(), 1, Err(&e));
                    return Err(e);
                }
            };
            // A closed mux refuses the publish before anything is sent: not recorded (the
            // operation is dropped), as with the managed publisher's `send_to`.
            let (reply, ack) = mux.register()?;
            if let Err(e) = inner
                .client
                .publish_with_reply_and_headers(subject.clone(), reply, headers, body)
                .await
            {
                ack.cancel();
                let e = error::map("publish", e);
                op.finish(subject.as_str(), 1, Err(&e));
                return Err(e);
            }
            let fut: AckFuture = async move {
                let a = ack.await;
                op.finish(subject.as_str(), 1, a.as_ref().map(drop));
                let a = a?;
                Ok(PublishAck {
                    message_id: id,
                    stream: a.stream,
                    sequence: a.sequence,
                    duplicate: a.duplicate,
                    domain: a.domain,
                })
            }
            .boxed();
            Ok(fut)
        }
        .boxed()
    }

    /// The subject and headers of a publish, checking the subject only with `check_subject`.
    fn prepare_publish(
        &self,
        subject: &str,
        id: &str,
        headers: &[(String, String)],
        options: &PublishOptions,
        check_subject: bool,
    ) -> Result<(Subject, HeaderMap)> {
        if check_subject {
            validate_publish_subject(subject)?;
        }
        let headers = build_headers(id, headers, options)?;
        Ok((self.inner.subject(subject), headers))
    }

    /// Publish `out` with message id `id` (`out.options.message_id` wins) and wait for the ack.
    pub async fn publish(&self, id: Option<&str>, out: &Outgoing) -> Result<PublishAck> {
        validate_headers(&out.headers, &out.options)?;
        let generated;
        let id = match (&out.options.message_id, id) {
            (Some(m), _) => m.as_str(),
            (None, Some(i)) => i,
            (None, None) => {
                generated = nuid::next().to_string();
                generated.as_str()
            }
        };
        let ack = self
            .send_raw(
                &out.subject,
                id,
                &out.headers,
                out.body.clone(),
                &out.options,
            )
            .await?;
        ack.await
    }

    /// Flush everything written so far to the server.
    pub async fn flush(&self) -> Result<()> {
        self.inner
            .client
            .flush()
            .await
            .map_err(|e| error::map("flush", e))
    }

    /// Flush and close the connection. Later calls fail with a connection error; a second
    /// `close` does nothing.
    pub async fn close(&self) -> Result<()> {
        if self
            .inner
            .closed
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Ok(());
        }
        let _ = self.inner.client.flush().await;
        self.inner
            .client
            .drain()
            .await
            .map_err(|e| Error::connection(format!("close: {e}")))
    }
}

impl PublishBackend for JetStream {
    fn send(&self, flight: &Arc<Flight>) -> SendFuture {
        // `validate` checked the subject when the flight was prepared.
        self.send_checked(
            flight.subject(),
            flight.id(),
            flight.headers(),
            flight.body().clone(),
            flight.options(),
            false,
        )
    }

    fn send_to(&self, flight: &Arc<Flight>, acks: &AckSink) -> Option<SendToFuture> {
        // `validate` checked the subject when the flight was prepared.
        let prepared = self.prepare_publish(
            flight.subject(),
            flight.id(),
            flight.headers(),
            flight.options(),
            false,
        );
        let inner = Arc::clone(&self.inner);
        let (flight, acks) = (Arc::clone(flight), acks.clone());
        Some(
            async move {
                let (subject, headers) = prepared?;
                let op = inner.metrics.begin(Operation::Send);
                let mux = match inner.acks().await {
                    Ok(m) => m,
                    Err(e) => {
                        op.finish(subject.as_str(), 1, Err(&e));
                        return Err(e);
                    }
                };
                let timed = acks::Timed {
                    op,
                    subject: subject.clone(),
                };
                // A closed mux refuses the entry before anything is sent: its timing is
                // dropped unrecorded.
                let (reply, token) = mux.register_sink(&acks, &flight, Some(timed))?;
                let body = flight.body().clone();
                inner
                    .client
                    .publish_with_reply_and_headers(subject, reply, headers, body)
                    .await
                    .map_err(|e| {
                        let e = error::map("publish", e);
                        if let Some(t) = mux.forget(token) {
                            t.op.finish(t.subject.as_str(), 1, Err(&e));
                        }
                        e
                    })
            }
            .boxed(),
        )
    }

    fn validate(&self, out: &Outgoing) -> Result<()> {
        validate_publish_subject(&out.subject)?;
        validate_headers(&out.headers, &out.options)
    }

    fn describe(&self) -> String {
        format!("JetStream({})", self.inner.endpoints)
    }

    fn metrics(&self) -> Option<ClientMetrics> {
        Some(self.inner.metrics.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_must_be_nats_urls() {
        assert_eq!(
            parse_endpoints("nats://127.0.0.1:4222, nats://[::1]:4223").unwrap(),
            vec!["nats://127.0.0.1:4222", "nats://[::1]:4223"]
        );
        let e = parse_endpoints("127.0.0.1:8081").unwrap_err();
        assert!(e.message().starts_with("endpoints:"), "{e}");
        let e = parse_endpoints("").unwrap_err();
        assert!(e.message().contains("no endpoint"), "{e}");
        let e = parse_endpoints("nats://u:secret@").unwrap_err();
        assert!(!e.message().contains("secret"), "{e}");
    }

    #[test]
    fn credentials_are_redacted() {
        assert_eq!(redact("nats://u:pw@h:1"), "nats://***@h:1");
        assert_eq!(redact("nats://h:1"), "nats://h:1");
    }

    #[test]
    fn subjects_and_headers_are_checked() {
        assert!(validate_publish_subject("orders.new").is_ok());
        for bad in ["", "a..b", "a.*", "a.>", "a b", ".a"] {
            let e = validate_publish_subject(bad).unwrap_err();
            assert!(e.message().starts_with("subject:"), "{bad}: {e}");
        }
        let opts = PublishOptions::default();
        assert!(validate_headers(&[("X-Ok".into(), "v".into())], &opts).is_ok());
        let e = validate_headers(&[("a:b".into(), "v".into())], &opts).unwrap_err();
        assert!(e.message().starts_with("headers:"), "{e}");
        let e = validate_headers(&[("k".into(), "a\r\nb".into())], &opts).unwrap_err();
        assert!(e.message().starts_with("headers:"), "{e}");
        let h = build_headers(
            "p-1",
            &[],
            &PublishOptions {
                expected_last_sequence: Some(7),
                ..PublishOptions::default()
            },
        )
        .unwrap();
        assert_eq!(h.get(NATS_MESSAGE_ID).map(|v| v.as_str()), Some("p-1"));
        assert_eq!(
            h.get(NATS_EXPECTED_LAST_SEQUENCE).map(|v| v.as_str()),
            Some("7")
        );
    }
}
