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

/// Receives `Some(result)`, or `None` when the delivery was abandoned unstarted at shutdown,
/// and when the listener call started, if the listener said.
type Completion = Box<dyn FnOnce(Option<ConsumeResult>, Option<Instant>) + Send>;

/// A message handed to a listener, with the means to report its result.
pub struct Delivery {
    message: Arc<MessageView>,
    done: Option<Completion>,
    started: Option<Instant>,
}

impl Delivery {
    /// A delivery whose result goes to `done`: `Some(result)` when consumed, `None` when it
    /// was abandoned before its callback started.
    /// `done` also learns when the listener call started, when the listener told
    /// ([`Delivery::started_at`]).
    pub fn new(
        message: Arc<MessageView>,
        done: impl FnOnce(Option<ConsumeResult>, Option<Instant>) + Send + 'static,
    ) -> Self {
        Self {
            message,
            done: Some(Box::new(done)),
            started: None,
        }
    }

    /// The listener call that consumes this delivery started at `at`.
    pub fn started_at(&mut self, at: Instant) {
        self.started = Some(at);
    }

    /// The message.
    pub fn message(&self) -> &Arc<MessageView> {
        &self.message
    }

    /// Report the result. Dropping a delivery without calling this reports a failure.
    pub fn complete(mut self, result: ConsumeResult) {
        if let Some(done) = self.done.take() {
            done(Some(result), self.started);
        }
    }

    /// Give the delivery up without consuming it (shutdown): the message is not settled and the
    /// broker redelivers it once its invisibility ends.
    pub fn abandon(mut self) {
        if let Some(done) = self.done.take() {
            done(None, None);
        }
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(Some(ConsumeResult::Failure), self.started);
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

/// Receives the results of a [`Run`]'s consumed prefix, or `None` when it was abandoned unstarted.
type RunCompletion = Box<dyn FnOnce(Option<Vec<ConsumeResult>>) + Send>;

/// Consecutive messages of one FIFO lane, consumed in order by one thread in one go, stopping
/// at the first failure: the results cover the consumed prefix (every result but the last is a
/// success); the messages after it were not shown to the listener. Handing a lane's messages
/// over as a run costs one thread hand-off (and, in the Python binding, one GIL acquisition)
/// for the whole run instead of one per message.
pub struct Run {
    messages: Vec<Arc<MessageView>>,
    done: Option<RunCompletion>,
}

impl Run {
    /// A run of `messages` (at least one) whose results go to `done`.
    pub fn new(
        messages: Vec<Arc<MessageView>>,
        done: impl FnOnce(Option<Vec<ConsumeResult>>) + Send + 'static,
    ) -> Self {
        debug_assert!(!messages.is_empty(), "a run has at least one message");
        Self {
            messages,
            done: Some(Box::new(done)),
        }
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &[Arc<MessageView>] {
        &self.messages
    }

    /// Report the results of the consumed prefix (at least one result: a run dropped or
    /// completed without any counts its first message as failed).
    pub fn complete(mut self, mut results: Vec<ConsumeResult>) {
        if results.is_empty() {
            results.push(ConsumeResult::Failure);
        }
        if let Some(done) = self.done.take() {
            done(Some(results));
        }
    }

    /// Give the run up without consuming it (shutdown).
    pub fn abandon(mut self) {
        if let Some(done) = self.done.take() {
            done(None);
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(Some(vec![ConsumeResult::Failure]));
        }
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("messages", &self.messages.len())
            .finish()
    }
}

/// Where consume services send messages. `submit` must not block: implementations queue the
/// batch and run user code elsewhere.
pub trait Listener: Send + Sync + 'static {
    /// Accept a batch; every delivery is completed later, from any thread.
    fn submit(&self, batch: Vec<Delivery>);

    /// Accept a FIFO run; it is completed later, from any thread. The default consumes only the
    /// run's first message (the lane hands over the rest again afterwards).
    fn submit_run(&self, run: Run) {
        let first = run.messages[0].clone();
        self.submit(vec![Delivery::new(
            first,
            move |outcome, _| match outcome {
                Some(result) => run.complete(vec![result]),
                None => run.abandon(),
            },
        )]);
    }

    /// Stop accepting work, give back the deliveries and runs that have not started, and wait
    /// up to `timeout` for running callbacks to finish.
    fn shutdown(&self, timeout: Duration) -> Stopped;

    /// Deliveries waiting to start.
    fn queued(&self) -> usize;

    /// Deliveries whose callback is running.
    fn running(&self) -> usize;
}

/// What [`Listener::shutdown`] leaves behind.
#[derive(Debug, Default)]
pub struct Stopped {
    /// Deliveries that never started; the caller abandons them.
    pub deliveries: Vec<Delivery>,
    /// Runs that never started; the caller abandons them.
    pub runs: Vec<Run>,
    /// Whether every running callback finished in time.
    pub finished: bool,
}

impl Stopped {
    /// Messages that were not consumed.
    pub fn messages(&self) -> usize {
        self.deliveries.len() + self.runs.iter().map(|r| r.messages.len()).sum::<usize>()
    }

    /// Abandon everything left behind (the broker redelivers it).
    pub fn abandon(self) {
        self.deliveries.into_iter().for_each(Delivery::abandon);
        self.runs.into_iter().for_each(Run::abandon);
    }
}

/// User code that consumes a batch synchronously on a worker thread.
pub trait BatchListener: Send + Sync + 'static {
    /// Consume `messages` in order, pushing one result per message onto `results`. A result
    /// missing at the end counts as a failure.
    fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>);

    /// Consume FIFO runs: each run in order, stopping it at its first failure; `results[i]`
    /// (empty on entry) receives the results of `runs[i]`'s consumed prefix. Runs are
    /// independent: a failure in one does not stop the others. The default calls
    /// [`consume_batch`](Self::consume_batch) one message at a time.
    fn consume_runs(&self, runs: &[&[Arc<MessageView>]], results: &mut [Vec<ConsumeResult>]) {
        for (run, out) in runs.iter().zip(results.iter_mut()) {
            for m in *run {
                let before = out.len();
                self.consume_batch(std::slice::from_ref(m), out);
                out.truncate(before + 1);
                if out.len() == before {
                    out.push(ConsumeResult::Failure);
                }
                if out[before] == ConsumeResult::Failure {
                    break;
                }
            }
        }
    }

    /// Wraps the whole life of a consumption thread: `run` is the thread's loop. The Python
    /// binding keeps a thread state alive across batches here, so taking the GIL per batch is
    /// cheap.
    fn run_thread(&self, run: &mut (dyn FnMut() + Send)) {
        run();
    }

    /// How long the last [`consume_batch`](Self::consume_batch) or
    /// [`consume_runs`](Self::consume_runs) on this thread actually ran its callbacks, if the
    /// listener knows better than the call's wall time: the Python binding leaves out the wait
    /// for the GIL. Batches are sized by callback time; counting the GIL's wait in it made
    /// every thread's batches shrink as the threads contended (with a fixed cost per batch,
    /// such as a process span, down to one message each). The default: the wall time.
    fn last_busy(&self) -> Option<Duration> {
        None
    }
}

/// Wall time of user callbacks one batch should take.
pub const TARGET_BATCH_TIME: Duration = Duration::from_millis(1);

struct PoolState {
    queue: VecDeque<Delivery>,
    runs: VecDeque<Run>,
    /// Messages in `runs`.
    run_messages: usize,
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
        Error::require_count("consumption_threads", threads)?;
        Error::require_count("max_batch", max_batch)?;
        let shared = Arc::new(PoolShared {
            state: Mutex::new(PoolState {
                queue: VecDeque::new(),
                runs: VecDeque::new(),
                run_messages: 0,
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

/// Work one worker took from the pool.
enum Taken {
    Deliveries,
    Runs,
}

fn worker(shared: &PoolShared, listener: &dyn BatchListener) {
    let mut batch: Vec<Delivery> = Vec::new();
    let mut runs: Vec<Run> = Vec::new();
    let mut run_results: Vec<Vec<ConsumeResult>> = Vec::new();
    let mut views: Vec<Arc<MessageView>> = Vec::new();
    let mut results: Vec<ConsumeResult> = Vec::new();
    loop {
        let (taken, n) = {
            let mut st = shared
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            loop {
                if !st.queue.is_empty() || !st.runs.is_empty() {
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
            let taken = if st.runs.is_empty() {
                let n = batch_size(shared, st.queue.len(), st.idle + 1);
                batch.extend(st.queue.drain(..n));
                (Taken::Deliveries, n)
            } else {
                // Whole runs (never split: a run is ordered), about one batch's worth.
                let budget = batch_size(shared, st.run_messages, st.idle + 1);
                let mut n = 0;
                while let Some(run) = st.runs.front() {
                    let len = run.messages.len();
                    if n > 0 && n + len > budget {
                        break;
                    }
                    n += len;
                    runs.extend(st.runs.pop_front());
                }
                st.run_messages -= n;
                (Taken::Runs, n)
            };
            shared.running.fetch_add(taken.1, Ordering::AcqRel);
            if (!st.queue.is_empty() || !st.runs.is_empty()) && st.idle > 0 {
                shared.work.notify_one();
            }
            taken
        };
        let started = Instant::now();
        let consumed = match taken {
            Taken::Deliveries => {
                views.extend(batch.iter_mut().map(|d| {
                    d.started = Some(started);
                    d.message.clone()
                }));
                listener.consume_batch(&views, &mut results);
                for (i, d) in batch.drain(..).enumerate() {
                    d.complete(results.get(i).copied().unwrap_or(ConsumeResult::Failure));
                }
                views.clear();
                results.clear();
                n
            }
            Taken::Runs => {
                run_results.resize_with(runs.len(), Vec::new);
                {
                    let slices: Vec<&[Arc<MessageView>]> =
                        runs.iter().map(|r| r.messages.as_slice()).collect();
                    listener.consume_runs(&slices, &mut run_results);
                }
                let mut consumed = 0;
                for (run, out) in runs.drain(..).zip(run_results.iter_mut()) {
                    let mut out = std::mem::take(out);
                    out.truncate(run.messages.len());
                    consumed += out.len();
                    run.complete(out);
                }
                consumed
            }
        };
        let busy = listener.last_busy().unwrap_or_else(|| started.elapsed());
        let per = busy.as_nanos() / consumed.max(1) as u128;
        let per = u64::try_from(per).unwrap_or(u64::MAX);
        let old = shared.mean_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            per
        } else {
            old - old / 8 + per / 8
        };
        shared.mean_ns.store(new, Ordering::Relaxed);
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

    fn submit_run(&self, run: Run) {
        let mut st = self.lock();
        if st.closed {
            drop(st);
            run.abandon();
            return;
        }
        st.run_messages += run.messages.len();
        st.runs.push_back(run);
        if st.idle > 0 {
            self.shared.work.notify_one();
        }
    }

    fn shutdown(&self, timeout: Duration) -> Stopped {
        let deadline = crate::duration::deadline(Instant::now(), timeout);
        let mut stopped = {
            let mut st = self.lock();
            st.closed = true;
            st.run_messages = 0;
            self.shared.work.notify_all();
            Stopped {
                deliveries: st.queue.drain(..).collect(),
                runs: st.runs.drain(..).collect(),
                finished: false,
            }
        };
        let mut st = self.lock();
        while self.shared.running.load(Ordering::Acquire) > 0 {
            let now = Instant::now();
            if now >= deadline {
                return stopped;
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
        stopped.finished = true;
        stopped
    }

    fn queued(&self) -> usize {
        let st = self.lock();
        st.queue.len() + st.run_messages
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

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::rocketmq::message_view::tests::{source, wire_message};

    fn view(id: &str) -> Arc<MessageView> {
        Arc::new(MessageView::from_proto(wire_message(id, b"x", Some("g")), source()).unwrap())
    }

    /// Fails the ids in `fail`; records what each thread consumed, in order.
    struct Recorder {
        fail: Vec<&'static str>,
        seen: Mutex<Vec<String>>,
        slow: Duration,
    }

    impl BatchListener for Recorder {
        fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>) {
            for m in messages {
                std::thread::sleep(self.slow);
                self.seen.lock().unwrap().push(m.message_id().to_string());
                results.push(if self.fail.contains(&m.message_id()) {
                    ConsumeResult::Failure
                } else {
                    ConsumeResult::Success
                });
            }
        }
    }

    fn submit(pool: &WorkerPool, ids: &[&str]) -> mpsc::Receiver<Option<Vec<ConsumeResult>>> {
        let (tx, rx) = mpsc::channel();
        pool.submit_run(Run::new(ids.iter().map(|i| view(i)).collect(), move |r| {
            tx.send(r).unwrap();
        }));
        rx
    }

    /// Takes `wall` per batch (waiting, like a thread waiting for the GIL) but says its
    /// callbacks took `busy`; records the size of each batch.
    struct Waiting {
        wall: Duration,
        busy: Option<Duration>,
        sizes: Mutex<Vec<usize>>,
    }

    impl BatchListener for Waiting {
        fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>) {
            std::thread::sleep(self.wall);
            self.sizes.lock().unwrap().push(messages.len());
            results.extend(messages.iter().map(|_| ConsumeResult::Success));
        }

        fn last_busy(&self) -> Option<Duration> {
            self.busy
        }
    }

    /// The batch sizes a pool of one thread took for 200 messages submitted in 20 batches.
    fn batch_sizes(busy: Option<Duration>) -> Vec<usize> {
        let listener = Arc::new(Waiting {
            wall: Duration::from_millis(2),
            busy,
            sizes: Mutex::default(),
        });
        let pool = WorkerPool::start(listener.clone(), 1, 64).unwrap();
        let (tx, rx) = mpsc::channel();
        for b in 0..20 {
            let batch = (0..10)
                .map(|i| {
                    let tx = tx.clone();
                    Delivery::new(view(&format!("m{b}-{i}")), move |r, _| {
                        tx.send(r).unwrap();
                    })
                })
                .collect();
            pool.submit(batch);
        }
        for _ in 0..200 {
            let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(r, Some(ConsumeResult::Success));
        }
        assert!(pool.shutdown(Duration::from_secs(5)).finished);
        let sizes = listener.sizes.lock().unwrap().clone();
        sizes
    }

    #[test]
    fn batches_are_sized_by_the_callback_time_the_listener_reports() {
        // Judged by wall time (2 ms a batch, above the 1 ms target), batches shrink towards
        // one message; judged by the 10 µs the listener reports, they take what is queued.
        let by_wall = batch_sizes(None);
        let by_busy = batch_sizes(Some(Duration::from_micros(10)));
        assert_eq!(by_wall.iter().sum::<usize>(), 200);
        assert_eq!(by_busy.iter().sum::<usize>(), 200);
        assert!(
            by_busy.len() * 2 < by_wall.len(),
            "reported-time batches {by_busy:?}, wall-time batches {by_wall:?}"
        );
    }

    #[test]
    fn a_run_stops_at_its_first_failure_and_runs_are_independent() {
        let listener = Arc::new(Recorder {
            fail: vec!["a2"],
            seen: Mutex::default(),
            slow: Duration::ZERO,
        });
        let pool = WorkerPool::start(listener.clone(), 1, 64).unwrap();
        let a = submit(&pool, &["a1", "a2", "a3"]);
        let b = submit(&pool, &["b1", "b2"]);
        let t = Duration::from_secs(5);
        use ConsumeResult::{Failure, Success};
        assert_eq!(a.recv_timeout(t).unwrap(), Some(vec![Success, Failure]));
        assert_eq!(b.recv_timeout(t).unwrap(), Some(vec![Success, Success]));
        let seen = listener.seen.lock().unwrap().clone();
        assert!(
            !seen.contains(&"a3".to_string()),
            "a3 ran after a failure: {seen:?}"
        );
        assert!(pool.shutdown(t).finished);
    }

    #[test]
    fn runs_are_never_split_across_threads() {
        let listener = Arc::new(Recorder {
            fail: vec![],
            seen: Mutex::default(),
            slow: Duration::from_micros(200),
        });
        let pool = WorkerPool::start(listener.clone(), 4, 2).unwrap();
        let ids: Vec<Vec<String>> = (0..8)
            .map(|r| (0..10).map(|i| format!("r{r}-{i:02}")).collect())
            .collect();
        let rxs: Vec<_> = ids
            .iter()
            .map(|run| submit(&pool, &run.iter().map(String::as_str).collect::<Vec<_>>()))
            .collect();
        for rx in rxs {
            let r = rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
            assert_eq!(r, vec![ConsumeResult::Success; 10]);
        }
        // Four threads interleave runs, but each run's messages were consumed in order.
        let seen = listener.seen.lock().unwrap().clone();
        for run in &ids {
            let order: Vec<&String> = seen.iter().filter(|s| run.contains(s)).collect();
            assert_eq!(order, run.iter().collect::<Vec<_>>());
        }
        assert!(pool.shutdown(Duration::from_secs(5)).finished);
    }

    #[test]
    fn shutdown_gives_back_unstarted_runs_and_dropped_runs_fail() {
        let listener = Arc::new(Recorder {
            fail: vec![],
            seen: Mutex::default(),
            slow: Duration::from_millis(300),
        });
        let pool = WorkerPool::start(listener, 1, 1).unwrap();
        let first = submit(&pool, &["a1"]);
        while pool.running() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let second = submit(&pool, &["b1", "b2", "b3"]);
        assert_eq!(pool.queued(), 3);
        let stopped = pool.shutdown(Duration::from_secs(5));
        assert!(stopped.finished);
        assert_eq!(stopped.messages(), 3);
        stopped.abandon();
        let t = Duration::from_secs(5);
        assert_eq!(
            first.recv_timeout(t).unwrap(),
            Some(vec![ConsumeResult::Success])
        );
        assert_eq!(second.recv_timeout(t).unwrap(), None);
        // After shutdown a run is abandoned at once; a dropped run fails its first message.
        assert_eq!(submit(&pool, &["c1"]).recv_timeout(t).unwrap(), None);
        let (tx, rx) = mpsc::channel();
        drop(Run::new(vec![view("d1")], move |r| tx.send(r).unwrap()));
        assert_eq!(rx.recv().unwrap(), Some(vec![ConsumeResult::Failure]));
    }
}
