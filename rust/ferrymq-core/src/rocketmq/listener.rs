//! How received messages reach user code, and how results come back.
//!
//! The consume services hand [`Delivery`] batches to a [`Listener`]. A delivery must be completed
//! exactly once with a [`ConsumeResult`]; one that is dropped unfinished counts as a failure, so
//! no message can silently vanish between the cache and the settle path.
//!
//! [`WorkerPool`] is the standard listener: a fixed set of OS threads (never tokio workers, so a
//! slow or blocking callback cannot stall network I/O) that call a [`BatchListener`] with batches
//! of messages. A batch is sized so that it takes about [`TARGET_BATCH_TIME`] of callback time:
//! fast callbacks are called many per batch (one GIL acquisition per batch in the Python
//! binding), slow ones one at a time so that every thread gets work.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::rocketmq::message_view::MessageView;

/// The outcome of consuming one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConsumeResult {
    /// Consumed: the message is acknowledged.
    Success,
    /// Not consumed: the message is redelivered later (or retried locally in FIFO mode).
    Failure,
}

/// Receives `Some(result)`, or `None` when the delivery was abandoned unstarted at shutdown.
type Completion = Box<dyn FnOnce(Option<ConsumeResult>) + Send>;

/// A message handed to a listener, with the means to report its result.
pub struct Delivery {
    message: Arc<MessageView>,
    done: Option<Completion>,
}

impl Delivery {
    /// A delivery whose result goes to `done`: `Some(result)` when consumed, `None` when it
    /// was abandoned before its callback started.
    pub fn new(
        message: Arc<MessageView>,
        done: impl FnOnce(Option<ConsumeResult>) + Send + 'static,
    ) -> Self {
        Self {
            message,
            done: Some(Box::new(done)),
        }
    }

    /// The message.
    pub fn message(&self) -> &Arc<MessageView> {
        &self.message
    }

    /// Report the result. Dropping a delivery without calling this reports a failure.
    pub fn complete(mut self, result: ConsumeResult) {
        if let Some(done) = self.done.take() {
            done(Some(result));
        }
    }

    /// Give the delivery up without consuming it (shutdown): the message is not settled and the
    /// broker redelivers it once its invisibility ends.
    pub fn abandon(mut self) {
        if let Some(done) = self.done.take() {
            done(None);
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(Some(ConsumeResult::Failure));
        }
    }
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("message_id", &self.message.message_id())
            .finish()
    }
}

/// Where consume services send messages. `submit` must not block: implementations queue the
/// batch and run user code elsewhere.
pub trait Listener: Send + Sync + 'static {
    /// Accept a batch; every delivery is completed later, from any thread.
    fn submit(&self, batch: Vec<Delivery>);

    /// Stop accepting work, abandon deliveries that have not started (they are returned), and
    /// wait up to `timeout` for running callbacks to finish. Returns the abandoned deliveries and
    /// whether every running callback finished in time.
    fn shutdown(&self, timeout: Duration) -> (Vec<Delivery>, bool);

    /// Deliveries waiting to start.
    fn queued(&self) -> usize;

    /// Deliveries whose callback is running.
    fn running(&self) -> usize;
}

/// User code that consumes a batch synchronously on a worker thread.
pub trait BatchListener: Send + Sync + 'static {
    /// Consume `messages` in order, pushing one result per message onto `results`. A result
    /// missing at the end counts as a failure.
    fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>);

    /// Wraps the whole life of a consumption thread: `run` is the thread's loop. The Python
    /// binding keeps a thread state alive across batches here, so taking the GIL per batch is
    /// cheap.
    fn run_thread(&self, run: &mut (dyn FnMut() + Send)) {
        run();
    }
}

/// Wall time of user callbacks one batch should take.
pub const TARGET_BATCH_TIME: Duration = Duration::from_millis(1);

struct PoolState {
    queue: VecDeque<Delivery>,
    closed: bool,
    idle: usize,
}

struct PoolShared {
    state: Mutex<PoolState>,
    work: Condvar,
    finished: Condvar,
    running: AtomicUsize,
    /// Exponentially weighted mean callback time, in nanoseconds.
    mean_ns: AtomicU64,
    max_batch: usize,
}

/// A fixed pool of consumption threads running a [`BatchListener`].
pub struct WorkerPool {
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl WorkerPool {
    /// Start `threads` threads named `ferrymq-consume-N` that call `listener` with batches of at
    /// most `max_batch` messages.
    pub fn start<L: BatchListener>(
        listener: Arc<L>,
        threads: usize,
        max_batch: usize,
    ) -> Result<Self> {
        if threads == 0 {
            return Err(Error::invalid("consumption_threads", "must be at least 1"));
        }
        if max_batch == 0 {
            return Err(Error::invalid("max_batch", "must be at least 1"));
        }
        let shared = Arc::new(PoolShared {
            state: Mutex::new(PoolState {
                queue: VecDeque::new(),
                closed: false,
                idle: 0,
            }),
            work: Condvar::new(),
            finished: Condvar::new(),
            running: AtomicUsize::new(0),
            mean_ns: AtomicU64::new(0),
            max_batch,
        });
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let shared = shared.clone();
            let listener = listener.clone();
            let h = std::thread::Builder::new()
                .name(format!("ferrymq-consume-{i}"))
                .spawn(move || listener.run_thread(&mut || worker(&shared, &*listener)))
                .map_err(|e| Error::internal(format!("cannot start a consumption thread: {e}")))?;
            handles.push(h);
        }
        Ok(Self {
            shared,
            threads: Mutex::new(handles),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How many deliveries one worker takes: about [`TARGET_BATCH_TIME`] of callbacks, at least
/// one, at most `max_batch`. Until a callback time has been measured, a fair share among the idle
/// workers.
fn batch_size(shared: &PoolShared, queued: usize, idle: usize) -> usize {
    let mean = shared.mean_ns.load(Ordering::Relaxed);
    let n = if mean == 0 {
        queued.div_ceil(idle.max(1))
    } else {
        usize::try_from(TARGET_BATCH_TIME.as_nanos() / u128::from(mean)).unwrap_or(usize::MAX)
    };
    n.clamp(1, shared.max_batch).min(queued)
}

fn worker(shared: &PoolShared, listener: &dyn BatchListener) {
    let mut batch: Vec<Delivery> = Vec::new();
    let mut views: Vec<Arc<MessageView>> = Vec::new();
    let mut results: Vec<ConsumeResult> = Vec::new();
    loop {
        {
            let mut st = shared
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                if !st.queue.is_empty() {
                    break;
                }
                if st.closed {
                    return;
                }
                st.idle += 1;
                st = shared
                    .work
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                st.idle -= 1;
            }
            let n = batch_size(shared, st.queue.len(), st.idle + 1);
            batch.extend(st.queue.drain(..n));
            shared.running.fetch_add(batch.len(), Ordering::AcqRel);
            if !st.queue.is_empty() && st.idle > 0 {
                shared.work.notify_one();
            }
        }
        views.extend(batch.iter().map(|d| d.message.clone()));
        let started = Instant::now();
        listener.consume_batch(&views, &mut results);
        let per = started.elapsed().as_nanos() / views.len() as u128;
        let per = u64::try_from(per).unwrap_or(u64::MAX);
        let old = shared.mean_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            per
        } else {
            old - old / 8 + per / 8
        };
        shared.mean_ns.store(new, Ordering::Relaxed);
        let n = batch.len();
        for (i, d) in batch.drain(..).enumerate() {
            d.complete(results.get(i).copied().unwrap_or(ConsumeResult::Failure));
        }
        views.clear();
        results.clear();
        if shared.running.fetch_sub(n, Ordering::AcqRel) == n {
            let _guard = shared
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            shared.finished.notify_all();
        }
    }
}

impl Listener for WorkerPool {
    fn submit(&self, batch: Vec<Delivery>) {
        if batch.is_empty() {
            return;
        }
        let mut st = self.lock();
        if st.closed {
            drop(st);
            for d in batch {
                d.abandon();
            }
            return;
        }
        st.queue.extend(batch);
        if st.idle > 0 {
            self.shared.work.notify_one();
        }
    }

    fn shutdown(&self, timeout: Duration) -> (Vec<Delivery>, bool) {
        let deadline = Instant::now() + timeout;
        let abandoned: Vec<Delivery> = {
            let mut st = self.lock();
            st.closed = true;
            self.shared.work.notify_all();
            st.queue.drain(..).collect()
        };
        let mut st = self.lock();
        while self.shared.running.load(Ordering::Acquire) > 0 {
            let now = Instant::now();
            if now >= deadline {
                return (abandoned, false);
            }
            st = self
                .shared
                .finished
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(st);
        let handles: Vec<_> = std::mem::take(
            &mut *self
                .threads
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for h in handles {
            let _ = h.join();
        }
        (abandoned, true)
    }

    fn queued(&self) -> usize {
        self.lock().queue.len()
    }

    fn running(&self) -> usize {
        self.shared.running.load(Ordering::Acquire)
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        let mut st = self.lock();
        st.closed = true;
        self.shared.work.notify_all();
    }
}
