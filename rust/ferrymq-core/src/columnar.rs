//! [`MessageColumns`]: received messages laid out column by column in the Apache Arrow memory
//! format, so that a reader (the PySpark source) can hand them to `pyarrow` without creating one
//! Python object per message.
//!
//! The columns are the read schema of `ferrymq.spark` (Kafka's names first):
//!
//! | column | Arrow type | nullable |
//! | --- | --- | --- |
//! | `key` | binary | yes |
//! | `value` | binary | no |
//! | `topic` | utf8 | no |
//! | `partition` | int32 | no |
//! | `offset` | int64 | no |
//! | `timestamp` | timestamp(us, UTC) as int64 | yes |
//! | `properties` | map<utf8, utf8> | no (may be empty) |
//! | `tag` | utf8 | yes |
//! | `message_group` | utf8 | yes |
//! | `message_id` | utf8 | yes |
//!
//! Variable-width columns use 32-bit offsets, so one batch holds at most `i32::MAX` bytes per
//! column; [`MessageColumns::push`] refuses a row that would overflow (the caller starts a new
//! batch first: see [`MessageColumns::would_fit`]). Validity bitmaps are LSB-first, one bit per
//! row, 1 = valid, as Arrow specifies.

use bytes::Bytes;

use crate::error::{Error, Result};

/// A variable-width column (binary or utf8) with an optional validity bitmap.
#[derive(Debug, Clone, Default)]
pub struct VarColumn {
    offsets: Vec<i32>,
    data: Vec<u8>,
    validity: Vec<u8>,
    nulls: usize,
    nullable: bool,
}

impl VarColumn {
    fn new(nullable: bool) -> Self {
        Self {
            offsets: vec![0],
            data: Vec::new(),
            validity: Vec::new(),
            nulls: 0,
            nullable,
        }
    }

    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    fn push(&mut self, v: Option<&[u8]>) {
        let row = self.len();
        if self.nullable {
            if row % 8 == 0 {
                self.validity.push(0);
            }
            if v.is_some() {
                self.validity[row / 8] |= 1 << (row % 8);
            } else {
                self.nulls += 1;
            }
        }
        if let Some(v) = v {
            self.data.extend_from_slice(v);
        }
        // Callers check `would_fit` first, so the length fits in an i32.
        self.offsets
            .push(i32::try_from(self.data.len()).unwrap_or(i32::MAX));
    }

    /// The offsets buffer (`len + 1` little-endian i32).
    pub fn offsets(&self) -> &[i32] {
        &self.offsets
    }
    /// The data buffer.
    pub fn data(&self) -> &[u8] {
        &self.data
    }
    /// The validity bitmap, or `None` when the column has no nulls.
    pub fn validity(&self) -> Option<&[u8]> {
        (self.nulls > 0).then_some(self.validity.as_slice())
    }
    /// How many rows are null.
    pub fn null_count(&self) -> usize {
        self.nulls
    }
    /// Bytes held by this column.
    pub fn byte_len(&self) -> usize {
        self.data.len() + self.offsets.len() * 4 + self.validity.len()
    }
}

/// A fixed-width column of `T` with an optional validity bitmap.
#[derive(Debug, Clone, Default)]
pub struct FixedColumn<T> {
    values: Vec<T>,
    validity: Vec<u8>,
    nulls: usize,
}

impl<T: Copy + Default> FixedColumn<T> {
    fn push(&mut self, v: Option<T>) {
        let row = self.values.len();
        if row % 8 == 0 {
            self.validity.push(0);
        }
        match v {
            Some(v) => {
                self.validity[row / 8] |= 1 << (row % 8);
                self.values.push(v);
            }
            None => {
                self.nulls += 1;
                self.values.push(T::default());
            }
        }
    }
    /// The values (nulls hold `T::default()`).
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// The validity bitmap, or `None` when the column has no nulls.
    pub fn validity(&self) -> Option<&[u8]> {
        (self.nulls > 0).then_some(self.validity.as_slice())
    }
    /// How many rows are null.
    pub fn null_count(&self) -> usize {
        self.nulls
    }
}

/// One received message, borrowed, as the columns want it.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    /// Message key (RocketMQ: the first of `keys`; NATS: the `ferrymq-key` header).
    pub key: Option<&'a [u8]>,
    /// Payload.
    pub value: &'a [u8],
    /// Topic, stream subject or JMQ topic.
    pub topic: &'a str,
    /// Queue id / partition.
    pub partition: i32,
    /// Queue offset, partition index or stream sequence.
    pub offset: i64,
    /// Store time (or born time) in Unix microseconds.
    pub timestamp_us: Option<i64>,
    /// User properties / headers.
    pub properties: &'a [(&'a str, &'a str)],
    /// Tag (RocketMQ).
    pub tag: Option<&'a str>,
    /// Message group (RocketMQ FIFO).
    pub message_group: Option<&'a str>,
    /// Message id.
    pub message_id: Option<&'a str>,
    /// The W3C `traceparent` the message carried (never also among `properties`).
    pub trace_context: Option<&'a str>,
    /// The W3C `tracestate` that came with it.
    pub trace_state: Option<&'a str>,
}

impl Row<'_> {
    fn var_bytes(&self) -> usize {
        let props: usize = self.properties.iter().map(|(k, v)| k.len() + v.len()).sum();
        self.key.map_or(0, <[u8]>::len)
            + self.value.len()
            + self.topic.len()
            + props
            + self.tag.map_or(0, str::len)
            + self.message_group.map_or(0, str::len)
            + self.message_id.map_or(0, str::len)
            + self.trace_context.map_or(0, str::len)
            + self.trace_state.map_or(0, str::len)
    }
}

/// Received messages in Arrow column layout (see the module documentation).
#[derive(Debug, Clone)]
pub struct MessageColumns {
    /// `key` (binary, nullable).
    pub key: VarColumn,
    /// `value` (binary).
    pub value: VarColumn,
    /// `topic` (utf8).
    pub topic: VarColumn,
    /// `partition` (int32).
    pub partition: Vec<i32>,
    /// `offset` (int64).
    pub offset: Vec<i64>,
    /// `timestamp` in microseconds (nullable).
    pub timestamp_us: FixedColumn<i64>,
    /// `properties`: list offsets (`len + 1` i32) into `property_keys` / `property_values`.
    pub property_offsets: Vec<i32>,
    /// Map keys (utf8).
    pub property_keys: VarColumn,
    /// Map values (utf8).
    pub property_values: VarColumn,
    /// `tag` (utf8, nullable).
    pub tag: VarColumn,
    /// `message_group` (utf8, nullable).
    pub message_group: VarColumn,
    /// `message_id` (utf8, nullable).
    pub message_id: VarColumn,
    /// `trace_context` (utf8, nullable): the W3C `traceparent`.
    pub trace_context: VarColumn,
    /// `trace_state` (utf8, nullable): the W3C `tracestate`.
    pub trace_state: VarColumn,
    bytes: usize,
}

impl Default for MessageColumns {
    fn default() -> Self {
        Self::new()
    }
}

/// The most bytes one variable-width column may hold (32-bit Arrow offsets).
const MAX_COLUMN_BYTES: usize = i32::MAX as usize;

impl MessageColumns {
    /// An empty batch.
    pub fn new() -> Self {
        Self {
            key: VarColumn::new(true),
            value: VarColumn::new(false),
            topic: VarColumn::new(false),
            partition: Vec::new(),
            offset: Vec::new(),
            timestamp_us: FixedColumn::default(),
            property_offsets: vec![0],
            property_keys: VarColumn::new(false),
            property_values: VarColumn::new(false),
            tag: VarColumn::new(true),
            message_group: VarColumn::new(true),
            message_id: VarColumn::new(true),
            trace_context: VarColumn::new(true),
            trace_state: VarColumn::new(true),
            bytes: 0,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.offset.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.offset.is_empty()
    }

    /// Payload bytes held (variable-width data of every column).
    pub fn byte_len(&self) -> usize {
        self.bytes
    }

    /// Whether `row` can be added without overflowing a 32-bit offset.
    pub fn would_fit(&self, row: &Row<'_>) -> bool {
        // A conservative test: every variable-width column holds at most `self.bytes`.
        self.bytes + row.var_bytes() <= MAX_COLUMN_BYTES
    }

    /// Append one message.
    pub fn push(&mut self, row: &Row<'_>) -> Result<()> {
        if !self.would_fit(row) {
            return Err(Error::invalid(
                "batch",
                "more than 2 GiB of message data in one batch; read a smaller range",
            ));
        }
        self.bytes += row.var_bytes();
        self.key.push(row.key);
        self.value.push(Some(row.value));
        self.topic.push(Some(row.topic.as_bytes()));
        self.partition.push(row.partition);
        self.offset.push(row.offset);
        self.timestamp_us.push(row.timestamp_us);
        for (k, v) in row.properties {
            self.property_keys.push(Some(k.as_bytes()));
            self.property_values.push(Some(v.as_bytes()));
        }
        self.property_offsets.push(
            i32::try_from(self.property_keys.len())
                .map_err(|_| Error::invalid("batch", "too many properties in one batch"))?,
        );
        self.tag.push(row.tag.map(str::as_bytes));
        self.message_group
            .push(row.message_group.map(str::as_bytes));
        self.message_id.push(row.message_id.map(str::as_bytes));
        self.trace_context
            .push(row.trace_context.map(str::as_bytes));
        self.trace_state.push(row.trace_state.map(str::as_bytes));
        Ok(())
    }
}

/// Fixed-width values that Arrow stores little-endian.
pub trait LeBytes: Copy {
    /// Append the little-endian bytes of `self` to `out`.
    fn put_le(self, out: &mut Vec<u8>);
}

impl LeBytes for i32 {
    fn put_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl LeBytes for i64 {
    fn put_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

/// A fixed-width buffer as the bytes of an Arrow buffer.
pub fn as_le_bytes<T: LeBytes>(v: &[T]) -> Bytes {
    let mut out = Vec::with_capacity(std::mem::size_of_val(v));
    for x in v {
        x.put_le(&mut out);
    }
    Bytes::from(out)
}

/// What one read of the offset range `[start, end)` of a queue, partition or stream returns
/// (every offset reader: RocketMQ over gRPC and remoting, JMQ4, JetStream).
#[derive(Debug, Clone)]
pub struct RangeRead {
    /// The messages, as Arrow columns.
    pub columns: MessageColumns,
    /// Where the next read of this range continues (`end` when the range is done).
    pub next_offset: i64,
    /// The offset of the first message returned, if any (a value above `start` with no filter
    /// means messages below it are gone: retention).
    pub first_offset: Option<i64>,
}

/// The progress of a range read: the next offset wanted, the messages taken so far, and the
/// run of reads that brought nothing (a reader gives up after a few: the range was planned
/// against another server, or messages vanished).
#[derive(Debug)]
pub struct RangeCursor {
    read: RangeRead,
    end: i64,
    max_rows: usize,
    empty: u32,
}

impl RangeCursor {
    /// A read of `[start, end)` whose offsets start at `first` (0 or 1), at most `max_rows`
    /// (at least 1) messages.
    pub fn new(start: i64, end: i64, first: i64, max_rows: usize) -> Result<Self> {
        if start < first || end < start {
            return Err(Error::invalid(
                "range",
                format!("[{start}, {end}) is not a valid offset range (offsets start at {first})"),
            ));
        }
        Ok(Self {
            read: RangeRead {
                columns: MessageColumns::new(),
                next_offset: start,
                first_offset: None,
            },
            end,
            max_rows: max_rows.max(1),
            empty: 0,
        })
    }

    /// The next offset wanted.
    pub fn at(&self) -> i64 {
        self.read.next_offset
    }

    /// Whether the read goes on: offsets left below `end` and room for more rows.
    pub fn wants_more(&self) -> bool {
        self.at() < self.end && !self.full()
    }

    /// Whether `max_rows` messages were taken.
    pub fn full(&self) -> bool {
        self.read.columns.len() >= self.max_rows
    }

    /// How many messages the next read should ask for, at most `cap`.
    pub fn want(&self, cap: usize) -> usize {
        (self.max_rows - self.read.columns.len().min(self.max_rows))
            .min(usize::try_from(self.end - self.at()).unwrap_or(usize::MAX))
            .min(cap)
    }

    /// Whether the message at `offset` belongs to what is still wanted.
    pub fn wants(&self, offset: i64) -> bool {
        offset >= self.at() && offset < self.end && !self.full()
    }

    /// Take the message at `offset` (added to the columns by `push`).
    pub fn take(
        &mut self,
        offset: i64,
        push: impl FnOnce(&mut MessageColumns) -> Result<()>,
    ) -> Result<()> {
        push(&mut self.read.columns)?;
        self.read.first_offset.get_or_insert(offset);
        self.read.next_offset = offset + 1;
        self.empty = 0;
        Ok(())
    }

    /// Continue from `offset` when it is ahead (the server skipped filtered-out or removed
    /// messages), never past `end`.
    pub fn skip_to(&mut self, offset: i64) {
        if offset > self.at() {
            self.read.next_offset = offset.min(self.end);
            self.empty = 0;
        }
    }

    /// Nothing else is in the range.
    pub fn finish(&mut self) {
        self.read.next_offset = self.read.next_offset.max(self.end);
    }

    /// A read brought nothing new: after `max` in a row, the error `why` describes.
    pub fn nothing_new(&mut self, max: u32, why: impl FnOnce(i64, i64) -> String) -> Result<()> {
        self.empty += 1;
        if self.empty >= max {
            return Err(Error::timeout(why(self.at(), self.end)));
        }
        Ok(())
    }

    /// What was read.
    pub fn into_read(mut self) -> RangeRead {
        self.read.next_offset = self.read.next_offset.min(self.end);
        self.read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(offset: i64, key: Option<&'a [u8]>, props: &'a [(&'a str, &'a str)]) -> Row<'a> {
        Row {
            key,
            value: b"hello",
            topic: "t",
            partition: 3,
            offset,
            timestamp_us: if offset == 1 { None } else { Some(offset * 10) },
            properties: props,
            tag: Some("tg"),
            message_group: None,
            message_id: Some("id"),
            trace_context: (offset == 2).then_some("00-tp"),
            trace_state: None,
        }
    }

    #[test]
    fn lays_out_arrow_buffers() {
        let mut c = MessageColumns::new();
        c.push(&row(0, Some(b"k0"), &[("a", "1"), ("bb", "22")]))
            .unwrap();
        c.push(&row(1, None, &[])).unwrap();
        c.push(&row(2, Some(b""), &[("c", "")])).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c.key.offsets(), &[0, 2, 2, 2]);
        assert_eq!(c.key.data(), b"k0");
        // Rows 0 and 2 are valid, row 1 is null.
        assert_eq!(c.key.validity(), Some(&[0b101][..]));
        assert_eq!(c.key.null_count(), 1);
        assert_eq!(c.value.validity(), None);
        assert_eq!(c.value.offsets(), &[0, 5, 10, 15]);
        assert_eq!(c.offset, vec![0, 1, 2]);
        assert_eq!(c.partition, vec![3, 3, 3]);
        assert_eq!(c.timestamp_us.values(), &[0, 0, 20]);
        assert_eq!(c.timestamp_us.validity(), Some(&[0b101][..]));
        assert_eq!(c.property_offsets, vec![0, 2, 2, 3]);
        assert_eq!(c.property_keys.data(), b"abbc");
        assert_eq!(c.property_values.offsets(), &[0, 1, 3, 3]);
        assert_eq!(c.message_group.null_count(), 3);
        assert!(c.tag.validity().is_none());
        assert_eq!(c.trace_context.validity(), Some(&[0b100][..]));
        assert_eq!(c.trace_context.data(), b"00-tp");
        assert_eq!(c.trace_state.null_count(), 3);
    }

    #[test]
    fn validity_spans_bytes() {
        let mut c = MessageColumns::new();
        for i in 0..10 {
            let key: Option<&[u8]> = if i == 9 { None } else { Some(b"k") };
            c.push(&row(i + 2, key, &[])).unwrap();
        }
        assert_eq!(c.key.validity(), Some(&[0xff, 0b01][..]));
    }

    #[test]
    fn little_endian_bytes() {
        assert_eq!(&as_le_bytes(&[1i32, 256])[..], &[1, 0, 0, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn range_cursor_takes_skips_and_gives_up() {
        let push = |c: &mut MessageColumns| {
            c.push(&Row {
                key: None,
                value: b"v",
                topic: "t",
                partition: 0,
                offset: 0,
                timestamp_us: None,
                properties: &[],
                tag: None,
                message_group: None,
                message_id: None,
                trace_context: None,
                trace_state: None,
            })
        };
        assert!(RangeCursor::new(-1, 5, 0, 10).is_err());
        assert!(RangeCursor::new(0, 5, 1, 10).is_err());
        assert!(RangeCursor::new(5, 4, 0, 10).is_err());

        let mut c = RangeCursor::new(10, 20, 0, 3).unwrap();
        assert_eq!(c.want(100), 3);
        assert!(!c.wants(9) && c.wants(10) && !c.wants(20));
        c.take(12, push).unwrap();
        assert_eq!(c.at(), 13);
        assert!(!c.wants(12));
        c.skip_to(11);
        assert_eq!(c.at(), 13, "never backwards");
        c.skip_to(15);
        c.take(15, push).unwrap();
        c.take(16, push).unwrap();
        assert!(c.full() && !c.wants_more());
        let r = c.into_read();
        assert_eq!(
            (r.columns.len(), r.first_offset, r.next_offset),
            (3, Some(12), 17)
        );

        let mut c = RangeCursor::new(1, 4, 1, 100).unwrap();
        assert_eq!(c.want(100), 3);
        c.skip_to(99);
        assert_eq!(c.at(), 4, "never past end");
        let mut c = RangeCursor::new(1, 4, 1, 100).unwrap();
        c.finish();
        assert!(!c.wants_more());
        assert_eq!(c.into_read().next_offset, 4);

        let mut c = RangeCursor::new(0, 4, 0, 100).unwrap();
        assert!(c.nothing_new(2, |at, end| format!("{at}..{end}")).is_ok());
        let e = c
            .nothing_new(2, |at, end| format!("{at}..{end}"))
            .unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Timeout);
        assert!(e.to_string().contains("0..4"), "{e}");
    }
}
