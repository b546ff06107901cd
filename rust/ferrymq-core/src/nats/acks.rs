//! JetStream publish acks over one wildcard inbox subscription per connection.
//!
//! A JetStream publish is a plain NATS publish whose reply subject receives the stream's
//! `PubAck`. Instead of one inbox (and one ack timer) per message, [`AckMux`] subscribes once to
//! `<inbox prefix>.<nuid>.*` and gives every publish the reply subject
//! `<inbox prefix>.<nuid>.<token>`, `token` counting up from 1. One demultiplexing task reads
//! the subscription, takes the pending entry of the token out of an ordered map and completes
//! it with the parsed ack: through its oneshot ([`AckMux::register`]), or, for the managed
//! publisher, straight into the runner's [`AckSink`] ([`AckMux::register_sink`]).
//!
//! Time-outs cost nothing per message: every entry waits the same `request_timeout` and tokens
//! are handed out in time order, so the oldest pending entry (the map's first) is always the
//! next to expire. The task sleeps until that deadline, fails what has expired, and sleeps
//! again until the new first entry's deadline. Every entry ends exactly once: acked, failed,
//! timed out, dropped by its waiter ([`AckWait`] removes it), or failed when the connection
//! closes. The map holds only entries still waiting, so its size is the number of publishes in
//! flight (for the managed publisher, at most its window).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use async_nats::{StatusCode, Subject};
use bytes::BytesMut;
use futures::StreamExt;
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::error;
use crate::error::{Error, Result};
use crate::metrics::InFlight;
use crate::publisher::{AckSink, Flight, PublishAck};

/// What the stream acknowledged (the message id is the publisher's to add).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsAck {
    pub stream: String,
    pub sequence: u64,
    pub duplicate: bool,
    pub domain: Option<String>,
}

type Reply = Result<JsAck>;

/// The JSON of a `PubAck`, or of an API error.
#[derive(Deserialize)]
struct PubAckJson {
    #[serde(default)]
    stream: Option<String>,
    #[serde(default)]
    seq: Option<u64>,
    #[serde(default)]
    duplicate: bool,
    #[serde(default)]
    domain: Option<String>,
    #[serde(default)]
    error: Option<async_nats::jetstream::Error>,
}

const WHAT: &str = "publish";

/// Turn a reply to a JetStream publish into its ack or error.
pub(crate) fn decode(status: Option<StatusCode>, payload: &[u8]) -> Reply {
    if status == Some(StatusCode::NO_RESPONDERS) {
        return Err(error::no_responders(WHAT));
    }
    if let Some(s) = status {
        if payload.is_empty() {
            return Err(Error::protocol(format!(
                "{WHAT}: unexpected status {s} instead of an ack"
            )));
        }
    }
    if status.is_none() {
        if let Some(ack) = quick_ack(payload) {
            return Ok(ack);
        }
    }
    let ack: PubAckJson = serde_json::from_slice(payload)
        .map_err(|e| Error::protocol(format!("{WHAT}: malformed ack: {e}")))?;
    if let Some(e) = &ack.error {
        return Err(error::api_error(WHAT, e));
    }
    match (ack.stream, ack.seq) {
        (Some(stream), Some(sequence)) => Ok(JsAck {
            stream,
            sequence,
            duplicate: ack.duplicate,
            domain: ack.domain.filter(|d| !d.is_empty()),
        }),
        _ => Err(Error::protocol(format!(
            "{WHAT}: ack without stream and seq: {}",
            String::from_utf8_lossy(payload)
        ))),
    }
}

/// The usual shape of a successful ack, `{"stream":"S", "seq":N,"duplicate": true}` as
/// nats-server writes it (`domain` and `duplicate` optional, keys in any order, blanks between
/// tokens), read without serde. `None` for anything else (an error, an escaped string, another
/// key): [`decode`] then parses it in full.
fn quick_ack(payload: &[u8]) -> Option<JsAck> {
    let mut rest = blank(payload).strip_prefix(b"{")?;
    let (mut stream, mut sequence, mut duplicate, mut domain) = (None, None, false, None);
    loop {
        let (key, r) = json_plain_str(blank(rest))?;
        let r = blank(blank(r).strip_prefix(b":")?);
        rest = match key {
            b"stream" | b"domain" => {
                let (v, r) = json_plain_str(r)?;
                let v = std::str::from_utf8(v).ok()?;
                if key == b"stream" {
                    stream = Some(v);
                } else {
                    domain = Some(v);
                }
                r
            }
            b"seq" => {
                let digits = r.iter().take_while(|c| c.is_ascii_digit()).count();
                sequence = Some(
                    std::str::from_utf8(&r[..digits])
                        .ok()?
                        .parse::<u64>()
                        .ok()?,
                );
                &r[digits..]
            }
            b"duplicate" => match r.strip_prefix(b"true") {
                Some(r) => {
                    duplicate = true;
                    r
                }
                None => r.strip_prefix(b"false")?,
            },
            _ => return None,
        };
        match blank(rest) {
            [b',', r @ ..] => rest = r,
            [b'}', r @ ..] if blank(r).is_empty() => break,
            _ => return None,
        }
    }
    Some(JsAck {
        stream: stream?.to_string(),
        sequence: sequence?,
        duplicate,
        domain: domain.filter(|d| !d.is_empty()).map(str::to_string),
    })
}

/// `s` without leading JSON whitespace.
fn blank(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .take_while(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
        .count();
    &s[n..]
}

/// A JSON string without escapes at the start of `s`: its contents and what follows it.
fn json_plain_str(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let s = s.strip_prefix(b"\"")?;
    let end = s
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
    (s[end] == b'"').then(|| (&s[..end], &s[end + 1..]))
}

struct Pending {
    deadline: Instant,
    waiter: Waiter,
}

/// Who is told the outcome of a publish.
enum Waiter {
    /// The [`AckWait`] of [`AckMux::register`].
    Future(oneshot::Sender<Reply>),
    /// The managed publisher's runner, with the flight the ack belongs to. Weak: the runner
    /// holds every flight until it is done, and an entry that outlives its flight (the runner
    /// timed it out and the mux's own `request_timeout` is longer) must not keep the message.
    Sink(AckSink, Weak<Flight>, Option<Timed>),
}

/// A managed publisher's publish being timed for the connection's metrics: recorded as one
/// `send` to `subject` when its entry ends (acked, failed, timed out, closed), also when its
/// flight is gone.
pub(crate) struct Timed {
    pub(crate) op: InFlight,
    pub(crate) subject: Subject,
}

impl Timed {
    fn finish(self, outcome: std::result::Result<(), &Error>) {
        self.op.finish(self.subject.as_str(), 1, outcome);
    }
}

impl Waiter {
    fn finish(self, reply: Reply) {
        match self {
            Waiter::Future(tx) => {
                let _ = tx.send(reply);
            }
            Waiter::Sink(sink, flight, timed) => {
                if let Some(t) = timed {
                    t.finish(reply.as_ref().map(drop));
                }
                let Some(flight) = flight.upgrade() else {
                    return; // finished and gone: nobody waits for this any more
                };
                let ack = reply.map(|a| PublishAck {
                    message_id: flight.id().to_string(),
                    stream: a.stream,
                    sequence: a.sequence,
                    duplicate: a.duplicate,
                    domain: a.domain,
                });
                sink.deliver(flight, ack);
            }
        }
    }
}

struct State {
    next_token: u64,
    pending: BTreeMap<u64, Pending>,
    /// Reply subjects are written here and split off: each is a shared `Bytes` from the start,
    /// so the clones async-nats makes of it cost a reference count, not an allocation.
    replies: BytesMut,
    /// Why new publishes fail, once the mux is closed.
    closed: Option<&'static str>,
}

/// The pending acks of one connection and the reply subjects that lead to them.
pub(crate) struct AckMux {
    /// `<inbox prefix>.<nuid>.`: a reply subject is this plus the token.
    prefix: String,
    timeout: Duration,
    state: Mutex<State>,
    /// Wakes the task when the map stops being empty or the mux is closed.
    wake: Notify,
}

const CLOSED: &str = "the connection was closed before the ack arrived";

impl AckMux {
    /// A mux whose reply subjects start with `prefix` (which ends with a `.`).
    pub(crate) fn new(prefix: String, timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            prefix,
            timeout,
            state: Mutex::new(State {
                next_token: 1,
                pending: BTreeMap::new(),
                replies: BytesMut::new(),
                closed: None,
            }),
            wake: Notify::new(),
        })
    }

    /// The subject to subscribe to.
    pub(crate) fn wildcard(&self) -> String {
        format!("{}*", self.prefix)
    }

    /// Register one publish: its reply subject and the future of its ack.
    pub(crate) fn register(self: &Arc<Self>) -> Result<(Subject, AckWait)> {
        let (tx, rx) = oneshot::channel();
        let (reply, token) = self.insert(Waiter::Future(tx))?;
        let wait = AckWait {
            mux: Arc::clone(self),
            token,
            rx,
            done: false,
        };
        Ok((reply, wait))
    }

    /// Register one publish of the managed publisher: its ack (or error, or time-out) goes to
    /// `sink` with `flight`. Returns the reply subject and the token to
    /// [`forget`](Self::forget) if the publish cannot be sent. `timed`, if given, is recorded
    /// when the entry ends (or handed back by `forget`).
    pub(crate) fn register_sink(
        &self,
        sink: &AckSink,
        flight: &Arc<Flight>,
        timed: Option<Timed>,
    ) -> Result<(Subject, u64)> {
        self.insert(Waiter::Sink(sink.clone(), Arc::downgrade(flight), timed))
    }

    fn insert(&self, waiter: Waiter) -> Result<(Subject, u64)> {
        let deadline = crate::duration::tokio_deadline(Instant::now(), self.timeout);
        let (token, was_empty, reply) = {
            let mut st = self.state.lock();
            if let Some(why) = st.closed {
                return Err(Error::connection(format!("{WHAT}: {why}")));
            }
            let token = st.next_token;
            st.next_token += 1;
            let was_empty = st.pending.is_empty();
            st.pending.insert(token, Pending { deadline, waiter });
            let need = self.prefix.len() + 20;
            if st.replies.capacity() < need {
                st.replies.reserve(need * 256);
            }
            st.replies.extend_from_slice(self.prefix.as_bytes());
            st.replies
                .extend_from_slice(itoa::Buffer::new().format(token).as_bytes());
            let reply = st.replies.split().freeze();
            (token, was_empty, reply)
        };
        if was_empty {
            self.wake.notify_one();
        }
        let reply = Subject::from_utf8(reply).expect("the prefix and a number are UTF-8");
        Ok((reply, token))
    }

    /// Forget `token` (its publish failed or its waiter is gone): nobody is told. Returns the
    /// timing of a sink entry, for its caller to record the failure.
    pub(crate) fn forget(&self, token: u64) -> Option<Timed> {
        let p = self.state.lock().pending.remove(&token)?;
        match p.waiter {
            Waiter::Sink(_, _, timed) => timed,
            Waiter::Future(_) => None,
        }
    }

    /// Complete the entry a reply subject leads to; unknown and late replies are ignored.
    pub(crate) fn complete(&self, subject: &str, status: Option<StatusCode>, payload: &[u8]) {
        let Some(token) = subject
            .strip_prefix(self.prefix.as_str())
            .and_then(|t| t.parse::<u64>().ok())
        else {
            return;
        };
        let Some(p) = self.state.lock().pending.remove(&token) else {
            return;
        };
        p.waiter.finish(decode(status, payload));
    }

    /// Fail every entry whose deadline is at or before `now`; returns the next deadline.
    pub(crate) fn expire(&self, now: Instant) -> Option<Instant> {
        let mut expired = Vec::new();
        let next = {
            let mut st = self.state.lock();
            while let Some(entry) = st.pending.first_entry() {
                if entry.get().deadline > now {
                    break;
                }
                expired.push(entry.remove());
            }
            st.pending.first_key_value().map(|(_, p)| p.deadline)
        };
        if !expired.is_empty() {
            let why = format!(
                "{WHAT}: no ack within request_timeout ({} ms)",
                self.timeout.as_millis()
            );
            for p in expired {
                p.waiter.finish(Err(Error::timeout(why.clone())));
            }
        }
        next
    }

    /// Refuse new publishes (saying `why`) and fail every pending one with a connection error.
    pub(crate) fn close(&self, why: &'static str) {
        let pending = {
            let mut st = self.state.lock();
            st.closed.get_or_insert(why);
            std::mem::take(&mut st.pending)
        };
        for p in pending.into_values() {
            p.waiter
                .finish(Err(Error::connection(format!("{WHAT}: {CLOSED}"))));
        }
        self.wake.notify_one();
    }

    fn is_closed(&self) -> bool {
        self.state.lock().closed.is_some()
    }

    fn first_deadline(&self) -> Option<Instant> {
        self.state
            .lock()
            .pending
            .first_key_value()
            .map(|(_, p)| p.deadline)
    }

    /// How many publishes wait for their ack.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.state.lock().pending.len()
    }
}

/// Replies handled in one go before the task looks at its timer again.
const BATCH: usize = 256;

/// The demultiplexing task: reads `replies` until it ends (the connection was drained or
/// closed) or the mux is closed, completing entries and expiring them on time.
pub(crate) async fn run<S>(mux: Arc<AckMux>, replies: S)
where
    S: futures::Stream<Item = async_nats::Message> + Unpin,
{
    let mut replies = replies.fuse();
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    let mut armed = false;
    loop {
        if mux.is_closed() {
            break;
        }
        if !armed {
            if let Some(deadline) = mux.first_deadline() {
                timer.as_mut().reset(deadline);
                armed = true;
            }
        }
        tokio::select! {
            biased;
            () = &mut timer, if armed => {
                match mux.expire(Instant::now()) {
                    Some(next) => timer.as_mut().reset(next),
                    None => armed = false,
                }
            }
            m = replies.next() => {
                let Some(m) = m else { break };
                mux.complete(m.subject.as_str(), m.status, &m.payload);
                for _ in 1..BATCH {
                    match futures::FutureExt::now_or_never(replies.next()) {
                        Some(Some(m)) => mux.complete(m.subject.as_str(), m.status, &m.payload),
                        Some(None) => break,
                        None => break,
                    }
                }
            }
            () = mux.wake.notified() => {}
        }
    }
    mux.close("the connection is closed");
}

/// The future of one publish's ack. Dropping it before the ack arrives forgets the entry.
pub(crate) struct AckWait {
    mux: Arc<AckMux>,
    token: u64,
    rx: oneshot::Receiver<Reply>,
    done: bool,
}

impl AckWait {
    /// Forget the entry now (its publish could not be sent).
    pub(crate) fn cancel(mut self) {
        self.done = true;
        self.mux.forget(self.token);
    }
}

impl Future for AckWait {
    type Output = Reply;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        let r = Pin::new(&mut self.rx).poll(cx);
        match r {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.done = true;
                Poll::Ready(
                    r.unwrap_or_else(|_| Err(Error::connection(format!("{WHAT}: {CLOSED}")))),
                )
            }
        }
    }
}

impl Drop for AckWait {
    fn drop(&mut self) {
        if !self.done {
            self.mux.forget(self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::publisher::is_expectation_failure;
    use futures::FutureExt;

    fn mux(timeout: Duration) -> Arc<AckMux> {
        AckMux::new("_INBOX.test.".to_string(), timeout)
    }

    #[test]
    fn decodes_acks() {
        let a = decode(None, br#"{"stream":"S","seq":7}"#).unwrap();
        assert_eq!(
            a,
            JsAck {
                stream: "S".into(),
                sequence: 7,
                duplicate: false,
                domain: None
            }
        );
        let a = decode(
            None,
            br#"{"stream":"S","seq":7,"duplicate":true,"domain":"hub"}"#,
        )
        .unwrap();
        assert!(a.duplicate);
        assert_eq!(a.domain.as_deref(), Some("hub"));
        let a = decode(None, br#"{"stream":"S","seq":1,"domain":""}"#).unwrap();
        assert_eq!(a.domain, None);
    }

    #[test]
    fn the_quick_path_agrees_with_serde_or_steps_aside() {
        for ok in [
            // What nats-server 2.9 writes.
            &br#"{"stream":"P", "seq":1}"#[..],
            br#"{"stream":"P", "seq":1,"duplicate": true}"#,
            br#"{"stream":"P", "domain":"hub", "seq":3}"#,
            br#"{"stream":"S","seq":7}"#,
            br#" { "stream" : "S" , "seq" : 7 } "#,
            br#"{"stream":"ORDERS","seq":18446744073709551615,"duplicate":true}"#,
            br#"{"stream":"S","seq":1,"domain":"hub","duplicate":false}"#,
            br#"{"seq":2,"stream":"S","domain":""}"#,
        ] {
            let quick = quick_ack(ok).unwrap_or_else(|| panic!("{ok:?}"));
            let full: PubAckJson = serde_json::from_slice(ok).unwrap();
            assert_eq!(quick.stream, full.stream.unwrap());
            assert_eq!(quick.sequence, full.seq.unwrap());
            assert_eq!(quick.duplicate, full.duplicate);
            assert_eq!(quick.domain, full.domain.filter(|d| !d.is_empty()));
        }
        for other in [
            &br#"{"error":{"code":400,"err_code":10071,"description":"x"}}"#[..],
            br#"{"stream":"S\u0041","seq":7}"#,
            br#"{"stream":"S","seq":7,"extra":1}"#,
            br#"{"stream":"S","seq":-1}"#,
            br#"{"stream":"S"}"#,
            br#"{"stream":"S","seq":7}x"#,
            br#"{"stream":"S","seq":7,}"#,
            br#"{"stream":"S","seq":"7"}"#,
            b"",
            b"{",
        ] {
            assert_eq!(quick_ack(other), None, "{other:?}");
        }
        // What steps aside is still parsed in full.
        assert_eq!(
            decode(None, br#"{"stream":"S\u0041","seq":7}"#)
                .unwrap()
                .stream,
            "SA"
        );
        assert_eq!(
            decode(None, br#"{ "stream":"S","seq":7 }"#)
                .unwrap()
                .sequence,
            7
        );
    }

    #[test]
    fn decodes_errors() {
        let e = decode(
            None,
            br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"}}"#,
        )
        .unwrap_err();
        let s = e.status().unwrap();
        assert_eq!(
            (s.code, s.name, s.retriable),
            (10071, "STREAM_WRONG_LAST_SEQUENCE", false)
        );
        assert!(is_expectation_failure(&e));
        assert!(e.message().contains("wrong last sequence: 1"), "{e}");
        let e = decode(
            None,
            br#"{"error":{"code":503,"description":"unavailable"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.status().unwrap().code, 503);
        let e = decode(Some(StatusCode::NO_RESPONDERS), b"").unwrap_err();
        assert_eq!(e.status().unwrap().code, 503);
        assert!(e.is_retriable());
        let e = decode(None, b"not json").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        let e = decode(None, b"{}").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
    }

    #[tokio::test]
    async fn replies_complete_their_own_entry_and_unknown_ones_are_ignored() {
        let m = mux(Duration::from_secs(5));
        let (r1, w1) = m.register().unwrap();
        let (r2, w2) = m.register().unwrap();
        assert_eq!(r1.as_str(), "_INBOX.test.1");
        assert_eq!(r2.as_str(), "_INBOX.test.2");
        m.complete("_INBOX.test.99", None, br#"{"stream":"S","seq":9}"#);
        m.complete("_INBOX.other.1", None, br#"{"stream":"S","seq":9}"#);
        m.complete("_INBOX.test.x", None, b"{}");
        assert_eq!(m.pending(), 2);
        m.complete(
            r2.as_str(),
            None,
            br#"{"stream":"S","seq":2,"duplicate":true}"#,
        );
        m.complete(r1.as_str(), None, br#"{"stream":"S","seq":1}"#);
        // A second reply to the same token is late: ignored.
        m.complete(r1.as_str(), None, br#"{"stream":"S","seq":5}"#);
        let a2 = w2.await.unwrap();
        assert_eq!((a2.sequence, a2.duplicate), (2, true));
        assert_eq!(w1.await.unwrap().sequence, 1);
        assert_eq!(m.pending(), 0);
    }

    #[tokio::test]
    async fn dropped_and_cancelled_waits_leave_nothing_behind() {
        let m = mux(Duration::from_secs(5));
        let (_, w1) = m.register().unwrap();
        let (_, w2) = m.register().unwrap();
        assert_eq!(m.pending(), 2);
        drop(w1);
        w2.cancel();
        assert_eq!(m.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn entries_time_out_in_order() {
        let m = mux(Duration::from_millis(100));
        let (tx, rx) = futures::channel::mpsc::unbounded::<async_nats::Message>();
        let task = tokio::spawn(run(Arc::clone(&m), rx));
        let (_, w1) = m.register().unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        let (_, w2) = m.register().unwrap();
        let t0 = Instant::now();
        let e = w1.await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.message().contains("request_timeout (100 ms)"), "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(40));
        let mut w2 = w2;
        assert!((&mut w2).now_or_never().is_none(), "w2 expires 60 ms later");
        let e = w2.await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert_eq!(m.pending(), 0);
        // Registered while idle: the task wakes up for it.
        let (_, w3) = m.register().unwrap();
        assert_eq!(w3.await.unwrap_err().kind(), ErrorKind::Timeout);
        drop(tx);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn the_end_of_the_subscription_fails_every_pending_entry() {
        let m = mux(Duration::from_secs(30));
        let (tx, rx) = futures::channel::mpsc::unbounded::<async_nats::Message>();
        let task = tokio::spawn(run(Arc::clone(&m), rx));
        let (_, w1) = m.register().unwrap();
        let (_, w2) = m.register().unwrap();
        drop(tx);
        task.await.unwrap();
        for w in [w1, w2] {
            let e = w.await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Connection);
        }
        let e = m.register().err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert_eq!(m.pending(), 0);
    }

    #[tokio::test]
    async fn sink_entries_deliver_with_their_flight_and_never_keep_it() {
        let m = mux(Duration::from_secs(5));
        let sink = AckSink::new();
        let f1 = Flight::for_test("a-1");
        let f2 = Flight::for_test("a-2");
        let f3 = Flight::for_test("a-3");
        let (r1, _) = m.register_sink(&sink, &f1, None).unwrap();
        let (r2, t2) = m.register_sink(&sink, &f2, None).unwrap();
        let (r3, _) = m.register_sink(&sink, &f3, None).unwrap();
        assert_eq!(
            Arc::strong_count(&f1),
            1,
            "the mux must not keep the flight"
        );
        // A forgotten entry (its publish failed) hears nothing.
        m.forget(t2);
        assert_eq!(m.pending(), 2);
        m.complete(r2.as_str(), None, br#"{"stream":"S","seq":2}"#);
        m.complete(
            r1.as_str(),
            None,
            br#"{"stream":"S","seq":1,"duplicate":true}"#,
        );
        // The flight is gone (finished and dropped by the runner): the ack goes nowhere.
        drop(f3);
        m.complete(r3.as_str(), None, br#"{"stream":"S","seq":3}"#);
        assert_eq!(m.pending(), 0);
        let got = sink.take_all();
        assert_eq!(got.len(), 1);
        let (flight, ack) = &got[0];
        assert!(Arc::ptr_eq(flight, &f1));
        let ack = ack.as_ref().unwrap();
        assert_eq!(
            (ack.message_id.as_str(), ack.sequence, ack.duplicate),
            ("a-1", 1, true)
        );
        // Errors, time-outs and closing reach the sink too.
        let f4 = Flight::for_test("a-4");
        let (r4, _) = m.register_sink(&sink, &f4, None).unwrap();
        m.complete(
            r4.as_str(),
            None,
            br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"}}"#,
        );
        let f5 = Flight::for_test("a-5");
        m.register_sink(&sink, &f5, None).unwrap();
        m.close("closed by the test");
        let got = sink.take_all();
        assert_eq!(got.len(), 2);
        assert!(Arc::ptr_eq(&got[0].0, &f4) && Arc::ptr_eq(&got[1].0, &f5));
        let e = got[0].1.as_ref().unwrap_err();
        assert_eq!(e.status().unwrap().code, 10071);
        let e = got[1].1.as_ref().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Connection);
    }

    #[tokio::test]
    async fn the_task_completes_replies_it_reads() {
        let m = mux(Duration::from_secs(30));
        let (tx, rx) = futures::channel::mpsc::unbounded::<async_nats::Message>();
        let task = tokio::spawn(run(Arc::clone(&m), rx));
        let (reply, w) = m.register().unwrap();
        tx.unbounded_send(async_nats::Message {
            subject: reply,
            reply: None,
            payload: bytes::Bytes::from_static(br#"{"stream":"S","seq":3}"#),
            headers: None,
            status: None,
            description: None,
            length: 0,
        })
        .unwrap();
        assert_eq!(w.await.unwrap().sequence, 3);
        m.close("closed by the test");
        task.await.unwrap();
    }
}
