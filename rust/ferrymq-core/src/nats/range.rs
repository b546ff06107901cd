//! Replayable reads of a JetStream stream by sequence, and pipelined batch publishes: the NATS
//! half of the PySpark source and sink.
//!
//! A stream is one total order, so a Spark offset is a stream sequence (the next one to read).
//! [`StreamReader`] returns exactly the messages with `start <= sequence < end` (those
//! matching the filter subject, if any) however often it is called, as Arrow columns, through a
//! short-lived ephemeral pull consumer that starts at `start`.

use std::time::Duration;

use super::consumer::{DeliverPolicy, PullConsumerConfig};
use super::JetStream;
use crate::columnar::{MessageColumns, RangeCursor, RangeRead, Row};
use crate::error::{Error, Result};
use crate::range::RangeSource;

/// The header carrying the message key written by the Spark sink (NATS has no key).
pub const KEY_HEADER: &str = "ferrymq-key";
/// The JetStream de-duplication header.
const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// Most messages asked for in one fetch.
const FETCH_MAX: usize = 1000;
/// How long a fetch may wait when the range is known to hold messages.
const FETCH_WAIT: Duration = Duration::from_secs(2);
/// How long a fetch waits when a filter may leave the rest of the range empty.
const FILTERED_WAIT: Duration = Duration::from_millis(200);
/// Consecutive empty fetches tolerated below `end` without a filter.
const MAX_EMPTY_FETCHES: u32 = 5;

/// The only partition of a stream (a stream is one total order).
pub const STREAM_PARTITION: &str = "0";

/// The [`RangeSource`] of JetStream streams: a topic is a stream, its one partition
/// [`STREAM_PARTITION`], offsets are stream sequences, optionally narrowed to a subject
/// (wildcards allowed). Nothing is committed: the caller's checkpoint holds the sequences.
#[derive(Debug, Clone)]
pub struct StreamReader {
    js: JetStream,
    filter_subject: Option<String>,
}

impl StreamReader {
    /// A reader on the connection `js`, of the messages matching `filter_subject` (all when
    /// `None`).
    pub fn new(js: JetStream, filter_subject: Option<String>) -> Self {
        Self { js, filter_subject }
    }

    /// `(first sequence stored, next sequence to be written)` of `stream`: the readable range.
    async fn bounds(&self, stream: &str) -> Result<(i64, i64)> {
        let info = self.js.stream_info(stream).await?;
        let next = i64::try_from(info.last_sequence)
            .map_err(|_| Error::protocol("stream sequence overflows i64"))?
            + 1;
        if info.messages == 0 {
            return Ok((next, next));
        }
        let first = i64::try_from(info.first_sequence)
            .map_err(|_| Error::protocol("stream sequence overflows i64"))?;
        Ok((first.max(1), next))
    }
}

impl RangeSource for StreamReader {
    fn protocol(&self) -> &'static str {
        "nats"
    }

    async fn partitions(&self, _topic: &str) -> Result<Vec<String>> {
        Ok(vec![STREAM_PARTITION.to_string()])
    }

    async fn earliest(&self, topic: &str, _partition: &str) -> Result<i64> {
        Ok(self.bounds(topic).await?.0)
    }

    async fn latest(&self, topic: &str, _partition: &str) -> Result<i64> {
        Ok(self.bounds(topic).await?.1)
    }

    /// Every message of stream `stream` with `start <= sequence < end` (matching the filter
    /// subject), through a short-lived ephemeral pull consumer that starts at `start`.
    async fn read(
        &self,
        stream: &str,
        _partition: &str,
        start: i64,
        end: i64,
        max_rows: usize,
    ) -> Result<RangeRead> {
        let filter_subject = self.filter_subject.as_deref();
        let mut cursor = RangeCursor::new(start, end, 1, max_rows)?;
        if !cursor.wants_more() {
            return Ok(cursor.into_read());
        }
        let want_total = cursor.want(usize::MAX);
        let consumer = self
            .js
            .pull_consumer(
                stream,
                &PullConsumerConfig {
                    durable: None,
                    filter_subject: filter_subject.map(str::to_string),
                    deliver: DeliverPolicy::ByStartSequence(
                        u64::try_from(start).unwrap_or_default(),
                    ),
                    ack_wait: Duration::from_secs(300),
                    max_deliver: Some(1),
                    max_ack_pending: Some(i64::try_from(want_total + 1).unwrap_or(i64::MAX)),
                    inactive_threshold: Duration::from_secs(30),
                },
            )
            .await?;
        let wait = if filter_subject.is_some() {
            FILTERED_WAIT
        } else {
            FETCH_WAIT
        };
        let result = async {
            'outer: while cursor.wants_more() {
                let batch = consumer.fetch(cursor.want(FETCH_MAX), wait).await?;
                if batch.is_empty() {
                    if filter_subject.is_some() {
                        // Nothing else matches in the stream right now: the range is done.
                        cursor.finish();
                        break;
                    }
                    cursor.nothing_new(MAX_EMPTY_FETCHES, |at, end| {
                        format!("stream {stream:?}: no message at sequence {at} below {end}")
                    })?;
                    continue;
                }
                for m in &batch {
                    let seq = i64::try_from(m.stream_sequence)
                        .map_err(|_| Error::protocol("stream sequence overflows i64"))?;
                    if seq >= end {
                        cursor.finish();
                        break 'outer;
                    }
                    if !cursor.wants(seq) {
                        continue;
                    }
                    cursor.take(seq, |c| push_js(c, m, seq))?;
                    if m.pending == 0 && filter_subject.is_some() {
                        // The last matching message for now: nothing else can be in range.
                        cursor.finish();
                        break 'outer;
                    }
                    if cursor.full() {
                        break 'outer;
                    }
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = self.js.delete_consumer(stream, consumer.name()).await {
            tracing::debug!(target: "ferrymq::nats", error = %e, "could not delete the range consumer; it expires by itself");
        }
        result.map(|()| cursor.into_read())
    }

    async fn close(&self) -> Result<()> {
        self.js.close().await
    }
}

/// Append a fetched message as row `seq`.
fn push_js(columns: &mut MessageColumns, m: &super::JsMessage, seq: i64) -> Result<()> {
    let mut key = None;
    let mut id = None;
    let mut props: Vec<(&str, &str)> = Vec::with_capacity(m.headers.len());
    for (k, v) in &m.headers {
        if k.eq_ignore_ascii_case(KEY_HEADER) {
            key = Some(v.as_bytes());
        } else if k.eq_ignore_ascii_case(MSG_ID_HEADER) {
            id = Some(v.as_str());
        } else {
            props.push((k.as_str(), v.as_str()));
        }
    }
    // A map column holds each name once: the last value of a repeated header wins.
    props.reverse();
    let mut seen = std::collections::HashSet::new();
    props.retain(|(k, _)| seen.insert(*k));
    let (trace_context, trace_state) = crate::trace_context::take_received(None, &mut props);
    props.sort_unstable();
    let micros = m
        .published
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_micros()).ok());
    columns.push(&Row {
        key,
        value: &m.body,
        topic: &m.subject,
        partition: 0,
        offset: seq,
        timestamp_us: micros,
        properties: &props,
        tag: None,
        message_group: None,
        message_id: id,
        trace_context,
        trace_state,
    })
}
