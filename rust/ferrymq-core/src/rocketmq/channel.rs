//! One HTTP/2 connection to one broker address, as the transport of the generated gRPC stub.
//!
//! [`H2Channel`] is a `tower` service over an `h2` client connection, used in place of tonic's
//! `Channel` because of what a unary RPC costs through that one: tonic's channel queues every
//! request to a buffer task, which hands it to hyper's connection task, which spawns one more
//! task per request to stream its body; each hop is a cross-thread wake-up. Here the caller's
//! task puts the request (headers and its whole body, when the body is ready at once, as a unary
//! request's always is) straight into the connection's send queue, and reads the answer from it;
//! the one task per connection does the socket I/O (a caller alone on the channel writes its
//! own request: see below). A streaming request body (telemetry) is fed
//! by a task of its own, as before.
//!
//! On the wire: the `http` scheme and the address as authority (as tonic's channel sent them),
//! ferrymq's own `user-agent`, the windows below, hyper's client limits (a 16 KiB header list,
//! 100 streams until the server's SETTINGS say otherwise), and, while calls are open, a
//! keep-alive PING every 30 s that must be answered within 10 s. The connection is opened on
//! first use; when it fails, the calls in flight fail with it (the callers retry) and the next
//! call reconnects. A connection the server is closing (GOAWAY: a proxy draining, a maximum
//! connection age) takes no new call: the call goes to a new connection, and only a call that
//! finds the new one closing too fails, as `Unavailable` (nothing was sent, callers retry).
//! A streaming request body is written as the peer's flow-control window allows, so the
//! bounded queue feeding it keeps its bound.
//!
//! Wake-ups per call. The connection (`h2`'s connection future, which does the socket I/O) is
//! polled by its task, or by a caller alone on the channel right after it queued a request: the
//! caller writes its own request on its own thread (see [`Driver`]), so a blocking caller (one
//! sync send after another) costs one wake-up of a runtime worker, when the answer arrives,
//! and one of the caller, instead of also waking the connection task to write (which then
//! contended for `h2`'s lock with the caller still queuing the request body). And `h2` wakes
//! the connection once more when the last handle on a finished stream is dropped, which for a
//! unary call happens while the caller finishes reading the answer; so that handle is kept
//! until the next call on the channel queues its request (see [`Shared::finished`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures::task::AtomicWaker;
use futures::FutureExt as _;
use http_body::{Body as _, Frame};
use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the proxy logs as the client.
const USER_AGENT: &str = concat!("ferrymq/", env!("CARGO_PKG_VERSION"));
/// hyper's client defaults, which tonic's channel sent.
const MAX_HEADER_LIST: u32 = 16 << 10;
const STREAMS_BEFORE_SETTINGS: usize = 100;
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// The largest request body kept as "sent whole" (see [`Shared::finished`]): one DATA frame at
/// HTTP/2's default maximum frame size, which the stream's initial window always admits.
const UNARY_KEEP_MAX: usize = 16 << 10;

/// How to reach the address: TCP, then TLS if configured.
pub(super) struct Dial {
    /// `host:port`.
    pub addr: String,
    /// TLS client configuration and the name to verify.
    pub tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// TCP + TLS + HTTP/2 handshake timeout.
    pub connect_timeout: Duration,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl Dial {
    async fn connect(&self) -> std::io::Result<Box<dyn Io>> {
        let tcp = TcpStream::connect(&self.addr).await?;
        tcp.set_nodelay(true)?;
        Ok(match &self.tls {
            None => Box::new(tcp),
            Some((config, name)) => Box::new(
                tokio_rustls::TlsConnector::from(Arc::clone(config))
                    .connect(name.clone(), tcp)
                    .await?,
            ),
        })
    }
}

/// An open connection.
#[derive(Clone)]
struct Conn {
    generation: u64,
    send: h2::client::SendRequest<Bytes>,
    driver: Arc<Driver>,
}

/// Polls a connection, on behalf of its task or of a caller that has just queued a request.
///
/// The connection is always polled with one waker ([`Waking`]), whoever polls it, so its
/// socket and `h2` wake the same thing: the connection task, unless callers are queuing
/// requests (they poll it themselves right after; the wake-up is deferred until they are done).
struct Driver {
    /// `None` once the connection has ended.
    connection: Mutex<Option<h2::client::Connection<Box<dyn Io>, Bytes>>>,
    waking: Arc<Waking>,
    waker: Waker,
}

struct Waking {
    /// Callers between queuing a request and polling the connection.
    queuing: AtomicUsize,
    /// A wake-up came while callers were queuing.
    deferred: AtomicBool,
    /// The connection task.
    task: AtomicWaker,
}

impl Wake for Waking {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Deferred while callers queue; whoever sees the last of them gone passes it on (the
        // caller in `Queuing::drop` or this): no wake-up is lost.
        self.deferred.store(true, Ordering::SeqCst);
        if self.queuing.load(Ordering::SeqCst) == 0 && self.deferred.swap(false, Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

impl Driver {
    fn new(connection: h2::client::Connection<Box<dyn Io>, Bytes>) -> Self {
        let waking = Arc::new(Waking {
            queuing: AtomicUsize::new(0),
            deferred: AtomicBool::new(false),
            task: AtomicWaker::new(),
        });
        Self {
            connection: Mutex::new(Some(connection)),
            waker: Waker::from(Arc::clone(&waking)),
            waking,
        }
    }

    /// Poll the connection (the caller holds its lock): `Ready` once it has ended.
    fn poll(&self, slot: &mut Option<h2::client::Connection<Box<dyn Io>, Bytes>>) -> Poll<()> {
        let Some(connection) = slot.as_mut() else {
            return Poll::Ready(());
        };
        match connection.poll_unpin(&mut Context::from_waker(&self.waker)) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                if let Err(e) = r {
                    tracing::debug!(target: "ferrymq::rocketmq", error = %e, "HTTP/2 connection closed");
                }
                *slot = None;
                Poll::Ready(())
            }
        }
    }

    /// The connection task's poll: `Ready` once the connection has ended.
    fn poll_task(&self, cx: &Context<'_>) -> Poll<()> {
        self.waking.task.register(cx.waker());
        self.poll(&mut self.connection.lock())
    }
}

/// Held by a caller while it queues a request; when dropped, polls the connection (writing what
/// was queued) unless the connection task or another caller is polling it, in which case the
/// wake-up the queuing deferred goes to the task.
struct Queuing<'a>(&'a Driver);

impl<'a> Queuing<'a> {
    fn new(driver: &'a Driver) -> Self {
        driver.waking.queuing.fetch_add(1, Ordering::SeqCst);
        Self(driver)
    }
}

impl Drop for Queuing<'_> {
    fn drop(&mut self) {
        let driver = self.0;
        let mut ended = false;
        if let Some(mut slot) = driver.connection.try_lock() {
            // This poll serves every wake-up so far.
            driver.waking.deferred.store(false, Ordering::SeqCst);
            ended = driver.poll(&mut slot).is_ready();
        }
        driver.waking.queuing.fetch_sub(1, Ordering::SeqCst);
        if driver.waking.deferred.swap(false, Ordering::SeqCst) || ended {
            driver.waking.task.wake();
        }
    }
}

struct Shared {
    dial: Dial,
    authority: http::uri::Authority,
    /// The open connection: its generation, handle and driver.
    current: Mutex<Option<Conn>>,
    generation: AtomicU64,
    /// Calls open (request sent, answer not read to its end): no keep-alive PING when idle, as
    /// servers may refuse PINGs on a connection without calls.
    open_calls: AtomicUsize,
    /// Unary calls open (request queued, answer not dropped).
    unary_calls: AtomicUsize,
    /// Held while connecting: concurrent first calls share one connection.
    connecting: tokio::sync::Mutex<()>,
    /// The last handle on the stream of a unary call that ended (request sent whole, answer
    /// read to its end): dropped by the next call right after it queues its request, or when
    /// the connection is forgotten. Nothing is left to send or receive on such a stream;
    /// dropping the handle only frees it in `h2` and wakes the connection task, which the next
    /// call has just done anyway. At most one per channel.
    finished: Mutex<Option<h2::RecvStream>>,
}

impl Shared {
    /// Drop the kept handle of a finished stream, if any (outside the lock: `h2` takes its own).
    fn drop_finished(&self) {
        let finished = self.finished.lock().take();
        drop(finished);
    }
}

/// A lazily connected HTTP/2 connection to one address (cheap to clone: clones share it).
#[derive(Clone)]
pub struct H2Channel {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for H2Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Channel")
            .field("addr", &self.shared.dial.addr)
            .finish_non_exhaustive()
    }
}

impl H2Channel {
    /// A channel to `dial.addr`; nothing is connected before the first call.
    pub(super) fn new(dial: Dial) -> std::result::Result<Self, http::uri::InvalidUri> {
        let authority = http::uri::Authority::try_from(dial.addr.as_str())?;
        Ok(Self {
            shared: Arc::new(Shared {
                dial,
                authority,
                current: Mutex::new(None),
                generation: AtomicU64::new(0),
                open_calls: AtomicUsize::new(0),
                unary_calls: AtomicUsize::new(0),
                connecting: tokio::sync::Mutex::new(()),
                finished: Mutex::new(None),
            }),
        })
    }

    /// The open connection, or a new one.
    async fn sender(&self) -> std::result::Result<Conn, BoxError> {
        if let Some(c) = self.shared.current.lock().clone() {
            return Ok(c);
        }
        let _connecting = self.shared.connecting.lock().await;
        if let Some(c) = self.shared.current.lock().clone() {
            return Ok(c);
        }
        let shared = &self.shared;
        let handshake = async {
            let io = shared.dial.connect().await?;
            let r: std::result::Result<_, BoxError> = h2::client::Builder::new()
                .initial_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .max_send_buffer_size(1 << 20)
                .max_header_list_size(MAX_HEADER_LIST)
                .initial_max_send_streams(STREAMS_BEFORE_SETTINGS)
                .enable_push(false)
                .handshake::<_, Bytes>(io)
                .await
                .map_err(Into::into);
            r
        };
        let (send, connection) =
            match tokio::time::timeout(shared.dial.connect_timeout, handshake).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(Box::new(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("connecting to {}: timed out", shared.dial.addr),
                    )))
                }
            };
        let generation = shared.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut connection = connection;
        let ping = connection.ping_pong();
        let driver = Arc::new(Driver::new(connection));
        let task_driver = Arc::clone(&driver);
        let weak = Arc::downgrade(shared);
        let idle = weak.clone();
        tokio::spawn(async move {
            let keep_alive = async move {
                let Some(mut ping) = ping else {
                    return futures::future::pending::<()>().await;
                };
                loop {
                    tokio::time::sleep(KEEP_ALIVE_INTERVAL).await;
                    match idle.upgrade() {
                        None => return,
                        Some(s) if s.open_calls.load(Ordering::Relaxed) == 0 => continue,
                        Some(_) => {}
                    }
                    let pong =
                        tokio::time::timeout(KEEP_ALIVE_TIMEOUT, ping.ping(h2::Ping::opaque()));
                    if !matches!(pong.await, Ok(Ok(_))) {
                        return;
                    }
                }
            };
            tokio::select! {
                () = futures::future::poll_fn(|cx| task_driver.poll_task(cx)) => {}
                () = keep_alive => {
                    tracing::debug!(target: "ferrymq::rocketmq", "HTTP/2 keep-alive PING unanswered; closing the connection");
                }
            }
            // Closes the connection if it is still open.
            let connection = task_driver.connection.lock().take();
            drop(connection);
            forget(&weak, generation);
        });
        let conn = Conn {
            generation,
            send,
            driver,
        };
        *shared.current.lock() = Some(conn.clone());
        Ok(conn)
    }
}

/// Drop connection `generation` so that the next call reconnects.
fn forget(shared: &Weak<Shared>, generation: u64) {
    if let Some(shared) = shared.upgrade() {
        {
            let mut current = shared.current.lock();
            if current.as_ref().is_some_and(|c| c.generation == generation) {
                *current = None;
            }
        }
        shared.drop_finished();
    }
}

impl tower_service::Service<http::Request<tonic::body::Body>> for H2Channel {
    type Response = http::Response<RecvBody>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn Future<Output = std::result::Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::result::Result<(), BoxError>> {
        // Readiness (a free stream slot) is awaited in the call.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.send(request).await })
    }
}

impl H2Channel {
    async fn send(
        &self,
        request: http::Request<tonic::body::Body>,
    ) -> std::result::Result<http::Response<RecvBody>, BoxError> {
        let open = OpenCall::new(&self.shared);
        let (mut head, mut body) = request.into_parts();
        let mut uri = http::uri::Parts::from(head.uri);
        uri.scheme = Some(http::uri::Scheme::HTTP);
        uri.authority = Some(self.shared.authority.clone());
        head.uri = http::Uri::from_parts(uri)?;
        head.headers
            .entry(http::header::USER_AGENT)
            .or_insert(http::HeaderValue::from_static(USER_AGENT));
        // What the body has ready now: all of it for a unary request.
        let mut data = Bytes::new();
        let mut complete = false;
        while let Some(frame) = next_frame(&mut body).now_or_never() {
            match frame {
                None => {
                    complete = true;
                    break;
                }
                Some(frame) => {
                    // Trailers are skipped: a gRPC client sends none.
                    // One frame (a unary request's message) is sent as it is, not copied.
                    if let Ok(d) = frame?.into_data() {
                        data = if data.is_empty() {
                            d
                        } else {
                            Bytes::from([data, d].concat())
                        };
                    }
                }
            }
        }
        // A connection that is closing refuses new streams: forget it and take a new one, once.
        let mut fresh = false;
        let (generation, mut sender, driver) = loop {
            let Conn {
                generation,
                send,
                driver,
            } = self.sender().await?;
            match send.ready().await {
                Ok(s) => break (generation, s, driver),
                Err(e) => {
                    self.refused(generation, &e);
                    if fresh || !(e.is_go_away() || e.is_io()) {
                        return Err(self.unsent(&e));
                    }
                    fresh = true;
                }
            }
        };
        let request = http::Request::from_parts(head, ());
        let end = complete && data.is_empty();
        // A request sent whole in one DATA frame at most: once its answer ends, the stream is
        // closed both ways and its last handle can wait for the next call (see `finished`).
        let unary = complete && data.len() <= UNARY_KEEP_MAX;
        // The only unary call open on the channel (a blocking caller's send; telemetry's stream
        // does not count): this thread writes the request, and until `queuing` is dropped,
        // wake-ups of the connection wait. With other unary calls open, the connection task
        // writes the requests queued meanwhile together, as one write.
        let unary_call = unary.then(|| UnaryCall::new(&self.shared));
        let alone = unary && self.shared.unary_calls.load(Ordering::Relaxed) == 1;
        let queuing = alone.then(|| Queuing::new(&driver));
        let sent = sender.send_request(request, end);
        // Dropping the previous call's stream wakes the connection: as queuing, for nothing.
        self.shared.drop_finished();
        let (response, mut stream) = match sent {
            Ok(r) => r,
            Err(e) => {
                self.refused(generation, &e);
                return Err(self.unsent(&e));
            }
        };
        if !end {
            // A unary body: bounded by the caller, h2 buffers it until the window opens.
            let sent = data.is_empty() || stream.send_data(data, complete).is_ok();
            // Not sent: the peer answered and closed the stream first (a refusal, such as a
            // telemetry stream with bad credentials), or the connection broke. Either way the
            // answer, or its error, says why better than the send's "inactive stream".
            if sent && !complete {
                tokio::spawn(pipe(body, stream));
            }
        }
        drop(queuing);
        let response = response.await?;
        Ok(response.map(|recv| RecvBody {
            recv: Some(recv),
            data_done: false,
            unary,
            open,
            _unary_call: unary_call,
        }))
    }
}

impl H2Channel {
    /// Forget connection `generation` when `e` says it cannot take streams any more.
    fn refused(&self, generation: u64, e: &h2::Error) {
        if e.is_io() || e.is_go_away() {
            forget(&Arc::downgrade(&self.shared), generation);
        }
    }

    /// The error of a call that was not sent: `Unavailable` (retried by the callers) when the
    /// connection is closing or broken.
    fn unsent(&self, e: &h2::Error) -> BoxError {
        let why = format!("connection to {} is closing: {e}", self.shared.dial.addr);
        if e.is_io() || e.is_go_away() {
            Box::new(tonic::Status::unavailable(why))
        } else {
            Box::new(tonic::Status::internal(why))
        }
    }
}

fn next_frame(
    body: &mut tonic::body::Body,
) -> impl Future<Output = Option<std::result::Result<Frame<Bytes>, tonic::Status>>> + '_ {
    futures::future::poll_fn(move |cx| Pin::new(&mut *body).poll_frame(cx))
}

/// Feed the rest of a streaming request body to its HTTP/2 stream, no faster than the peer's
/// window opens: the next frame is read from the body only once this one is sent.
async fn pipe(mut body: tonic::body::Body, mut stream: h2::SendStream<Bytes>) {
    loop {
        match next_frame(&mut body).await {
            None => {
                let _ = stream.send_data(Bytes::new(), true);
                return;
            }
            Some(Ok(frame)) => {
                if let Ok(d) = frame.into_data() {
                    if send_within_window(&mut stream, d).await.is_err() {
                        return;
                    }
                }
            }
            Some(Err(e)) => {
                tracing::debug!(target: "ferrymq::rocketmq", error = %e, "request stream failed");
                stream.send_reset(h2::Reason::CANCEL);
                return;
            }
        }
    }
}

/// Send `data` in pieces the peer's flow-control window has room for.
async fn send_within_window(
    stream: &mut h2::SendStream<Bytes>,
    mut data: Bytes,
) -> std::result::Result<(), h2::Error> {
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let mut granted = stream.capacity();
        while granted == 0 {
            granted = match futures::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(r) => r?,
                None => return Err(h2::Error::from(h2::Reason::STREAM_CLOSED)),
            };
        }
        let piece = data.split_to(granted.min(data.len()));
        stream.send_data(piece, false)?;
    }
    Ok(())
}

/// Counts a call as open until its answer is dropped.
struct OpenCall(Arc<Shared>);

impl OpenCall {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.open_calls.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(shared))
    }
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.0.open_calls.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts a unary call as open until its answer is dropped.
struct UnaryCall(Arc<Shared>);

impl UnaryCall {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.unary_calls.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(shared))
    }
}

impl Drop for UnaryCall {
    fn drop(&mut self) {
        self.0.unary_calls.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The body of an answer: DATA frames, then the trailers (the gRPC status).
pub struct RecvBody {
    /// `None` only once dropped.
    recv: Option<h2::RecvStream>,
    data_done: bool,
    /// The request was sent whole (see [`Shared::finished`]).
    unary: bool,
    open: OpenCall,
    _unary_call: Option<UnaryCall>,
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        let Some(recv) = self.recv.take() else { return };
        // An answer not read to its end is dropped now: `h2` then resets the stream at once.
        if self.unary && recv.is_end_stream() {
            let previous = self.open.0.finished.lock().replace(recv);
            drop(previous);
        }
    }
}

impl http_body::Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, h2::Error>>> {
        let this = &mut *self;
        let Some(recv) = this.recv.as_mut() else {
            return Poll::Ready(None);
        };
        if !this.data_done {
            match ready!(recv.poll_data(cx)) {
                Some(Ok(d)) => {
                    let _ = recv.flow_control().release_capacity(d.len());
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.data_done = true,
            }
        }
        match ready!(recv.poll_trailers(cx)) {
            Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.as_ref().is_none_or(h2::RecvStream::is_end_stream)
    }
}

#[cfg(test)]
#[path = "channel_tests.rs"]
mod tests;
