//! The produce queue and its batcher over an in-memory backend whose chunks the test answers.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use super::{ProduceBackend, ProduceQueue, Refused};
use crate::error::{Error, ErrorKind, Result};
use crate::message::Message;

/// A chunk the backend was asked to send, waiting for the test's answer.
struct Asked {
    bodies: Vec<String>,
    group: Option<String>,
    answer: oneshot::Sender<Result<()>>,
}

/// Records every chunk; each one waits until the test answers it (or answers at once when
/// `auto` is set). An `Err` answer fails the chunk; a body "bad" fails only its message.
#[derive(Clone, Default)]
struct Backend {
    asked: Arc<Mutex<Vec<Asked>>>,
    arrived: Arc<Notify>,
    auto: bool,
}

impl Backend {
    fn auto() -> Self {
        Self {
            auto: true,
            ..Self::default()
        }
    }

    /// Wait until chunks carrying `n` messages in all are waiting for an answer, and take
    /// them: the batcher may split what was pushed at once (it can start on the first push).
    async fn take_messages(&self, n: usize) -> Vec<Asked> {
        let mut asked = Vec::new();
        while asked.iter().map(|a: &Asked| a.bodies.len()).sum::<usize>() < n {
            asked.extend(self.take(1).await);
        }
        asked
    }

    /// Wait until `n` chunks are waiting for an answer, and take them.
    async fn take(&self, n: usize) -> Vec<Asked> {
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let mut asked = self.asked.lock();
                if asked.len() >= n {
                    return asked.drain(..).collect();
                }
            }
            arrived.await;
        }
    }
}

impl ProduceBackend for Backend {
    type Receipt = String;
    fn send_chunk(
        &self,
        messages: Vec<Message>,
    ) -> BoxFuture<'static, Result<Vec<Result<String>>>> {
        let bodies: Vec<String> = messages
            .iter()
            .map(|m| String::from_utf8_lossy(m.body()).into_owned())
            .collect();
        let (tx, rx) = oneshot::channel();
        if self.auto {
            let _ = tx.send(Ok(()));
        } else {
            self.asked.lock().push(Asked {
                bodies: bodies.clone(),
                group: messages[0].message_group().map(str::to_string),
                answer: tx,
            });
            self.arrived.notify_waiters();
        }
        async move {
            rx.await.map_err(|_| Error::internal("no answer"))??;
            Ok(bodies
                .into_iter()
                .map(|b| {
                    if b == "bad" {
                        Err(Error::invalid("body", "refused by the test backend"))
                    } else {
                        Ok(b)
                    }
                })
                .collect())
        }
        .boxed()
    }
}

fn msg(topic: &str, body: &str) -> Message {
    Message::builder(topic, body.as_bytes().to_vec())
        .build()
        .unwrap()
}

fn fifo(topic: &str, group: &str, body: &str) -> Message {
    Message::builder(topic, body.as_bytes().to_vec())
        .message_group(group)
        .build()
        .unwrap()
}

fn queue(backend: &Backend, max_pending: usize) -> ProduceQueue<Backend, usize> {
    ProduceQueue::new(
        backend.clone(),
        max_pending,
        tokio::runtime::Handle::current(),
    )
    .unwrap()
}

fn push(q: &ProduceQueue<Backend, usize>, m: Message, token: usize) {
    assert!(q.push(m, token).is_ok(), "message {token} refused");
}

#[tokio::test]
async fn max_pending_must_be_positive() {
    let e =
        ProduceQueue::<Backend, usize>::new(Backend::auto(), 0, tokio::runtime::Handle::current())
            .err()
            .unwrap();
    assert!(e.message().starts_with("max_pending:"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_bounded_by_unreported_messages() {
    let b = Backend::default();
    let q = queue(&b, 3);
    for i in 0..3 {
        push(&q, msg("t", &i.to_string()), i);
    }
    match q.push(msg("t", "3"), 3) {
        Err(Refused::Full(m, token)) => assert_eq!((m.body().as_ref(), token), (&b"3"[..], 3)),
        _ => panic!("a fourth message was accepted with max_pending = 3"),
    }
    // Sent and answered, but not yet taken: still pending, still full.
    for a in b.take_messages(3).await {
        a.answer.send(Ok(())).unwrap();
    }
    q.drained().await;
    assert_eq!(q.pending(), 3);
    assert!(matches!(q.push(msg("t", "3"), 3), Err(Refused::Full(..))));
    assert_eq!(q.take_ready().len(), 3);
    assert_eq!(q.pending(), 0);
    push(&q, msg("t", "3"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drained_waits_for_every_answer() {
    let b = Backend::default();
    let q = queue(&b, 100);
    for i in 0..10 {
        push(&q, msg("t", &i.to_string()), i);
    }
    let asked = b.take_messages(10).await;
    let drained = q.drained();
    tokio::pin!(drained);
    assert!(futures::poll!(drained.as_mut()).is_pending());
    q.ready(Duration::ZERO).await;
    assert!(
        q.take_ready().is_empty(),
        "reported before the backend answered"
    );
    for a in asked {
        a.answer.send(Ok(())).unwrap();
    }
    drained.await;
    let got: Vec<usize> = q.take_ready().into_iter().map(|d| d.token).collect();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_come_in_produce_order_per_topic() {
    let b = Backend::default();
    let q = queue(&b, 10_000);
    // Twelve messages of 300 KB on one topic: chunks of at most three (a chunk carries at most
    // 1 MB), sent concurrently and answered last first.
    let big = "x".repeat(300 << 10);
    let messages: Vec<Message> = (0..12).map(|i| msg("t", &format!("{i}{big}"))).collect();
    for (i, m) in messages.into_iter().enumerate() {
        push(&q, m, i);
    }
    let mut asked = b.take_messages(12).await;
    assert!(asked.len() >= 4, "{} chunks", asked.len());
    let first = asked.remove(0);
    for a in asked.into_iter().rev() {
        a.answer.send(Ok(())).unwrap();
    }
    q.ready(Duration::from_millis(50)).await;
    assert!(
        q.take_ready().is_empty(),
        "later chunks reported before the first one"
    );
    first.answer.send(Ok(())).unwrap();
    q.drained().await;
    let got: Vec<usize> = q.take_ready().into_iter().map(|d| d.token).collect();
    assert_eq!(got, (0..12).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_reported_per_message_and_per_chunk() {
    let b = Backend::default();
    let q = queue(&b, 100);
    push(&q, msg("ok", "a"), 0);
    push(&q, msg("ok", "bad"), 1);
    push(&q, msg("ok", "b"), 2);
    push(&q, msg("down", "c"), 3);
    push(&q, msg("down", "d"), 4);
    for a in b.take_messages(5).await {
        let answer = if a.bodies.iter().any(|body| body == "c" || body == "d") {
            Err(Error::connection("broker unreachable"))
        } else {
            Ok(())
        };
        a.answer.send(answer).unwrap();
    }
    q.drained().await;
    let mut got = q.take_ready();
    got.sort_by_key(|d| d.token);
    let outcome: Vec<(usize, std::result::Result<String, ErrorKind>)> = got
        .into_iter()
        .map(|d| (d.token, d.result.map_err(|e| e.kind())))
        .collect();
    assert_eq!(
        outcome,
        vec![
            (0, Ok("a".to_string())),
            (1, Err(ErrorKind::InvalidArgument)),
            (2, Ok("b".to_string())),
            (3, Err(ErrorKind::Connection)),
            (4, Err(ErrorKind::Connection)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_group_is_sent_one_chunk_at_a_time() {
    let b = Backend::default();
    let q = queue(&b, 10_000);
    push(&q, fifo("t", "h", "other group"), 0);
    // Bodies of 600 KB: one message per chunk (a chunk carries at most 1 MB).
    let big = "x".repeat(600 << 10);
    for i in 1..=3 {
        push(&q, fifo("t", "g", &format!("{i}{big}")), i);
    }
    // h and the first chunk of g are out; the second chunk of g waits for the first.
    let asked = b.take(2).await;
    let groups: Vec<Option<&str>> = asked.iter().map(|a| a.group.as_deref()).collect();
    assert_eq!(groups, vec![Some("h"), Some("g")]);
    tokio::task::yield_now().await;
    assert!(
        b.asked.lock().is_empty(),
        "a second chunk of g went out early"
    );
    for a in asked {
        a.answer.send(Ok(())).unwrap();
    }
    for i in 2..=3 {
        let next = b.take(1).await;
        assert_eq!(next.len(), 1);
        assert!(next[0].bodies[0].starts_with(&i.to_string()));
        next.into_iter()
            .for_each(|a| a.answer.send(Ok(())).unwrap());
    }
    q.drained().await;
    let got: Vec<usize> = q.take_ready().into_iter().map(|d| d.token).collect();
    assert_eq!(got, vec![0, 1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_sends_what_is_queued_and_refuses_more() {
    let b = Backend::auto();
    let q = queue(&b, 10_000);
    for i in 0..500 {
        push(&q, msg(&format!("t{}", i % 3), &i.to_string()), i);
    }
    q.close();
    assert!(q.is_closed());
    assert!(
        matches!(q.push(msg("t", "late"), 500), Err(Refused::Closed(e)) if e.kind() == ErrorKind::Closed)
    );
    q.drained().await;
    let mut got: Vec<usize> = q.take_ready().into_iter().map(|d| d.token).collect();
    got.sort_unstable();
    assert_eq!(got, (0..500).collect::<Vec<_>>());
    assert_eq!(q.pending(), 0);
}
