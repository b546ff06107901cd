//! How received messages reach user code, and how results come back.
//!
//! The consume services hand [`Delivery`] batches to a [`Listener`]. A delivery must be completed
//! exactly once with a [`ConsumeResult`]; one that is dropped unfinished counts as a failure, so
//! no message can silently vanish between the cache and the settle path.
//!
//! The standard listener, a pool of consumption threads calling a [`BatchListener`], is
//! [`WorkerPool`](super::worker_pool::WorkerPool).

use std::sync::Arc;
use std::time::{Duration, Instant};

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

    /// How long a message may wait for a fuller batch, when each batch carries a fixed cost of
    /// its own worth spreading over more messages (the Python binding: a process span while
    /// tracing); the pool waits only while messages arrive fast (see
    /// [`crate::rocketmq::worker_pool`]). Asked each time a worker finds work. The default:
    /// None, no waiting.
    fn gather_wait(&self) -> Option<Duration> {
        None
    }
}

/// For [`Listener::shutdown`] implementations: wait on `finished` (notified under `guard`'s
/// mutex whenever `running` drops) until `running` is zero or `deadline` passes; whether it
/// reached zero.
pub fn wait_until_finished<T>(
    mut guard: std::sync::MutexGuard<'_, T>,
    finished: &std::sync::Condvar,
    running: &std::sync::atomic::AtomicUsize,
    deadline: Instant,
) -> bool {
    while running.load(std::sync::atomic::Ordering::Acquire) > 0 {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        guard = finished
            .wait_timeout(guard, deadline - now)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    true
}
