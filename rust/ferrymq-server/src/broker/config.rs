//! Configuration of the embedded broker. Defaults follow the Apache RocketMQ 5 proxy and broker
//! (`ProxyConfig`, `BrokerConfig`, rocketmq-v2 reference §6 and §12.5); tests shrink the timers.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::error::{Error, Result};

/// What a topic does when its memory bound is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Evict messages every consumer group has finished with; if that frees too little, answer
    /// `TOO_MANY_REQUESTS` ("topic full: consumers must catch up"). Nothing is lost silently.
    Reject,
    /// Evict the oldest messages whatever their consumption state, like time-based retention.
    DropOldest,
}

/// Optional access key / secret: when set, every RPC except QueryRoute and QueryAssignment must
/// carry a valid `authorization` header (reference §5.2), else `UNAUTHORIZED`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key (`Credential=` of the header).
    pub access_key: String,
    /// The secret key, the HMAC-SHA1 key. Never printed.
    pub secret_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .field("secret_key", &"***")
            .finish()
    }
}

/// Everything configurable about an embedded broker.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Number of endpoints ("brokers"), each on its own loopback port.
    pub endpoints: usize,
    /// Address to listen on (loopback).
    pub host: IpAddr,
    /// Fixed ports, one per endpoint; empty picks free ports.
    pub ports: Vec<u16>,
    /// Create unknown topics (NORMAL, `auto_create_queues` queues) on first use. (Groups are
    /// always created on first use, as RocketMQ's `autoCreateSubscriptionGroup` does.)
    pub auto_create: bool,
    /// Queues of an auto-created topic.
    pub auto_create_queues: usize,
    /// Largest message body (`maxMessageSize`, 4 MiB); larger → `MESSAGE_BODY_TOO_LARGE`.
    pub max_body_size: usize,
    /// Largest total size of a message's user properties (16 KiB).
    pub max_properties_size: usize,
    /// Memory bound of one topic's stored messages, counting what each holds (its record of
    /// body and metadata + 128 B, see `record::accounted`; delay and half messages count from
    /// their send).
    pub max_topic_bytes: usize,
    /// Behaviour of a full topic.
    pub when_full: WhenFull,
    /// Lower bound of the receive long-polling timeout (proxy: 5 s).
    pub long_polling_min: Duration,
    /// Upper bound of the receive long-polling timeout (proxy: 20 s).
    pub long_polling_max: Duration,
    /// Smallest invisible duration of a receive without auto-renew (proxy: 10 s).
    pub min_invisible: Duration,
    /// Largest invisible duration accepted.
    pub max_invisible: Duration,
    /// Invisible duration of an auto-renewed receive, renewed while its client lives (60 s).
    pub auto_renew_invisible: Duration,
    /// Longest time an auto-renewed message is held before it is redelivered anyway (3 h).
    pub auto_renew_max: Duration,
    /// Receive batch size echoed to consumers in settings (32).
    pub receive_batch_size: i32,
    /// Send attempts echoed to producers in settings (`grpcClientProducerMaxAttempts`, 3).
    pub producer_max_attempts: i32,
    /// Age of a half (transactional) message before its producer is asked (6 s).
    pub transaction_check_delay: Duration,
    /// Interval between two checks of the same half message (30 s).
    pub transaction_check_interval: Duration,
    /// Checks before an unresolved half message is discarded (15).
    pub transaction_check_max: u32,
    /// Furthest delivery time accepted for a delay message (3 days); later → `ILLEGAL_DELIVERY_TIME`.
    pub max_delay: Duration,
    /// Credentials required of clients, if any.
    pub credentials: Option<Credentials>,
    /// Also serve the classic remoting protocol: one more loopback port per endpoint, each a
    /// broker for that endpoint's queues and a name server for every topic (on by default).
    pub remoting: bool,
    /// The OTLP/gRPC metrics collector announced to clients in their settings
    /// (`Settings.metric`: on, with this `host:port`), as a proxy with metrics exported to a
    /// collector does; `None`: metrics off (the proxy's default).
    pub metric_collector: Option<ferrymq_core::rocketmq::Endpoints>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            endpoints: 1,
            host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            ports: Vec::new(),
            auto_create: false,
            auto_create_queues: 8,
            max_body_size: 4 * 1024 * 1024,
            max_properties_size: 16 * 1024,
            max_topic_bytes: 256 * 1024 * 1024,
            when_full: WhenFull::Reject,
            long_polling_min: Duration::from_secs(5),
            long_polling_max: Duration::from_secs(20),
            min_invisible: Duration::from_secs(10),
            max_invisible: Duration::from_secs(12 * 3600),
            auto_renew_invisible: Duration::from_secs(60),
            auto_renew_max: Duration::from_secs(3 * 3600),
            receive_batch_size: 32,
            producer_max_attempts: 3,
            transaction_check_delay: Duration::from_secs(6),
            transaction_check_interval: Duration::from_secs(30),
            transaction_check_max: 15,
            max_delay: Duration::from_secs(3 * 24 * 3600),
            credentials: None,
            remoting: true,
            metric_collector: None,
        }
    }
}

impl BrokerConfig {
    /// Defaults suited to tests: same rules, short timers (1 s long-polling floor, no invisible
    /// floor, 1 s transaction check-back).
    pub fn for_tests() -> Self {
        Self {
            long_polling_min: Duration::from_secs(1),
            min_invisible: Duration::ZERO,
            transaction_check_delay: Duration::from_secs(1),
            transaction_check_interval: Duration::from_secs(1),
            ..Self::default()
        }
    }

    /// Check the configuration, naming the first bad field.
    pub fn validate(&self) -> Result<()> {
        if self.endpoints == 0 || self.endpoints > 64 {
            return Err(Error::invalid("endpoints", "must be between 1 and 64"));
        }
        if !self.ports.is_empty() && self.ports.len() != self.endpoints {
            return Err(Error::invalid(
                "ports",
                format!("needs one port per endpoint ({})", self.endpoints),
            ));
        }
        if self.auto_create_queues == 0 || self.auto_create_queues > 1024 {
            return Err(Error::invalid(
                "auto_create_queues",
                "must be between 1 and 1024",
            ));
        }
        if self.max_body_size == 0 {
            return Err(Error::invalid("max_body_size", "must be positive"));
        }
        if self.max_topic_bytes < self.max_body_size {
            return Err(Error::invalid(
                "max_topic_bytes",
                "must be at least max_body_size",
            ));
        }
        if self.long_polling_min > self.long_polling_max {
            return Err(Error::invalid(
                "long_polling_min",
                "must not exceed long_polling_max",
            ));
        }
        if self.min_invisible > self.max_invisible {
            return Err(Error::invalid(
                "min_invisible",
                "must not exceed max_invisible",
            ));
        }
        if self.transaction_check_interval.is_zero() {
            return Err(Error::invalid(
                "transaction_check_interval",
                "must be positive",
            ));
        }
        if let Some(c) = &self.credentials {
            if c.access_key.is_empty() || c.secret_key.is_empty() {
                return Err(Error::invalid(
                    "credentials",
                    "access key and secret key must both be non-empty",
                ));
            }
        }
        Ok(())
    }
}
