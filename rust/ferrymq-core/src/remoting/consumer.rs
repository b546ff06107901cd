//! [`OffsetConsumer`]: a Kafka-style consumer of RocketMQ queues over the remoting protocol
//! (what `DefaultLitePullConsumer` with `assign`/`seek` and `KafkaConsumer` offer): the caller
//! assigns queues, positions are client-side, `poll` pulls by offset, and `commit` stores the
//! group's offsets on the brokers where lag tools see them.
//!
//! Each assigned queue keeps a *fetch position* (the next offset to pull) and a *position* (the
//! next offset `poll` hands out); pulled messages wait in a small per-queue buffer (one pull's
//! worth, at most 32 messages) until a poll takes them, so nothing pulled is dropped and memory
//! stays bounded by the assignment. A `seek` clears that queue's buffer; a generation number per
//! queue discards the answer of a pull that was in flight across a seek.
//!
//! `poll` first hands out buffered messages (queues in turn, so no queue starves), then pulls
//! every queue whose buffer is empty at once without suspension, and only when none has
//! anything waits with suspended (long-polling) pulls until the first answer with messages or
//! the timeout. Pulls never change broker state, so abandoning a suspended pull at the timeout
//! is harmless.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;

use super::client::{PullOutcome, PullStatus, RemotingClient, RemotingOptions, TagFilter};
use super::stored::StoredMessage;
use crate::error::{Error, Result};
use crate::rocketmq::pull::QueueRef;

/// The most messages one pull asks for (the broker caps a pull at 32 from memory anyway).
const PULL_BATCH: i32 = 32;
/// The longest suspension of one long-polling pull.
const MAX_SUSPEND: Duration = Duration::from_secs(20);

/// A queue of a topic: the unit of assignment, position and commit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicQueue {
    /// The topic.
    pub topic: String,
    /// The broker and queue id.
    pub queue: QueueRef,
}

impl TopicQueue {
    /// A queue of `topic`.
    pub fn new(topic: impl Into<String>, queue: QueueRef) -> Self {
        Self {
            topic: topic.into(),
            queue,
        }
    }
}

impl std::fmt::Display for TopicQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.queue.key())
    }
}

/// Where a queue without a position starts when nothing was committed for the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The first stored offset.
    Earliest,
    /// The next offset to be written (only new messages).
    Latest,
    /// No default: `poll` fails for such a queue until `seek`.
    None,
}

impl OffsetReset {
    /// Parse `"earliest"`, `"latest"` or `"none"`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "earliest" => Ok(Self::Earliest),
            "latest" => Ok(Self::Latest),
            "none" => Ok(Self::None),
            other => Err(Error::invalid(
                "auto_offset_reset",
                format!("{other:?} is not \"earliest\", \"latest\" or \"none\""),
            )),
        }
    }
}

/// One message handed out by [`OffsetConsumer::poll`], with the queue it came from.
#[derive(Debug, Clone)]
pub struct Polled {
    /// The queue.
    pub queue: TopicQueue,
    /// The message as stored.
    pub message: StoredMessage,
}

#[derive(Debug, Default)]
struct Assigned {
    /// Next offset `poll` hands out; `None` until resolved (committed offset or reset policy).
    position: Option<i64>,
    /// Next offset to pull.
    fetch_at: i64,
    /// Pulled, not yet handed out, in offset order.
    buffer: VecDeque<StoredMessage>,
    /// Bumped by every seek: answers of older pulls are discarded.
    generation: u64,
}

#[derive(Debug, Default)]
struct State {
    assigned: BTreeMap<TopicQueue, Assigned>,
    /// Where the next poll starts handing out buffered messages (round robin).
    turn: usize,
    closed: bool,
}

/// Offset-based consumer of one group (see the module docs). A cheap `Clone` handle.
#[derive(Debug, Clone)]
pub struct OffsetConsumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: RemotingClient,
    group: String,
    filter: Option<TagFilter>,
    reset: OffsetReset,
    state: Mutex<State>,
}

struct PullJob {
    tq: TopicQueue,
    at: i64,
    generation: u64,
}

impl OffsetConsumer {
    /// A consumer for `group`, optionally filtered by a tag expression (`"*"`, `"a || b"`).
    /// No I/O until the first call that needs it.
    pub fn new(
        options: RemotingOptions,
        group: impl Into<String>,
        tag_filter: Option<&str>,
        reset: OffsetReset,
    ) -> Result<Self> {
        let group = group.into();
        if group.trim().is_empty() {
            return Err(Error::invalid("group", "must not be empty"));
        }
        let filter = match tag_filter.map(str::trim) {
            None | Some("" | "*") => None,
            Some(f) => Some(TagFilter::parse(f)?),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                client: RemotingClient::new(options)?,
                group,
                filter,
                reset,
                state: Mutex::new(State::default()),
            }),
        })
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.inner.group
    }

    /// The remoting client underneath.
    pub fn client(&self) -> &RemotingClient {
        &self.inner.client
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.state.lock().closed {
            return Err(Error::closed("the consumer is closed"));
        }
        Ok(())
    }

    /// The readable queues of `topic`, sorted.
    pub async fn queues(&self, topic: &str) -> Result<Vec<TopicQueue>> {
        self.check_open()?;
        Ok(self
            .inner
            .client
            .read_queues(topic)
            .await?
            .into_iter()
            .map(|q| TopicQueue::new(topic, q))
            .collect())
    }

    /// Replace the assignment. Queues that stay assigned keep their position and buffer.
    pub fn assign(&self, queues: Vec<TopicQueue>) -> Result<()> {
        let mut st = self.inner.state.lock();
        if st.closed {
            return Err(Error::closed("the consumer is closed"));
        }
        let mut next = BTreeMap::new();
        for tq in queues {
            let a = st.assigned.remove(&tq).unwrap_or_default();
            next.insert(tq, a);
        }
        st.assigned = next;
        Ok(())
    }

    /// The assigned queues, sorted.
    pub fn assignment(&self) -> Vec<TopicQueue> {
        self.inner.state.lock().assigned.keys().cloned().collect()
    }

    fn not_assigned(tq: &TopicQueue) -> Error {
        Error::invalid("queue", format!("{tq} is not assigned to this consumer"))
    }

    /// Make `offset` the next offset `poll` hands out for `tq` (must be assigned).
    pub fn seek(&self, tq: &TopicQueue, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(Error::invalid("offset", format!("{offset} is negative")));
        }
        let mut st = self.inner.state.lock();
        let a = st
            .assigned
            .get_mut(tq)
            .ok_or_else(|| Self::not_assigned(tq))?;
        a.position = Some(offset);
        a.fetch_at = offset;
        a.buffer.clear();
        a.generation += 1;
        Ok(())
    }

    /// The first stored offset of each queue.
    pub async fn beginning_offsets(&self, tqs: &[TopicQueue]) -> Result<Vec<i64>> {
        self.check_open()?;
        let c = &self.inner.client;
        futures::future::try_join_all(tqs.iter().map(|tq| c.min_offset(&tq.topic, &tq.queue))).await
    }

    /// The next offset to be written of each queue.
    pub async fn end_offsets(&self, tqs: &[TopicQueue]) -> Result<Vec<i64>> {
        self.check_open()?;
        let c = &self.inner.client;
        futures::future::try_join_all(tqs.iter().map(|tq| c.max_offset(&tq.topic, &tq.queue))).await
    }

    /// For each `(queue, Unix ms)`, the first offset stored at or after that time, or `None`
    /// when every stored message is older.
    pub async fn offsets_for_times(&self, items: &[(TopicQueue, i64)]) -> Result<Vec<Option<i64>>> {
        self.check_open()?;
        let c = &self.inner.client;
        futures::future::try_join_all(items.iter().map(|(tq, ms)| async move {
            let (found, end) = futures::try_join!(
                c.search_offset(&tq.topic, &tq.queue, *ms),
                c.max_offset(&tq.topic, &tq.queue)
            )?;
            Ok::<_, Error>((found < end).then_some(found))
        }))
        .await
    }

    /// Seek each queue (assigned) to its first stored offset.
    pub async fn seek_to_beginning(&self, tqs: &[TopicQueue]) -> Result<()> {
        let offs = self.beginning_offsets(tqs).await?;
        for (tq, off) in tqs.iter().zip(offs) {
            self.seek(tq, off)?;
        }
        Ok(())
    }

    /// Seek each queue (assigned) to its end: only messages written from now on.
    pub async fn seek_to_end(&self, tqs: &[TopicQueue]) -> Result<()> {
        let offs = self.end_offsets(tqs).await?;
        for (tq, off) in tqs.iter().zip(offs) {
            self.seek(tq, off)?;
        }
        Ok(())
    }

    /// The next offset `poll` hands out for `tq` (resolved from the group's committed offset or
    /// the reset policy the first time).
    pub async fn position(&self, tq: &TopicQueue) -> Result<i64> {
        self.check_open()?;
        let (known, generation) = {
            let st = self.inner.state.lock();
            let a = st.assigned.get(tq).ok_or_else(|| Self::not_assigned(tq))?;
            (a.position, a.generation)
        };
        if let Some(p) = known {
            return Ok(p);
        }
        let start = self.initial_position(tq).await?;
        let mut st = self.inner.state.lock();
        let a = st
            .assigned
            .get_mut(tq)
            .ok_or_else(|| Self::not_assigned(tq))?;
        if a.generation == generation && a.position.is_none() {
            a.position = Some(start);
            a.fetch_at = start;
        }
        Ok(a.position.unwrap_or(start))
    }

    async fn initial_position(&self, tq: &TopicQueue) -> Result<i64> {
        let c = &self.inner.client;
        if let Some(off) = c
            .query_consumer_offset(&self.inner.group, &tq.topic, &tq.queue)
            .await?
        {
            return Ok(off);
        }
        match self.inner.reset {
            OffsetReset::Earliest => c.min_offset(&tq.topic, &tq.queue).await,
            OffsetReset::Latest => c.max_offset(&tq.topic, &tq.queue).await,
            OffsetReset::None => Err(Error::invalid(
                "auto_offset_reset",
                format!(
                    "{tq}: group {:?} committed no offset and the reset policy is \"none\"; \
                     seek first",
                    self.inner.group
                ),
            )),
        }
    }

    /// Store offsets for the group on the brokers: `offsets` (each the next offset to read),
    /// or every assigned queue's current position when `None`.
    pub async fn commit(&self, offsets: Option<Vec<(TopicQueue, i64)>>) -> Result<()> {
        self.check_open()?;
        let offsets = match offsets {
            Some(o) => {
                if let Some((tq, off)) = o.iter().find(|(_, off)| *off < 0) {
                    return Err(Error::invalid(
                        "offsets",
                        format!("{tq}: offset {off} is negative"),
                    ));
                }
                o
            }
            None => {
                let st = self.inner.state.lock();
                st.assigned
                    .iter()
                    .filter_map(|(tq, a)| a.position.map(|p| (tq.clone(), p)))
                    .collect()
            }
        };
        // One at a time: a real broker creates a group's offset table for a topic on its first
        // commit without a lock, so concurrent first commits of one group can lose entries
        // (observed on RocketMQ 5.3.3). Commits are rare; Java's consumers commit in a loop too.
        let c = &self.inner.client;
        let g = &self.inner.group;
        for (tq, off) in &offsets {
            c.update_consumer_offset(g, &tq.topic, &tq.queue, *off)
                .await?;
        }
        Ok(())
    }

    /// The group's committed offset of each queue (`None` where nothing was committed).
    pub async fn committed(&self, tqs: &[TopicQueue]) -> Result<Vec<Option<i64>>> {
        self.check_open()?;
        let c = &self.inner.client;
        let g = &self.inner.group;
        futures::future::try_join_all(
            tqs.iter()
                .map(|tq| c.query_consumer_offset(g, &tq.topic, &tq.queue)),
        )
        .await
    }

    /// Up to `max_messages` messages from the assigned queues, waiting up to `timeout` when
    /// none is available. Positions advance past what is returned.
    pub async fn poll(&self, max_messages: usize, timeout: Duration) -> Result<Vec<Polled>> {
        Error::require_count("max_messages", max_messages)?;
        self.check_open()?;
        let deadline = Instant::now() + timeout.min(Duration::from_secs(3600));
        // Resolve unknown positions first (committed offset or reset policy).
        let unresolved: Vec<TopicQueue> = {
            let st = self.inner.state.lock();
            st.assigned
                .iter()
                .filter(|(_, a)| a.position.is_none())
                .map(|(tq, _)| tq.clone())
                .collect()
        };
        futures::future::try_join_all(unresolved.iter().map(|tq| self.position(tq))).await?;

        let out = self.take_buffered(max_messages);
        if !out.is_empty() {
            return Ok(out);
        }
        // Every empty buffer pulled at once, without suspension.
        let jobs = self.pull_jobs();
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut pulls: FuturesUnordered<_> = jobs
            .into_iter()
            .map(|job| self.pull_one(job, None))
            .collect();
        while let Some(r) = pulls.next().await {
            r?;
        }
        let out = self.take_buffered(max_messages);
        if !out.is_empty() {
            return Ok(out);
        }
        // Nothing anywhere: long-poll every queue until the first has messages.
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Ok(Vec::new());
            }
            let suspend = remaining.min(MAX_SUSPEND);
            let jobs = self.pull_jobs();
            if jobs.is_empty() {
                return Ok(Vec::new());
            }
            let mut pulls: FuturesUnordered<_> = jobs
                .into_iter()
                .map(|job| self.pull_one(job, Some(suspend)))
                .collect();
            let waited = tokio::time::timeout(remaining, async {
                while let Some(r) = pulls.next().await {
                    if r? {
                        return Ok::<bool, Error>(true);
                    }
                }
                Ok(false)
            })
            .await;
            match waited {
                Ok(Ok(true)) => return Ok(self.take_buffered(max_messages)),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(self.take_buffered(max_messages)),
            }
        }
    }

    fn pull_jobs(&self) -> Vec<PullJob> {
        let st = self.inner.state.lock();
        st.assigned
            .iter()
            .filter(|(_, a)| a.position.is_some() && a.buffer.is_empty())
            .map(|(tq, a)| PullJob {
                tq: tq.clone(),
                at: a.fetch_at,
                generation: a.generation,
            })
            .collect()
    }

    /// One pull; fills the queue's buffer. `Ok(true)` when messages arrived.
    async fn pull_one(&self, job: PullJob, suspend: Option<Duration>) -> Result<bool> {
        let outcome: PullOutcome = self
            .inner
            .client
            .pull(
                &self.inner.group,
                &job.tq.topic,
                &job.tq.queue,
                job.at,
                PULL_BATCH,
                self.inner.filter.as_ref(),
                suspend,
            )
            .await?;
        let mut st = self.inner.state.lock();
        let Some(a) = st.assigned.get_mut(&job.tq) else {
            return Ok(false); // unassigned meanwhile
        };
        if a.generation != job.generation || a.fetch_at != job.at {
            return Ok(false); // a seek or another pull moved the queue
        }
        match outcome.status {
            PullStatus::Found => {
                let mut next = job.at;
                for m in outcome.messages {
                    if m.queue_offset >= next {
                        next = m.queue_offset + 1;
                        a.buffer.push_back(m);
                    }
                }
                a.fetch_at = outcome.next_begin_offset.max(next);
            }
            PullStatus::NoNewMessages => {}
            PullStatus::RetryImmediately => {
                a.fetch_at = outcome.next_begin_offset.max(job.at);
            }
            PullStatus::OffsetIllegal => {
                let to = outcome.next_begin_offset;
                tracing::warn!(
                    target: "ferrymq::remoting",
                    "{}: offset {} is outside [{}, {}); continuing at {to}",
                    job.tq,
                    job.at,
                    outcome.min_offset,
                    outcome.max_offset
                );
                a.fetch_at = to;
                a.position = Some(to);
            }
        }
        Ok(!a.buffer.is_empty())
    }

    /// Hand out up to `max` buffered messages, queues in turn, advancing positions.
    fn take_buffered(&self, max: usize) -> Vec<Polled> {
        let mut st = self.inner.state.lock();
        let n = st.assigned.len();
        if n == 0 {
            return Vec::new();
        }
        let start = st.turn % n;
        let keys: Vec<TopicQueue> = st.assigned.keys().cloned().collect();
        let mut out = Vec::new();
        for i in 0..n {
            if out.len() >= max {
                break;
            }
            let tq = &keys[(start + i) % n];
            let Some(a) = st.assigned.get_mut(tq) else {
                continue;
            };
            while out.len() < max {
                let Some(m) = a.buffer.pop_front() else {
                    break;
                };
                a.position = Some(m.queue_offset + 1);
                out.push(Polled {
                    queue: tq.clone(),
                    message: m,
                });
            }
        }
        st.turn = start + 1;
        out
    }

    /// Close the connections; later calls fail with `ClientClosedError` (idempotent).
    pub async fn close(&self) {
        {
            let mut st = self.inner.state.lock();
            st.closed = true;
            st.assigned.clear();
        }
        self.inner.client.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_policies_parse() {
        assert_eq!(
            OffsetReset::parse("Earliest").unwrap(),
            OffsetReset::Earliest
        );
        assert_eq!(OffsetReset::parse("latest").unwrap(), OffsetReset::Latest);
        assert_eq!(OffsetReset::parse(" none ").unwrap(), OffsetReset::None);
        assert!(OffsetReset::parse("smallest").is_err());
    }
}
