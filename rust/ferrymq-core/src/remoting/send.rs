//! Sending over remoting: single messages (code 310) and batches (code 320).
//!
//! A batch send splits the messages into requests of at most [`MAX_BATCH_MESSAGES`] messages
//! and [`MAX_BATCH_BYTES`] bytes, spreads them round-robin over the topic's writable queues and
//! keeps up to [`MAX_SENDS_IN_FLIGHT`] requests in flight. Each message travels as its own
//! record with its own keys, tag, properties and unique id; the request header's properties
//! stay empty, because a broker appends them to every record of the batch. The ids are made
//! before the first attempt and kept when a request is retried on another queue after a
//! retriable answer, a connection error or a timeout. Messages with a message group go to the
//! queue of their group (the hash the Java client uses) and are sent in order, one request at
//! a time per queue.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;

use super::client::{RemotingClient, DEFAULT_TOPIC};
use super::codec::RemotingCommand;
use super::codes::{request, response, status_error};
use super::stored;
use crate::duration::now_ms;
use crate::error::{Error, Result};
use crate::message::Message;
use crate::metrics::Operation;
use crate::rocketmq::pull::QueueRef;

/// Most messages in one batch request.
pub const MAX_BATCH_MESSAGES: usize = 1024;
/// Most encoded bytes in one batch request (the broker's default message size limit).
pub const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;
/// Most batch requests in flight at once.
pub const MAX_SENDS_IN_FLIGHT: usize = 8;
/// Attempts per send request.
pub const SEND_ATTEMPTS: usize = 3;
/// Producer group named in send requests.
pub const PRODUCER_GROUP: &str = "FERRYMQ_PRODUCER";

/// Where one sent message was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReceipt {
    /// The message's unique id (`UNIQ_KEY`).
    pub message_id: String,
    /// The queue.
    pub queue: QueueRef,
    /// Its queue offset.
    pub offset: i64,
    /// The address (`host:port`) of the broker that stored it.
    pub address: String,
}

/// One send request: messages (by index into the caller's slice) and their records.
struct Chunk {
    indices: Vec<usize>,
    body: BytesMut,
    /// The queue of a message group; `None`: any queue.
    fixed: Option<QueueRef>,
}

impl RemotingClient {
    /// Send one message (code 310); retried like a batch request.
    pub async fn send(&self, message: &Message) -> Result<BatchReceipt> {
        let mut r = self
            .send_messages(message.topic(), std::slice::from_ref(message), false)
            .await?;
        r.pop()
            .ok_or_else(|| Error::internal("send returned no receipt"))
    }

    /// Send `messages` (all of `topic`) as batch requests; receipts in input order.
    pub async fn send_batch(&self, topic: &str, messages: &[Message]) -> Result<Vec<BatchReceipt>> {
        self.send_messages(topic, messages, true).await
    }

    async fn send_messages(
        &self,
        topic: &str,
        messages: &[Message],
        batch: bool,
    ) -> Result<Vec<BatchReceipt>> {
        self.check_open()?;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        for m in messages {
            if m.topic() != topic {
                return Err(Error::invalid(
                    "messages",
                    format!("a message for {:?} in a batch for {topic:?}", m.topic()),
                ));
            }
            if batch && m.delivery_time().is_some() {
                return Err(Error::invalid(
                    "messages",
                    "delayed messages cannot be sent in a remoting batch; send them one by one",
                ));
            }
        }
        let ids = stored::new_unique_ids(messages.len());
        let queues = self.write_queues(topic).await?;
        if queues.is_empty() {
            return Err(Error::connection(format!(
                "topic {topic} has no writable queue"
            )));
        }
        let chunks = if batch {
            plan_chunks(messages, &ids, &queues)?
        } else {
            let fixed = messages[0]
                .message_group()
                .map(|g| queues[crate::selector::fifo_queue_index(g, queues.len())].clone());
            vec![vec![Chunk {
                indices: vec![0],
                body: BytesMut::from(&messages[0].body()[..]),
                fixed,
            }]]
        };
        let queues = Arc::new(queues);
        let ids = Arc::new(ids);
        let lanes = futures::stream::iter(chunks.into_iter().map(|lane| {
            let queues = queues.clone();
            let ids = ids.clone();
            async move {
                let mut out = Vec::new();
                for chunk in lane {
                    let r = self
                        .send_chunk(topic, messages, &ids, &queues, &chunk, batch)
                        .await?;
                    out.extend(chunk.indices.iter().copied().zip(r));
                }
                Ok::<_, Error>(out)
            }
        }))
        .buffer_unordered(MAX_SENDS_IN_FLIGHT);
        let results: Vec<Result<Vec<(usize, BatchReceipt)>>> = lanes.collect().await;
        let mut receipts: Vec<Option<BatchReceipt>> = vec![None; messages.len()];
        let mut first_error = None;
        for r in results {
            match r {
                Ok(v) => {
                    for (i, rec) in v {
                        receipts[i] = Some(rec);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            let sent = receipts.iter().filter(|r| r.is_some()).count();
            return Err(e.context(format!(
                "send to {topic}: {sent} of {} messages stored before the failure",
                messages.len()
            )));
        }
        receipts
            .into_iter()
            .map(|r| r.ok_or_else(|| Error::internal("a message got no receipt")))
            .collect()
    }

    /// Send one request with its retries, recorded as one `send` of its messages.
    async fn send_chunk(
        &self,
        topic: &str,
        messages: &[Message],
        ids: &[String],
        queues: &[QueueRef],
        chunk: &Chunk,
        batch: bool,
    ) -> Result<Vec<BatchReceipt>> {
        let op = self.inner.metrics.begin(Operation::Send);
        let r = self
            .send_attempts(topic, messages, ids, queues, chunk, batch)
            .await;
        op.finish(topic, chunk.indices.len() as u64, r.as_ref().map(drop));
        r
    }

    async fn send_attempts(
        &self,
        topic: &str,
        messages: &[Message],
        ids: &[String],
        queues: &[QueueRef],
        chunk: &Chunk,
        batch: bool,
    ) -> Result<Vec<BatchReceipt>> {
        let body = chunk.body.clone().freeze();
        let mut last_err = None;
        for attempt in 0..SEND_ATTEMPTS {
            let queue = match &chunk.fixed {
                Some(q) => q.clone(),
                None => {
                    let i = self.inner.round_robin.fetch_add(1, Ordering::Relaxed);
                    queues[i % queues.len()].clone()
                }
            };
            let first = chunk.indices[0];
            let properties = if batch {
                String::new()
            } else {
                stored::message_properties(&messages[first], &ids[first])?
            };
            let mut cmd = RemotingCommand::request(if batch {
                request::SEND_BATCH_MESSAGE
            } else {
                request::SEND_MESSAGE_V2
            })
            .with_ext("a", PRODUCER_GROUP)
            .with_ext("b", self.wrap(topic))
            .with_ext("c", DEFAULT_TOPIC)
            .with_ext("d", 4)
            .with_ext("e", queue.id)
            .with_ext("f", 0)
            .with_ext("g", now_ms())
            .with_ext("h", 0)
            .with_ext("i", properties)
            .with_ext("j", 0)
            .with_ext("k", "false");
            if batch {
                cmd.set_ext("m", "true");
            }
            cmd.set_ext("n", &queue.broker);
            cmd.body = body.clone();
            let r = self.call(topic, &queue.broker, cmd, self.timeout()).await;
            let err = match r {
                Ok(resp)
                    if matches!(
                        resp.code,
                        response::SUCCESS
                            | response::FLUSH_DISK_TIMEOUT
                            | response::FLUSH_SLAVE_TIMEOUT
                            | response::SLAVE_NOT_AVAILABLE
                    ) =>
                {
                    let base = resp.ext_i64("queueOffset")?;
                    let queue_id = resp
                        .ext("queueId")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(queue.id);
                    let address = self
                        .route(topic)
                        .await?
                        .master_addr(&queue.broker)
                        .unwrap_or_default()
                        .to_string();
                    return Ok(chunk
                        .indices
                        .iter()
                        .enumerate()
                        .map(|(k, &i)| BatchReceipt {
                            message_id: ids[i].clone(),
                            queue: QueueRef {
                                broker: queue.broker.clone(),
                                id: queue_id,
                            },
                            offset: base + i64::try_from(k).unwrap_or(0),
                            address: address.clone(),
                        })
                        .collect());
                }
                Ok(resp) => status_error(resp.code, resp.remark.as_deref()),
                Err(e) => e,
            };
            let err = err.context(format!(
                "send of {} message(s) to {topic}/{} (attempt {})",
                chunk.indices.len(),
                queue.key(),
                attempt + 1
            ));
            if !err.is_retriable() {
                return Err(err);
            }
            tracing::debug!(target: "ferrymq::remoting", "{err}; retrying");
            if attempt + 1 < SEND_ATTEMPTS {
                self.inner.metrics.retried(Operation::Send, 1);
            }
            last_err = Some(err);
        }
        Err(last_err.unwrap_or_else(|| Error::internal("no send attempt")))
    }
}

/// Split messages into send requests. Messages without a group form consecutive chunks, each
/// its own lane (any queue); messages with a group are gathered per group queue into one lane
/// of consecutive chunks, sent in order.
fn plan_chunks(
    messages: &[Message],
    ids: &[String],
    queues: &[QueueRef],
) -> Result<Vec<Vec<Chunk>>> {
    let mut lanes: Vec<Vec<Chunk>> = Vec::new();
    let mut fifo: BTreeMap<usize, Vec<Chunk>> = BTreeMap::new();
    let mut free: Option<Chunk> = None;
    let push = |slot: &mut Vec<Chunk>, i: usize, rec: &Bytes, fixed: Option<QueueRef>| {
        let fits = slot.last().is_some_and(|c| {
            c.indices.len() < MAX_BATCH_MESSAGES && c.body.len() + rec.len() <= MAX_BATCH_BYTES
        });
        if !fits {
            slot.push(Chunk {
                indices: Vec::new(),
                body: BytesMut::new(),
                fixed,
            });
        }
        if let Some(c) = slot.last_mut() {
            c.indices.push(i);
            c.body.extend_from_slice(rec);
        }
    };
    for (i, m) in messages.iter().enumerate() {
        let rec = stored::encode_batch(std::slice::from_ref(m), std::slice::from_ref(&ids[i]))?;
        match m.message_group() {
            Some(g) => {
                let qi = crate::selector::fifo_queue_index(g, queues.len());
                push(
                    fifo.entry(qi).or_default(),
                    i,
                    &rec,
                    Some(queues[qi].clone()),
                );
            }
            None => {
                let full = free.as_ref().is_some_and(|c| {
                    c.indices.len() >= MAX_BATCH_MESSAGES
                        || c.body.len() + rec.len() > MAX_BATCH_BYTES
                });
                if full {
                    if let Some(c) = free.take() {
                        lanes.push(vec![c]);
                    }
                }
                let c = free.get_or_insert_with(|| Chunk {
                    indices: Vec::new(),
                    body: BytesMut::new(),
                    fixed: None,
                });
                c.indices.push(i);
                c.body.extend_from_slice(&rec);
            }
        }
    }
    if let Some(c) = free {
        lanes.push(vec![c]);
    }
    lanes.extend(fifo.into_values());
    Ok(lanes)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use parking_lot::Mutex;

    use super::*;
    use crate::remoting::client::RemotingOptions;
    use crate::test_support::remoting_server;

    #[test]
    fn chunks_respect_limits_and_groups() {
        let queues: Vec<QueueRef> = (0..4)
            .map(|id| QueueRef {
                broker: "b".into(),
                id,
            })
            .collect();
        let mut msgs = Vec::new();
        for i in 0..2500 {
            let mut b = Message::builder("t", vec![0u8; 10]);
            if i % 10 == 0 {
                b = b.message_group(format!("g{}", i % 3));
            }
            msgs.push(b.build().unwrap());
        }
        let ids = stored::new_unique_ids(msgs.len());
        let lanes = plan_chunks(&msgs, &ids, &queues).unwrap();
        let mut seen = vec![false; msgs.len()];
        for lane in &lanes {
            for c in lane {
                assert!(c.indices.len() <= MAX_BATCH_MESSAGES);
                assert!(c.indices.windows(2).all(|w| w[0] < w[1]));
                for &i in &c.indices {
                    assert!(!seen[i]);
                    seen[i] = true;
                    assert_eq!(c.fixed.is_some(), msgs[i].message_group().is_some());
                }
            }
        }
        assert!(seen.iter().all(|s| *s));
        let big = Message::builder("t", vec![0u8; 3 * 1024 * 1024])
            .build()
            .unwrap();
        let lanes = plan_chunks(&[big.clone(), big], &ids[..2], &queues).unwrap();
        assert_eq!(lanes.len(), 2);
    }

    type Log = Arc<Mutex<Vec<(bool, String)>>>;

    /// The fake cluster of the test below: a route to itself, and a broker that answers
    /// SYSTEM_BUSY to every other batch request and logs each id it saw.
    fn fake_answer(
        c: &RemotingCommand,
        me: &str,
        log: &Log,
        state: &Mutex<(u32, HashMap<String, i64>)>,
    ) -> RemotingCommand {
        let mut r = RemotingCommand::response(0, c.opaque, None);
        if c.code == 105 {
            r.body = format!(
                "{{\"brokerDatas\":[{{\"brokerAddrs\":{{\"0\":\"{me}\"}},\"brokerName\":\"b\"}}],\
                 \"queueDatas\":[{{\"brokerName\":\"b\",\"perm\":6,\"readQueueNums\":2,\
                 \"writeQueueNums\":2}}]}}"
            )
            .into();
            return r;
        }
        assert_eq!(c.code, 320);
        assert_eq!(c.ext("i"), Some(""));
        assert_eq!(c.ext("m"), Some("true"));
        assert_eq!(c.ext("n"), Some("b"));
        let records = stored::decode_batch(&c.body).unwrap();
        let mut st = state.lock();
        st.0 += 1;
        let busy = st.0 % 2 == 1;
        for rec in &records {
            let id = rec.properties.iter().find(|(k, _)| k == "UNIQ_KEY");
            log.lock().push((busy, id.unwrap().1.clone()));
        }
        if busy {
            r.code = response::SYSTEM_BUSY;
        } else {
            let q = c.ext("e").unwrap().to_string();
            let o = st.1.entry(q.clone()).or_default();
            r.set_ext("queueId", &q);
            r.set_ext("queueOffset", *o);
            *o += i64::try_from(records.len()).unwrap();
        }
        r
    }

    #[tokio::test]
    async fn batch_retries_keep_ids_and_header() {
        let seen: Log = Arc::default();
        let log = seen.clone();
        let state: Arc<Mutex<(u32, HashMap<String, i64>)>> = Arc::default();
        let addr = remoting_server(move |c, me| fake_answer(c, me, &log, &state)).await;
        let client = RemotingClient::new(RemotingOptions::new(&addr)).unwrap();
        let msgs: Vec<Message> = (0..1500)
            .map(|i| Message::builder("t", format!("{i}")).build().unwrap())
            .collect();
        let receipts = client.send_batch("t", &msgs).await.unwrap();
        assert_eq!(receipts.len(), 1500);
        let seen = seen.lock().clone();
        // Refused requests were retried with the same ids; each id was stored once.
        let refused: HashSet<&String> = seen.iter().filter(|s| s.0).map(|s| &s.1).collect();
        let stored: Vec<&String> = seen.iter().filter(|s| !s.0).map(|s| &s.1).collect();
        let stored_set: HashSet<&String> = stored.iter().copied().collect();
        assert_eq!((stored.len(), stored_set.len()), (1500, 1500));
        assert!(!refused.is_empty());
        assert!(refused.is_subset(&stored_set));
        let ids: HashSet<&String> = receipts.iter().map(|r| &r.message_id).collect();
        assert!(ids == stored_set, "receipt ids differ from the stored ids");
        let mut offsets: Vec<(i32, i64)> =
            receipts.iter().map(|r| (r.queue.id, r.offset)).collect();
        offsets.sort_unstable();
        offsets.dedup();
        assert_eq!(offsets.len(), 1500);
    }
}
