//! The control side of a running [`Broker`]: topics and groups, faults, server-pushed telemetry
//! commands, and inspection (message counts, DLQ contents, calls per RPC, client settings).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::endpoint::{calls_of, Endpoint};
use super::fault::{Rpc, StatusFault, Unavailable};
use super::store::{dlq_topic, parse_permission, GroupConfig, Stored, Topic, TopicType};
use super::telemetry::{ClientSession, TelemetryReply};
use super::transaction::recover_command;
use super::transaction::TxCounts;
use super::Broker;
use crate::error::{Error, Result};
use crate::proto;
use crate::proto::telemetry_command::Command;

/// Counts of one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStats {
    /// Owning endpoint.
    pub broker: usize,
    /// Queue id within the endpoint.
    pub id: i32,
    /// Permission name.
    pub permission: &'static str,
    /// Lowest retained offset.
    pub min_offset: u64,
    /// Next offset to be written.
    pub max_offset: u64,
    /// Retained messages.
    pub messages: u64,
    /// Accounted bytes retained.
    pub bytes: u64,
    /// Per consumer group: (group, acked-below offset, in-flight count).
    pub groups: Vec<(String, u64, u64)>,
}

/// Counts of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicStats {
    /// The topic.
    pub name: String,
    /// Accepted message type name.
    pub message_type: &'static str,
    /// Retained messages (all queues).
    pub messages: u64,
    /// Accounted bytes (all queues).
    pub bytes: u64,
    /// Delay messages waiting for their time.
    pub delayed: u64,
    /// Per queue.
    pub queues: Vec<QueueStats>,
}

/// Counts of one endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStats {
    /// Index.
    pub index: usize,
    /// `host:port`.
    pub address: String,
    /// Broker name in routes.
    pub name: String,
    /// Calls per RPC.
    pub calls: Vec<(&'static str, u64)>,
    /// Status answers injected.
    pub injected: u64,
    /// Unavailability mode, if any.
    pub unavailable: Option<&'static str>,
    /// Clients with settings.
    pub clients: usize,
    /// gRPC connections accepted since start.
    pub connections_accepted: u64,
    /// gRPC connections open now.
    pub connections_open: u64,
}

/// A stored message, as inspection shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageInfo {
    /// Endpoint of its queue.
    pub broker: usize,
    /// Queue id.
    pub queue: i32,
    /// Offset.
    pub offset: u64,
    /// The message.
    pub message: proto::Message,
}

impl MessageInfo {
    fn of(topic: &str, broker: usize, queue: i32, s: &Stored) -> Self {
        Self {
            broker,
            queue,
            offset: s.offset,
            message: s.to_message(topic, queue),
        }
    }
}

impl Broker {
    fn endpoint(&self, index: usize) -> Result<&Endpoint> {
        self.core.endpoints.get(index).map(|e| &**e).ok_or_else(|| {
            Error::invalid(
                "endpoint",
                format!(
                    "{index} is out of range (the broker has {} endpoints)",
                    self.core.endpoints.len()
                ),
            )
        })
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.core
            .store
            .topic(name)
            .ok_or_else(|| Error::invalid("topic", format!("no topic {name:?}")))
    }

    // ---- topics and groups -------------------------------------------------------------

    /// Create a topic of `message_type` (`"NORMAL"`, `"FIFO"`, `"DELAY"`, `"TRANSACTION"`,
    /// `"PRIORITY"`, `"MIXED"`) with `queues` queues spread over the endpoints.
    pub fn create_topic(&self, name: &str, message_type: &str, queues: usize) -> Result<()> {
        let ty = TopicType::parse(message_type)?;
        self.core.store.create_topic(name, ty, queues).map(|_| ())
    }

    /// Delete a topic and its messages; returns whether it existed.
    pub fn delete_topic(&self, name: &str) -> bool {
        self.core.store.delete_topic(name)
    }

    /// Create (or replace) a consumer group.
    pub fn create_group(&self, group: GroupConfig) -> Result<()> {
        self.core.store.create_group(group).map(|_| ())
    }

    /// Set the permission (`"READ_WRITE"`, `"READ"`, `"WRITE"`, `"NONE"`) of one queue.
    pub fn set_queue_permission(
        &self,
        topic: &str,
        endpoint: usize,
        queue: i32,
        permission: &str,
    ) -> Result<()> {
        let p = parse_permission(permission)?;
        let t = self.topic(topic)?;
        let q = t.queue(endpoint, queue).ok_or_else(|| {
            Error::invalid(
                "queue",
                format!("topic {topic:?} has no queue {queue} on endpoint {endpoint}"),
            )
        })?;
        q.set_permission(p);
        Ok(())
    }

    /// Change server settings while clients run: the largest message body (checked on every
    /// send from now on) and the send attempts echoed to producers. Clients get the new values
    /// in the answer to their next settings sync, as from the proxy (see [`super::live`]).
    pub fn update_settings(
        &self,
        max_body_size: Option<usize>,
        producer_max_attempts: Option<i32>,
    ) -> Result<()> {
        self.core.live.update(
            max_body_size,
            producer_max_attempts,
            self.core.config.max_topic_bytes,
        )
    }

    // ---- faults ------------------------------------------------------------------------

    /// Make an endpoint unavailable (`Some`) or available again (`None`).
    pub async fn set_unavailable(&self, endpoint: usize, mode: Option<Unavailable>) -> Result<()> {
        let ep = self.endpoint(endpoint)?;
        let ep = self.core.endpoints[ep.index].clone();
        let previous = std::mem::replace(&mut *ep.unavailable.lock(), mode);
        match mode {
            Some(Unavailable::Refuse) => ep.refuse().await,
            Some(Unavailable::Hang) => {
                if previous == Some(Unavailable::Refuse) {
                    self.listen_again(&ep).await?;
                }
                ep.faults.io.set_frozen(true);
            }
            None => {
                ep.faults.io.set_frozen(false);
                if previous == Some(Unavailable::Refuse) {
                    self.listen_again(&ep).await?;
                }
            }
        }
        Ok(())
    }

    async fn listen_again(&self, ep: &Arc<Endpoint>) -> Result<()> {
        let l = crate::listen(&ep.addr.ip().to_string(), ep.addr.port()).await?;
        ep.start_accepting(l);
        Ok(())
    }

    /// Answer a status code instead of serving calls (see [`StatusFault`]).
    pub fn inject_status(&self, endpoint: usize, fault: StatusFault) -> Result<()> {
        self.endpoint(endpoint)?.faults.add_status(fault)
    }

    /// Add latency to every call of an endpoint, or to one RPC (zero removes it).
    pub fn set_latency(&self, endpoint: usize, rpc: Option<Rpc>, latency: Duration) -> Result<()> {
        self.endpoint(endpoint)?.faults.set_latency(rpc, latency);
        Ok(())
    }

    /// Remove status faults, latency and unavailability of an endpoint.
    pub async fn clear_faults(&self, endpoint: usize) -> Result<()> {
        self.endpoint(endpoint)?.faults.clear();
        self.set_unavailable(endpoint, None).await
    }

    /// End every Telemetry stream of an endpoint (clients see `UNAVAILABLE`); settings are kept.
    pub fn drop_telemetry(&self, endpoint: usize) -> Result<()> {
        self.endpoint(endpoint)?.clients.drop_streams();
        Ok(())
    }

    /// Restart an endpoint like a proxy restart: forget client settings and telemetry streams,
    /// cut connections. Stored messages, in-flight receipts and transactions are kept.
    pub fn restart(&self, endpoint: usize) -> Result<()> {
        let ep = self.endpoint(endpoint)?;
        ep.clients.reset();
        ep.faults.io.cut_all();
        Ok(())
    }

    // ---- server-pushed telemetry commands ----------------------------------------------

    fn push(&self, client_id: &str, make: impl Fn(String) -> Command) -> Result<String> {
        let nonce = crate::message_id::generate();
        for ep in &self.core.endpoints {
            if ep.clients.get(client_id).is_some_and(|s| s.connected()) {
                return ep
                    .clients
                    .push(client_id, make(nonce.clone()))
                    .map(|()| nonce);
            }
        }
        Err(Error::invalid(
            "client_id",
            format!("client {client_id:?} has no open telemetry stream"),
        ))
    }

    /// Ask a client to print its thread stack trace; returns the nonce of the command.
    pub fn print_thread_stack_trace(&self, client_id: &str) -> Result<String> {
        self.push(client_id, |nonce| {
            Command::PrintThreadStackTraceCommand(proto::PrintThreadStackTraceCommand { nonce })
        })
    }

    /// Ask a client to reconnect its endpoints; returns the nonce.
    pub fn reconnect_endpoints(&self, client_id: &str) -> Result<String> {
        self.push(client_id, |nonce| {
            Command::ReconnectEndpointsCommand(proto::ReconnectEndpointsCommand { nonce })
        })
    }

    /// Ask a client to verify (consume) a stored message; returns the nonce.
    pub fn verify_message(&self, client_id: &str, topic: &str, message_id: &str) -> Result<String> {
        let msg = self.find_message(topic, message_id).ok_or_else(|| {
            Error::invalid(
                "message_id",
                format!("no message {message_id:?} in {topic:?}"),
            )
        })?;
        self.push(client_id, move |nonce| {
            Command::VerifyMessageCommand(proto::VerifyMessageCommand {
                nonce,
                message: Some(msg.message.clone()),
            })
        })
    }

    /// Check a pending transaction back now, with `client_id` (or any producer of the topic).
    pub fn recover_orphaned_transaction(
        &self,
        transaction_id: &str,
        client_id: Option<&str>,
    ) -> Result<()> {
        let half = self
            .core
            .txs
            .get(transaction_id)
            .ok_or_else(|| Error::invalid("transaction_id", "no such pending transaction"))?;
        match client_id {
            Some(c) => {
                self.push(c, |_| recover_command(transaction_id, &half.msg))?;
                self.core.txs.checks.fetch_add(1, Ordering::Relaxed);
            }
            None => super::service::check_back(&self.core, transaction_id, &half),
        }
        Ok(())
    }

    /// Replies clients sent to pushed commands (oldest first, bounded).
    pub fn telemetry_replies(&self) -> Vec<TelemetryReply> {
        self.core.replies.all()
    }

    // ---- inspection --------------------------------------------------------------------

    /// Counts of every topic.
    pub fn topic_stats(&self) -> Vec<TopicStats> {
        let delayed = self.core.timer.pending();
        self.core
            .store
            .topics()
            .iter()
            .map(|t| {
                let queues: Vec<QueueStats> = t
                    .queues
                    .iter()
                    .map(|q| {
                        let st = q.state.lock();
                        let mut groups: Vec<_> = st
                            .cursors
                            .iter()
                            .map(|(g, c)| (g.to_string(), c.low(), c.inflight() as u64))
                            .collect();
                        groups.sort();
                        QueueStats {
                            broker: q.broker,
                            id: q.id,
                            permission: q.permission().as_str_name(),
                            min_offset: st.base,
                            max_offset: st.end(),
                            messages: st.messages.len() as u64,
                            bytes: st.bytes as u64,
                            groups,
                        }
                    })
                    .collect();
                TopicStats {
                    name: t.name.to_string(),
                    message_type: t.topic_type().as_str(),
                    messages: queues.iter().map(|q| q.messages).sum(),
                    bytes: t.bytes.load(Ordering::Relaxed) as u64,
                    delayed: delayed.get(&*t.name).copied().unwrap_or(0),
                    queues,
                }
            })
            .collect()
    }

    /// Counts of every endpoint.
    pub fn endpoint_stats(&self) -> Vec<EndpointStats> {
        self.core
            .endpoints
            .iter()
            .map(|e| EndpointStats {
                index: e.index,
                address: e.addr.to_string(),
                name: e.name.clone(),
                calls: calls_of(e)
                    .into_iter()
                    .map(|(r, n)| (r.name(), n))
                    .collect(),
                injected: e.faults.injected.load(Ordering::Relaxed),
                unavailable: e.unavailable.lock().map(|u| match u {
                    Unavailable::Refuse => "refuse",
                    Unavailable::Hang => "hang",
                }),
                clients: e.clients.all().len(),
                connections_accepted: e.accepted.load(Ordering::Relaxed),
                connections_open: e.faults.io.open_connections() as u64,
            })
            .collect()
    }

    /// Calls of one RPC on one endpoint.
    pub fn calls(&self, endpoint: usize, rpc: Rpc) -> Result<u64> {
        Ok(self.endpoint(endpoint)?.calls[rpc.index()].load(Ordering::Relaxed))
    }

    /// Client sessions (settings seen) of one endpoint.
    pub fn clients(&self, endpoint: usize) -> Result<Vec<ClientSession>> {
        Ok(self.endpoint(endpoint)?.clients.all())
    }

    /// Transaction counters.
    pub fn transaction_counts(&self) -> TxCounts {
        self.core.txs.counts()
    }

    /// Pending transactions: (transaction id, topic, message id).
    pub fn pending_transactions(&self) -> Vec<(String, String, String)> {
        self.core.txs.pending()
    }

    /// Retained messages of a topic, in queue order (at most `limit`).
    pub fn messages(&self, topic: &str, limit: usize) -> Result<Vec<MessageInfo>> {
        let t = self.topic(topic)?;
        let mut out = Vec::new();
        for q in &t.queues {
            let st = q.state.lock();
            for m in &st.messages {
                if out.len() >= limit {
                    return Ok(out);
                }
                out.push(MessageInfo::of(&t.name, q.broker, q.id, m));
            }
        }
        Ok(out)
    }

    /// The messages in a group's dead-letter topic (`%DLQ%<group>`).
    pub fn dead_letters(&self, group: &str) -> Vec<MessageInfo> {
        self.messages(&dlq_topic(group), usize::MAX)
            .unwrap_or_default()
    }

    fn find_message(&self, topic: &str, message_id: &str) -> Option<MessageInfo> {
        let t = self.core.store.topic(topic)?;
        for q in &t.queues {
            let st = q.state.lock();
            if let Some(m) = st.messages.iter().find(|m| m.message_id() == message_id) {
                return Some(MessageInfo::of(&t.name, q.broker, q.id, m));
            }
        }
        None
    }
}
