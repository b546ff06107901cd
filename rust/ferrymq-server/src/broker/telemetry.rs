//! Client sessions of one endpoint: the settings each client sent on its Telemetry stream, the
//! merged settings echoed back (reference §6), and the stream used to push server commands
//! (RecoverOrphanedTransaction, VerifyMessage, PrintThreadStackTrace, ReconnectEndpoints).
//!
//! Like the proxy, an endpoint forgets every session when it restarts; Heartbeat and Receive
//! from a client without settings answer `UNRECOGNIZED_CLIENT_TYPE`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::config::BrokerConfig;
use super::cursor::Liveness;
use super::store::{proto_duration, GroupConfig};
use crate::error::{Error, Result};
use crate::proto;
use crate::proto::telemetry_command::Command;

/// Items of a Telemetry response stream.
pub type TelemetryItem = std::result::Result<proto::TelemetryCommand, tonic::Status>;

/// What the broker knows about one client on one endpoint.
#[derive(Debug, Clone)]
pub struct ClientSession {
    /// `x-mq-client-id`.
    pub client_id: String,
    /// The settings as the client sent them (last version).
    pub settings: proto::Settings,
    /// The merged settings the broker echoed.
    pub merged: proto::Settings,
    /// When the settings last arrived.
    pub updated: SystemTime,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// Cleared when the client terminates or the endpoint restarts; stops auto-renewal.
    pub liveness: Arc<Liveness>,
    sink: Option<(u64, mpsc::Sender<TelemetryItem>)>,
}

impl ClientSession {
    /// The client type from its settings.
    pub fn client_type(&self) -> proto::ClientType {
        self.settings
            .client_type
            .and_then(|t| proto::ClientType::try_from(t).ok())
            .unwrap_or(proto::ClientType::Unspecified)
    }

    /// The consumer group of a consumer.
    pub fn group(&self) -> Option<&str> {
        match &self.settings.pub_sub {
            Some(proto::settings::PubSub::Subscription(s)) => {
                s.group.as_ref().map(|g| g.name.as_str())
            }
            _ => None,
        }
    }

    /// The topics a producer declared.
    pub fn topics(&self) -> Vec<String> {
        match &self.settings.pub_sub {
            Some(proto::settings::PubSub::Publishing(p)) => {
                p.topics.iter().map(|t| t.name.clone()).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Whether a Telemetry stream is open to push commands on.
    pub fn connected(&self) -> bool {
        self.sink.as_ref().is_some_and(|(_, tx)| !tx.is_closed())
    }
}

/// A reply a client sent on Telemetry (thread stack trace, verify result).
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryReply {
    /// Endpoint index.
    pub endpoint: usize,
    /// The replying client.
    pub client_id: String,
    /// `"thread_stack_trace"` or `"verify_message_result"`.
    pub kind: &'static str,
    /// The nonce of the command answered.
    pub nonce: String,
    /// Status code the client attached (0 when none).
    pub code: i32,
    /// Status message, or the stack trace text.
    pub detail: String,
}

/// Most replies kept for inspection.
const MAX_REPLIES: usize = 1024;

/// The sessions of one endpoint.
#[derive(Debug, Default)]
pub struct Clients {
    sessions: Mutex<HashMap<String, ClientSession>>,
    streams: Mutex<HashMap<u64, CancellationToken>>,
    next_stream: AtomicU64,
}

impl Clients {
    /// The session of `client_id`, if its settings arrived.
    pub fn get(&self, client_id: &str) -> Option<ClientSession> {
        self.sessions.lock().get(client_id).cloned()
    }

    /// The liveness marker of a client with settings.
    pub fn liveness(&self, client_id: &str) -> Option<Arc<Liveness>> {
        self.sessions
            .lock()
            .get(client_id)
            .map(|s| s.liveness.clone())
    }

    /// Whether the client sent settings.
    pub fn known(&self, client_id: &str) -> bool {
        self.sessions.lock().contains_key(client_id)
    }

    /// Count a heartbeat; false when the client is unknown.
    pub fn heartbeat(&self, client_id: &str) -> bool {
        match self.sessions.lock().get_mut(client_id) {
            Some(s) => {
                s.heartbeats += 1;
                true
            }
            None => false,
        }
    }

    /// All sessions, sorted by client id.
    pub fn all(&self) -> Vec<ClientSession> {
        let mut v: Vec<_> = self.sessions.lock().values().cloned().collect();
        v.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        v
    }

    /// Register a new Telemetry stream; returns its id and cancellation token.
    pub fn open_stream(&self) -> (u64, CancellationToken) {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        self.streams.lock().insert(id, token.clone());
        (id, token)
    }

    /// Forget a closed stream.
    pub fn close_stream(&self, id: u64) {
        self.streams.lock().remove(&id);
        for s in self.sessions.lock().values_mut() {
            if s.sink.as_ref().is_some_and(|(sid, _)| *sid == id) {
                s.sink = None;
            }
        }
    }

    /// Store settings that arrived on stream `stream` and return the session.
    pub fn store_settings(
        &self,
        client_id: &str,
        settings: proto::Settings,
        merged: proto::Settings,
        stream: u64,
        sink: mpsc::Sender<TelemetryItem>,
    ) {
        let mut sessions = self.sessions.lock();
        let s = sessions
            .entry(client_id.to_string())
            .or_insert_with(|| ClientSession {
                client_id: client_id.to_string(),
                settings: proto::Settings::default(),
                merged: proto::Settings::default(),
                updated: SystemTime::now(),
                heartbeats: 0,
                liveness: Liveness::new(),
                sink: None,
            });
        s.settings = settings;
        s.merged = merged;
        s.updated = SystemTime::now();
        s.sink = Some((stream, sink));
    }

    /// Forget a client (NotifyClientTermination). Returns whether it was known.
    pub fn remove(&self, client_id: &str) -> bool {
        match self.sessions.lock().remove(client_id) {
            Some(s) => {
                s.liveness.kill();
                true
            }
            None => false,
        }
    }

    /// Drop every Telemetry stream (they end with `UNAVAILABLE`); settings are kept.
    pub fn drop_streams(&self) {
        for (_, t) in self.streams.lock().drain() {
            t.cancel();
        }
    }

    /// Forget everything, like a restarted proxy.
    pub fn reset(&self) {
        self.drop_streams();
        for (_, s) in self.sessions.lock().drain() {
            s.liveness.kill();
        }
    }

    /// Push a command to a client's open stream.
    pub fn push(&self, client_id: &str, cmd: Command) -> Result<()> {
        let sink = self
            .sessions
            .lock()
            .get(client_id)
            .and_then(|s| s.sink.as_ref().map(|(_, tx)| tx.clone()));
        let Some(tx) = sink else {
            return Err(Error::invalid(
                "client_id",
                format!("client {client_id:?} has no open telemetry stream on this endpoint"),
            ));
        };
        tx.try_send(Ok(proto::TelemetryCommand {
            status: None,
            command: Some(cmd),
        }))
        .map_err(|e| Error::connection(format!("cannot push to client {client_id:?}: {e}")))
    }

    /// Producers (with an open stream) that declared `topic`, `prefer` first.
    pub fn producers_of(&self, topic: &str, prefer: &str) -> Vec<String> {
        let sessions = self.sessions.lock();
        let mut v: Vec<String> = sessions
            .values()
            .filter(|s| {
                s.connected()
                    && s.client_type() == proto::ClientType::Producer
                    && s.topics().iter().any(|t| t == topic)
            })
            .map(|s| s.client_id.clone())
            .collect();
        v.sort_by_key(|c| (c != prefer, c.clone()));
        v
    }
}

/// Replies received from clients, bounded.
#[derive(Debug, Default)]
pub struct Replies {
    items: Mutex<VecDeque<TelemetryReply>>,
}

impl Replies {
    /// Record a reply (the oldest is dropped past the bound).
    pub fn push(&self, r: TelemetryReply) {
        let mut items = self.items.lock();
        if items.len() == MAX_REPLIES {
            items.pop_front();
        }
        items.push_back(r);
    }

    /// Every reply kept, oldest first.
    pub fn all(&self) -> Vec<TelemetryReply> {
        self.items.lock().iter().cloned().collect()
    }
}

/// The delay of each RocketMQ delay level (1..=18, `messageDelayLevel`: `1s 5s 10s 30s 1m 2m
/// … 2h`), in seconds: remoting `DELAY` levels, and the default customized retry back-off.
pub const DELAY_LEVELS: [u64; 18] = [
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

/// RocketMQ's default customized retry back-off: one step per delay level.
pub fn default_backoff() -> Vec<Duration> {
    DELAY_LEVELS.map(Duration::from_secs).to_vec()
}

/// The settings the proxy echoes: the client's, with server values for retry, limits and, for
/// consumers, FIFO / batch size / long-polling from the group (reference §6).
pub fn merge_settings(
    client: &proto::Settings,
    group: Option<&GroupConfig>,
    config: &BrokerConfig,
) -> proto::Settings {
    let mut s = client.clone();
    s.metric = Some(match &config.metric_collector {
        None => proto::Metric {
            on: false,
            endpoints: None,
        },
        Some(collector) => proto::Metric {
            on: true,
            endpoints: Some(collector.to_proto()),
        },
    });
    match s.pub_sub.as_mut() {
        Some(proto::settings::PubSub::Publishing(p)) => {
            p.max_body_size = i32::try_from(config.max_body_size).unwrap_or(i32::MAX);
            p.validate_message_type = true;
            s.backoff_policy = Some(proto::RetryPolicy {
                max_attempts: config.producer_max_attempts,
                strategy: Some(proto::retry_policy::Strategy::ExponentialBackoff(
                    proto::ExponentialBackoff {
                        initial: Some(proto_duration(Duration::from_millis(10))),
                        max: Some(proto_duration(Duration::from_millis(1000))),
                        multiplier: 2.0,
                    },
                )),
            });
        }
        Some(proto::settings::PubSub::Subscription(sub)) => {
            let default_group;
            let g = match group {
                Some(g) => g,
                None => {
                    default_group =
                        GroupConfig::new(sub.group.as_ref().map_or("", |g| g.name.as_str()));
                    &default_group
                }
            };
            sub.fifo = Some(g.fifo);
            sub.receive_batch_size = Some(config.receive_batch_size);
            sub.long_polling_timeout = Some(proto_duration(config.long_polling_max));
            let backoff = if g.retry_backoff.is_empty() {
                default_backoff()
            } else {
                g.retry_backoff.clone()
            };
            s.backoff_policy = Some(proto::RetryPolicy {
                max_attempts: i32::try_from(g.max_delivery_attempts).unwrap_or(i32::MAX),
                strategy: Some(proto::retry_policy::Strategy::CustomizedBackoff(
                    proto::CustomizedBackoff {
                        next: backoff.into_iter().map(proto_duration).collect(),
                    },
                )),
            });
        }
        None => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_settings_get_proxy_values() {
        let client = proto::Settings {
            client_type: Some(proto::ClientType::Producer as i32),
            pub_sub: Some(proto::settings::PubSub::Publishing(proto::Publishing {
                topics: vec![proto::Resource {
                    resource_namespace: String::new(),
                    name: "t".into(),
                }],
                max_body_size: 0,
                validate_message_type: false,
            })),
            ..Default::default()
        };
        let m = merge_settings(&client, None, &BrokerConfig::default());
        let Some(proto::settings::PubSub::Publishing(p)) = &m.pub_sub else {
            panic!("publishing");
        };
        assert_eq!(p.max_body_size, 4 * 1024 * 1024);
        assert!(p.validate_message_type);
        assert_eq!(m.backoff_policy.unwrap().max_attempts, 3);
        assert_eq!(m.client_type, client.client_type);
    }

    #[test]
    fn consumer_settings_follow_the_group() {
        let client = proto::Settings {
            client_type: Some(proto::ClientType::PushConsumer as i32),
            pub_sub: Some(proto::settings::PubSub::Subscription(proto::Subscription {
                group: Some(proto::Resource {
                    resource_namespace: String::new(),
                    name: "g".into(),
                }),
                ..Default::default()
            })),
            ..Default::default()
        };
        let g = GroupConfig {
            fifo: true,
            max_delivery_attempts: 4,
            ..GroupConfig::new("g")
        };
        let m = merge_settings(&client, Some(&g), &BrokerConfig::default());
        let Some(proto::settings::PubSub::Subscription(s)) = &m.pub_sub else {
            panic!("subscription");
        };
        assert_eq!(s.fifo, Some(true));
        assert_eq!(s.receive_batch_size, Some(32));
        assert_eq!(s.long_polling_timeout.unwrap().seconds, 20);
        assert_eq!(m.backoff_policy.unwrap().max_attempts, 4);
    }
}
