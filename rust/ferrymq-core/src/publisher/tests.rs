//! Unit tests of the publisher's state machine over an in-process backend whose acks the test
//! releases by hand. (Integration tests against nats-server live in `tests/`.)

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::oneshot;

use super::*;
use crate::error::{BrokerStatus, Protocol};
use crate::test_support::wait_for;

/// A backend that records sends and lets the test decide each attempt's fate. With `sink` it
/// delivers acks through the runner's [`AckSink`] ([`PublishBackend::send_to`]), otherwise
/// through a future per attempt.
#[derive(Default)]
struct Manual {
    sink: bool,
    sent: Mutex<Vec<(String, u32)>>,
    acks: Mutex<VecDeque<(String, Reply)>>,
    sends: AtomicUsize,
}

enum Reply {
    Future(oneshot::Sender<Result<PublishAck>>),
    Sink(AckSink, Arc<Flight>),
}

impl Reply {
    fn send(self, r: Result<PublishAck>) {
        match self {
            Reply::Future(tx) => {
                let _ = tx.send(r);
            }
            Reply::Sink(sink, flight) => sink.deliver(flight, r),
        }
    }
}

impl Manual {
    fn with_sink() -> Self {
        Self {
            sink: true,
            ..Self::default()
        }
    }
    fn both() -> [Arc<Self>; 2] {
        [Arc::new(Self::default()), Arc::new(Self::with_sink())]
    }
    fn record(&self, flight: &Arc<Flight>, reply: Reply) {
        self.sent
            .lock()
            .push((flight.id().to_string(), flight.attempts()));
        self.acks.lock().push_back((flight.id().to_string(), reply));
        self.sends.fetch_add(1, Ordering::SeqCst);
    }
    fn release_one(&self, result: impl FnOnce(&str) -> Result<PublishAck>) -> bool {
        let next = self.acks.lock().pop_front();
        match next {
            Some((id, reply)) => {
                reply.send(result(&id));
                true
            }
            None => false,
        }
    }
    /// Release the pending attempt of `id` (out of order).
    fn release_id(&self, id: &str, result: Result<PublishAck>) {
        let reply = {
            let mut acks = self.acks.lock();
            let at = acks.iter().position(|(i, _)| i == id).expect("pending");
            acks.remove(at).expect("present").1
        };
        reply.send(result);
    }
    fn pending(&self) -> usize {
        self.acks.lock().len()
    }
}

fn ack_for(id: &str) -> Result<PublishAck> {
    Ok(PublishAck {
        message_id: id.to_string(),
        stream: "S".into(),
        sequence: 1,
        duplicate: false,
        domain: None,
    })
}

impl PublishBackend for Arc<Manual> {
    fn send(&self, flight: &Arc<Flight>) -> SendFuture {
        let (tx, rx) = oneshot::channel();
        self.record(flight, Reply::Future(tx));
        async move {
            let fut: AckFuture = async move {
                rx.await
                    .unwrap_or_else(|_| Err(Error::connection("ack channel dropped")))
            }
            .boxed();
            Ok(fut)
        }
        .boxed()
    }
    fn send_to(&self, flight: &Arc<Flight>, acks: &AckSink) -> Option<SendToFuture> {
        if !self.sink {
            return None;
        }
        self.record(flight, Reply::Sink(acks.clone(), Arc::clone(flight)));
        Some(async { Ok(()) }.boxed())
    }
    fn describe(&self) -> String {
        "manual".into()
    }
}

fn out(subject: &str) -> Outgoing {
    Outgoing {
        subject: subject.into(),
        body: Bytes::from_static(b"x"),
        ..Outgoing::default()
    }
}

fn config(max: usize, refill: usize) -> PublisherConfig {
    PublisherConfig {
        id_prefix: Some("p".into()),
        max_in_flight: max,
        refill_allowed_at: refill,
        events: Events::All,
        ..PublisherConfig::default()
    }
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// Tests that run their `_on` body once with each kind of backend ([`Manual::both`]).
macro_rules! on_both {
    ($($name:ident => $on:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            for b in Manual::both() {
                $on(b).await;
            }
        }
    )*};
}

on_both! {
    hold_at_max_and_refill_at_threshold => hold_at_max_and_refill_at_threshold_on;
    intake_is_bounded => intake_is_bounded_on;
    timeouts_complete_flights => timeouts_complete_flights_on;
    stop_completes_every_flight_and_refuses_new_ones => stop_completes_every_flight_and_refuses_new_ones_on;
    drain_waits_for_every_flight => drain_waits_for_every_flight_on;
}

#[tokio::test]
async fn config_errors_name_the_field() {
    let b = Arc::new(Manual::default());
    let e = Publisher::new(b.clone(), config(0, 0), tokio::runtime::Handle::current()).unwrap_err();
    assert!(e.message().starts_with("max_in_flight:"), "{e}");
    let e = Publisher::new(b.clone(), config(5, 5), tokio::runtime::Handle::current()).unwrap_err();
    assert!(e.message().starts_with("refill_allowed_at:"), "{e}");
    let mut c = config(5, 0);
    c.wait_timeout = Duration::ZERO;
    let e = Publisher::new(b, c, tokio::runtime::Handle::current()).unwrap_err();
    assert!(e.message().starts_with("wait_timeout:"), "{e}");
}

#[tokio::test]
async fn ids_are_prefix_dash_counter_and_user_ids_win() {
    let b = Arc::new(Manual::default());
    let p = Publisher::new(b, config(5, 0), tokio::runtime::Handle::current()).unwrap();
    assert_eq!(p.prepare(out("a")).unwrap().id(), "p-1");
    assert_eq!(p.prepare(out("a")).unwrap().id(), "p-2");
    let mut o = out("a");
    o.options.message_id = Some("mine".into());
    assert_eq!(p.prepare(o).unwrap().id(), "mine");
    let e = p.prepare(out("")).unwrap_err();
    assert!(e.message().starts_with("subject:"), "{e}");
}

async fn hold_at_max_and_refill_at_threshold_on(b: Arc<Manual>) {
    let p = Publisher::new(b.clone(), config(4, 1), tokio::runtime::Handle::current()).unwrap();
    let mut events = p.take_events().unwrap();
    p.start().unwrap();
    let mut flights = Vec::new();
    for _ in 0..8 {
        flights.push(p.publish(out("a")).await.unwrap());
    }
    wait_for("4 sent", || b.sends.load(Ordering::SeqCst) == 4).await;
    settle().await;
    // The window is full: exactly 4 sent, the rest wait in the intake.
    assert_eq!(b.sends.load(Ordering::SeqCst), 4);
    assert!(p.is_held());
    assert_eq!(p.in_flight(), 4);
    // Two acks bring the count to 2 > refill_allowed_at: still held.
    assert!(b.release_one(ack_for));
    assert!(b.release_one(ack_for));
    wait_for("2 in flight", || p.in_flight() == 2).await;
    settle().await;
    assert_eq!(b.sends.load(Ordering::SeqCst), 4);
    assert!(p.is_held());
    // The third ack reaches the threshold (1): the hold lifts and the window refills to 4.
    assert!(b.release_one(ack_for));
    wait_for("7 sent", || b.sends.load(Ordering::SeqCst) == 7).await;
    settle().await;
    assert_eq!(b.sends.load(Ordering::SeqCst), 7);
    assert!(p.is_held());
    let drained = tokio::spawn(p.drain());
    while !drained.is_finished() {
        b.release_one(ack_for);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(flights
        .iter()
        .all(|f| matches!(f.outcome(), Some(Outcome::Acked(_)))));
    // Replay the events: the in-flight count never exceeds 4, and after reaching 4 nothing is
    // published until it is back to 1.
    let mut n = 0i64;
    let mut held = false;
    let mut kinds = Vec::new();
    while let Ok(ev) = events.try_recv() {
        kinds.push(ev.kind);
        match ev.kind {
            EventKind::Published => {
                assert!(!held, "published while held");
                n += 1;
                assert!(n <= 4);
                if n == 4 {
                    held = true;
                }
            }
            _ => {
                n -= 1;
                if n <= 1 {
                    held = false;
                }
            }
        }
    }
    assert_eq!(
        kinds.iter().filter(|k| **k == EventKind::Published).count(),
        8
    );
    assert_eq!(kinds.iter().filter(|k| **k == EventKind::Acked).count(), 8);
}

async fn intake_is_bounded_on(b: Arc<Manual>) {
    let p = Publisher::new(b.clone(), config(2, 0), tokio::runtime::Handle::current()).unwrap();
    p.start().unwrap();
    // 2 in flight + 2 in the intake; the fifth has to wait.
    for _ in 0..4 {
        p.publish(out("a")).await.unwrap();
    }
    wait_for("2 sent", || b.sends.load(Ordering::SeqCst) == 2).await;
    let f = p.prepare(out("a")).unwrap();
    assert!(!p.try_enqueue(&f).unwrap());
    let wait = tokio::time::timeout(Duration::from_millis(50), p.enqueue(Arc::clone(&f))).await;
    assert!(wait.is_err(), "enqueue must wait while the intake is full");
    b.release_one(ack_for);
    b.release_one(ack_for);
    tokio::time::timeout(Duration::from_secs(5), p.enqueue(f))
        .await
        .unwrap()
        .unwrap();
    p.stop();
    p.finished().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_caller_wakes_once_a_quarter_of_the_intake_is_free() {
    let b = Arc::new(Manual::default());
    // Window 8 (sliding) and an intake of 8: a waiting caller wakes at 2 free slots.
    let p = Publisher::new(b.clone(), config(8, 7), tokio::runtime::Handle::current()).unwrap();
    p.start().unwrap();
    for _ in 0..16 {
        p.publish(out("a")).await.unwrap();
    }
    wait_for("8 sent", || b.sends.load(Ordering::SeqCst) == 8).await;
    assert_eq!(p.queued(), 8);
    let f = p.prepare(out("a")).unwrap();
    let mut wait = Box::pin(p.enqueue(Arc::clone(&f)));
    let short = Duration::from_millis(50);
    assert!(tokio::time::timeout(short, &mut wait).await.is_err());
    b.release_one(ack_for);
    wait_for("9 sent", || b.sends.load(Ordering::SeqCst) == 9).await;
    assert!(
        tokio::time::timeout(short, &mut wait).await.is_err(),
        "one free slot must not wake the caller"
    );
    b.release_one(ack_for);
    tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .unwrap()
        .unwrap();
    // The runner took two from the intake; the waiter queued one and left the other free.
    wait_for("10 sent", || b.sends.load(Ordering::SeqCst) == 10).await;
    assert_eq!(p.queued(), 7);
    let g = p.prepare(out("a")).unwrap();
    assert!(p.try_enqueue(&g).unwrap(), "the second free slot is there");
    p.stop();
    p.finished().await;
    assert!(f.is_done() && g.is_done());
}

async fn timeouts_complete_flights_on(b: Arc<Manual>) {
    let mut c = config(10, 0);
    c.wait_timeout = Duration::from_millis(50);
    let p = Publisher::new(b.clone(), c, tokio::runtime::Handle::current()).unwrap();
    let mut events = p.take_events().unwrap();
    p.start().unwrap();
    let f = p.publish(out("a")).await.unwrap();
    let o = tokio::time::timeout(Duration::from_secs(5), f.wait())
        .await
        .unwrap();
    assert!(matches!(o, Outcome::TimedOut(e) if e.kind() == crate::ErrorKind::Timeout));
    assert_eq!(events.recv().await.unwrap().kind, EventKind::Published);
    assert_eq!(events.recv().await.unwrap().kind, EventKind::Timeout);
    assert_eq!(p.in_flight(), 0);
    p.drain().await;
}

fn nats_status(code: i32, retriable: bool) -> Error {
    Error::broker_status(
        BrokerStatus {
            protocol: Protocol::Nats,
            code,
            name: "X",
            retriable,
        },
        false,
        "injected",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_reuse_the_id_and_expectations_are_final() {
    let b = Arc::new(Manual::default());
    let mut c = config(10, 0);
    c.retry = Some(RetryPolicy {
        attempts: 3,
        backoff: vec![Duration::from_millis(1)],
        deadline: None,
        attempt_timeout: None,
    });
    let p = Publisher::new(b.clone(), c, tokio::runtime::Handle::current()).unwrap();
    p.start().unwrap();
    let f = p.publish(out("a")).await.unwrap();
    wait_for("first attempt", || b.pending() == 1).await;
    b.release_one(|_| Err(nats_status(503, true)));
    wait_for("retry", || b.sends.load(Ordering::SeqCst) == 2).await;
    b.release_one(ack_for);
    let o = f.wait().await;
    assert!(matches!(o, Outcome::Acked(_)));
    assert_eq!(f.attempts(), 2);
    let sent = b.sent.lock().clone();
    assert_eq!(sent.iter().filter(|(id, _)| id == "p-1").count(), 2);

    let g = p.publish(out("a")).await.unwrap();
    wait_for("third send", || b.pending() == 1).await;
    b.release_one(|_| Err(nats_status(10071, false)));
    let o = g.wait().await;
    assert!(matches!(o, Outcome::Failed(e) if is_expectation_failure(e)));
    assert_eq!(g.attempts(), 1, "expectation failures are never retried");
    p.drain().await;
}

async fn stop_completes_every_flight_and_refuses_new_ones_on(b: Arc<Manual>) {
    let p = Publisher::new(b.clone(), config(2, 0), tokio::runtime::Handle::current()).unwrap();
    let mut events = p.take_events().unwrap();
    p.start().unwrap();
    let mut flights = Vec::new();
    for _ in 0..4 {
        flights.push(p.publish(out("a")).await.unwrap());
    }
    wait_for("2 sent", || b.sends.load(Ordering::SeqCst) == 2).await;
    p.stop();
    p.finished().await;
    for f in &flights {
        let o = f.outcome().expect("every flight is done");
        assert!(matches!(o, Outcome::Failed(e) if e.kind() == crate::ErrorKind::Closed));
    }
    let mut terminal = 0;
    while let Ok(ev) = events.try_recv() {
        if ev.kind != EventKind::Published {
            terminal += 1;
        }
    }
    assert_eq!(terminal, 4);
    let e = p.publish(out("a")).await.unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Closed);
}

async fn drain_waits_for_every_flight_on(b: Arc<Manual>) {
    let p = Arc::new(
        Publisher::new(b.clone(), config(3, 0), tokio::runtime::Handle::current()).unwrap(),
    );
    let mut flights = Vec::new();
    // Not started: drain starts the runner and publishes what was queued.
    for _ in 0..3 {
        flights.push(p.publish(out("a")).await.unwrap());
    }
    let drained = tokio::spawn(p.drain());
    settle().await;
    assert!(!drained.is_finished());
    let e = p.publish(out("a")).await.unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Closed);
    while !drained.is_finished() {
        b.release_one(ack_for);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(flights.iter().all(|f| f.is_done()));
    assert_eq!(p.state(), State::Finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_events_only_for_watched_flights() {
    let b = Arc::new(Manual::default());
    let mut c = config(10, 0);
    c.events = Events::Watched;
    let p = Publisher::new(b.clone(), c, tokio::runtime::Handle::current()).unwrap();
    let mut events = p.take_events().unwrap();
    p.start().unwrap();
    let a = p.publish(out("a")).await.unwrap();
    let w = p.publish(out("a")).await.unwrap();
    let (_, done) = w.watch(Box::new(7u32));
    assert!(!done);
    let drained = tokio::spawn(p.drain());
    while !drained.is_finished() {
        b.release_one(ack_for);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let ev = events.recv().await.unwrap();
    assert_eq!(ev.flight.id(), w.id());
    assert_eq!(ev.kind, EventKind::Acked);
    assert_eq!(
        ev.flight.attachment().and_then(|x| x.downcast_ref::<u32>()),
        Some(&7)
    );
    assert!(events.recv().await.is_none());
    assert!(a.is_done());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sink_acks_out_of_order_a_stuck_flight_and_a_late_result() {
    let b = Arc::new(Manual::with_sink());
    let mut c = config(4, 3);
    c.wait_timeout = Duration::from_secs(2);
    let p = Arc::new(Publisher::new(b.clone(), c, tokio::runtime::Handle::current()).unwrap());
    let mut events = p.take_events().unwrap();
    let collected = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(ev) = events.recv().await {
            all.push((ev.kind, ev.flight.id().to_string()));
        }
        all
    });
    p.start().unwrap();
    let n = 200;
    let publisher = Arc::clone(&p);
    let submitted = tokio::spawn(async move {
        let mut flights = Vec::new();
        for _ in 0..n {
            flights.push(publisher.publish(out("a")).await.unwrap());
        }
        flights
    });
    // Ack everything but the first flight, newest first; the stuck flight keeps its slot, so
    // more than twice the window is sent past it.
    while b.sends.load(Ordering::SeqCst) < n || b.pending() > 1 {
        let newest = b.acks.lock().back().map(|(id, _)| id.clone());
        match newest {
            Some(id) if id != "p-1" => b.release_id(&id, ack_for(&id)),
            _ => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
    let flights = submitted.await.unwrap();
    let first = Arc::clone(&flights[0]);
    assert!(!first.is_done());
    let o = tokio::time::timeout(Duration::from_secs(10), first.wait())
        .await
        .unwrap();
    assert!(matches!(o, Outcome::TimedOut(_)), "{o:?}");
    wait_for("0 in flight", || p.in_flight() == 0).await;
    // The ack that comes after the time-out changes nothing.
    b.release_id("p-1", ack_for("p-1"));
    settle().await;
    assert!(matches!(first.outcome(), Some(Outcome::TimedOut(_))));
    assert_eq!(p.in_flight(), 0);
    p.drain().await;
    drop(p);
    let all = collected.await.unwrap();
    let count = |k: EventKind| all.iter().filter(|(kind, _)| *kind == k).count();
    assert_eq!(count(EventKind::Published), n);
    assert_eq!(count(EventKind::Acked), n - 1);
    assert_eq!(count(EventKind::Timeout), 1);
    assert!(flights[1..]
        .iter()
        .all(|f| matches!(f.outcome(), Some(Outcome::Acked(a)) if a.message_id == f.id())));
}
