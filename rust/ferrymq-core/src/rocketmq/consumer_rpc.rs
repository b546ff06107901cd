//! The RPCs a consumer needs, behind one trait.
//!
//! The push consumer's process queues, consume services and settle path are written against
//! [`ConsumerRpc`], so they are unit-tested with an in-memory fake; the production
//! implementation sends the RPCs through the shared RocketMQ client layer (sessions, signing,
//! telemetry settings).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use crate::duration::to_proto_duration;
use crate::error::{Error, Result};
use crate::metrics::{ClientIdentity, ClientMetrics, RocketMqHistogram, System};
use crate::proto;
use crate::rocketmq::client::{check_status, deadline, Client, ClientOptions, CommandHandler};
use crate::rocketmq::endpoints::Endpoints;
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::message_view::{MessageSource, MessageView};
use crate::rocketmq::settings::{Backoff, RetryPolicy};
use crate::status;

/// Consumer settings: what the client asked for, overwritten by what the broker issued on the
/// telemetry stream (`Settings.subscription` and `Settings.backoff_policy`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerSettings {
    /// Whether the group consumes in FIFO order (`consumeMessageOrderly` on the broker).
    pub fifo: bool,
    /// How many messages one receive may return.
    pub receive_batch_size: u32,
    /// How long a receive waits on the broker for messages.
    pub long_polling_timeout: Duration,
    /// The consumption retry policy.
    pub retry_policy: RetryPolicy,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            fifo: false,
            receive_batch_size: 32,
            long_polling_timeout: Duration::from_secs(20),
            retry_policy: default_retry_policy(),
        }
    }
}

/// The delays the stock proxy issues to a consumer group by default (`messageDelayLevel` 3 and up).
const DEFAULT_DELAYS_SECS: [u64; 18] = [
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

/// The stock proxy's default consumer retry policy: 17 attempts, customized delays. Used only
/// until the broker's settings arrive.
pub fn default_retry_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 17,
        backoff: Backoff::Customized(
            DEFAULT_DELAYS_SECS
                .iter()
                .map(|s| Duration::from_secs(*s))
                .collect(),
        ),
    }
}

/// The subscription a consumer announces in its client settings.
pub fn subscription_settings(
    namespace: &str,
    group: &str,
    subscriptions: &[(String, FilterExpression)],
) -> proto::settings::PubSub {
    let resource = |name: &str| proto::Resource {
        resource_namespace: namespace.to_string(),
        name: name.to_string(),
    };
    proto::settings::PubSub::Subscription(proto::Subscription {
        group: Some(resource(group)),
        subscriptions: subscriptions
            .iter()
            .map(|(t, f)| proto::SubscriptionEntry {
                topic: Some(resource(t)),
                expression: Some(f.to_proto()),
            })
            .collect(),
        ..Default::default()
    })
}

/// Queue `id` of `topic` on the leader of `broker`, without endpoints: what the backends whose
/// queues are not RocketMQ queues (a JMQ4 topic, a JetStream stream) and the test broker assign.
pub fn leader_queue(
    topic: &str,
    id: i32,
    permission: proto::Permission,
    broker: impl Into<String>,
) -> proto::MessageQueue {
    proto::MessageQueue {
        topic: Some(proto::Resource {
            resource_namespace: String::new(),
            name: topic.to_string(),
        }),
        id,
        permission: permission as i32,
        broker: Some(proto::Broker {
            name: broker.into(),
            id: 0,
            endpoints: None,
        }),
        accept_message_types: vec![],
    }
}

/// The identity of a `system` client known as `client_id` whose server is the first address
/// of `endpoints`.
pub fn identity_at(system: System, client_id: String, endpoints: &Endpoints) -> ClientIdentity {
    let identity = ClientIdentity::new(system, client_id);
    match endpoints.addresses().first() {
        Some(a) => identity.with_server(a.host.clone(), a.port),
        None => identity,
    }
}

/// One `ReceiveMessage` call.
#[derive(Debug, Clone)]
pub struct ReceiveRequest {
    /// The queue to receive from (its broker's endpoints are the target).
    pub queue: proto::MessageQueue,
    /// The subscription filter.
    pub filter: FilterExpression,
    /// Most messages to return.
    pub batch_size: u32,
    /// How long received messages stay invisible (simple consumers; `None` with auto-renew).
    pub invisible_duration: Option<Duration>,
    /// Let the broker renew invisibility until the message is settled (push consumers).
    pub auto_renew: bool,
    /// How long the broker may hold the call waiting for messages.
    pub long_polling_timeout: Duration,
}

/// What one receive brought.
#[derive(Debug, Default)]
pub struct Received {
    /// The messages, as the wire carried them.
    pub messages: Vec<proto::Message>,
    /// When the broker delivered them (Unix ms), where it says (a RocketMQ 5 proxy's
    /// `delivery_timestamp` answer): the start of the Java client's delivery latency.
    pub delivered_at_ms: Option<i64>,
}

impl Received {
    /// The messages, once their delivery latency is recorded in `metrics` (where the broker
    /// told when it delivered them, and the client keeps RocketMQ's histograms).
    pub fn into_messages(self, metrics: &ClientMetrics, topic: &str) -> Vec<proto::Message> {
        if let (Some(at), true) = (self.delivered_at_ms, metrics.keeps_rocketmq()) {
            if !self.messages.is_empty() {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                let latency = Duration::from_millis(u64::try_from(now - at).unwrap_or(0));
                metrics.record_rocketmq(
                    RocketMqHistogram::DeliveryLatency,
                    topic,
                    latency,
                    self.messages.len() as u64,
                );
            }
        }
        self.messages
    }
}

impl From<Vec<proto::Message>> for Received {
    fn from(messages: Vec<proto::Message>) -> Self {
        Self {
            messages,
            delivered_at_ms: None,
        }
    }
}

/// What a consumer sends to brokers. Every method is one RPC, without retries: retrying is the
/// caller's policy (the push consumer retries settle operations, the simple consumer never does).
pub trait ConsumerRpc: Send + Sync + 'static {
    /// The current consumer settings (after the broker's telemetry echo).
    fn settings(&self) -> ConsumerSettings;

    /// The access point, which settles messages of queues whose route names no broker.
    fn access_endpoints(&self) -> Endpoints;

    /// Who the consumer is, for its metrics (the consumer adds its group). The default: a
    /// RocketMQ client without a client id at the first address of the access point.
    fn client_identity(&self) -> ClientIdentity {
        identity_at(System::RocketMq, String::new(), &self.access_endpoints())
    }

    /// `QueryAssignment`: the queues of `topic` this consumer group should read.
    fn query_assignment(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<proto::MessageQueue>>> + Send;

    /// `ReceiveMessage`: no messages when there is nothing to receive (`MESSAGE_NOT_FOUND`
    /// included); a throttled receive fails with `ErrorKind::FlowControl`.
    fn receive(&self, request: ReceiveRequest) -> impl Future<Output = Result<Received>> + Send;

    /// `AckMessage` for several messages of one source: one result per entry, in order.
    fn ack(
        &self,
        source: &MessageSource,
        messages: &[&MessageView],
    ) -> impl Future<Output = Result<Vec<Result<()>>>> + Send;

    /// `ChangeInvisibleDuration`: returns the new receipt handle (the caller stores it).
    fn change_invisible_duration(
        &self,
        message: &MessageView,
        duration: Duration,
    ) -> impl Future<Output = Result<String>> + Send;

    /// `ForwardMessageToDeadLetterQueue`.
    fn forward_to_dead_letter_queue(
        &self,
        message: &MessageView,
        max_delivery_attempts: u32,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The OTLP collector the server asks this client to export its metrics to (`host:port`);
    /// the default: none.
    fn metric_collector(&self) -> Option<String> {
        None
    }

    /// The queues a simple consumer receives from for `topic`, in turn. The default is the
    /// assignment ([`ConsumerRpc::query_assignment`]).
    fn receive_queues(
        &self,
        topic: &str,
    ) -> impl Future<Output = Result<Vec<proto::MessageQueue>>> + Send {
        self.query_assignment(topic)
    }

    /// How long a simple consumer's receive waits on one subscription while it polls several
    /// in turn; `None` (the default): a receive long-polls one subscription, the next receive
    /// the next one (RocketMQ, whose brokers hold a receive at least 5 s anyway).
    fn receive_slice(&self) -> Option<Duration> {
        None
    }

    /// The consumer is about to read `subscriptions` (a subscription was added, changed or
    /// removed while running): check what the backend needs (a route for each topic, filters
    /// it can apply) and tell the broker. An error leaves the subscriptions as they were.
    /// The default accepts any subscription and tells no one.
    fn update_subscriptions(
        &self,
        subscriptions: &[(String, FilterExpression)],
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = subscriptions;
        async { Ok(()) }
    }
}

/// [`ConsumerRpc`] over the shared client layer: headers, signing, channels and settings come
/// from the [`Client`]; settings lost by a restarted broker are re-sent on the first
/// `UNRECOGNIZED_CLIENT_TYPE`.
#[derive(Clone, Debug)]
pub struct ClientRpc {
    client: Client,
    group: proto::Resource,
}

fn is_readable_leader(q: &proto::MessageQueue) -> bool {
    let p = q.permission;
    (p == proto::Permission::Read as i32 || p == proto::Permission::ReadWrite as i32)
        && q.broker.as_ref().is_some_and(|b| b.id == 0)
}

impl ClientRpc {
    /// RPCs of `client` on behalf of consumer `group`.
    pub fn new(client: Client, group: &str) -> Self {
        let group = client.resource(group);
        Self { client, group }
    }

    /// Start a `client_type` client of consumer `group` subscribed to `subscriptions`: send
    /// the settings on the telemetry stream, wait for the broker's, and fetch the routes of the
    /// subscribed topics. On failure the client is shut down.
    pub async fn connect(
        options: ClientOptions,
        client_type: proto::ClientType,
        group: &str,
        subscriptions: &[(String, FilterExpression)],
        handler: Arc<dyn CommandHandler>,
    ) -> Result<Self> {
        let pub_sub = subscription_settings(&options.namespace, group, subscriptions);
        let client = Client::new(options, client_type, Some(group.into()), pub_sub, handler)?;
        client.start().await?;
        for (topic, _) in subscriptions {
            if let Err(e) = client.route(topic).await {
                client.shutdown().await;
                return Err(e);
            }
        }
        Ok(Self::new(client, group))
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The group resource.
    pub fn group(&self) -> &proto::Resource {
        &self.group
    }

    fn timeout(&self) -> Duration {
        self.client.settings().request_timeout
    }

    /// `result` as is, after telling the client about a failed call to `endpoints`.
    async fn reported<T>(&self, endpoints: &Endpoints, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.client.on_rpc_error(endpoints, e).await;
        }
        result
    }

    /// The readable leader queues of `topic` (route cached by the client).
    pub async fn readable_queues(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        let route = self.client.route(topic).await?;
        let queues: Vec<proto::MessageQueue> = route
            .queues()
            .iter()
            .filter(|q| is_readable_leader(q))
            .cloned()
            .collect();
        if queues.is_empty() {
            return Err(Error::rocketmq_status(
                status::FORBIDDEN,
                format!("topic {topic:?} has no readable queue"),
            ));
        }
        Ok(queues)
    }

    async fn send_receive(&self, request: ReceiveRequest) -> Result<Received> {
        use proto::receive_message_response::Content;
        let endpoints =
            MessageSource::of_queue(&request.queue, self.client.access_endpoints()).endpoints;
        let timeout = request.long_polling_timeout.saturating_add(self.timeout());
        let req = self.client.request_with_timeout(
            proto::ReceiveMessageRequest {
                group: Some(self.group.clone()),
                message_queue: Some(request.queue),
                filter_expression: Some(request.filter.to_proto()),
                batch_size: i32::try_from(request.batch_size).unwrap_or(i32::MAX),
                invisible_duration: request.invisible_duration.map(to_proto_duration),
                auto_renew: request.auto_renew,
                long_polling_timeout: Some(to_proto_duration(request.long_polling_timeout)),
                attempt_id: None,
            },
            timeout,
        );
        let result: Result<Received> = async {
            let mut stub = self.client.stub(&endpoints)?;
            let until = crate::duration::tokio_deadline(tokio::time::Instant::now(), timeout);
            let mut stream = tokio::time::timeout_at(until, stub.receive_message(req))
                .await
                .map_err(|_| Error::timeout("receive: no answer before the deadline"))??
                .into_inner();
            let mut messages = Vec::new();
            let mut delivered_at_ms = None;
            let mut code = None;
            loop {
                let next = tokio::time::timeout_at(until, stream.message())
                    .await
                    .map_err(|_| Error::timeout("receive: the stream did not end in time"))??;
                match next {
                    None => break,
                    Some(r) => match r.content {
                        Some(Content::Status(s)) => code = Some(s),
                        Some(Content::Message(m)) => messages.push(m),
                        Some(Content::DeliveryTimestamp(t)) => {
                            delivered_at_ms = Some(
                                t.seconds
                                    .saturating_mul(1000)
                                    .saturating_add(i64::from(t.nanos / 1_000_000)),
                            );
                        }
                        None => {}
                    },
                }
            }
            match code {
                Some(s) if s.code == status::MESSAGE_NOT_FOUND => Ok(Received::default()),
                Some(s) if s.code != status::OK => Err(Error::rocketmq_status(s.code, s.message)),
                _ => Ok(Received {
                    messages,
                    delivered_at_ms,
                }),
            }
        }
        .await;
        self.reported(&endpoints, result).await
    }
}

impl ConsumerRpc for ClientRpc {
    fn settings(&self) -> ConsumerSettings {
        let s = self.client.settings();
        let d = ConsumerSettings::default();
        ConsumerSettings {
            fifo: s.fifo.unwrap_or(d.fifo),
            receive_batch_size: s
                .receive_batch_size
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .unwrap_or(d.receive_batch_size),
            long_polling_timeout: s
                .long_polling_timeout
                .filter(|t| !t.is_zero())
                .unwrap_or(d.long_polling_timeout),
            retry_policy: if s.from_server {
                s.retry_policy.clone()
            } else {
                d.retry_policy
            },
        }
    }

    fn metric_collector(&self) -> Option<String> {
        self.client.metric_collector()
    }

    fn access_endpoints(&self) -> Endpoints {
        self.client.access_endpoints().clone()
    }

    async fn query_assignment(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        // Ask a broker of the topic's route (which also opens its telemetry session, so
        // heartbeats reach it); the access point when the route has none.
        let route = self.client.route(topic).await?;
        let endpoints = route
            .queues()
            .iter()
            .position(is_readable_leader)
            .map_or_else(
                || self.client.access_endpoints().clone(),
                |i| route.queue_endpoints(i).clone(),
            );
        let timeout = self.timeout();
        let req = self.client.request_with_timeout(
            proto::QueryAssignmentRequest {
                topic: Some(self.client.resource(topic)),
                group: Some(self.group.clone()),
                endpoints: Some(self.client.access_endpoints().to_proto()),
            },
            timeout,
        );
        let result: Result<Vec<proto::MessageQueue>> = async {
            let mut stub = self.client.stub(&endpoints)?;
            let resp = deadline(timeout, stub.query_assignment(req))
                .await?
                .into_inner();
            check_status(resp.status.as_ref())?;
            Ok(resp
                .assignments
                .into_iter()
                .filter_map(|a| a.message_queue)
                .collect())
        }
        .await;
        let result = result.map_err(|e| e.context(format!("assignment of topic {topic:?}")));
        self.reported(&endpoints, result).await
    }

    async fn receive(&self, request: ReceiveRequest) -> Result<Received> {
        self.send_receive(request).await
    }

    async fn receive_queues(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        self.readable_queues(topic).await
    }

    async fn ack(
        &self,
        source: &MessageSource,
        messages: &[&MessageView],
    ) -> Result<Vec<Result<()>>> {
        let timeout = self.timeout();
        let entries: Vec<proto::AckMessageEntry> = messages
            .iter()
            .map(|m| proto::AckMessageEntry {
                message_id: m.message_id().to_string(),
                receipt_handle: m.receipt_handle().to_string(),
                lite_topic: m.lite_topic().map(str::to_string),
            })
            .collect();
        let handles: Vec<String> = entries.iter().map(|e| e.receipt_handle.clone()).collect();
        let req = self.client.request_with_timeout(
            proto::AckMessageRequest {
                group: Some(self.group.clone()),
                topic: Some(source.topic.clone()),
                entries,
            },
            timeout,
        );
        let result: Result<Vec<Result<()>>> = async {
            let mut stub = self.client.stub(&source.endpoints)?;
            let resp = deadline(timeout, stub.ack_message(req)).await?.into_inner();
            check_status(resp.status.as_ref())?;
            let top = resp.status.unwrap_or_default();
            let by_handle: HashMap<String, proto::Status> = resp
                .entries
                .into_iter()
                .filter_map(|e| e.status.map(|s| (e.receipt_handle, s)))
                .collect();
            Ok(handles
                .iter()
                .map(|h| {
                    let s = by_handle.get(h).unwrap_or(&top);
                    if s.code == status::OK {
                        Ok(())
                    } else if s.code == status::MULTIPLE_RESULTS {
                        Err(Error::protocol("ack: no result for this entry"))
                    } else {
                        Err(Error::rocketmq_status(s.code, s.message.clone()))
                    }
                })
                .collect())
        }
        .await;
        self.reported(&source.endpoints, result).await
    }

    async fn change_invisible_duration(
        &self,
        message: &MessageView,
        duration: Duration,
    ) -> Result<String> {
        let source = message.source();
        let timeout = self.timeout();
        let req = self.client.request_with_timeout(
            proto::ChangeInvisibleDurationRequest {
                group: Some(self.group.clone()),
                topic: Some(source.topic.clone()),
                receipt_handle: message.receipt_handle().to_string(),
                invisible_duration: Some(to_proto_duration(duration)),
                message_id: message.message_id().to_string(),
                lite_topic: message.lite_topic().map(str::to_string),
                suspend: None,
            },
            timeout,
        );
        let result: Result<String> = async {
            let mut stub = self.client.stub(&source.endpoints)?;
            let resp = deadline(timeout, stub.change_invisible_duration(req))
                .await?
                .into_inner();
            check_status(resp.status.as_ref())?;
            Ok(resp.receipt_handle)
        }
        .await;
        self.reported(&source.endpoints, result).await
    }

    async fn forward_to_dead_letter_queue(
        &self,
        message: &MessageView,
        max_delivery_attempts: u32,
    ) -> Result<()> {
        let source = message.source();
        let timeout = self.timeout();
        let req = self.client.request_with_timeout(
            proto::ForwardMessageToDeadLetterQueueRequest {
                group: Some(self.group.clone()),
                topic: Some(source.topic.clone()),
                receipt_handle: message.receipt_handle().to_string(),
                message_id: message.message_id().to_string(),
                delivery_attempt: message.delivery_attempt(),
                max_delivery_attempts: i32::try_from(max_delivery_attempts).unwrap_or(i32::MAX),
                lite_topic: message.lite_topic().map(str::to_string),
            },
            timeout,
        );
        let result: Result<()> = async {
            let mut stub = self.client.stub(&source.endpoints)?;
            let resp = deadline(timeout, stub.forward_message_to_dead_letter_queue(req))
                .await?
                .into_inner();
            check_status(resp.status.as_ref())
        }
        .await;
        self.reported(&source.endpoints, result).await
    }

    /// Every topic must have a route; then the telemetry stream carries the new subscriptions.
    async fn update_subscriptions(
        &self,
        subscriptions: &[(String, FilterExpression)],
    ) -> Result<()> {
        self.client.check_running()?;
        for (topic, _) in subscriptions {
            self.client.route(topic).await?;
        }
        self.client
            .set_pub_sub(subscription_settings(
                self.client.namespace(),
                &self.group.name,
                subscriptions,
            ))
            .await;
        Ok(())
    }
}

/// An in-memory broker for unit tests: POP semantics (invisible until settled), FIFO groups
/// blocked while a message of theirs is in flight, broker-side DLQ after the last attempt, and
/// fault injection.
#[cfg(test)]
#[path = "consumer_rpc_fake.rs"]
pub(crate) mod fake;
