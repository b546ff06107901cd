//! One JMQ4 connection, in the shape of async-nats: [`Connection`] is a cheap `Clone` handle that
//! sends commands over a bounded channel to a connection task. The task owns the socket and a
//! `BytesMut` read buffer, writes frames (coalescing what is queued), splits frames off the
//! buffer with [`decode_frame`], and hands each response to the waiter registered under its
//! request id. It heartbeats idle connections and drops waiters whose deadline passed.
//!
//! The connection is opened with ADD_CONNECTION as the first frame, written in a single write
//! (servers sniff the protocol from the first 19 bytes, §2.2), and closed with
//! REMOVE_CONNECTION. A frame that does not decode closes the connection and fails every pending
//! request with a protocol error.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::codec::{
    command_type as ct, decode_frame, encode_frame_with, Frame, Header, QosLevel, Reader,
    BOOLEAN_ACK, DEFAULT_MAX_FRAME, VERSION,
};
use super::codes;
use super::command::{
    language, AddConnection, AddConsumer, AddProducer, Heartbeat, Payload, RemoveConnection,
    Request,
};
use crate::error::{Error, ErrorKind, Result};

/// How a client identifies itself and paces its connections.
#[derive(Clone)]
pub struct ConnectOptions {
    /// The app (a `.group` suffix is allowed; servers compare the part before the dot).
    pub app: String,
    /// The app's token. Never logged.
    pub token: String,
    /// The client's region, for nearby routing.
    pub region: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Reported client version.
    pub client_version: String,
    /// The client IP reported in ADD_CONNECTION (default: the socket's local address). The
    /// coordinator identifies members by it.
    pub client_ip: Option<String>,
    /// TCP connect + ADD_CONNECTION deadline.
    pub connect_timeout: Duration,
    /// Default request deadline.
    pub request_timeout: Duration,
    /// Heartbeat when the connection was idle this long.
    pub heartbeat_interval: Duration,
    /// Largest frame accepted from the server.
    pub max_frame: usize,
    /// Capacity of the command channel (back-pressure beyond it).
    pub queue_capacity: usize,
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("app", &self.app)
            .field("token", &"<redacted>")
            .field("region", &self.region)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            app: String::new(),
            token: String::new(),
            region: None,
            namespace: None,
            client_version: format!("ferrymq-{}", crate::VERSION),
            client_ip: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(30),
            max_frame: DEFAULT_MAX_FRAME,
            queue_capacity: 1024,
        }
    }
}

impl ConnectOptions {
    /// Check the fields that go into ADD_CONNECTION.
    pub fn validate(&self) -> Result<()> {
        if self.app.trim().is_empty() {
            return Err(Error::invalid("app", "must not be empty"));
        }
        if self.token.is_empty() {
            return Err(Error::invalid("token", "must not be empty"));
        }
        for (field, v) in [
            ("app", Some(&self.app)),
            ("token", Some(&self.token)),
            ("region", self.region.as_ref()),
            ("namespace", self.namespace.as_ref()),
        ] {
            if v.is_some_and(|v| v.len() > 127) {
                return Err(Error::invalid(
                    field,
                    "longer than 127 bytes (JMQ4 sends it with a 1-byte length)",
                ));
            }
        }
        Ok(())
    }

    /// The app as servers compare it (before any `.group` suffix).
    pub fn app_name(&self) -> &str {
        self.app.split('.').next().unwrap_or(&self.app)
    }
}

struct Pending {
    reply: oneshot::Sender<Result<Frame>>,
    deadline: Instant,
}

enum Command {
    Request {
        frame: BytesMut,
        request_id: i32,
        reply: Option<oneshot::Sender<Result<Frame>>>,
        deadline: Instant,
    },
    Close(oneshot::Sender<()>),
}

struct Shared {
    addr: String,
    local: Option<SocketAddr>,
    closed: AtomicBool,
    next_id: AtomicI32,
    producers: tokio::sync::Mutex<HashSet<String>>,
    consumers: tokio::sync::Mutex<HashSet<String>>,
    sequence: AtomicI64,
    request_timeout: Duration,
    app: String,
}

/// A JMQ4 connection handle. Cloning is cheap; all clones share one socket.
#[derive(Clone)]
pub struct Connection {
    tx: mpsc::Sender<Command>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.shared.addr)
            .field("closed", &self.is_closed())
            .finish()
    }
}

static CONNECTION_SEQUENCE: AtomicI64 = AtomicI64::new(0);

impl Connection {
    /// Connect to `addr` (`host:port`) and send ADD_CONNECTION.
    pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Connection> {
        options.validate()?;
        let stream = tokio::time::timeout(options.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::timeout(format!("connecting to JMQ4 broker {addr} timed out")))?
            .map_err(|e| {
                Error::connection(format!("cannot connect to JMQ4 broker {addr}")).with_source(e)
            })?;
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok();
        tokio::time::timeout(
            options.connect_timeout,
            Self::handshake(addr, stream, local, options),
        )
        .await
        .map_err(|_| Error::timeout(format!("ADD_CONNECTION to {addr} timed out")))?
    }

    async fn handshake(
        addr: &str,
        mut stream: TcpStream,
        local: Option<SocketAddr>,
        options: &ConnectOptions,
    ) -> Result<Connection> {
        let req = AddConnection {
            username: None,
            password: None,
            app: options.app_name().to_string(),
            token: options.token.clone(),
            region: options.region.clone(),
            namespace: options.namespace.clone(),
            language: language::PYTHON,
            client_version: options.client_version.chars().take(127).collect(),
            ip: options
                .client_ip
                .clone()
                .or_else(|| local.map(|a| a.ip().to_string()))
                .unwrap_or_default(),
            time: super::codec::now_millis(),
            sequence: CONNECTION_SEQUENCE.fetch_add(1, Ordering::Relaxed) + 1,
        };
        let mut out = BytesMut::new();
        let header = Header::request(AddConnection::TYPE, 1, QosLevel::Receive);
        encode_frame_with(&header, &mut out, |d| req.encode(VERSION, d))?;
        // One write: the server must see the 19-byte prefix in its first read.
        stream.write_all(&out).await.map_err(|e| {
            Error::connection(format!("cannot write to JMQ4 broker {addr}")).with_source(e)
        })?;
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let frame = loop {
            if let Some(f) = decode_frame(&mut buf, options.max_frame)? {
                break f;
            }
            let n = stream.read_buf(&mut buf).await.map_err(|e| {
                Error::connection(format!("JMQ4 broker {addr} broke the connection")).with_source(e)
            })?;
            if n == 0 {
                return Err(Error::connection(format!(
                    "JMQ4 broker {addr} closed the connection during ADD_CONNECTION \
                     (not a JMQ4 port?)"
                )));
            }
        };
        let resp = decode_response::<AddConnection>(&frame, VERSION).map_err(|e| {
            if e.status()
                .is_some_and(|s| s.code == codes::CN_AUTHENTICATION_ERROR)
            {
                e.context(format!(
                    "app {:?} was refused by {addr} (check app and token)",
                    options.app_name()
                ))
            } else {
                e.context(format!("ADD_CONNECTION to {addr}"))
            }
        })?;
        if let Some(n) = resp.notification {
            tracing::warn!(target: "ferrymq::jmq", "notification from broker {addr}: {n}");
        }
        let (tx, rx) = mpsc::channel(options.queue_capacity.max(1));
        let shared = Arc::new(Shared {
            addr: addr.to_string(),
            local,
            closed: AtomicBool::new(false),
            next_id: AtomicI32::new(2),
            producers: tokio::sync::Mutex::new(HashSet::new()),
            consumers: tokio::sync::Mutex::new(HashSet::new()),
            sequence: AtomicI64::new(0),
            request_timeout: options.request_timeout,
            app: options.app_name().to_string(),
        });
        tokio::spawn(run(
            stream,
            buf,
            rx,
            shared.clone(),
            options.heartbeat_interval,
            options.max_frame,
        ));
        Ok(Connection { tx, shared })
    }

    /// The broker address.
    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// The local socket address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.shared.local
    }

    /// Whether the connection is gone (closed by us, the peer, or a protocol error).
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire) || self.tx.is_closed()
    }

    fn next_id(&self) -> i32 {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        if id <= 0 {
            self.shared.next_id.store(2, Ordering::Relaxed);
            1
        } else {
            id
        }
    }

    /// Send `req` and wait for its typed response (or fail with the BooleanAck status).
    pub async fn call<R: Request>(&self, req: &R) -> Result<R::Response> {
        self.call_timeout(req, self.shared.request_timeout).await
    }

    /// [`Connection::call`] with an explicit deadline.
    pub async fn call_timeout<R: Request>(
        &self,
        req: &R,
        timeout: Duration,
    ) -> Result<R::Response> {
        let id = self.next_id();
        let mut frame = BytesMut::new();
        let header = Header::request(R::TYPE, id, QosLevel::Receive);
        encode_frame_with(&header, &mut frame, |d| req.encode(VERSION, d))?;
        let (reply, rx) = oneshot::channel();
        let deadline = crate::duration::deadline(Instant::now(), timeout);
        self.tx
            .send(Command::Request {
                frame,
                request_id: id,
                reply: Some(reply),
                deadline,
            })
            .await
            .map_err(|_| self.closed_error())?;
        let frame = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                return Err(Error::timeout(format!(
                    "{} to {} got no answer within {timeout:?}",
                    ct::name(R::TYPE),
                    self.shared.addr
                )))
            }
            Ok(Err(_)) => return Err(self.closed_error()),
            Ok(Ok(r)) => r?,
        };
        decode_response::<R>(&frame, VERSION)
    }

    /// Send `req` with header QoS ONE_WAY: the server never answers.
    pub async fn send_oneway<R: Request>(&self, req: &R) -> Result<()> {
        let id = self.next_id();
        let mut frame = BytesMut::new();
        let header = Header::request(R::TYPE, id, QosLevel::OneWay);
        encode_frame_with(&header, &mut frame, |d| req.encode(VERSION, d))?;
        self.tx
            .send(Command::Request {
                frame,
                request_id: id,
                reply: None,
                deadline: Instant::now(),
            })
            .await
            .map_err(|_| self.closed_error())
    }

    fn closed_error(&self) -> Error {
        Error::connection(format!(
            "the connection to JMQ4 broker {} is closed",
            self.shared.addr
        ))
    }

    fn next_sequence(&self) -> i64 {
        self.shared.sequence.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// ADD_PRODUCER for the topics not yet registered on this connection (once per topic).
    pub async fn ensure_producer(&self, topics: &[&str]) -> Result<()> {
        self.ensure(&self.shared.producers, topics, AddProducer::new)
            .await
    }

    /// ADD_CONSUMER for the topics not yet registered on this connection (once per topic).
    pub async fn ensure_consumer(&self, topics: &[&str]) -> Result<()> {
        self.ensure(&self.shared.consumers, topics, AddConsumer::new)
            .await
    }

    /// Send the request `add` makes of (topics, app, sequence) for the topics not yet in
    /// `registered`, then note them there.
    async fn ensure<R: Request>(
        &self,
        registered: &tokio::sync::Mutex<HashSet<String>>,
        topics: &[&str],
        add: impl FnOnce(Vec<String>, String, i64) -> R,
    ) -> Result<()> {
        let mut set = registered.lock().await;
        let new: Vec<String> = topics
            .iter()
            .filter(|t| !set.contains(**t))
            .map(|t| (*t).to_string())
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let req = add(new.clone(), self.shared.app.clone(), self.next_sequence());
        self.call(&req).await?;
        set.extend(new);
        Ok(())
    }

    /// Forget that `topic` was registered as a consumer (after a 136 from the broker).
    pub async fn forget_consumer(&self, topic: &str) {
        self.shared.consumers.lock().await.remove(topic);
    }

    /// Topics registered as producer / consumer on this connection.
    pub async fn registered(&self) -> (Vec<String>, Vec<String>) {
        let p = self.shared.producers.lock().await.iter().cloned().collect();
        let c = self.shared.consumers.lock().await.iter().cloned().collect();
        (p, c)
    }

    /// REMOVE_PRODUCER / REMOVE_CONSUMER for what was registered, REMOVE_CONNECTION, then close
    /// the socket. Errors while saying goodbye are ignored; the socket is closed regardless.
    pub async fn close(&self) {
        if self.is_closed() {
            return;
        }
        let quick = Duration::from_secs(2).min(self.shared.request_timeout);
        let (producers, consumers) = self.registered().await;
        let app = self.shared.app.clone();
        if !producers.is_empty() {
            let _ = self
                .call_timeout(
                    &super::command::RemoveProducer {
                        topics: producers,
                        app: app.clone(),
                    },
                    quick,
                )
                .await;
        }
        if !consumers.is_empty() {
            let _ = self
                .call_timeout(
                    &super::command::RemoveConsumer {
                        topics: consumers,
                        app,
                    },
                    quick,
                )
                .await;
        }
        let _ = self.call_timeout(&RemoveConnection, quick).await;
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Command::Close(tx)).await.is_ok() {
            let _ = rx.await;
        }
        self.shared.closed.store(true, Ordering::Release);
    }
}

/// Turn a response frame into the typed response of `R`, or the error its status says.
pub fn decode_response<R: Request>(frame: &Frame, version: u8) -> Result<R::Response> {
    let h = &frame.header;
    let expected = <R::Response as Payload>::TYPE;
    if h.command_type != expected && h.command_type != BOOLEAN_ACK {
        return Err(Error::protocol(format!(
            "{} answered with command type {} ({})",
            ct::name(R::TYPE),
            h.command_type,
            ct::name(h.command_type)
        )));
    }
    if h.status != 0 {
        return Err(codes::error(
            i32::from(h.status),
            h.error.clone().unwrap_or_default(),
        ));
    }
    if h.command_type == BOOLEAN_ACK && expected != BOOLEAN_ACK {
        return Err(Error::protocol(format!(
            "{} answered with an empty success BooleanAck",
            ct::name(R::TYPE)
        )));
    }
    let mut r = Reader::new(frame.payload.clone());
    let resp = R::Response::decode(&mut r, version)?;
    r.finish(ct::name(expected))?;
    Ok(resp)
}

async fn run(
    stream: TcpStream,
    mut buf: BytesMut,
    mut rx: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    heartbeat: Duration,
    max_frame: usize,
) {
    let (mut rd, mut wr) = stream.into_split();
    let mut pending: HashMap<i32, Pending> = HashMap::new();
    let mut out = BytesMut::with_capacity(64 * 1024);
    let mut last_activity = Instant::now();
    let tick_every = heartbeat
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(tick_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut close_ack: Option<oneshot::Sender<()>> = None;
    let failure: Error = 'outer: loop {
        tokio::select! {
            cmd = rx.recv() => {
                let Some(cmd) = cmd else {
                    break Error::closed("connection handle dropped");
                };
                let mut cmd = Some(cmd);
                // Coalesce whatever is queued into one write.
                while let Some(c) = cmd.take() {
                    match c {
                        Command::Request { frame, request_id, reply, deadline } => {
                            out.extend_from_slice(&frame);
                            if let Some(reply) = reply {
                                pending.insert(request_id, Pending { reply, deadline });
                            }
                        }
                        Command::Close(ack) => {
                            close_ack = Some(ack);
                        }
                    }
                    if close_ack.is_none() && out.len() < 1 << 20 {
                        cmd = rx.try_recv().ok();
                    }
                }
                if !out.is_empty() {
                    if let Err(e) = wr.write_all(&out).await {
                        break Error::connection(format!("write to JMQ4 broker {} failed", shared.addr)).with_source(e);
                    }
                    out.clear();
                    last_activity = Instant::now();
                }
                if close_ack.is_some() {
                    break Error::closed(format!("the connection to {} was closed", shared.addr));
                }
            }
            n = rd.read_buf(&mut buf) => {
                match n {
                    Ok(0) => break Error::connection(format!("JMQ4 broker {} closed the connection", shared.addr)),
                    Err(e) => break Error::connection(format!("read from JMQ4 broker {} failed", shared.addr)).with_source(e),
                    Ok(_) => {}
                }
                last_activity = Instant::now();
                loop {
                    match decode_frame(&mut buf, max_frame) {
                        Ok(Some(frame)) => {
                            if let Some(p) = pending.remove(&frame.header.request_id) {
                                let _ = p.reply.send(Ok(frame));
                            }
                        }
                        Ok(None) => break,
                        Err(e) => break 'outer e.context(format!("JMQ4 broker {}", shared.addr)),
                    }
                }
            }
            _ = tick.tick() => {
                let now = Instant::now();
                pending.retain(|_, p| p.deadline > now && !p.reply.is_closed());
                if now.duration_since(last_activity) >= heartbeat {
                    let id = shared.next_id.fetch_add(1, Ordering::Relaxed).max(1);
                    let mut frame = BytesMut::new();
                    let h = Header::request(Heartbeat::TYPE, id, QosLevel::Receive);
                    if encode_frame_with(&h, &mut frame, |_| Ok(())).is_ok() {
                        if let Err(e) = wr.write_all(&frame).await {
                            break Error::connection(format!("heartbeat to {} failed", shared.addr)).with_source(e);
                        }
                    }
                    last_activity = now;
                }
            }
        }
    };
    shared.closed.store(true, Ordering::Release);
    let _ = wr.shutdown().await;
    if failure.kind() != ErrorKind::Closed {
        tracing::debug!(target: "ferrymq::jmq", "connection to {} ended: {failure}", shared.addr);
    }
    for (_, p) in pending.drain() {
        let _ = p.reply.send(Err(Error::new(
            failure.kind(),
            failure.message().to_string(),
        )));
    }
    rx.close();
    while let Ok(c) = rx.try_recv() {
        match c {
            Command::Request { reply: Some(r), .. } => {
                let _ = r.send(Err(Error::new(
                    failure.kind(),
                    failure.message().to_string(),
                )));
            }
            Command::Close(ack) => {
                let _ = ack.send(());
            }
            Command::Request { .. } => {}
        }
    }
    if let Some(ack) = close_ack {
        let _ = ack.send(());
    }
}
