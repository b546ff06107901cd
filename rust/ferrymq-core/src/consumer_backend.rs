//! [`ConsumerBackend`]: the protocols the consumers consume from, behind their [`ConsumerRpc`]
//! seam, so that a single `PushConsumer<ConsumerBackend>` type (the push engine,
//! [`crate::rocketmq::push`]) and a single
//! [`SimpleConsumer`](crate::rocketmq::simple_consumer::SimpleConsumer) serve every protocol.
//!
//! Each variant is one protocol's [`ConsumerRpc`]; this file only dispatches, connects
//! ([`PushConsumer::connect`]) and closes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::jmq::cluster::ClusterOptions;
use crate::jmq::consumer::ConsumerOptions;
use crate::jmq::consumer_rpc::JmqRpc;
use crate::metrics::{ClientIdentity, System};
use crate::nats::consumer_rpc::{JsConsumerOptions, JsConsumerRpc};
use crate::nats::{JetStream, NatsOptions};
use crate::proto;
use crate::rocketmq::client::ClientOptions;
use crate::rocketmq::consumer_rpc::{
    identity_at, ClientRpc, ConsumerRpc, ConsumerSettings, ReceiveRequest, Received,
};
use crate::rocketmq::endpoints::Endpoints;
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::listener::Listener;
use crate::rocketmq::message_view::{MessageSource, MessageView};
use crate::rocketmq::push::consumer::connect_rpc;
use crate::rocketmq::push::{PushConsumer, PushConsumerConfig, ShutdownReport};

/// A consumer's connection to its broker, by protocol.
#[derive(Debug)]
pub enum ConsumerBackend {
    /// RocketMQ 5 over gRPC.
    RocketMq(ClientRpc),
    /// JMQ4.
    Jmq(JmqRpc),
    /// NATS JetStream (durable pull consumers).
    Nats(JsConsumerRpc),
}

/// Where a consumer connects, by protocol.
#[derive(Debug, Clone)]
pub enum ConsumerTarget {
    /// A RocketMQ 5 proxy.
    RocketMq(ClientOptions),
    /// A JMQ4 cluster; the consumer's topics are the consumer's subscriptions.
    Jmq(ClusterOptions, ConsumerOptions),
    /// A NATS server with JetStream; the group is [`JsConsumerOptions::group`].
    Nats(NatsOptions, JsConsumerOptions),
}

macro_rules! dispatch {
    ($self:expr, $rpc:ident => $call:expr) => {
        match $self {
            ConsumerBackend::RocketMq($rpc) => $call,
            ConsumerBackend::Jmq($rpc) => $call,
            ConsumerBackend::Nats($rpc) => $call,
        }
    };
}

impl ConsumerBackend {
    /// Connect to `target` on behalf of the push consumer `config`, whose listener answers the
    /// broker's verification commands (RocketMQ).
    pub async fn connect(
        target: ConsumerTarget,
        config: &PushConsumerConfig,
        listener: &Arc<dyn Listener>,
    ) -> Result<Self> {
        config.validate()?;
        Self::connect_with(target, &config.subscriptions, |options| {
            connect_rpc(options, config, listener)
        })
        .await
    }

    /// Connect to `target` for `subscriptions`; a RocketMQ target connects through `rocketmq`,
    /// which knows the client type and how it answers the broker's commands.
    pub async fn connect_with<F, Fut>(
        target: ConsumerTarget,
        subscriptions: &[(String, FilterExpression)],
        rocketmq: F,
    ) -> Result<Self>
    where
        F: FnOnce(ClientOptions) -> Fut,
        Fut: Future<Output = Result<ClientRpc>>,
    {
        match target {
            ConsumerTarget::RocketMq(options) => Ok(Self::RocketMq(rocketmq(options).await?)),
            ConsumerTarget::Jmq(cluster, mut options) => {
                options.topics = JmqRpc::topics(subscriptions)?;
                Ok(Self::Jmq(JmqRpc::connect(cluster, options).await?))
            }
            ConsumerTarget::Nats(nats, options) => {
                let js = JetStream::connect(nats).await?;
                let rpc = match JsConsumerRpc::new(js.clone(), options) {
                    Ok(rpc) => rpc,
                    Err(e) => {
                        let _ = js.close().await;
                        return Err(e);
                    }
                };
                // Bind every subscription's durable consumer now: a bad subject or stream
                // fails the start, not the first receive.
                if let Err(e) = rpc.update_subscriptions(subscriptions).await {
                    let _ = js.close().await;
                    return Err(e);
                }
                Ok(Self::Nats(rpc))
            }
        }
    }

    /// The client id the broker knows this consumer by (`jmq:<app>` for JMQ4).
    pub fn client_id(&self) -> String {
        match self {
            Self::RocketMq(r) => r.client().client_id().to_string(),
            Self::Jmq(r) => format!("jmq:{}", r.consumer().cluster().app()),
            Self::Nats(r) => format!("nats:{}", r.options().group),
        }
    }

    /// Disconnect: RocketMQ tells every broker and ends the client's tasks; JMQ4 sends the
    /// results of partly settled fetches, then closes its connections. Idempotent.
    pub async fn close(&self) {
        match self {
            Self::RocketMq(r) => r.client().shutdown().await,
            Self::Jmq(r) => r.close().await,
            Self::Nats(r) => {
                let _ = r.jetstream().close().await;
            }
        }
    }
}

impl ConsumerRpc for ConsumerBackend {
    fn settings(&self) -> ConsumerSettings {
        dispatch!(self, r => r.settings())
    }

    fn access_endpoints(&self) -> Endpoints {
        dispatch!(self, r => r.access_endpoints())
    }

    /// The protocol's system, [`ConsumerBackend::client_id`], and the first access address.
    fn client_identity(&self) -> ClientIdentity {
        let system = match self {
            Self::RocketMq(_) => System::RocketMq,
            Self::Jmq(_) => System::Jmq,
            Self::Nats(_) => System::Nats,
        };
        identity_at(system, self.client_id(), &self.access_endpoints())
    }

    async fn query_assignment(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        dispatch!(self, r => r.query_assignment(topic).await)
    }

    async fn receive(&self, request: ReceiveRequest) -> Result<Received> {
        dispatch!(self, r => r.receive(request).await)
    }

    async fn receive_queues(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        dispatch!(self, r => r.receive_queues(topic).await)
    }

    fn metric_collector(&self) -> Option<String> {
        dispatch!(self, r => r.metric_collector())
    }

    fn receive_slice(&self) -> Option<Duration> {
        dispatch!(self, r => r.receive_slice())
    }

    async fn ack(
        &self,
        source: &MessageSource,
        messages: &[&MessageView],
    ) -> Result<Vec<Result<()>>> {
        dispatch!(self, r => r.ack(source, messages).await)
    }

    async fn change_invisible_duration(
        &self,
        message: &MessageView,
        duration: Duration,
    ) -> Result<String> {
        dispatch!(self, r => r.change_invisible_duration(message, duration).await)
    }

    async fn forward_to_dead_letter_queue(
        &self,
        message: &MessageView,
        max_delivery_attempts: u32,
    ) -> Result<()> {
        dispatch!(self, r => r.forward_to_dead_letter_queue(message, max_delivery_attempts).await)
    }

    async fn update_subscriptions(
        &self,
        subscriptions: &[(String, FilterExpression)],
    ) -> Result<()> {
        dispatch!(self, r => r.update_subscriptions(subscriptions).await)
    }
}

impl PushConsumer<ConsumerBackend> {
    /// Connect to `target` and start consuming. On failure nothing keeps running (the listener
    /// is shut down too).
    pub async fn connect(
        target: ConsumerTarget,
        config: PushConsumerConfig,
        listener: Arc<dyn Listener>,
    ) -> Result<Self> {
        let result = match ConsumerBackend::connect(target, &config, &listener).await {
            Ok(rpc) => {
                let rpc = Arc::new(rpc);
                let started = Self::start(rpc.clone(), config, listener.clone());
                if started.is_err() {
                    rpc.close().await;
                }
                started
            }
            Err(e) => Err(e),
        };
        if result.is_err() {
            let _ = tokio::task::spawn_blocking(move || listener.shutdown(Duration::ZERO)).await;
        }
        result
    }

    /// [`PushConsumer::shutdown`], then [`ConsumerBackend::close`]. Idempotent.
    pub async fn close(&self, timeout: Duration) -> ShutdownReport {
        let report = self.shutdown(timeout).await;
        self.rpc().close().await;
        report
    }
}
