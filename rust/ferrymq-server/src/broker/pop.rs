//! POP consumption: what ReceiveMessage, AckMessage, ChangeInvisibleDuration and
//! ForwardMessageToDeadLetterQueue do to one queue for one consumer group.
//!
//! Each (queue, group) pair has a [`Cursor`] (defined in [`cursor`](super::cursor), kept by the
//! queue state in [`store`](super::store)): `low` (everything below is done), `next` (nothing
//! at or above was delivered yet) and one slot per offset in between. A delivered message is
//! `Inflight` with a nonce and a `visible_at` time; its receipt handle names the endpoint, queue,
//! offset and nonce, so a handle stops working as soon as the message is acked, redelivered or
//! given a new invisible duration (which issues a new nonce). Expired messages are redelivered
//! with `delivery_attempt + 1`; past the group's maximum they go to the group's DLQ instead.
//!
//! FIFO groups: a message is not delivered while an earlier message of the same message group
//! (same queue) is in flight from an earlier receive or waiting for redelivery; messages without
//! a group never block. One receive may hand out several messages of a group, in offset order
//! (as a real broker hands out a batch of a FIFO queue and blocks the queue until the whole batch
//! is settled): the group then stays blocked until every one of them is acked or dead-lettered.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use super::cursor::{Cursor, Liveness};
use super::cursor::{Inflight, Slot};
use super::store::{QueueState, Stored};
use crate::proto;
use crate::status;

/// Most slots a FIFO receive inspects before giving up on one queue.
const FIFO_SCAN_LIMIT: usize = 16 * 1024;
/// A FIFO receive also gives up on a queue after this many slots in a row that it could not
/// deliver (held back behind an earlier message of their group): with a deep backlog of a few
/// groups, scanning on finds nothing and cost every receive the whole scan limit. Order is
/// never at stake, only how far ahead one receive looks for another group.
const FIFO_FRUITLESS_LIMIT: usize = 256;

/// Hashes the group keys of a FIFO receive's blocked set ([`Stored::group_key`], already hashes)
/// by passing them on. (Two groups with the same key would only hold each other back, never
/// reorder.)
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type KeySet = HashSet<u64, std::hash::BuildHasherDefault<KeyHasher>>;

/// A message handed out by a receive.
#[derive(Debug)]
pub struct Delivery {
    /// The stored message.
    pub stored: Arc<Stored>,
    /// The nonce of its receipt handle.
    pub nonce: u32,
    /// 1-based delivery attempt.
    pub attempt: u32,
}

/// A message that ran out of delivery attempts and must move to the DLQ.
#[derive(Debug)]
pub struct DeadLetter {
    /// The stored message.
    pub stored: Arc<Stored>,
    /// Deliveries so far.
    pub attempts: u32,
}

/// A tag filter (`*`, or `a || b`); SQL filters are refused before this point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Everything.
    All,
    /// Messages whose tag is one of these.
    Tags(Vec<String>),
}

impl Filter {
    /// Parse a RocketMQ filter expression. `Err` carries the status to answer.
    pub fn parse(expr: Option<&proto::FilterExpression>) -> Result<Filter, (i32, String)> {
        let Some(f) = expr else {
            return Ok(Filter::All);
        };
        match proto::FilterType::try_from(f.r#type) {
            Ok(proto::FilterType::Sql) => Err((
                status::ILLEGAL_FILTER_EXPRESSION,
                "SQL92 filtering is not enabled on this broker (enablePropertyFilter=false)".into(),
            )),
            Ok(proto::FilterType::Tag | proto::FilterType::Unspecified) => {
                let e = f.expression.trim();
                Filter::of_tags(e).ok_or_else(|| {
                    (
                        status::ILLEGAL_FILTER_EXPRESSION,
                        format!("bad tag expression {e:?}"),
                    )
                })
            }
            Err(_) => Err((
                status::ILLEGAL_FILTER_EXPRESSION,
                format!("unknown filter type {}", f.r#type),
            )),
        }
    }

    /// The filter of a tag expression (`*` or empty: everything; else `a || b`), `None` when
    /// the expression names no tag.
    pub fn of_tags(expr: &str) -> Option<Filter> {
        let expr = expr.trim();
        if expr.is_empty() || expr == "*" {
            return Some(Filter::All);
        }
        let tags: Vec<String> = expr
            .split("||")
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        (!tags.is_empty()).then_some(Filter::Tags(tags))
    }

    /// Whether `m` passes.
    pub fn matches(&self, m: &Stored) -> bool {
        match self {
            Filter::All => true,
            Filter::Tags(tags) => m.tag().is_some_and(|t| tags.iter().any(|x| x == t)),
        }
    }
}

/// The parameters of one receive on one queue.
#[derive(Debug)]
pub struct Pop<'a> {
    /// The consumer group.
    pub group: &'a Arc<str>,
    /// Whether the group is FIFO.
    pub fifo: bool,
    /// The group's maximum delivery attempts.
    pub max_attempts: u32,
    /// Most messages to hand out.
    pub max: usize,
    /// Invisible duration of delivered messages.
    pub invisible: Duration,
    /// Tag filter.
    pub filter: &'a Filter,
    /// The time of the receive.
    pub now: Instant,
    /// Set for auto-renewed receives: renewed while the client lives, up to `renew_max`.
    pub renew: Option<&'a Arc<Liveness>>,
    /// The connection of the receive, if known: auto-renewal also stops when it closes.
    pub conn: Option<&'a Arc<Liveness>>,
    /// How long auto-renewal may hold a message.
    pub renew_max: Duration,
    /// Invisible duration added by each automatic renewal.
    pub renew_slice: Duration,
    /// Source of receipt-handle nonces.
    pub nonces: &'a AtomicU32,
}

/// What a receive on one queue produced.
#[derive(Debug, Default)]
pub struct PopOutcome {
    /// Messages to deliver.
    pub deliveries: Vec<Delivery>,
    /// Messages to move to the DLQ.
    pub dead: Vec<DeadLetter>,
    /// When something in this queue becomes deliverable again, if known.
    pub next_due: Option<Instant>,
}

impl PopOutcome {
    fn due(&mut self, at: Instant) {
        self.next_due = Some(self.next_due.map_or(at, |d| d.min(at)));
    }

    /// Hand `stored` out as delivery `attempt`, under a receipt handle with `nonce`.
    fn deliver(&mut self, stored: &Arc<Stored>, nonce: u32, attempt: u32) {
        self.deliveries.push(Delivery {
            stored: Arc::clone(stored),
            nonce,
            attempt,
        });
    }

    /// Move `stored` to the DLQ after `attempts` deliveries.
    fn bury(&mut self, stored: &Arc<Stored>, attempts: u32) {
        self.dead.push(DeadLetter {
            stored: Arc::clone(stored),
            attempts,
        });
    }
}

/// Why a receipt handle was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandleError(pub String);

const STALE_HANDLE: &str =
    "the receipt handle is stale (the message was redelivered or its invisible duration changed)";

impl HandleError {
    /// Whether the message is in circulation under another receipt handle (redelivered, or its
    /// invisible duration changed), rather than acked or gone.
    pub fn is_stale(&self) -> bool {
        self.0 == STALE_HANDLE
    }
}

impl Cursor {
    fn deliver(&mut self, offset: u64, attempts: u32, p: &Pop<'_>) -> (u32, Slot) {
        let nonce = p.nonces.fetch_add(1, Ordering::Relaxed);
        let visible_at = crate::duration::deadline(p.now, p.invisible);
        if !p.fifo {
            self.expiry.push(Reverse((visible_at, offset, nonce)));
        }
        (
            nonce,
            Slot::Inflight(Inflight {
                nonce,
                attempts: attempts + 1,
                visible_at,
                held_since: p.now,
                renew: p.renew.cloned(),
                conn: p.conn.cloned(),
            }),
        )
    }
}

impl QueueState {
    /// The cursor of `group`, created at the lowest retained offset (a fresh group reads from
    /// the beginning, as a fresh RocketMQ broker does).
    pub fn cursor(&mut self, group: &Arc<str>) -> &mut Cursor {
        let base = self.base;
        let c = self
            .cursors
            .entry(group.clone())
            .or_insert_with(|| Cursor::new(base));
        c.sync(base);
        c
    }

    /// Receive up to `p.max` messages from this queue into `out`.
    pub fn pop(&mut self, p: &Pop<'_>, out: &mut PopOutcome) {
        let base = self.base;
        let end = self.end();
        let want = out.deliveries.len() + p.max;
        let c = self
            .cursors
            .entry(p.group.clone())
            .or_insert_with(|| Cursor::new(base));
        c.sync(base);
        let msgs = &self.messages;
        let stored = |off: u64| &msgs[(off - base) as usize];
        if p.fifo {
            pop_fifo(c, p, out, want, end, stored);
        } else {
            pop_normal(c, p, out, want, end, stored);
        }
        c.compact();
    }

    /// Ack the message at `offset` delivered with `nonce`.
    pub fn ack(
        &mut self,
        group: &Arc<str>,
        offset: u64,
        nonce: u32,
    ) -> Result<Arc<Stored>, HandleError> {
        self.dead_letter(group, offset, nonce)
            .map(|(stored, _)| stored)
    }

    /// Give the message a new invisible duration; returns the new nonce.
    pub fn change_invisible(
        &mut self,
        group: &Arc<str>,
        offset: u64,
        nonce: u32,
        invisible: Duration,
        now: Instant,
        nonces: &AtomicU32,
    ) -> Result<u32, HandleError> {
        let c = self.cursor(group);
        take_inflight(c, offset, nonce)?;
        let new = nonces.fetch_add(1, Ordering::Relaxed);
        let visible_at = crate::duration::deadline(now, invisible);
        if let Some(Slot::Inflight(f)) = c.slot_mut(offset) {
            f.nonce = new;
            f.visible_at = visible_at;
            f.renew = None;
        }
        c.expiry.push(Reverse((visible_at, offset, new)));
        Ok(new)
    }

    /// Put back a message handed out with `nonce` that never reached the client (its receive
    /// answer could not be written): visible again at once, this delivery not counted. Returns
    /// whether it was still in flight with that nonce.
    pub fn release(&mut self, group: &Arc<str>, offset: u64, nonce: u32, now: Instant) -> bool {
        let c = self.cursor(group);
        let Some(Slot::Inflight(f)) = c.slot_mut(offset) else {
            return false;
        };
        if f.nonce != nonce {
            return false;
        }
        f.attempts = f.attempts.saturating_sub(1);
        f.visible_at = now;
        f.renew = None;
        f.conn = None;
        // A FIFO cursor scans its slots; a normal one needs the expiry entry (as after a
        // ChangeInvisibleDuration).
        c.expiry.push(Reverse((now, offset, nonce)));
        true
    }

    /// Take the message out of circulation (acked, or for the DLQ); returns it and its delivery
    /// attempts.
    pub fn dead_letter(
        &mut self,
        group: &Arc<str>,
        offset: u64,
        nonce: u32,
    ) -> Result<(Arc<Stored>, u32), HandleError> {
        let stored = self.get(offset).cloned();
        let c = self.cursor(group);
        let attempts = take_inflight(c, offset, nonce)?;
        *c.slot_mut(offset).expect("checked") = Slot::Done;
        c.inflight -= 1;
        c.compact();
        stored
            .map(|s| (s, attempts))
            .ok_or_else(|| HandleError("the message was evicted".into()))
    }
}

/// Check that `offset` is in flight with `nonce` (not redelivered since); returns its attempts.
fn take_inflight(c: &mut Cursor, offset: u64, nonce: u32) -> Result<u32, HandleError> {
    let (low, next) = (c.low, c.next);
    match c.slot_mut(offset) {
        // Past its invisible duration but not redelivered yet, the handle still works (the
        // proxy's ack lands before the revive scan that would redeliver the message).
        Some(Slot::Inflight(f)) if f.nonce == nonce => Ok(f.attempts),
        Some(Slot::Done) | None if offset < low || offset >= next => Err(HandleError(
            "no message in flight for this receipt handle (already acked?)".into(),
        )),
        _ => Err(HandleError(STALE_HANDLE.into())),
    }
}

/// Decide what to do with an expired in-flight slot: renew it (auto-renew), or make it ready.
/// Returns `None` when renewed.
fn expire(f: &mut Inflight, p: &Pop<'_>) -> Option<u32> {
    if f.renewable() && p.now.duration_since(f.held_since) < p.renew_max {
        f.visible_at =
            crate::duration::deadline(p.now, p.renew_slice.max(Duration::from_millis(1)));
        return None;
    }
    Some(f.attempts)
}

fn pop_normal<'m>(
    c: &mut Cursor,
    p: &Pop<'_>,
    out: &mut PopOutcome,
    want: usize,
    end: u64,
    stored: impl Fn(u64) -> &'m Arc<Stored>,
) {
    // Redeliveries first, oldest deadline first.
    while out.deliveries.len() < want {
        let Some(Reverse((at, offset, nonce))) = c.expiry.peek().copied() else {
            break;
        };
        if at > p.now {
            out.due(at);
            break;
        }
        c.expiry.pop();
        let Some(Slot::Inflight(f)) = c.slot_mut(offset) else {
            continue;
        };
        if f.nonce != nonce || f.visible_at > p.now {
            continue;
        }
        let Some(attempts) = expire(f, p) else {
            let at = f.visible_at;
            c.expiry.push(Reverse((at, offset, nonce)));
            continue;
        };
        let s = stored(offset);
        if attempts >= p.max_attempts {
            *c.slot_mut(offset).expect("present") = Slot::Done;
            c.inflight -= 1;
            out.bury(s, attempts);
            continue;
        }
        let (nonce, slot) = c.deliver(offset, attempts, p);
        *c.slot_mut(offset).expect("present") = slot;
        out.deliver(s, nonce, attempts + 1);
    }
    // Then new messages.
    while out.deliveries.len() < want && c.next < end {
        let offset = c.next;
        c.next += 1;
        let s = stored(offset);
        if !p.filter.matches(s) {
            c.slots.push_back(Slot::Done);
            continue;
        }
        let (nonce, slot) = c.deliver(offset, 0, p);
        c.slots.push_back(slot);
        c.inflight += 1;
        out.deliver(s, nonce, 1);
    }
}

fn pop_fifo<'m>(
    c: &mut Cursor,
    p: &Pop<'_>,
    out: &mut PopOutcome,
    want: usize,
    end: u64,
    stored: impl Fn(u64) -> &'m Arc<Stored>,
) {
    // Groups held back by a message in flight from an earlier receive (or skipped here). A group
    // this receive hands a message of stays open: its next messages may follow in this batch.
    let mut blocked_groups = KeySet::default();
    let mut scanned = 0usize;
    let mut fruitless = 0usize;
    let low = c.low;
    for i in 0..c.slots.len() {
        if out.deliveries.len() >= want
            || scanned >= FIFO_SCAN_LIMIT
            || fruitless >= FIFO_FRUITLESS_LIMIT
        {
            return;
        }
        scanned += 1;
        fruitless += 1;
        let offset = low + i as u64;
        let attempts = match &mut c.slots[i] {
            Slot::Done => continue,
            Slot::Ready { attempts } => *attempts,
            Slot::Inflight(f) => {
                // Still invisible, or renewed for another slice: its group waits.
                let expired = if f.visible_at > p.now {
                    None
                } else {
                    expire(f, p)
                };
                match expired {
                    Some(a) => a,
                    None => {
                        out.due(f.visible_at);
                        if let Some(g) = stored(offset).group_key {
                            blocked_groups.insert(g);
                        }
                        continue;
                    }
                }
            }
        };
        let s = stored(offset);
        let group = s.group_key;
        if group.is_some_and(|g| blocked_groups.contains(&g)) {
            if let Slot::Inflight(_) = c.slots[i] {
                c.slots[i] = Slot::Ready { attempts };
                c.inflight -= 1;
            }
            continue;
        }
        let was_inflight = matches!(c.slots[i], Slot::Inflight(_));
        if attempts >= p.max_attempts {
            c.slots[i] = Slot::Done;
            if was_inflight {
                c.inflight -= 1;
            }
            out.bury(s, attempts);
            continue;
        }
        let (nonce, slot) = c.deliver(offset, attempts, p);
        c.slots[i] = slot;
        if !was_inflight {
            c.inflight += 1;
        }
        fruitless = 0;
        out.deliver(s, nonce, attempts + 1);
    }
    while out.deliveries.len() < want
        && c.next < end
        && scanned < FIFO_SCAN_LIMIT
        && fruitless < FIFO_FRUITLESS_LIMIT
    {
        scanned += 1;
        fruitless += 1;
        let offset = c.next;
        c.next += 1;
        let s = stored(offset);
        if !p.filter.matches(s) {
            c.slots.push_back(Slot::Done);
            continue;
        }
        let group = s.group_key;
        if group.is_some_and(|g| blocked_groups.contains(&g)) {
            c.slots.push_back(Slot::Ready { attempts: 0 });
            continue;
        }
        let (nonce, slot) = c.deliver(offset, 0, p);
        c.slots.push_back(slot);
        c.inflight += 1;
        fruitless = 0;
        out.deliver(s, nonce, 1);
    }
}

/// Encode a receipt handle (`fmq1.<endpoint>.<queue>.<offset>.<nonce>`, lower-case hex).
pub fn encode_handle(broker: usize, queue: i32, offset: u64, nonce: u32) -> String {
    let mut s = String::with_capacity(48);
    s.push_str("fmq1");
    for v in [broker as u64, queue as u32 as u64, offset, u64::from(nonce)] {
        s.push('.');
        push_hex(&mut s, v);
    }
    s
}

/// Append `v` in lower-case hex without leading zeros (this runs once per delivered message).
fn push_hex(s: &mut String, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = DIGITS[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    s.extend(buf[i..].iter().map(|b| char::from(*b)));
}

/// Decode a receipt handle into (broker, queue, offset, nonce).
pub fn decode_handle(h: &str) -> Option<(usize, i32, u64, u32)> {
    let mut it = h.strip_prefix("fmq1.")?.split('.');
    let broker = usize::from_str_radix(it.next()?, 16).ok()?;
    let queue = i32::from_str_radix(it.next()?, 16).ok()?;
    let offset = u64::from_str_radix(it.next()?, 16).ok()?;
    let nonce = u32::from_str_radix(it.next()?, 16).ok()?;
    if it.next().is_some() {
        return None;
    }
    Some((broker, queue, offset, nonce))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn stored(offset: u64, group: Option<&str>) -> Arc<Stored> {
        Arc::new(Stored::new(
            offset,
            proto::Message {
                topic: None,
                user_properties: HashMap::new(),
                system_properties: Some(proto::SystemProperties {
                    message_id: format!("m{offset}"),
                    message_group: group.map(str::to_string),
                    ..Default::default()
                }),
                body: bytes::Bytes::new(),
            },
            0,
        ))
    }

    fn queue(groups: &[Option<&str>]) -> QueueState {
        let mut q = QueueState::default();
        for (i, g) in groups.iter().enumerate() {
            q.messages.push_back(stored(i as u64, *g));
        }
        q
    }

    struct Ctx {
        group: Arc<str>,
        nonces: AtomicU32,
        filter: Filter,
    }

    impl Ctx {
        fn new() -> Self {
            Self {
                group: "g".into(),
                nonces: AtomicU32::new(1),
                filter: Filter::All,
            }
        }
        fn pop(&self, q: &mut QueueState, fifo: bool, max: usize, now: Instant) -> PopOutcome {
            self.pop_renewed(q, fifo, max, now, None, None)
        }
        fn pop_renewed(
            &self,
            q: &mut QueueState,
            fifo: bool,
            max: usize,
            now: Instant,
            renew: Option<&Arc<Liveness>>,
            conn: Option<&Arc<Liveness>>,
        ) -> PopOutcome {
            let p = Pop {
                group: &self.group,
                fifo,
                max_attempts: 3,
                max,
                invisible: Duration::from_secs(10),
                filter: &self.filter,
                now,
                renew,
                conn,
                renew_max: Duration::from_secs(3600),
                renew_slice: Duration::from_secs(60),
                nonces: &self.nonces,
            };
            let mut out = PopOutcome::default();
            q.pop(&p, &mut out);
            out
        }
    }

    fn offsets(o: &PopOutcome) -> Vec<u64> {
        o.deliveries.iter().map(|d| d.stored.offset).collect()
    }

    #[test]
    fn ack_and_handles() {
        let ctx = Ctx::new();
        let mut q = queue(&[None, None, None]);
        let t0 = Instant::now();
        let out = ctx.pop(&mut q, false, 2, t0);
        assert_eq!(offsets(&out), vec![0, 1]);
        let d = &out.deliveries[0];
        assert_eq!(d.attempt, 1);
        assert!(q.ack(&ctx.group, 0, d.nonce + 100).is_err());
        q.ack(&ctx.group, 0, d.nonce).unwrap();
        assert!(q.ack(&ctx.group, 0, d.nonce).is_err(), "double ack");
        assert_eq!(q.cursors[&ctx.group].low(), 1);
        // change invisible: new nonce, old one stops working
        let n1 = out.deliveries[1].nonce;
        let n2 = q
            .change_invisible(&ctx.group, 1, n1, Duration::from_secs(1), t0, &ctx.nonces)
            .unwrap();
        assert!(q.ack(&ctx.group, 1, n1).is_err());
        // expires after 1 s: redelivered with attempt 2, the nonce n2 handle is stale afterwards
        let out = ctx.pop(&mut q, false, 5, t0 + Duration::from_secs(2));
        assert_eq!(offsets(&out), vec![1, 2]);
        assert_eq!(out.deliveries[0].attempt, 2);
        assert!(q.ack(&ctx.group, 1, n2).is_err());
    }

    #[test]
    fn expired_handle_acks_until_the_message_is_redelivered() {
        // As on the real proxy: past its invisible duration, the handle still acks until the
        // message is delivered again.
        let ctx = Ctx::new();
        let mut q = queue(&[None, None]);
        let t0 = Instant::now();
        let out = ctx.pop(&mut q, false, 2, t0);
        let late = t0 + Duration::from_secs(11);
        q.ack(&ctx.group, 0, out.deliveries[0].nonce).unwrap();
        let again = ctx.pop(&mut q, false, 5, late);
        assert_eq!(offsets(&again), vec![1]);
        assert!(
            q.ack(&ctx.group, 1, out.deliveries[1].nonce).is_err(),
            "stale"
        );
    }

    #[test]
    fn dlq_after_max_attempts() {
        let ctx = Ctx::new();
        let mut q = queue(&[None]);
        let mut t = Instant::now();
        for attempt in 1..=3 {
            let out = ctx.pop(&mut q, false, 1, t);
            assert_eq!(out.deliveries.len(), 1);
            assert_eq!(out.deliveries[0].attempt, attempt);
            t += Duration::from_secs(11);
        }
        let out = ctx.pop(&mut q, false, 1, t);
        assert!(out.deliveries.is_empty());
        assert_eq!(out.dead.len(), 1);
        assert_eq!(out.dead[0].attempts, 3);
        assert_eq!(q.cursors[&ctx.group].low(), 1);
    }

    #[test]
    fn fifo_blocks_message_groups() {
        let ctx = Ctx::new();
        let mut q = queue(&[Some("a"), Some("a"), Some("b"), None, Some("b"), Some("a")]);
        let t0 = Instant::now();
        // one receive may take several messages of a group, in order
        let first = ctx.pop(&mut q, true, 2, t0);
        assert_eq!(offsets(&first), vec![0, 1]);
        // a is in flight: its next message waits; b's two messages come together
        let second = ctx.pop(&mut q, true, 10, t0);
        assert_eq!(offsets(&second), vec![2, 3, 4]);
        assert!(ctx.pop(&mut q, true, 10, t0).deliveries.is_empty());
        // a stays blocked until every message of its batch is settled
        q.ack(&ctx.group, 0, first.deliveries[0].nonce).unwrap();
        assert!(ctx.pop(&mut q, true, 10, t0).deliveries.is_empty());
        q.ack(&ctx.group, 1, first.deliveries[1].nonce).unwrap();
        let third = ctx.pop(&mut q, true, 10, t0);
        assert_eq!(offsets(&third), vec![5]);
        // everything in flight expires: redelivered in offset order, attempts counted
        let later = t0 + Duration::from_secs(11);
        let out = ctx.pop(&mut q, true, 10, later);
        assert_eq!(offsets(&out), vec![2, 3, 4, 5]);
        assert!(out.deliveries.iter().all(|d| d.attempt == 2));
    }

    #[test]
    fn fifo_redelivers_a_groups_first_message_before_its_next() {
        let ctx = Ctx::new();
        let mut q = queue(&[Some("a"), Some("a")]);
        let t0 = Instant::now();
        assert_eq!(offsets(&ctx.pop(&mut q, true, 1, t0)), vec![0]);
        assert!(ctx.pop(&mut q, true, 10, t0).deliveries.is_empty());
        let later = t0 + Duration::from_secs(11);
        let out = ctx.pop(&mut q, true, 10, later);
        assert_eq!(offsets(&out), vec![0, 1]);
        let attempts: Vec<u32> = out.deliveries.iter().map(|d| d.attempt).collect();
        assert_eq!(attempts, vec![2, 1]);
        // a nack of the first message holds the second back again
        let nonces = AtomicU32::new(1_000);
        let n = q
            .change_invisible(
                &ctx.group,
                0,
                out.deliveries[0].nonce,
                Duration::from_secs(1),
                later,
                &nonces,
            )
            .unwrap();
        q.ack(&ctx.group, 1, out.deliveries[1].nonce).unwrap();
        assert!(ctx.pop(&mut q, true, 10, later).deliveries.is_empty());
        let after = ctx.pop(&mut q, true, 10, later + Duration::from_secs(2));
        assert_eq!(offsets(&after), vec![0]);
        assert_ne!(after.deliveries[0].nonce, n);
    }

    #[test]
    fn released_messages_come_back_at_once_without_counting_the_delivery() {
        for fifo in [false, true] {
            let ctx = Ctx::new();
            let mut q = queue(&[Some("a"), Some("a")]);
            let t0 = Instant::now();
            let out = ctx.pop(&mut q, fifo, 2, t0);
            assert_eq!(offsets(&out), vec![0, 1]);
            let (n0, n1) = (out.deliveries[0].nonce, out.deliveries[1].nonce);
            assert!(!q.release(&ctx.group, 0, n0 + 100, t0), "wrong nonce");
            assert!(q.release(&ctx.group, 0, n0, t0));
            assert!(q.release(&ctx.group, 1, n1, t0));
            let again = ctx.pop(&mut q, fifo, 10, t0);
            assert_eq!(offsets(&again), vec![0, 1], "fifo={fifo}");
            assert!(
                again.deliveries.iter().all(|d| d.attempt == 1),
                "fifo={fifo}"
            );
            assert!(!q.release(&ctx.group, 0, n0, t0), "already out again");
        }
    }

    #[test]
    fn auto_renewal_needs_a_live_client_and_a_live_connection() {
        for fifo in [false, true] {
            let ctx = Ctx::new();
            let mut q = queue(&[Some("a"), Some("b")]);
            let (client, conn_a, conn_b) = (Liveness::new(), Liveness::new(), Liveness::new());
            let t0 = Instant::now();
            let a = ctx.pop_renewed(&mut q, fifo, 1, t0, Some(&client), Some(&conn_a));
            let b = ctx.pop_renewed(&mut q, fifo, 1, t0, Some(&client), Some(&conn_b));
            assert_eq!((offsets(&a), offsets(&b)), (vec![0], vec![1]));
            // Past the invisible duration, both are renewed (slices of 60 s).
            let t1 = t0 + Duration::from_secs(11);
            assert!(ctx.pop(&mut q, fifo, 10, t1).deliveries.is_empty());
            // The connection of the first receive closes: only its message comes back.
            conn_a.kill();
            let t2 = t1 + Duration::from_secs(61);
            let out = ctx.pop(&mut q, fifo, 10, t2);
            assert_eq!(offsets(&out), vec![0], "fifo={fifo}");
            assert_eq!(out.deliveries[0].attempt, 2);
        }
    }

    #[test]
    fn handles_round_trip() {
        let h = encode_handle(3, 7, 123_456_789, 42);
        assert_eq!(h, format!("fmq1.3.7.{:x}.2a", 123_456_789));
        assert_eq!(decode_handle(&h), Some((3, 7, 123_456_789, 42)));
        assert_eq!(
            decode_handle(&encode_handle(0, 0, 0, 0)),
            Some((0, 0, 0, 0))
        );
        let max = encode_handle(63, i32::MAX, u64::MAX, u32::MAX);
        assert_eq!(
            decode_handle(&max),
            Some((63, i32::MAX, u64::MAX, u32::MAX))
        );
        assert_eq!(decode_handle("garbage"), None);
        assert_eq!(decode_handle("fmq1.1.2.3"), None);
    }
}
