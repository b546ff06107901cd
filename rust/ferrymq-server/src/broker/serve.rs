//! The HTTP/2 server of one endpoint: its connections, each served by one task that drives the
//! `h2` connection and every gRPC call on it (tonic's generated `MessagingService` server).
//!
//! This replaces tonic's `Server` (hyper's HTTP/2 server under tower layers) because of what one
//! call at a time cost there (`cargo bench --bench broker_load`, `sync_send`): hyper spawns a task
//! per request stream, which wakes the connection's task to write the answer, and request and
//! answer cross a dozen future and body adapters. Here the connection's task polls its calls
//! itself: a call answered at once (a send, an ack, a heartbeat) is read, served and written in
//! one run of the task, in one write, and no other task or thread is woken for it. Calls that
//! wait (long polls, telemetry streams, injected latency) stay in the task's set of calls and run
//! again when woken. While the task runs, the wake-ups that `h2` and the calls give it are only
//! noted ([`Wakes`]) and served by one more pass; a task that woke itself would be rescheduled
//! as a yield, and tokio then wakes another worker to steal it.
//!
//! What tonic's server did and this keeps: the HTTP/2 settings (8 MiB stream and 16 MiB
//! connection windows, hyper's 16 KiB header-list limit and 400 KiB send buffer, no stream
//! limit); the connection's addresses in each request's extensions (`Request::remote_addr`); the
//! `grpc-timeout` deadline (a call still unanswered at its deadline is answered `CANCELLED`,
//! "Timeout expired", and dropped); a call whose stream the client resets is dropped; answer
//! bodies written as the peer's flow control allows, as hyper pipes them; a body that fails
//! resets its stream; on shutdown, a GOAWAY and the connection served until its calls end
//! ([`super::Broker::shutdown`] cuts the connections meanwhile). Not kept: hyper's `date`
//! answer header (a RocketMQ proxy sends none, and no client reads it).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::stream::FuturesUnordered;
use futures::task::AtomicWaker;
use futures::{FutureExt as _, StreamExt as _};
use http_body::{Body, Frame};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::{Connected as _, TcpConnectInfo};
use tower_service::Service as _;

use super::fault::FaultIo;
use super::service_wire::EndpointService;
use super::unary;
use crate::proto::messaging_service_server::MessagingServiceServer;

/// tonic's server of the `MessagingService`: every call [`unary`] does not answer goes to it.
type Grpc = MessagingServiceServer<EndpointService>;

/// hyper's server defaults, which tonic's server kept: the header-list limit it announces and the
/// bytes it buffers per stream.
const MAX_HEADER_LIST: u32 = 16 << 10;
const MAX_SEND_BUFFER: usize = 400 << 10;
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// Passes over the connection and its calls in one run of the task, at most; work left after
/// them waits for the task's next turn (a call that keeps waking itself cannot hold the thread).
const MAX_PASSES: usize = 8;

/// Serve `svc` on the connections the endpoint's accept loop hands over, until `shutdown`.
pub(crate) fn spawn(
    svc: Arc<EndpointService>,
    mut conns: mpsc::Receiver<FaultIo>,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let grpc = MessagingServiceServer::from_arc(Arc::clone(&svc))
        .max_decoding_message_size(unary::MAX_DECODE)
        .max_encoding_message_size(usize::MAX);
    let service = Service { svc, grpc };
    tokio::spawn(async move {
        let mut open = JoinSet::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                io = conns.recv() => match io {
                    Some(io) => {
                        open.spawn(serve(io, service.clone(), shutdown.clone()));
                    }
                    None => break,
                },
                Some(_) = open.join_next(), if !open.is_empty() => {}
            }
        }
        drop(conns);
        while open.join_next().await.is_some() {}
    })
}

/// The service of an endpoint: its handlers, and tonic's server of them.
#[derive(Clone)]
struct Service {
    svc: Arc<EndpointService>,
    grpc: Grpc,
}

/// One connection, from the client's preface to its end.
async fn serve(io: FaultIo, service: Service, shutdown: CancellationToken) {
    let info = io.connect_info();
    let handshake = h2::server::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_local_error_reset_streams(None)
        .handshake::<_, Bytes>(io);
    let h2 = tokio::select! {
        () = shutdown.cancelled() => return,
        r = handshake => match r {
            Ok(h2) => h2,
            Err(e) => {
                tracing::debug!(target: "ferrymq::broker", "HTTP/2 handshake failed: {e}");
                return;
            }
        },
    };
    let wakes = Arc::new(Wakes::default());
    Connection {
        h2,
        calls: FuturesUnordered::new(),
        service,
        info,
        waker: Waker::from(Arc::clone(&wakes)),
        wakes,
        shutdown: Box::pin(shutdown.cancelled_owned()),
        closing: false,
    }
    .await;
}

/// The wake-ups of a connection's task. While the task runs (`running`), a wake-up is only
/// noted (`noted`) and the task makes one more pass; otherwise it wakes the task.
#[derive(Default)]
struct Wakes {
    running: AtomicBool,
    noted: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Whoever sees the task not running passes the note on (this, or the task when it stops
        // running): no wake-up is lost.
        self.noted.store(true, Ordering::SeqCst);
        if !self.running.load(Ordering::SeqCst) && self.noted.swap(false, Ordering::SeqCst) {
            self.task.wake();
        }
    }
}

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The task of one connection: the `h2` connection and the calls open on it, all polled with
/// the one [`Wakes`] waker.
struct Connection {
    h2: h2::server::Connection<FaultIo, Bytes>,
    calls: FuturesUnordered<Call>,
    service: Service,
    info: TcpConnectInfo,
    wakes: Arc<Wakes>,
    waker: Waker,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    closing: bool,
}

impl Connection {
    /// One pass: read what arrived, accept new calls, write what is queued (all in
    /// `poll_accept`), then poll the calls that are new or were woken. `Ready` once the
    /// connection has ended.
    fn pass(&mut self) -> Poll<()> {
        let mut cx = Context::from_waker(&self.waker);
        loop {
            match self.h2.poll_accept(&mut cx) {
                Poll::Ready(Some(Ok((request, respond)))) => {
                    let call = call(&mut self.service, request, respond, &self.info);
                    self.calls.push(call);
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::debug!(target: "ferrymq::broker", "HTTP/2 connection failed: {e}");
                    return Poll::Ready(());
                }
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(())) = self.calls.poll_next_unpin(&mut cx) {}
        Poll::Pending
    }
}

impl Future for Connection {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = &mut *self;
        me.wakes.task.register(cx.waker());
        if !me.closing && me.shutdown.as_mut().poll(cx).is_ready() {
            me.closing = true;
            me.h2.graceful_shutdown();
        }
        me.wakes.running.store(true, Ordering::SeqCst);
        for _ in 0..MAX_PASSES {
            me.wakes.noted.store(false, Ordering::SeqCst);
            if me.pass().is_ready() {
                me.wakes.running.store(false, Ordering::SeqCst);
                return Poll::Ready(());
            }
            if !me.wakes.noted.load(Ordering::SeqCst) {
                break;
            }
        }
        me.wakes.running.store(false, Ordering::SeqCst);
        if me.wakes.noted.swap(false, Ordering::SeqCst) {
            // Woken after the last pass, or work left after `MAX_PASSES`: run again.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// One call: the request to the service, its answer to the stream. A unary call whose whole
/// body is here goes to [`unary`]; every other call (and a unary one [`unary`] gives back) to
/// tonic's server, its body starting with what was read of it.
fn call(
    service: &mut Service,
    request: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    info: &TcpConnectInfo,
) -> Call {
    let (mut parts, mut stream) = request.into_parts();
    let deadline = grpc_timeout(&parts.headers);
    parts.extensions.insert(info.clone());
    let mut read = Read::default();
    if unary::serves(parts.uri.path()) && !parts.headers.contains_key("grpc-encoding") {
        match whole(&mut stream) {
            Ok(payload) => match unary::start(&service.svc, parts, &payload) {
                Ok(reply) => return answer(Reply::Unary(reply), deadline, respond),
                Err(given_back) => {
                    parts = *given_back;
                    read = Read {
                        data: Some(payload),
                        data_done: true,
                        trailers: None,
                        ended: true,
                    };
                }
            },
            Err(partly) => read = *partly,
        }
    }
    let request = http::Request::from_parts(parts, RecvBody { read, stream });
    answer(Reply::Grpc(service.grpc.call(request)), deadline, respond)
}

fn answer(
    reply: Reply,
    deadline: Option<Duration>,
    respond: h2::server::SendResponse<Bytes>,
) -> Call {
    Box::pin(Answer {
        state: State::Serving {
            reply,
            deadline,
            sleep: None,
        },
        respond: Some(respond),
    })
}

/// The whole body of a request if it has all arrived (its data frames, no trailers), else
/// what was read of it (boxed: the rare way).
fn whole(stream: &mut h2::RecvStream) -> Result<Bytes, Box<Read>> {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    let mut data: Option<Bytes> = None;
    loop {
        match stream.poll_data(&mut cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                let _ = stream.flow_control().release_capacity(chunk.len());
                data = Some(match data {
                    None => chunk,
                    Some(before) => {
                        let mut joined = BytesMut::with_capacity(before.len() + chunk.len());
                        joined.extend_from_slice(&before);
                        joined.extend_from_slice(&chunk);
                        joined.freeze()
                    }
                });
            }
            Poll::Ready(None) => break,
            Poll::Ready(Some(Err(_))) | Poll::Pending => {
                return Err(Box::new(Read {
                    data,
                    ..Read::default()
                }))
            }
        }
    }
    let trailers = match stream.poll_trailers(&mut cx) {
        Poll::Ready(Ok(None)) => return Ok(data.unwrap_or_default()),
        Poll::Ready(Ok(Some(trailers))) => Some(trailers),
        Poll::Ready(Err(_)) | Poll::Pending => None,
    };
    Err(Box::new(Read {
        data,
        data_done: true,
        trailers,
        ended: false,
    }))
}

type GrpcFuture = <Grpc as tower_service::Service<http::Request<RecvBody>>>::Future;

/// The answer a call is waiting for: from tonic's server, or from [`unary`].
enum Reply {
    Grpc(GrpcFuture),
    Unary(unary::Reply),
}

/// What to write: an answer from tonic's server (headers and a body), or a unary answer's
/// headers and encoded message, followed by `grpc-status: 0`.
enum Outcome {
    Http(http::Response<tonic::body::Body>),
    Unary(http::HeaderMap, Bytes),
}

impl Reply {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Outcome> {
        match self {
            Reply::Grpc(f) => match ready!(f.poll_unpin(cx)) {
                Ok(response) => Poll::Ready(Outcome::Http(response)),
                Err(never) => match never {},
            },
            Reply::Unary(f) => Poll::Ready(match ready!(f.poll_unpin(cx)) {
                Ok((headers, message)) => Outcome::Unary(headers, message),
                Err(status) => Outcome::Http(status.into_http()),
            }),
        }
    }
}

/// A call in progress: waiting for its answer, then writing its body.
struct Answer {
    state: State,
    respond: Option<h2::server::SendResponse<Bytes>>,
}

enum State {
    Serving {
        reply: Reply,
        deadline: Option<Duration>,
        /// Armed when the answer is not ready at the first poll (a call answered at once needs
        /// no timer).
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    },
    Writing(Pipe),
}

impl Future for Answer {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = &mut *self;
        if let State::Serving {
            reply,
            deadline,
            sleep,
        } = &mut me.state
        {
            let Some(respond) = me.respond.as_mut() else {
                return Poll::Ready(());
            };
            let outcome = match reply.poll(cx) {
                Poll::Ready(outcome) => outcome,
                Poll::Pending => {
                    // As hyper: a call the client reset is dropped.
                    if respond.poll_reset(cx).is_ready() {
                        return Poll::Ready(());
                    }
                    // As tonic's `GrpcTimeout`: past the call's deadline, CANCELLED.
                    let Some(d) = *deadline else {
                        return Poll::Pending;
                    };
                    let sleep = sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(d)));
                    ready!(sleep.as_mut().poll(cx));
                    Outcome::Http(tonic::Status::cancelled("Timeout expired").into_http())
                }
            };
            let Some(mut respond) = me.respond.take() else {
                return Poll::Ready(());
            };
            match outcome {
                Outcome::Unary(headers, message) => {
                    let mut head = http::Response::new(());
                    *head.headers_mut() = headers;
                    let sent = respond.send_response(head, false).and_then(|mut send| {
                        send.send_data(message, false)?;
                        send.send_trailers(unary::ok_trailers())
                    });
                    if let Err(e) = sent {
                        tracing::debug!(target: "ferrymq::broker", "sending an answer: {e}");
                        respond.send_reset(h2::Reason::INTERNAL_ERROR);
                    }
                    return Poll::Ready(());
                }
                Outcome::Http(response) => {
                    let (parts, body) = response.into_parts();
                    let head = http::Response::from_parts(parts, ());
                    if body.is_end_stream() {
                        if let Err(e) = respond.send_response(head, true) {
                            tracing::debug!(target: "ferrymq::broker", "sending an answer: {e}");
                            respond.send_reset(h2::Reason::INTERNAL_ERROR);
                        }
                        return Poll::Ready(());
                    }
                    match respond.send_response(head, false) {
                        Ok(send) => {
                            me.state = State::Writing(Pipe {
                                body,
                                send,
                                held: None,
                            });
                        }
                        Err(e) => {
                            tracing::debug!(target: "ferrymq::broker", "sending an answer: {e}");
                            respond.send_reset(h2::Reason::INTERNAL_ERROR);
                            return Poll::Ready(());
                        }
                    }
                }
            }
        }
        match &mut me.state {
            State::Writing(pipe) => pipe.poll(cx),
            State::Serving { .. } => Poll::Ready(()),
        }
    }
}

/// An answer's body written to its stream, as hyper's server writes one: the next frame is
/// taken from the body only once the last one was handed to `h2`, and a data frame waits for
/// stream send capacity (at least one byte; `h2` holds the rest until the window allows).
struct Pipe {
    body: tonic::body::Body,
    send: h2::SendStream<Bytes>,
    /// A data frame (and whether it ends the stream) waiting for capacity.
    held: Option<(Bytes, bool)>,
}

impl Pipe {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.send.poll_reset(cx).is_ready() {
                return Poll::Ready(());
            }
            if self.held.is_some() {
                while self.send.capacity() == 0 {
                    match ready!(self.send.poll_capacity(cx)) {
                        Some(Ok(0)) => {}
                        Some(Ok(_)) => break,
                        Some(Err(_)) | None => return Poll::Ready(()),
                    }
                }
                let Some((data, eos)) = self.held.take() else {
                    continue;
                };
                if self.send.send_data(data, eos).is_err() || eos {
                    return Poll::Ready(());
                }
                continue;
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let eos = self.body.is_end_stream();
                        if data.is_empty() {
                            // No capacity needed (an explicit end of the stream, say).
                            if self.send.send_data(data, eos).is_err() || eos {
                                return Poll::Ready(());
                            }
                        } else {
                            self.send.reserve_capacity(1);
                            self.held = Some((data, eos));
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.send.reserve_capacity(0);
                            if let Err(e) = self.send.send_trailers(trailers) {
                                tracing::debug!(target: "ferrymq::broker", "sending trailers: {e}");
                            }
                            return Poll::Ready(());
                        }
                    }
                },
                Some(Err(e)) => {
                    tracing::debug!(target: "ferrymq::broker", "answer body failed: {e}");
                    self.send.send_reset(h2::Reason::INTERNAL_ERROR);
                    return Poll::Ready(());
                }
                None => {
                    // Neither an end-of-stream data frame nor trailers came: end the stream.
                    let _ = self.send.send_data(Bytes::new(), true);
                    return Poll::Ready(());
                }
            }
        }
    }
}

/// What was read of a request's body before it was handed to tonic's server (by [`whole`]).
#[derive(Default)]
struct Read {
    /// Its data frames, joined.
    data: Option<Bytes>,
    /// Every data frame was read.
    data_done: bool,
    /// Its trailers.
    trailers: Option<http::HeaderMap>,
    /// Nothing more to read: the stream has ended.
    ended: bool,
}

/// A request's body: what was read of it before, then its data frames (their flow-control
/// capacity given back as they are read), then its trailers.
pub(crate) struct RecvBody {
    read: Read,
    stream: h2::RecvStream,
}

impl Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let me = &mut *self;
        if let Some(data) = me.read.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if !me.read.data_done {
            match ready!(me.stream.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = me.stream.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                // RST_STREAM with NO_ERROR ends the request early without failing it
                // (RFC 9113 §8.1), as hyper reads it.
                Some(Err(e)) if e.reason() == Some(h2::Reason::NO_ERROR) => {
                    return Poll::Ready(None)
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => me.read.data_done = true,
            }
        }
        if let Some(trailers) = me.read.trailers.take() {
            me.read.ended = true;
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        if me.read.ended {
            return Poll::Ready(None);
        }
        match ready!(me.stream.poll_trailers(cx)) {
            Ok(Some(trailers)) => {
                me.read.ended = true;
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Ok(None) => {
                me.read.ended = true;
                Poll::Ready(None)
            }
            Err(e) => Poll::Ready(Some(Err(e))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.data.is_none()
            && self.read.trailers.is_none()
            && (self.read.ended || self.stream.is_end_stream())
    }
}

/// The `grpc-timeout` of a request, read as tonic's server reads it (at most 8 digits and a
/// unit; anything else means no deadline).
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    let (n, unit) = v.split_at(v.len().checked_sub(1)?);
    if n.len() > 8 {
        return None;
    }
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_is_read_as_tonic_reads_it() {
        let with = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert("grpc-timeout", v.parse().unwrap());
            grpc_timeout(&h)
        };
        assert_eq!(with("3S"), Some(Duration::from_secs(3)));
        assert_eq!(with("250m"), Some(Duration::from_millis(250)));
        assert_eq!(with("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(with("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(with("123456789n"), None);
        assert_eq!(with("5x"), None);
        assert_eq!(with("S"), None);
        assert_eq!(grpc_timeout(&http::HeaderMap::new()), None);
    }
}
