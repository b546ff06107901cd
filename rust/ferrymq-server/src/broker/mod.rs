//! The embedded broker: an in-process Apache RocketMQ 5 (`apache.rocketmq.v2`) gRPC broker for
//! development, tests and benchmarks, with fault injection.
//!
//! A [`Broker`] runs `endpoints` gRPC servers on loopback ports; each endpoint plays one
//! RocketMQ broker with its local-mode proxy (its own port, its own client settings, its own
//! faults). Topics spread their queues over the endpoints; any endpoint answers QueryRoute for
//! every topic. Behaviour follows the proxy's "server rules" (rocketmq-v2 reference §6).
//!
//! Unless [`BrokerConfig::remoting`] is off, every endpoint also listens on a second loopback
//! port for the classic remoting protocol, over the same store: a remoting client finds routes
//! there (any of these ports is also a name server), pulls by offset, commits offsets and sends
//! batches, and sees what gRPC clients send (and the other way round).
//!
//! | module | concept |
//! | --- | --- |
//! | [`config`] | [`BrokerConfig`]: limits and timers (proxy defaults) |
//! | [`store`] | topics, queues (one lock each), groups, memory bound |
//! | [`record`] | the compact stored form of a message, per-queue record chunks, accounted size |
//! | [`route`] | QueryRoute / QueryAssignment answers |
//! | [`send`] | SendMessage checks, message kinds, queue choice |
//! | [`telemetry`] | client settings per endpoint, merged echo, pushed commands |
//! | [`live`] | server settings changed at run time, answered at the clients' next sync |
//! | [`cursor`] | POP cursor of one group on one queue: per-offset slots, in-flight count |
//! | [`pop`] | receive / ack / invisibility / receipt handles / FIFO blocking / DLQ |
//! | `handout` | a receive's answer stream: what it could not write goes back to the queue |
//! | [`transaction`] | half messages, EndTransaction, orphan check-back |
//! | [`timer`] | delayed delivery and RecallMessage |
//! | [`fault`] | fault injection per endpoint |
//! | [`auth`] | client id and HMAC-SHA1 signature checks |
//! | `serve` | the HTTP/2 server: one task per connection drives it and its gRPC calls |
//! | [`service`] | the `MessagingService` implementation: server, routes, offsets, transactions, telemetry |
//! | `service_send` | SendMessage: batches, transaction and delay messages |
//! | `service_receive` | ReceiveMessage, AckMessage, ChangeInvisibleDuration, dead letters |
//! | `unary` | the unary calls answered without tonic's codec (decode, handler, encode) |
//! | `service_wire` | what the service's handlers share: admission, lookups, statuses, answer streams |
//! | [`remoting`] | the classic remoting protocol: listener, connections, name server, offsets, ACL |
//! | [`remoting_pull`] | remoting pulls (result codes, long polling) and the stored-record format |
//! | [`remoting_send`] | remoting sends and batches, mapped onto the store's messages |
//! | [`remoting_wire`] | what the remoting handlers share: connection, replies, header fields |
//! | [`admin`] | topics/groups admin, faults, commands and inspection of a running [`Broker`] |

pub mod admin;
pub mod auth;
pub mod config;
pub mod cursor;
pub mod endpoint;
pub mod fault;
pub(crate) mod handout;
pub mod live;
pub mod pop;
pub mod record;
pub mod remoting;
pub mod remoting_pull;
pub mod remoting_send;
pub mod remoting_wire;
pub mod route;
pub mod send;
pub(crate) mod serve;
pub mod service;
pub(crate) mod service_receive;
pub(crate) mod service_send;
pub(crate) mod service_wire;
pub mod store;
pub mod telemetry;
pub mod timer;
pub mod transaction;
pub(crate) mod unary;

#[cfg(test)]
mod receive_tests;
#[cfg(test)]
mod remoting_tests;
#[cfg(test)]
mod serve_tests;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use config::{BrokerConfig, Credentials, WhenFull};
pub use fault::{Rpc, StatusFault, Unavailable};
pub use store::{GroupConfig, TopicType};

use endpoint::{Core, Endpoint};

use crate::error::Result;

/// A running embedded broker. Dropping it stops the servers.
#[derive(Debug)]
pub struct Broker {
    pub(crate) core: Arc<Core>,
    servers: Mutex<Vec<JoinHandle<()>>>,
}

impl Broker {
    /// Bind the endpoints' ports and start serving. Must run inside a tokio runtime.
    pub async fn start(config: BrokerConfig) -> Result<Broker> {
        config.validate()?;
        let host = config.host.to_string();
        let mut listeners = Vec::with_capacity(config.endpoints);
        for i in 0..config.endpoints {
            let port = config.ports.get(i).copied().unwrap_or(0);
            listeners.push(crate::listen(&host, port).await?);
        }
        let mut remoting_listeners = Vec::new();
        if config.remoting {
            for _ in 0..config.endpoints {
                remoting_listeners.push(crate::listen(&host, 0).await?);
            }
        }
        let shutdown = CancellationToken::new();
        let mut endpoints = Vec::new();
        let mut receivers = Vec::new();
        for (i, l) in listeners.iter().enumerate() {
            let (tx, rx) = mpsc::channel(256);
            let addr = l.local_addr()?;
            endpoints.push(Arc::new(Endpoint {
                index: i,
                addr,
                addr_str: addr.to_string(),
                name: format!("broker-{i}"),
                clients: telemetry::Clients::default(),
                faults: fault::Faults::default(),
                calls: Default::default(),
                accepted: AtomicU64::new(0),
                remoting: endpoint::RemotingState::new(
                    remoting_listeners
                        .get(i)
                        .map(TcpListener::local_addr)
                        .transpose()?,
                ),
                accept: Mutex::new(None),
                unavailable: Mutex::new(None),
                conn_tx: tx,
            }));
            receivers.push(rx);
        }
        let core = Arc::new(Core {
            store: store::Store::new(config.endpoints),
            live: live::LiveSettings::new(&config),
            config,
            endpoints,
            nonces: AtomicU32::new(1),
            timer: timer::Timer::default(),
            txs: transaction::Transactions::default(),
            replies: telemetry::Replies::default(),
            verified: auth::Verified::default(),
            shutdown,
        });
        let mut servers = Vec::new();
        for ((ep, l), rx) in core.endpoints.iter().zip(listeners).zip(receivers) {
            ep.start_accepting(l);
            servers.push(service::spawn_server(core.clone(), ep.clone(), rx));
        }
        for (ep, l) in core.endpoints.iter().zip(remoting_listeners) {
            servers.push(remoting::spawn_listener(core.clone(), ep.clone(), l));
        }
        servers.push(tokio::spawn(timer_task(core.clone())));
        servers.push(tokio::spawn(transaction_task(core.clone())));
        tracing::info!(target: "ferrymq::broker", "embedded broker listening on {}", access_point(&core));
        Ok(Broker {
            core,
            servers: Mutex::new(servers),
        })
    }

    /// The access point a client connects to: every endpoint as `host:port`, joined by `;`
    /// (the RocketMQ clients' endpoints syntax). Any one endpoint serves every route.
    pub fn access_point(&self) -> String {
        access_point(&self.core)
    }

    /// The socket address of every endpoint.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.core.endpoints.iter().map(|e| e.addr).collect()
    }

    /// The remoting address of every endpoint (empty when [`BrokerConfig::remoting`] is off).
    pub fn remoting_addresses(&self) -> Vec<SocketAddr> {
        self.core
            .endpoints
            .iter()
            .filter_map(|e| e.remoting.addr)
            .collect()
    }

    /// `remoting://host:port` of the first endpoint: the name-server address a remoting client
    /// starts from (any endpoint serves every route). Empty when remoting is off.
    pub fn remoting_access_point(&self) -> String {
        self.remoting_addresses()
            .first()
            .map_or_else(String::new, |a| format!("remoting://{a}"))
    }

    /// The configuration.
    pub fn config(&self) -> &BrokerConfig {
        &self.core.config
    }

    /// Stop serving: close the ports, cut connections, end background tasks.
    pub async fn shutdown(&self) {
        self.core.shutdown.cancel();
        for ep in &self.core.endpoints {
            ep.stop_accepting();
            ep.faults.io.cut_all();
            ep.faults.io.set_frozen(false);
            ep.clients.reset();
        }
        let servers: Vec<_> = self.servers.lock().drain(..).collect();
        for s in servers {
            let abort = s.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), s)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }

    /// Whether [`Broker::shutdown`] was called.
    pub fn is_closed(&self) -> bool {
        self.core.shutdown.is_cancelled()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.core.shutdown.cancel();
        for ep in &self.core.endpoints {
            ep.stop_accepting();
            ep.faults.io.cut_all();
        }
        for s in self.servers.lock().drain(..) {
            s.abort();
        }
    }
}

fn access_point(core: &Core) -> String {
    core.endpoints
        .iter()
        .map(|e| e.addr.to_string())
        .collect::<Vec<_>>()
        .join(";")
}

/// Moves due delay messages into their queues.
async fn timer_task(core: Arc<Core>) {
    loop {
        let (due, next) = core.timer.take_due(store::now_ms());
        for d in due {
            core.store.append_reserved(&d.topic, &d.queue, vec![d.msg]);
        }
        let wait = next.map_or(Duration::from_secs(3600), |n| {
            Duration::from_millis((n - store::now_ms()).clamp(0, 3_600_000) as u64)
        });
        tokio::select! {
            () = core.shutdown.cancelled() => return,
            () = core.timer.changed.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Checks orphaned transactions back with their producers.
async fn transaction_task(core: Arc<Core>) {
    let tick = (core.config.transaction_check_interval / 4)
        .clamp(Duration::from_millis(20), Duration::from_secs(1));
    loop {
        tokio::select! {
            () = core.shutdown.cancelled() => return,
            () = tokio::time::sleep(tick) => {}
        }
        let (due, gone) = core.txs.due(
            Instant::now(),
            core.config.transaction_check_interval,
            core.config.transaction_check_max,
        );
        for half in gone {
            core.store
                .release(&half.topic, store::accounted_size(&half.msg));
        }
        for (tx_id, half) in due {
            service::check_back(&core, &tx_id, &half);
        }
    }
}
