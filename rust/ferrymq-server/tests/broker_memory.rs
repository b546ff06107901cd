//! Memory the embedded broker's store holds per message, counted by the test binary's allocator.
//!
//! The global allocator of this binary is the system allocator behind a counter of live bytes,
//! each allocation counted as the heap chunk glibc malloc gives it (the request plus its 8-byte
//! header, rounded up to 16, at least 32 bytes). The store is driven directly, single-threaded,
//! so what the counter sees between two points is what the store allocated.
//!
//! `cargo test -p ferrymq-server --test broker_memory -- --nocapture` prints the figures.

#![allow(clippy::print_stderr)] // the figures are the point of a run with --nocapture

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use ferrymq_core::message::MessageKind;
use ferrymq_core::proto;
use ferrymq_server::broker::store::{Store, TopicType, MESSAGE_OVERHEAD};
use ferrymq_server::broker::{BrokerConfig, WhenFull};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// What glibc malloc takes for a request of `size` bytes.
fn chunk(size: usize) -> isize {
    ((size + 8 + 15) & !15).max(32) as isize
}

// SAFETY: every call is passed on to the system allocator with the caller's arguments; the
// counter is only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(chunk(layout.size()), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(chunk(layout.size()), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(chunk(new_size) - chunk(layout.size()), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The tests measure one at a time (the counter is process-wide).
static SERIAL: Mutex<()> = Mutex::new(());

const BODY: usize = 100;

/// A message as the ferrymq producer sends it and the broker completes it (store host, digest).
fn message(topic: &str, body: Bytes) -> proto::Message {
    proto::Message {
        topic: Some(proto::Resource {
            resource_namespace: String::new(),
            name: topic.into(),
        }),
        user_properties: Default::default(),
        system_properties: Some(proto::SystemProperties {
            message_id: ferrymq_core::message_id::generate(),
            body_encoding: proto::Encoding::Identity as i32,
            message_type: proto::MessageType::Normal as i32,
            born_timestamp: Some(prost_types::Timestamp {
                seconds: 1_764_000_000,
                nanos: 123_000_000,
            }),
            born_host: "build-host-01".into(),
            store_host: "127.0.0.1:40123".into(),
            body_digest: Some(proto::Digest {
                r#type: proto::DigestType::Crc32 as i32,
                checksum: format!("{:08X}", crc32fast::hash(&body)),
            }),
            ..Default::default()
        }),
        body,
    }
}

struct Measured {
    /// Live bytes the store holds per message.
    real: f64,
    /// What the topic's bound counts per message.
    accounted: f64,
}

/// Store `n` messages of `BODY` bytes in batches of `batch` (slices of one request buffer per
/// batch, as tonic decodes them) into an 8-queue topic, and measure.
fn store_messages(n: usize, batch: usize) -> Measured {
    let store = Store::new(1);
    let topic = store
        .create_topic("t", TopicType::Only(MessageKind::Normal), 8)
        .unwrap();
    let cfg = BrokerConfig {
        max_topic_bytes: usize::MAX / 2,
        when_full: WhenFull::Reject,
        ..BrokerConfig::default()
    };
    let before = LIVE.load(Ordering::Relaxed);
    let mut sent = 0;
    while sent < n {
        // One request buffer per batch, with room to spare as a receive buffer has.
        let buf = Bytes::from(vec![b'x'; batch * BODY * 2]);
        let msgs: Vec<_> = (0..batch)
            .map(|i| message("t", buf.slice(i * BODY..(i + 1) * BODY)))
            .collect();
        let q = &topic.queues[(sent / batch) % topic.queues.len()];
        store.append(&topic, q, msgs, &cfg).unwrap();
        sent += batch;
    }
    let real = (LIVE.load(Ordering::Relaxed) - before) as f64 / sent as f64;
    let accounted = topic.bytes.load(Ordering::Relaxed) as f64 / sent as f64;
    assert_eq!(topic.message_count(), sent as u64);
    drop(topic);
    drop(store);
    Measured { real, accounted }
}

#[test]
fn a_stored_message_holds_at_most_its_body_and_256_bytes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for batch in [1, 32] {
        let m = store_messages(100_000, batch);
        eprintln!(
            "batch {batch}: {:.0} B held, {:.0} B accounted per stored {BODY} B message",
            m.real, m.accounted
        );
        assert!(
            m.real <= (BODY + 256) as f64,
            "batch {batch}: {:.0} B held per message of {BODY} B",
            m.real
        );
        // The bound counts at least what is really held, and not much more.
        assert!(
            m.accounted >= m.real && m.accounted <= m.real + MESSAGE_OVERHEAD as f64,
            "batch {batch}: {:.0} B accounted, {:.0} B held",
            m.accounted,
            m.real
        );
    }
}

#[test]
fn stored_messages_keep_no_request_buffer_alive() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let store = Store::new(1);
    let topic = store
        .create_topic("t", TopicType::Only(MessageKind::Normal), 1)
        .unwrap();
    let cfg = BrokerConfig::default();
    let before = LIVE.load(Ordering::Relaxed);
    // A 1 MiB receive buffer of which ten 100 B bodies are stored.
    let buf = Bytes::from(vec![b'x'; 1 << 20]);
    let msgs: Vec<_> = (0..10)
        .map(|i| message("t", buf.slice(i * BODY..(i + 1) * BODY)))
        .collect();
    store.append(&topic, &topic.queues[0], msgs, &cfg).unwrap();
    drop(buf);
    let held = LIVE.load(Ordering::Relaxed) - before;
    eprintln!("10 messages sliced from a 1 MiB buffer: {held} B held after the buffer is dropped");
    assert!(
        held < 64 * 1024,
        "{held} B held: the request buffer is pinned"
    );
}

#[test]
fn evicted_messages_give_their_memory_back() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let store = Store::new(1);
    let topic = store
        .create_topic("t", TopicType::Only(MessageKind::Normal), 1)
        .unwrap();
    let one =
        ferrymq_server::broker::store::accounted_size(&message("t", Bytes::from(vec![0; BODY])));
    // Room for 10k messages, evicting the oldest when full (the queue's chunks go with them).
    let cfg = BrokerConfig {
        max_topic_bytes: 10_000 * one,
        when_full: WhenFull::DropOldest,
        ..BrokerConfig::default()
    };
    let q = topic.queues[0].clone();
    let send = |n: usize| {
        for _ in 0..n {
            let m = message("t", Bytes::from(vec![b'y'; BODY]));
            store.append(&topic, &q, vec![m], &cfg).unwrap();
        }
    };
    let start = LIVE.load(Ordering::Relaxed);
    send(20_000);
    let full = LIVE.load(Ordering::Relaxed) - start;
    send(100_000);
    let later = LIVE.load(Ordering::Relaxed) - start;
    eprintln!("bound of 10k messages: {full} B held when full, {later} B after 100k more");
    assert_eq!(topic.message_count(), 10_000);
    // Flat: at most a chunk and the deque's growth apart.
    assert!(
        (later - full).abs() < 512 * 1024,
        "live bytes moved from {full} to {later} while the topic stayed full"
    );
}
