//! The batcher task of a [`ProduceQueue`](super::ProduceQueue): drains the queue into chunks
//! sent concurrently, and hands their reports back in produce order per topic.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::{Delivery, ProduceBackend, Shared};
use crate::message::Message;

/// Queued messages the batcher drains at once (fewer wait [`LINGER`] for company).
const MAX_BATCH: usize = 1024;
/// Body bytes per chunk.
const MAX_CHUNK_BYTES: usize = 1 << 20;
/// Messages per chunk.
pub(super) const MAX_CHUNK: usize = 64;
/// Messages in flight at once. Bounded: with hundreds of HTTP/2 streams on a loaded machine,
/// sends pass their deadline, the cancelled streams pile up, and a gRPC server answers GOAWAY
/// `ENHANCE_YOUR_CALM` (h2's reset-flood guard), which fails every call on the connection.
pub(super) const MAX_IN_FLIGHT: usize = 64;
/// How long a small batch waits for company before it is sent.
const LINGER: Duration = Duration::from_micros(500);
/// FIFO lanes kept before the idle ones are dropped.
const MAX_LANES: usize = 1024;

type Pending<T> = (Message, T);

/// Wait for queued messages; `false` once the queue is closed and empty.
async fn wait_for_work<R, T>(shared: &Shared<R, T>) -> bool {
    if !shared.queue.lock().is_empty() {
        return true;
    }
    if shared.closed.load(Ordering::Acquire) {
        return false;
    }
    let woken = shared.wake.notified();
    tokio::pin!(woken);
    woken.as_mut().enable();
    if shared.queue.lock().is_empty() {
        if shared.closed.load(Ordering::Acquire) {
            return false;
        }
        woken.await;
    }
    // A small batch waits a little for company; a full one goes at once.
    if shared.queue.lock().len() < MAX_BATCH {
        tokio::time::sleep(LINGER).await;
    }
    true
}

/// Group by (topic, kind, message group), keeping the order within each group, and cut each
/// group into chunks of at most [`MAX_CHUNK`] messages and [`MAX_CHUNK_BYTES`] body bytes.
fn chunks<T>(buf: Vec<Pending<T>>) -> Vec<Vec<Pending<T>>> {
    let mut groups: Vec<Vec<Pending<T>>> = Vec::new();
    for p in buf {
        let m = &p.0;
        match groups.iter_mut().find(|g| {
            let f = &g[0].0;
            f.topic() == m.topic() && f.kind() == m.kind() && f.message_group() == m.message_group()
        }) {
            Some(g) => g.push(p),
            None => groups.push(vec![p]),
        }
    }
    let mut out = Vec::new();
    for group in groups {
        let mut chunk: Vec<Pending<T>> = Vec::new();
        let mut bytes = 0usize;
        for p in group {
            let len = p.0.body().len();
            if !chunk.is_empty() && (bytes + len > MAX_CHUNK_BYTES || chunk.len() >= MAX_CHUNK) {
                out.push(std::mem::take(&mut chunk));
                bytes = 0;
            }
            bytes += len;
            chunk.push(p);
        }
        if !chunk.is_empty() {
            out.push(chunk);
        }
    }
    out
}

/// Drain the queue of `shared` into chunks sent with `backend`, until it is closed and empty.
pub(super) async fn run<B: ProduceBackend, T: Send + 'static>(
    backend: B,
    shared: Arc<Shared<B::Receipt, T>>,
) {
    let sends = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut lanes: HashMap<(String, String), Arc<tokio::sync::Mutex<()>>> = HashMap::new();
    while wait_for_work(&shared).await {
        let buf: Vec<Pending<T>> = std::mem::take(&mut *shared.queue.lock());
        for chunk in chunks(buf) {
            let n = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
            let Ok(permit) = Arc::clone(&sends).acquire_many_owned(n).await else {
                return;
            };
            let topic = chunk[0].0.topic().to_string();
            // The chunks of a FIFO group are sent one at a time, in order.
            let lane = match chunk[0].0.message_group() {
                Some(g) => {
                    if lanes.len() > MAX_LANES {
                        lanes.retain(|_, l| Arc::strong_count(l) > 1);
                    }
                    let l = Arc::clone(lanes.entry((topic.clone(), g.to_string())).or_default());
                    Some(l.lock_owned().await)
                }
                None => None,
            };
            let ticket = shared.ticket(&topic);
            let (messages, tokens): (Vec<Message>, Vec<T>) = chunk.into_iter().unzip();
            let send = backend.send_chunk(messages);
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                // One result per message: a message that failed does not make the others of
                // its chunk look failed when the backend tells them apart.
                let deliveries: Vec<Delivery<B::Receipt, T>> = match send.await {
                    Ok(results) if results.len() == tokens.len() => tokens
                        .into_iter()
                        .zip(results)
                        .map(|(token, result)| Delivery { token, result })
                        .collect(),
                    Ok(results) => {
                        let e = crate::error::Error::internal(format!(
                            "{} results for a chunk of {} messages",
                            results.len(),
                            tokens.len()
                        ));
                        failed(tokens, &e)
                    }
                    Err(e) => failed(tokens, &e),
                };
                drop(lane);
                drop(permit);
                shared.complete(&topic, ticket, deliveries);
            });
        }
    }
}

fn failed<R, T>(tokens: Vec<T>, e: &crate::error::Error) -> Vec<Delivery<R, T>> {
    tokens
        .into_iter()
        .map(|token| Delivery {
            token,
            result: Err(e.replicate()),
        })
        .collect()
}
