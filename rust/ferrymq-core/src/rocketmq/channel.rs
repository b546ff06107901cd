//! One HTTP/2 connection to one broker address, as the transport of the generated gRPC stub.
//!
//! [`H2Channel`] is a `tower` service over an `h2` client connection, used in place of tonic's
//! `Channel` because of what a unary RPC costs through that one: tonic's channel queues every
//! request to a buffer task, which hands it to hyper's connection task, which spawns one more
//! task per request to stream its body; each hop is a cross-thread wake-up. Here the caller's
//! task puts the request (headers and its whole body, when the body is ready at once, as a unary
//! request's always is) straight into the connection's send queue, and reads the answer from it;
//! the one task per connection does the socket I/O. A streaming request body (telemetry) is fed
//! by a task of its own, as before.
//!
//! What goes on the wire is what tonic's channel sent: the same pseudo-headers (`http` scheme,
//! the address as authority), headers (`user-agent` included), windows, and, while calls are
//! open on it, a keep-alive PING every 30 s that must be answered within 10 s. The connection is
//! opened on first use; when it fails, the calls in flight fail with it (the callers retry) and
//! the next call reconnects.
//!
//! Wake-ups per call: a blocking caller (one sync send after another) costs a wake-up of the
//! connection task to write its request and one of the caller when the answer is read. `h2`
//! wakes the connection task once more when the last handle on a finished stream is dropped,
//! which for a unary call happens while the caller finishes reading the answer; the task then
//! runs (and takes `h2`'s lock) while the caller goes on. So the finished stream's last handle
//! is kept until the next call on the channel has queued its request, when the task is
//! already woken and dropping it wakes nothing (see [`Shared::finished`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use http_body::{Body as _, Frame};
use parking_lot::Mutex;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `user-agent` tonic's channel sent (the proxy logs it).
const USER_AGENT: &str = "tonic/0.14.9";
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

struct Shared {
    dial: Dial,
    authority: http::uri::Authority,
    /// The open connection's handle and its generation.
    current: Mutex<Option<(u64, h2::client::SendRequest<Bytes>)>>,
    generation: AtomicU64,
    /// Calls open (request sent, answer not read to its end): no keep-alive PING when idle, as
    /// servers may refuse PINGs on a connection without calls.
    open_calls: AtomicUsize,
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
                connecting: tokio::sync::Mutex::new(()),
                finished: Mutex::new(None),
            }),
        })
    }

    /// The open connection, or a new one.
    async fn sender(&self) -> std::result::Result<(u64, h2::client::SendRequest<Bytes>), BoxError> {
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
                .enable_push(false)
                .handshake::<_, Bytes>(io)
                .await
                .map_err(Into::into);
            r
        };
        let (send, mut connection) =
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
        let ping = connection.ping_pong();
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
                r = &mut connection => {
                    if let Err(e) = r {
                        tracing::debug!(target: "ferrymq::rocketmq", error = %e, "HTTP/2 connection closed");
                    }
                }
                () = keep_alive => {
                    tracing::debug!(target: "ferrymq::rocketmq", "HTTP/2 keep-alive PING unanswered; closing the connection");
                }
            }
            forget(&weak, generation);
        });
        *shared.current.lock() = Some((generation, send.clone()));
        Ok((generation, send))
    }
}

/// Drop connection `generation` so that the next call reconnects.
fn forget(shared: &Weak<Shared>, generation: u64) {
    if let Some(shared) = shared.upgrade() {
        {
            let mut current = shared.current.lock();
            if current.as_ref().is_some_and(|(g, _)| *g == generation) {
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
        let (generation, sender) = self.sender().await?;
        let mut sender = match sender.ready().await {
            Ok(s) => s,
            Err(e) => {
                forget(&Arc::downgrade(&self.shared), generation);
                return Err(e.into());
            }
        };
        let request = http::Request::from_parts(head, ());
        let end = complete && data.is_empty();
        // A request sent whole in one DATA frame at most: once its answer ends, the stream is
        // closed both ways and its last handle can wait for the next call (see `finished`).
        let unary = complete && data.len() <= UNARY_KEEP_MAX;
        let sent = sender.send_request(request, end);
        // The connection task is woken now (to write the request): the previous call's
        // stream goes without a wake-up of its own.
        self.shared.drop_finished();
        let (response, mut stream) = match sent {
            Ok(r) => r,
            Err(e) => {
                if e.is_io() || e.is_go_away() {
                    forget(&Arc::downgrade(&self.shared), generation);
                }
                return Err(e.into());
            }
        };
        if !end {
            if !data.is_empty() {
                stream.send_data(data, complete)?;
            }
            if !complete {
                tokio::spawn(pipe(body, stream));
            }
        }
        let response = response.await?;
        Ok(response.map(|recv| RecvBody {
            recv: Some(recv),
            data_done: false,
            unary,
            open,
        }))
    }
}

fn next_frame(
    body: &mut tonic::body::Body,
) -> impl Future<Output = Option<std::result::Result<Frame<Bytes>, tonic::Status>>> + '_ {
    futures::future::poll_fn(move |cx| Pin::new(&mut *body).poll_frame(cx))
}

/// Feed the rest of a streaming request body to its HTTP/2 stream.
async fn pipe(mut body: tonic::body::Body, mut stream: h2::SendStream<Bytes>) {
    loop {
        match next_frame(&mut body).await {
            None => {
                let _ = stream.send_data(Bytes::new(), true);
                return;
            }
            Some(Ok(frame)) => {
                if let Ok(d) = frame.into_data() {
                    if stream.send_data(d, false).is_err() {
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

/// The body of an answer: DATA frames, then the trailers (the gRPC status).
pub struct RecvBody {
    /// `None` only once dropped.
    recv: Option<h2::RecvStream>,
    data_done: bool,
    /// The request was sent whole (see [`Shared::finished`]).
    unary: bool,
    open: OpenCall,
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
