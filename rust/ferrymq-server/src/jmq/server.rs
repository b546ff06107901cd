//! The embedded JMQ4 server: a tokio TCP server that behaves like a JoyQueue broker as the
//! reference describes it, quirks included (§8), for tests and development.
//!
//! * One server has one or more *nodes* (brokers), each on its own loopback port, sharing one
//!   [`JmqStore`]; partition groups are led by the nodes in turn, so leader routing, "not
//!   leader" codes and the coordinator can be exercised.
//! * Protocol sniffing on the first read (≥ 19 bytes, magic, known type), ADD_CONNECTION first
//!   with app/token authentication, app checks on every later command, BooleanAck (-128) for
//!   request-level failures and payload-less commands, silence for header QoS ONE_WAY, a closed
//!   socket for undecodable frames and unknown command types, the COMMIT_ACK count bug.
//! * Fault injection: unavailable, an error code for the next N calls, latency, per-node health,
//!   coordinator loss, leader moves and restart (all connections dropped, data kept).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::codec::{
    decode_frame, encode_frame_with, sniff, Frame, Header, QosLevel, BOOLEAN_ACK, DEFAULT_MAX_FRAME,
};
use super::command::AnyRequest;
use super::handle::{handle, Ctx, Reply};
use super::store::{JmqStore, StoreConfig};
use crate::error::Result;

/// The app every embedded server knows unless configured otherwise (`bin/topic.sh` always
/// creates `test_token`, §8.9).
pub const DEFAULT_APP: &str = "test_app";
/// The token of [`DEFAULT_APP`].
pub const DEFAULT_TOKEN: &str = "test_token";

/// Settings of an embedded JMQ4 server.
#[derive(Debug, Clone)]
pub struct JmqServerConfig {
    /// Address to bind (loopback).
    pub bind_host: String,
    /// Host advertised in FETCH_CLUSTER / FIND_COORDINATOR (a real broker advertises its NIC IP).
    pub advertised_host: Option<String>,
    /// Number of broker nodes (each on its own port).
    pub nodes: usize,
    /// Fixed ports per node (0 or missing: any free port).
    pub ports: Vec<u16>,
    /// The data center (region) of each node; missing entries are `"default"`.
    pub regions: Vec<String>,
    /// Apps and tokens.
    pub apps: Vec<(String, String)>,
    /// Store settings.
    pub store: StoreConfig,
    /// Largest frame accepted.
    pub max_frame: usize,
}

impl Default for JmqServerConfig {
    fn default() -> Self {
        JmqServerConfig {
            bind_host: "127.0.0.1".into(),
            advertised_host: None,
            nodes: 1,
            ports: Vec::new(),
            regions: Vec::new(),
            apps: vec![(DEFAULT_APP.into(), DEFAULT_TOKEN.into())],
            store: StoreConfig::default(),
            max_frame: DEFAULT_MAX_FRAME,
        }
    }
}

/// One broker node of the server.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Broker id (1-based).
    pub id: i32,
    /// Bound address.
    pub addr: SocketAddr,
    /// Data center / region.
    pub region: String,
}

#[derive(Debug, Default)]
struct FailRule {
    command: Option<i8>,
    code: i32,
    remaining: u32,
}

#[derive(Debug, Default)]
/// Injected faults; the request handler reads them.
pub(super) struct Faults {
    pub(super) unavailable: bool,
    pub(super) latency: Duration,
    rules: Vec<FailRule>,
    pub(super) health: HashMap<i32, f64>,
    pub(super) no_coordinator: bool,
}

impl Faults {
    pub(super) fn take(&mut self, command: i8) -> Option<i32> {
        let rule = self
            .rules
            .iter_mut()
            .find(|r| r.remaining > 0 && r.command.is_none_or(|c| c == command))?;
        rule.remaining -= 1;
        let code = rule.code;
        self.rules.retain(|r| r.remaining > 0);
        Some(code)
    }
}

pub(super) struct Inner {
    pub(super) store: Arc<JmqStore>,
    pub(super) nodes: Vec<NodeInfo>,
    pub(super) advertised_host: String,
    pub(super) faults: Mutex<Faults>,
    pub(super) conns: Mutex<HashMap<u64, CancellationToken>>,
    pub(super) next_conn: AtomicU64,
    pub(super) shutdown: CancellationToken,
    pub(super) max_frame: usize,
    pub(super) requests: AtomicU64,
}

/// A running embedded JMQ4 server. Dropping it shuts it down.
pub struct JmqServer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for JmqServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JmqServer")
            .field("nodes", &self.inner.nodes)
            .finish_non_exhaustive()
    }
}

impl JmqServer {
    /// Bind every node and start serving (needs a tokio runtime).
    pub async fn start(config: JmqServerConfig) -> Result<JmqServer> {
        let nodes = config.nodes.clamp(1, 64);
        let ids: Vec<i32> = (1..=nodes as i32).collect();
        let store = JmqStore::new(config.store.clone(), ids.clone());
        Self::start_with_store(config, store).await
    }

    /// Start serving `store` (whose node ids must be `1..=config.nodes`).
    pub async fn start_with_store(
        config: JmqServerConfig,
        store: Arc<JmqStore>,
    ) -> Result<JmqServer> {
        let n = config.nodes.clamp(1, 64);
        for (app, token) in &config.apps {
            store.add_app(app, token);
        }
        let mut listeners = Vec::with_capacity(n);
        let mut infos = Vec::with_capacity(n);
        for i in 0..n {
            let port = config.ports.get(i).copied().unwrap_or(0);
            let l = crate::listen(&config.bind_host, port).await?;
            infos.push(NodeInfo {
                id: i as i32 + 1,
                addr: l.local_addr()?,
                region: config
                    .regions
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| "default".into()),
            });
            listeners.push(l);
        }
        let inner = Arc::new(Inner {
            store,
            advertised_host: config
                .advertised_host
                .clone()
                .unwrap_or_else(|| infos[0].addr.ip().to_string()),
            nodes: infos,
            faults: Mutex::new(Faults::default()),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(1),
            shutdown: CancellationToken::new(),
            max_frame: config.max_frame,
            requests: AtomicU64::new(0),
        });
        for (i, l) in listeners.into_iter().enumerate() {
            tokio::spawn(accept_loop(inner.clone(), i, l));
        }
        Ok(JmqServer { inner })
    }

    /// `jmq://host:port` of the first node (any node works as a bootstrap).
    pub fn endpoint(&self) -> String {
        format!("jmq://{}", self.inner.nodes[0].addr)
    }

    /// The nodes.
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.inner.nodes
    }

    /// The store.
    pub fn store(&self) -> &Arc<JmqStore> {
        &self.inner.store
    }

    /// Create a topic (see [`JmqStore::create_topic`]).
    pub fn create_topic(&self, name: &str, partitions: u16) -> Result<()> {
        self.inner.store.create_topic(name, partitions, false)
    }

    /// Register an app and its token.
    pub fn add_app(&self, app: &str, token: &str) {
        self.inner.store.add_app(app, token);
    }

    /// Requests handled so far (all nodes).
    pub fn request_count(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Connections currently open.
    pub fn connection_count(&self) -> usize {
        self.inner.conns.lock().len()
    }

    /// While `true`, every connection is closed and new ones are dropped at once.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.inner.faults.lock().unavailable = unavailable;
        if unavailable {
            self.drop_connections();
        }
    }

    /// Answer the next `times` requests of `command` (any command when `None`) with `code`:
    /// a per-topic code for PRODUCE_MESSAGE and FETCH_TOPIC_MESSAGE, a BooleanAck otherwise.
    pub fn fail_next(&self, command: Option<i8>, code: i32, times: u32) {
        if times > 0 {
            self.inner.faults.lock().rules.push(FailRule {
                command,
                code,
                remaining: times,
            });
        }
    }

    /// Delay every request by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        self.inner.faults.lock().latency = latency;
    }

    /// The FETCH_HEALTH point reported by `node` (0 = healthy, as a real server always says).
    pub fn set_health(&self, node: i32, point: f64) {
        self.inner.faults.lock().health.insert(node, point);
    }

    /// Make FIND_COORDINATOR report no coordinator (181) and FETCH_ASSIGNED_PARTITION fail.
    pub fn set_coordinator_available(&self, available: bool) {
        self.inner.faults.lock().no_coordinator = !available;
    }

    /// Move the leader of partition group `group` of `topic` to `node`.
    pub fn set_leader(&self, topic: &str, group: i32, node: i32) -> Result<()> {
        self.inner.store.set_leader(topic, group, node)
    }

    /// Drop every connection (as a broker restart does); data and topics are kept.
    pub fn restart(&self) {
        self.drop_connections();
    }

    fn drop_connections(&self) {
        let conns: Vec<CancellationToken> = self.inner.conns.lock().values().cloned().collect();
        for c in conns {
            c.cancel();
        }
    }

    /// Stop accepting and close every connection.
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.drop_connections();
    }
}

impl Drop for JmqServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub(super) fn coordinator_of<'a>(inner: &'a Inner, app: &str) -> &'a NodeInfo {
    let h = super::message::java_string_hash(app).unsigned_abs() as usize;
    &inner.nodes[h % inner.nodes.len()]
}

async fn accept_loop(inner: Arc<Inner>, node: usize, listener: TcpListener) {
    loop {
        let accepted = tokio::select! {
            () = inner.shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if inner.faults.lock().unavailable {
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve(inner.clone(), node, stream, peer));
    }
}

async fn serve(inner: Arc<Inner>, node: usize, stream: TcpStream, peer: SocketAddr) {
    let conn = inner.next_conn.fetch_add(1, Ordering::Relaxed);
    let cancel = inner.shutdown.child_token();
    inner.conns.lock().insert(conn, cancel.clone());
    let ctx = Arc::new(Ctx::new(inner.clone(), node, conn, peer));
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Bytes>(256);
    let writer_cancel = cancel.clone();
    let writer = tokio::spawn(async move {
        let mut buf = BytesMut::new();
        loop {
            let first = tokio::select! {
                () = writer_cancel.cancelled() => break,
                f = rx.recv() => f,
            };
            let Some(first) = first else { break };
            buf.extend_from_slice(&first);
            while buf.len() < 1 << 20 {
                match rx.try_recv() {
                    Ok(more) => buf.extend_from_slice(&more),
                    Err(_) => break,
                }
            }
            if wr.write_all(&buf).await.is_err() {
                writer_cancel.cancel();
                break;
            }
            buf.clear();
        }
        let _ = wr.shutdown().await;
    });
    let mut buf = BytesMut::with_capacity(64 * 1024);
    // Protocol detection needs the whole 19-byte prefix in the very first read (§2.2).
    let first = tokio::select! {
        () = cancel.cancelled() => Ok(0),
        r = rd.read_buf(&mut buf) => r,
    };
    let ok = matches!(first, Ok(n) if n > 0) && sniff(&buf);
    if ok {
        'conn: loop {
            loop {
                match decode_frame(&mut buf, inner.max_frame) {
                    Ok(Some(frame)) => {
                        if !dispatch(&ctx, frame, &tx).await {
                            break 'conn;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(target: "ferrymq::jmq::server", "closing connection {conn}: {e}");
                        break 'conn;
                    }
                }
            }
            let n = tokio::select! {
                () = cancel.cancelled() => break,
                r = rd.read_buf(&mut buf) => r,
            };
            match n {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    cancel.cancel();
    let _ = writer.await;
    inner.conns.lock().remove(&conn);
    inner.store.release_connection(conn);
}

/// Handle one frame; `false` closes the connection.
async fn dispatch(ctx: &Arc<Ctx>, frame: Frame, tx: &mpsc::Sender<Bytes>) -> bool {
    if frame.header.response {
        return true;
    }
    let header = frame.header;
    let req = match AnyRequest::decode(header.command_type, header.version, frame.payload) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(target: "ferrymq::jmq::server", "undecodable request: {e}");
            return false;
        }
    };
    ctx.inner.requests.fetch_add(1, Ordering::Relaxed);
    if matches!(req, AnyRequest::AddConnection(_)) {
        // Handled in order: everything after it depends on the binding.
        let reply = handle(ctx, &header, req).await;
        send(tx, &header, reply).await;
        return true;
    }
    let ctx = ctx.clone();
    let tx = tx.clone();
    tokio::spawn(async move {
        let reply = handle(&ctx, &header, req).await;
        send(&tx, &header, reply).await;
    });
    true
}

async fn send(tx: &mpsc::Sender<Bytes>, req: &Header, reply: Reply) {
    if req.qos == QosLevel::OneWay {
        // The server never answers ONE_WAY requests, not even with an error (§2, §8.7).
        return;
    }
    let (ty, status, error, payload) = match reply {
        Reply::Typed(t, p) => (t, 0u8, None, p),
        Reply::Ack(code, msg) => (BOOLEAN_ACK, (code & 0xFF) as u8, msg, BytesMut::new()),
    };
    let h = Header::response_to(req, ty, status, error);
    let mut out = BytesMut::with_capacity(payload.len() + 64);
    if encode_frame_with(&h, &mut out, |d| {
        d.extend_from_slice(&payload);
        Ok(())
    })
    .is_ok()
    {
        let _ = tx.send(out.freeze()).await;
    }
}

impl JmqServer {
    /// Serve JMQ4 next to an embedded RocketMQ broker: the JMQ4 nodes learn the broker's topics
    /// (a topic made with `create_topic`, by auto-creation or the admin API) on first use, each
    /// RocketMQ queue becoming a JMQ4 partition. Messages are kept per protocol: the two wire
    /// formats have separate stores, so a message sent over one protocol is not delivered over
    /// the other.
    pub async fn start_for_broker(
        broker: &crate::broker::Broker,
        config: JmqServerConfig,
    ) -> Result<JmqServer> {
        let nodes = config.nodes.clamp(1, 64);
        let store = JmqStore::new(config.store.clone(), (1..=nodes as i32).collect());
        let core = Arc::downgrade(&broker.core);
        store.set_topic_source(Arc::new(move |name: &str| {
            let core = core.upgrade()?;
            let topic = core.store.topic(name)?;
            u16::try_from(topic.queues.len()).ok()
        }));
        Self::start_with_store(config, store).await
    }
}
