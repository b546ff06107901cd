//! [`WorkerPool`], the standard [`Listener`]: a fixed set of OS threads (never tokio workers, so
//! a slow or blocking callback cannot stall network I/O) that call a [`BatchListener`] with
//! batches of messages. A batch is sized so that it takes about [`TARGET_BATCH_TIME`] of callback
//! time: fast callbacks are called many per batch (one GIL acquisition per batch in the Python
//! binding), slow ones one at a time so that every thread gets work.
//!
//! A listener whose batches carry a fixed cost of their own (the Python binding's process span,
//! while tracing) asks the pool to gather, for at most a wait it names
//! ([`BatchListener::gather_wait`], [`GATHER_WAIT`] in the binding): while messages arrive fast
//! enough to at least double a batch within that wait, one worker waits (at most that long) for
//! its batch to fill to the ~1 ms of callbacks before taking it, so the cost is spread over more
//! messages. A trickle is never held back: when the arrivals would not double the batch in time,
//! it is taken at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::rocketmq::listener::{
    wait_until_finished, BatchListener, ConsumeResult, Delivery, Listener, Run, Stopped,
};
use crate::rocketmq::message_view::MessageView;

/// Wall time of user callbacks one batch should take.
pub const TARGET_BATCH_TIME: Duration = Duration::from_millis(1);

/// How long a message may wait for its batch to fill, for a listener whose batches carry a
/// fixed cost ([`BatchListener::gather_wait`]): 2 ms.
pub const GATHER_WAIT: Duration = Duration::from_millis(2);

struct PoolState {
    queue: VecDeque<Delivery>,
    runs: VecDeque<Run>,
    /// Messages in `runs`.
    run_messages: usize,
    closed: bool,
    idle: usize,
    /// Whether a worker is waiting for its batch to fill (at most one does).
    gathering: bool,
    /// When work last arrived, and the exponentially weighted mean time between arriving
    /// messages, in nanoseconds (0: not known yet).
    last_arrival: Option<Instant>,
    gap_ns: u64,
}

impl PoolState {
    fn new() -> Self {
        Self {
            queue: VecDeque::new(),
            runs: VecDeque::new(),
            run_messages: 0,
            closed: false,
            idle: 0,
            gathering: false,
            last_arrival: None,
            gap_ns: 0,
        }
    }

    fn queued(&self) -> usize {
        self.queue.len() + self.run_messages
    }

    /// Note `n` messages arriving now.
    fn arrived(&mut self, n: usize) {
        let now = Instant::now();
        if let Some(last) = self.last_arrival {
            let gap = (now - last).as_nanos() / n.max(1) as u128;
            let gap = u64::try_from(gap).unwrap_or(u64::MAX).max(1);
            self.gap_ns = if self.gap_ns == 0 {
                gap
            } else {
                self.gap_ns - self.gap_ns / 8 + gap / 8
            };
        }
        self.last_arrival = Some(now);
    }
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
            state: Mutex::new(PoolState::new()),
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
/// one, at most `max_batch`. Until a callback time has been measured, one: a slow listener's
/// first batch must not take a long share of the work on one thread (nor hold `close` up
/// until it is done), and a fast one's is measured after a single call.
fn batch_size(shared: &PoolShared, queued: usize) -> usize {
    target_batch(shared).unwrap_or(1).min(queued)
}

/// About [`TARGET_BATCH_TIME`] of callbacks (at least one message, at most `max_batch`), once a
/// callback time has been measured.
fn target_batch(shared: &PoolShared) -> Option<usize> {
    let mean = shared.mean_ns.load(Ordering::Relaxed);
    if mean == 0 {
        return None;
    }
    let n = usize::try_from(TARGET_BATCH_TIME.as_nanos() / u128::from(mean)).unwrap_or(usize::MAX);
    Some(n.clamp(1, shared.max_batch))
}

/// Whether a worker that found `st`'s work should wait up to `wait` for more before taking it:
/// no other worker is waiting, the batch would be short of `target`, and
/// messages arrive fast enough to at least double it within `wait`.
fn worth_gathering(st: &PoolState, target: Option<usize>, wait: Duration) -> bool {
    let Some(target) = target else {
        return false;
    };
    if st.gathering || st.closed || st.gap_ns == 0 {
        return false;
    }
    let queued = st.queued();
    queued < target && wait.as_nanos() / u128::from(st.gap_ns) >= queued as u128
}

/// Whether a worker is gathering a batch that is still short of its target: then arriving work
/// wakes nobody (a woken worker would only go back to wait; on a VM each such wake-up costs
/// tens of microseconds), and the gatherer takes it at the end of its wait.
fn gathering_short(shared: &PoolShared, st: &PoolState) -> bool {
    st.gathering && target_batch(shared).is_some_and(|t| st.queued() < t)
}

type Guard<'a> = std::sync::MutexGuard<'a, PoolState>;

/// Wait (counted idle, so that arriving work wakes a worker) until notified or `until`.
fn idle_wait<'a>(shared: &'a PoolShared, mut st: Guard<'a>, until: Option<Instant>) -> Guard<'a> {
    st.idle += 1;
    st = match until {
        None => shared
            .work
            .wait(st)
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        Some(t) => {
            let left = t.saturating_duration_since(Instant::now());
            shared
                .work
                .wait_timeout(st, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0
        }
    };
    st.idle -= 1;
    st
}

/// Wait until there is work to take (None: the pool closed), gathering a fuller batch first
/// when that is worth it ([`worth_gathering`]). While one worker gathers, the others leave the
/// work to it unless the batch already reached its target.
fn wait_for_work<'a>(
    shared: &'a PoolShared,
    mut st: Guard<'a>,
    listener: &dyn BatchListener,
) -> Option<Guard<'a>> {
    let mut gathering_until: Option<Instant> = None;
    loop {
        let queued = st.queued();
        if queued == 0 {
            if gathering_until.take().is_some() {
                st.gathering = false; // another worker took it
            }
            if st.closed {
                return None;
            }
            st = idle_wait(shared, st, None);
            continue;
        }
        let full = target_batch(shared).is_some_and(|t| queued >= t);
        match gathering_until {
            Some(until) if !full && !st.closed && Instant::now() < until => {
                st = idle_wait(shared, st, Some(until));
            }
            Some(_) => {
                st.gathering = false;
                return Some(st);
            }
            None if st.gathering && !full && !st.closed => {
                // Another worker gathers this batch.
                st = idle_wait(shared, st, None);
            }
            None => match listener.gather_wait() {
                Some(wait) if worth_gathering(&st, target_batch(shared), wait) => {
                    st.gathering = true;
                    gathering_until = Some(crate::duration::deadline(Instant::now(), wait));
                }
                _ => return Some(st),
            },
        }
    }
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
            let st = shared
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let Some(mut st) = wait_for_work(shared, st, listener) else {
                return;
            };
            let taken = if st.runs.is_empty() {
                let n = batch_size(shared, st.queue.len());
                batch.extend(st.queue.drain(..n));
                (Taken::Deliveries, n)
            } else {
                // Whole runs (never split: a run is ordered), about one batch's worth.
                let budget = batch_size(shared, st.run_messages);
                let mut n = 0;
                while let Some(run) = st.runs.front() {
                    let len = run.messages().len();
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
                    d.started_at(started);
                    d.message().clone()
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
                        runs.iter().map(|r| r.messages()).collect();
                    listener.consume_runs(&slices, &mut run_results);
                }
                let mut consumed = 0;
                for (run, out) in runs.drain(..).zip(run_results.iter_mut()) {
                    let mut out = std::mem::take(out);
                    out.truncate(run.messages().len());
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
        st.arrived(batch.len());
        st.queue.extend(batch);
        if st.idle > 0 && !gathering_short(&self.shared, &st) {
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
        st.arrived(run.messages().len());
        st.run_messages += run.messages().len();
        st.runs.push_back(run);
        if st.idle > 0 && !gathering_short(&self.shared, &st) {
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
        let st = self.lock();
        if !wait_until_finished(st, &self.shared.finished, &self.shared.running, deadline) {
            return stopped;
        }
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

    /// Records its batch sizes, reports 1 µs of callbacks per batch, gathers for `wait`.
    struct Gatherer {
        wait: Option<Duration>,
        sizes: Mutex<Vec<usize>>,
    }

    impl BatchListener for Gatherer {
        fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>) {
            self.sizes.lock().unwrap().push(messages.len());
            results.extend(messages.iter().map(|_| ConsumeResult::Success));
        }

        fn last_busy(&self) -> Option<Duration> {
            Some(Duration::from_micros(1))
        }

        fn gather_wait(&self) -> Option<Duration> {
            self.wait
        }
    }

    fn deliver(pool: &WorkerPool, id: &str, tx: &mpsc::Sender<Option<ConsumeResult>>) {
        let tx = tx.clone();
        pool.submit(vec![Delivery::new(view(id), move |r, _| {
            tx.send(r).unwrap();
        })]);
    }

    #[test]
    fn a_gathering_listener_gets_full_batches_while_messages_arrive_fast() {
        // At 1 µs a message, a batch's target is `max_batch` (8) messages; the wait is long
        // enough that only the target ends it.
        let listener = Arc::new(Gatherer {
            wait: Some(Duration::from_secs(60)),
            sizes: Mutex::default(),
        });
        let pool = WorkerPool::start(listener.clone(), 2, 8).unwrap();
        let (tx, rx) = mpsc::channel();
        // Nothing is known of the arrivals yet: the first message is taken at once.
        deliver(&pool, "m0", &tx);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)).unwrap(),
            Some(ConsumeResult::Success)
        );
        // Its callback time is measured once the worker is past the batch.
        let until = Instant::now() + Duration::from_secs(10);
        while pool.shared.mean_ns.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < until, "no callback time measured");
            std::thread::yield_now();
        }
        // Sixteen more, one submit each, as fast as they come: two full batches.
        for i in 1..=16 {
            deliver(&pool, &format!("m{i}"), &tx);
        }
        for _ in 0..16 {
            let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!(r, Some(ConsumeResult::Success));
        }
        assert!(pool.shutdown(Duration::from_secs(5)).finished);
        assert_eq!(*listener.sizes.lock().unwrap(), vec![1, 8, 8]);
    }

    #[test]
    fn a_worker_gathers_only_while_arrivals_would_double_its_batch_in_time() {
        let wait = Duration::from_millis(2);
        let mut st = PoolState::new();
        st.run_messages = 1; // one message queued
        let worth = |st: &PoolState, target| worth_gathering(st, target, wait);
        // Nothing known of the arrivals, or of the callbacks: take it.
        assert!(!worth(&st, Some(100)));
        st.gap_ns = 100_000; // a message every 100 µs: 20 more within the wait
        assert!(!worth(&st, None));
        assert!(worth(&st, Some(100)));
        st.run_messages = 20;
        assert!(worth(&st, Some(100)));
        st.run_messages = 21; // 20 more would not double 21
        assert!(!worth(&st, Some(100)));
        st.run_messages = 1;
        assert!(!worth(&st, Some(1)), "the batch is full already");
        // A trickle (a message every 10 ms) is never held back.
        st.gap_ns = 10_000_000;
        assert!(!worth(&st, Some(100)));
        // One worker gathers at a time; a closing pool gathers nothing.
        st.gap_ns = 100_000;
        st.gathering = true;
        assert!(!worth(&st, Some(100)));
        st.gathering = false;
        st.closed = true;
        assert!(!worth(&st, Some(100)));
    }

    #[test]
    fn arrivals_are_timed_per_message() {
        let mut st = PoolState::new();
        st.arrived(4);
        assert_eq!(st.gap_ns, 0, "one arrival has no gap");
        std::thread::sleep(Duration::from_millis(4));
        st.arrived(4);
        // At least 4 ms over 4 messages: 1 ms or more a message.
        assert!(st.gap_ns >= 1_000_000, "{}", st.gap_ns);
    }
}
