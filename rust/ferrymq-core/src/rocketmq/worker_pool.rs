//! [`WorkerPool`], the standard [`Listener`]: a fixed set of OS threads (never tokio workers, so
//! a slow or blocking callback cannot stall network I/O) that call a [`BatchListener`] with
//! batches of messages. A batch is sized so that it takes about [`TARGET_BATCH_TIME`] of callback
//! time: fast callbacks are called many per batch (one GIL acquisition per batch in the Python
//! binding), slow ones one at a time so that every thread gets work.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::rocketmq::listener::{BatchListener, ConsumeResult, Delivery, Listener, Run, Stopped};
use crate::rocketmq::message_view::MessageView;

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
        st.run_messages += run.messages().len();
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
