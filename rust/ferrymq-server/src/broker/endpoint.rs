//! What every part of the broker shares: an [`Endpoint`] (one port with its sessions, faults
//! and counters) and the [`Core`] state of all endpoints. A leaf below the services: the gRPC
//! service, the remoting listener and the admin calls import it; it imports only the stores.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::BrokerConfig;
use super::fault::{self, Rpc, Unavailable};
use super::{auth, live, store, telemetry, timer, transaction};

/// One endpoint: a port, its client sessions, its faults and call counters.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) index: usize,
    pub(crate) addr: SocketAddr,
    pub(crate) addr_str: String,
    pub(crate) name: String,
    pub(crate) clients: telemetry::Clients,
    pub(crate) faults: fault::Faults,
    pub(crate) calls: [AtomicU64; Rpc::ALL.len()],
    /// gRPC connections accepted since the endpoint started (a client that reconnects shows
    /// here as a new one).
    pub(crate) accepted: AtomicU64,
    /// The remoting side of the endpoint (its address when it listens).
    pub(crate) remoting: RemotingState,
    pub(crate) accept: Mutex<Option<JoinHandle<()>>>,
    pub(crate) unavailable: Mutex<Option<Unavailable>>,
    pub(crate) conn_tx: mpsc::Sender<fault::FaultIo>,
}

impl Endpoint {
    pub(crate) fn start_accepting(self: &Arc<Self>, listener: TcpListener) {
        let ep = self.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((sock, _)) => {
                        ep.accepted.fetch_add(1, Ordering::Relaxed);
                        let _ = sock.set_nodelay(true);
                        let io = fault::FaultIo::new(sock, ep.faults.io.clone());
                        if ep.conn_tx.send(io).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "ferrymq::broker", "accept on {}: {e}", ep.addr);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        });
        if let Some(old) = self.accept.lock().replace(task) {
            old.abort();
        }
    }

    pub(crate) fn stop_accepting(&self) {
        if let Some(t) = self.accept.lock().take() {
            t.abort();
        }
    }

    /// Stop accepting, cut every open connection, then wait until the accept task is gone, so
    /// its listener is closed and the port can be bound again at once (an abort alone takes
    /// effect whenever the runtime next gets to the task). Cutting comes first: nothing held
    /// by a fault reaches the service in between.
    pub(crate) async fn refuse(&self) {
        self.faults.io.set_frozen(false);
        let task = self.accept.lock().take();
        if let Some(t) = &task {
            t.abort();
        }
        self.faults.io.cut_all();
        if let Some(t) = task {
            let _ = t.await;
        }
    }
}

/// State shared by every endpoint.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: BrokerConfig,
    pub(crate) store: store::Store,
    pub(crate) endpoints: Vec<Arc<Endpoint>>,
    pub(crate) nonces: AtomicU32,
    pub(crate) timer: timer::Timer,
    pub(crate) txs: transaction::Transactions,
    pub(crate) replies: telemetry::Replies,
    /// Server settings changed at run time (answered to clients at their next settings sync).
    pub(crate) live: live::LiveSettings,
    /// Request signatures found valid lately (checked once, not once per request).
    pub(crate) verified: auth::Verified,
    pub(crate) shutdown: CancellationToken,
}

impl Core {
    /// The endpoint index of a broker name (`"broker-<i>"`).
    pub(crate) fn broker_index(&self, name: &str) -> Option<usize> {
        self.endpoints.iter().position(|e| e.name == name)
    }
}

/// Calls per RPC on an endpoint, for stats.
pub(crate) fn calls_of(ep: &Endpoint) -> Vec<(Rpc, u64)> {
    Rpc::ALL
        .iter()
        .map(|r| (*r, ep.calls[r.index()].load(Ordering::Relaxed)))
        .collect()
}

/// The remoting side of one endpoint.
#[derive(Debug)]
pub(crate) struct RemotingState {
    /// Where it listens (`None` when remoting is off).
    pub(crate) addr: Option<SocketAddr>,
    /// Subscriptions announced by heartbeats, per (group, topic): the tag expression a pull
    /// without `FLAG_SUBSCRIPTION` filters with.
    pub(crate) subscriptions: Mutex<HashMap<(String, String), String>>,
}

impl RemotingState {
    pub(crate) fn new(addr: Option<SocketAddr>) -> Self {
        Self {
            addr,
            subscriptions: Mutex::new(HashMap::new()),
        }
    }

    /// The tag expression a heartbeat announced for (group, topic).
    pub(crate) fn subscription(&self, group: &str, topic: &str) -> Option<String> {
        self.subscriptions
            .lock()
            .get(&(group.to_string(), topic.to_string()))
            .cloned()
    }
}
