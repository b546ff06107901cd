//! The telemetry session: one bidirectional `Telemetry` stream per endpoint.
//!
//! * The client's `Settings` are the first command on every stream; the server answers with its
//!   merged settings, which the client applies ([`super::settings::EffectiveSettings`]).
//! * The session does not know the client's type: the client implements `SessionOwner` and
//!   passes itself down. Settings answers and server commands go to it as calls (orphaned-
//!   transaction recovery, message verification, `ReconnectEndpoints` dropping the channel before
//!   the stream is re-opened); thread stack traces are answered here.
//! * When the stream ends (broker restart, network failure) the session re-opens it by itself
//!   with a capped back-off and re-sends the settings. A `UNRECOGNIZED_CLIENT_TYPE` answer to any
//!   RPC triggers the same re-sync.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::connection::{deadline, Stub};
use super::endpoints::Endpoints;
use super::message_view::{MessageSource, MessageView};
use crate::error::{Error, Result};
use crate::proto;
use crate::proto::telemetry_command::Command;
use crate::status;

/// The outgoing half of a telemetry stream.
pub(crate) type CommandStream = ReceiverStream<proto::TelemetryCommand>;

/// What a session needs from the client that owns it, and where the session hands what the
/// server sends: the merged settings and the server commands. The client implements it and
/// passes itself down (held weakly: a dropped client ends the session's loop); the session
/// never sees the client's own type.
pub(crate) trait SessionOwner: Send + Sync + 'static {
    /// The settings command sent first on every stream.
    fn settings_command(&self) -> proto::TelemetryCommand;
    /// How long the background loop lets one re-open take.
    fn open_timeout(&self) -> Duration;
    /// A gRPC stub for `endpoints` (shared channel).
    fn stub(&self, endpoints: &Endpoints) -> Result<Stub>;
    /// `commands` wrapped in a request that carries the client's headers.
    fn request(&self, commands: CommandStream) -> tonic::Request<CommandStream>;
    /// The server answered the settings with its merged settings.
    fn server_settings(&self, settings: &proto::Settings);
    /// `RecoverOrphanedTransactionCommand` from `endpoints`: the future resolves the
    /// transaction; the session spawns it.
    fn recover_orphaned_transaction(
        self: Arc<Self>,
        endpoints: Endpoints,
        message: MessageView,
        transaction_id: String,
    ) -> BoxFuture<'static, ()>;
    /// `VerifyMessageCommand`: the future answers the status code and message that the session
    /// sends back as the `VerifyMessageResult`.
    fn verify_message(self: Arc<Self>, message: MessageView) -> BoxFuture<'static, (i32, String)>;
    /// `ReconnectEndpointsCommand`: drop the channel to `endpoints` (the session then re-opens
    /// its stream).
    fn reset_channel(&self, endpoints: &Endpoints);
}

type StackTraceProvider = Box<dyn Fn() -> String + Send + Sync>;
static STACK_TRACES: OnceLock<StackTraceProvider> = OnceLock::new();

/// Install the function that answers `PrintThreadStackTraceCommand` (the Python binding installs
/// one that formats every Python thread's stack). It may block; it runs on a blocking thread.
pub fn set_stack_trace_provider(f: impl Fn() -> String + Send + Sync + 'static) {
    let _ = STACK_TRACES.set(Box::new(f));
}

fn stack_traces() -> String {
    match STACK_TRACES.get() {
        Some(f) => f(),
        None => format!(
            "ferrymq {} (Rust core): thread {:?}; no stack trace provider installed",
            crate::VERSION,
            std::thread::current().name()
        ),
    }
}

/// One telemetry stream and its state.
pub(crate) struct Session {
    pub(crate) endpoints: Endpoints,
    tx: Mutex<Option<mpsc::Sender<proto::TelemetryCommand>>>,
    settings_gen: watch::Sender<u64>,
    reconnect: Notify,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("endpoints", &self.endpoints)
            .field("connected", &self.tx.lock().is_some())
            .field("settings_received", &*self.settings_gen.borrow())
            .finish()
    }
}

/// An opened stream handed from the first (foreground) connect to the background loop.
pub(crate) struct Opened {
    tx: mpsc::Sender<proto::TelemetryCommand>,
    stream: tonic::Streaming<proto::TelemetryCommand>,
    first: proto::TelemetryCommand,
}

const MAX_BACKOFF: Duration = Duration::from_secs(5);
const MIN_BACKOFF: Duration = Duration::from_millis(100);

impl Session {
    pub(crate) fn new(endpoints: Endpoints) -> Arc<Self> {
        Arc::new(Self {
            endpoints,
            tx: Mutex::new(None),
            settings_gen: watch::channel(0).0,
            reconnect: Notify::new(),
        })
    }

    /// How many settings echoes arrived so far.
    pub(crate) fn settings_generation(&self) -> u64 {
        *self.settings_gen.borrow()
    }

    /// Wait until more than `after` settings echoes arrived; false on timeout.
    pub(crate) async fn wait_settings(&self, after: u64, timeout: Duration) -> bool {
        let mut rx = self.settings_gen.subscribe();
        tokio::time::timeout(timeout, rx.wait_for(|g| *g > after))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Send `cmd` on the open stream; false when there is none (the loop is reconnecting).
    pub(crate) async fn send(&self, cmd: proto::TelemetryCommand) -> bool {
        let tx = self.tx.lock().clone();
        match tx {
            Some(tx) => tx.send(cmd).await.is_ok(),
            None => false,
        }
    }

    /// Re-send the settings now, or re-open the stream if it is down.
    pub(crate) async fn resync(&self, settings: proto::TelemetryCommand) {
        if !self.send(settings).await {
            self.reconnect.notify_one();
        }
    }

    /// Drop the stream and open a new one.
    pub(crate) fn reconnect(&self) {
        self.reconnect.notify_one();
    }

    /// Open a stream, send the settings and wait for the first answer. Used in the foreground at
    /// start-up so connection and authentication failures reach the caller.
    pub(crate) async fn open(&self, owner: &dyn SessionOwner, timeout: Duration) -> Result<Opened> {
        let (tx, rx) = mpsc::channel(64);
        tx.try_send(owner.settings_command())
            .map_err(|_| Error::internal("telemetry channel full at open"))?;
        let mut stub = owner.stub(&self.endpoints)?;
        let req = owner.request(ReceiverStream::new(rx));
        let fut = async move {
            let mut stream = stub.telemetry(req).await?.into_inner();
            match stream.message().await? {
                Some(first) => Ok((stream, first)),
                None => Err(Error::connection(
                    "the broker closed the telemetry stream before answering the settings",
                )),
            }
        };
        let (stream, first) = deadline(timeout, fut)
            .await
            .map_err(|e| e.context(format!("telemetry with {}", self.endpoints)))?;
        if let Some(st) = &first.status {
            if st.code != status::OK && !matches!(first.command, Some(Command::Settings(_))) {
                return Err(Error::rocketmq_status(st.code, st.message.clone())
                    .context(format!("telemetry with {}", self.endpoints)));
            }
        }
        Ok(Opened { tx, stream, first })
    }

    /// The background loop: keep a stream open until `cancel` fires or the owner is dropped.
    pub(crate) async fn run(
        self: Arc<Self>,
        weak: Weak<dyn SessionOwner>,
        cancel: CancellationToken,
        mut opened: Option<Opened>,
    ) {
        let mut backoff = MIN_BACKOFF;
        loop {
            if cancel.is_cancelled() {
                break;
            }
            let current = match opened.take() {
                Some(o) => Ok(o),
                None => {
                    let Some(owner) = weak.upgrade() else {
                        break;
                    };
                    let timeout = owner.open_timeout();
                    tokio::select! {
                        () = cancel.cancelled() => break,
                        r = self.open(&*owner, timeout) => r,
                    }
                }
            };
            match current {
                Ok(Opened {
                    tx,
                    mut stream,
                    first,
                }) => {
                    *self.tx.lock() = Some(tx);
                    tracing::debug!(target: "ferrymq::rocketmq", endpoints = %self.endpoints, "telemetry stream open");
                    let mut next = Some(first);
                    loop {
                        if let Some(cmd) = next.take() {
                            if matches!(cmd.command, Some(Command::Settings(_))) {
                                backoff = MIN_BACKOFF;
                            }
                            if self.handle(&weak, cmd) {
                                break;
                            }
                        }
                        tokio::select! {
                            () = cancel.cancelled() => break,
                            () = self.reconnect.notified() => {
                                backoff = Duration::ZERO;
                                break;
                            }
                            m = stream.message() => match m {
                                Ok(Some(cmd)) => next = Some(cmd),
                                Ok(None) => {
                                    tracing::info!(target: "ferrymq::rocketmq", endpoints = %self.endpoints, "telemetry stream closed by the broker; re-opening");
                                    break;
                                }
                                Err(e) => {
                                    tracing::warn!(target: "ferrymq::rocketmq", endpoints = %self.endpoints, error = %e, "telemetry stream failed; re-opening");
                                    break;
                                }
                            }
                        }
                    }
                    *self.tx.lock() = None;
                }
                Err(e) => {
                    tracing::warn!(target: "ferrymq::rocketmq", endpoints = %self.endpoints, error = %e, "cannot open telemetry; retrying");
                }
            }
            if cancel.is_cancelled() {
                break;
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = self.reconnect.notified() => {}
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
        }
        *self.tx.lock() = None;
    }

    /// Decode a message carried by a command (logged and skipped when it does not decode).
    fn view(&self, message: Option<proto::Message>) -> Option<MessageView> {
        let message = message?;
        let source = MessageSource {
            topic: message.topic.clone().unwrap_or_default(),
            endpoints: self.endpoints.clone(),
            queue_id: message
                .system_properties
                .as_ref()
                .map_or(-1, |sp| sp.queue_id),
            broker_name: String::new(),
        };
        match MessageView::from_proto(message, Arc::new(source)) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(target: "ferrymq::rocketmq", error = %e, "undecodable message in a telemetry command");
                None
            }
        }
    }

    /// Handle one server command; returns true when the stream must be re-opened.
    fn handle(
        self: &Arc<Self>,
        weak: &Weak<dyn SessionOwner>,
        cmd: proto::TelemetryCommand,
    ) -> bool {
        let Some(owner) = weak.upgrade() else {
            return true;
        };
        match cmd.command {
            Some(Command::Settings(s)) => {
                owner.server_settings(&s);
                self.settings_gen.send_modify(|g| *g += 1);
            }
            Some(Command::RecoverOrphanedTransactionCommand(c)) => {
                let Some(view) = self.view(c.message) else {
                    return false;
                };
                tracing::info!(target: "ferrymq::rocketmq", message_id = %view.message_id(), "orphaned transaction check");
                let fut = Arc::clone(&owner).recover_orphaned_transaction(
                    self.endpoints.clone(),
                    view,
                    c.transaction_id,
                );
                tokio::spawn(fut);
            }
            Some(Command::VerifyMessageCommand(c)) => {
                let Some(view) = self.view(c.message) else {
                    return false;
                };
                let fut = Arc::clone(&owner).verify_message(view);
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let (code, message) = fut.await;
                    me.send(proto::TelemetryCommand {
                        status: Some(proto::Status { code, message }),
                        command: Some(Command::VerifyMessageResult(proto::VerifyMessageResult {
                            nonce: c.nonce,
                        })),
                    })
                    .await;
                });
            }
            Some(Command::PrintThreadStackTraceCommand(c)) => {
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let trace = tokio::task::spawn_blocking(stack_traces)
                        .await
                        .unwrap_or_else(|e| format!("stack trace unavailable: {e}"));
                    me.send(proto::TelemetryCommand {
                        status: Some(proto::Status {
                            code: status::OK,
                            message: "OK".into(),
                        }),
                        command: Some(Command::ThreadStackTrace(proto::ThreadStackTrace {
                            nonce: c.nonce,
                            thread_stack_trace: Some(trace),
                        })),
                    })
                    .await;
                });
            }
            Some(Command::ReconnectEndpointsCommand(_)) => {
                tracing::info!(target: "ferrymq::rocketmq", endpoints = %self.endpoints, "broker asked to reconnect");
                owner.reset_channel(&self.endpoints);
                return true;
            }
            Some(Command::NotifyUnsubscribeLiteCommand(c)) => {
                tracing::debug!(target: "ferrymq::rocketmq", lite_topic = %c.lite_topic, "ignored NotifyUnsubscribeLite");
            }
            Some(other) => {
                tracing::debug!(target: "ferrymq::rocketmq", command = ?std::mem::discriminant(&other), "ignored telemetry command");
            }
            None => {
                if let Some(st) = cmd.status {
                    if st.code != status::OK {
                        tracing::warn!(target: "ferrymq::rocketmq", code = st.code, message = %st.message, "telemetry status from broker");
                    }
                }
            }
        }
        false
    }
}
