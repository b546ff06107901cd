//! Rust `tracing` events forwarded to Python `logging` under the `ferrymq` logger.
//!
//! The level filter is an atomic read on the emitting thread, so a disabled event costs no GIL
//! and no allocation. Enabled events go through a bounded channel to one forwarder thread that
//! takes the GIL once per batch; if the channel is full the event is counted, and the count is
//! reported in the next batch, so nothing disappears silently. A forked child has no forwarder
//! thread (threads do not survive `fork()`): its first event starts one of its own.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Once;
use std::time::Duration;

use pyo3::prelude::*;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// 0 = off, 1 = ERROR, 2 = WARN, 3 = INFO, 4 = DEBUG, 5 = TRACE.
static MAX_LEVEL: AtomicU8 = AtomicU8::new(2);
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The forwarder of this process (null until the first event; one of a parent's after a fork).
/// Each is leaked: an emitting thread may still hold a reference when a newer one replaces it.
static FORWARDER: AtomicPtr<Forwarder> = AtomicPtr::new(std::ptr::null_mut());
static SUBSCRIBER: Once = Once::new();
const CHANNEL_CAPACITY: usize = 8192;
const BATCH: usize = 512;

/// The channel to one process's forwarder thread.
struct Forwarder {
    pid: u32,
    tx: SyncSender<Record>,
}

/// This process's forwarder, started by the first caller in the process; `None` if its thread
/// could not be started.
fn forwarder() -> Option<&'static Forwarder> {
    let pid = crate::runtime::pid();
    let current = FORWARDER.load(Ordering::Acquire);
    // SAFETY: a non-null pointer in FORWARDER comes from `Box::into_raw` and is never freed.
    if let Some(f) = unsafe { current.as_ref() } {
        if f.pid == pid {
            return Some(f);
        }
    }
    let (tx, rx) = sync_channel(CHANNEL_CAPACITY);
    let fresh = Box::into_raw(Box::new(Forwarder { pid, tx }));
    match FORWARDER.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            std::thread::Builder::new()
                .name("ferrymq-log".into())
                .spawn(move || forward(&rx))
                .ok()?;
            // SAFETY: just published, never freed.
            Some(unsafe { &*fresh })
        }
        Err(winner) => {
            // Another thread started this process's forwarder first.
            // SAFETY: `fresh` was never published, so this is its only owner.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above, a published pointer is never freed.
            unsafe { winner.as_ref() }.filter(|f| f.pid == pid)
        }
    }
}

struct Record {
    level: u8,
    target: String,
    message: String,
}

fn rank(level: Level) -> u8 {
    match level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        Level::DEBUG => 4,
        Level::TRACE => 5,
    }
}

/// Python `logging` level number for our rank.
fn py_level(rank: u8) -> u32 {
    match rank {
        1 => 40,
        2 => 30,
        3 => 20,
        4 => 10,
        _ => 5,
    }
}

/// Set the most verbose level forwarded, from a Python `logging` level number.
pub fn set_python_level(level: i64) {
    let r = match level {
        l if l <= 5 => 5,
        l if l <= 10 => 4,
        l if l <= 20 => 3,
        l if l <= 30 => 2,
        l if l <= 50 => 1,
        _ => 0,
    };
    MAX_LEVEL.store(r, Ordering::Relaxed);
}

struct ForwardLayer;

struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            self.record_debug(field, &value);
        }
    }
}

impl<S: Subscriber> Layer<S> for ForwardLayer {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        rank(*meta.level()) <= MAX_LEVEL.load(Ordering::Relaxed)
            && meta.target().starts_with("ferrymq")
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let Some(forwarder) = forwarder() else {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut v = MessageVisitor(String::new());
        event.record(&mut v);
        let rec = Record {
            level: rank(*meta.level()),
            target: meta.target().to_string(),
            message: v.0,
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            forwarder.tx.try_send(rec)
        {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn forward(rx: &Receiver<Record>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.recv_timeout(Duration::from_millis(5)) {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        if crate::exit::is_exiting() {
            return;
        }
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        // `try_attach`: at interpreter shutdown there is no Python to log to (and `attach`
        // would panic on this thread), so the forwarder stops.
        let attached = Python::try_attach(|py| {
            let Ok(logging) = py.import("logging") else {
                return;
            };
            let Ok(root) = logging.call_method1("getLogger", ("ferrymq",)) else {
                return;
            };
            if dropped > 0 {
                let _ = root.call_method1(
                    "warning",
                    (format!(
                        "{dropped} ferrymq log records were dropped: the log channel was full"
                    ),),
                );
            }
            for r in batch {
                let name = r
                    .target
                    .replace("::", ".")
                    .replace("ferrymq_core", "ferrymq")
                    .replace("_native", "ferrymq");
                if let Ok(logger) = logging.call_method1("getLogger", (name,)) {
                    let _ = logger.call_method1("log", (py_level(r.level), r.message));
                }
            }
        });
        if attached.is_none() {
            return;
        }
    }
}

/// Install the forwarding subscriber (once: a forked child inherits it) and start this
/// process's forwarder.
pub fn init() {
    SUBSCRIBER.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(ForwardLayer);
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
    let _ = forwarder();
}
