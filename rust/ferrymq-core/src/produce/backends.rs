//! [`ProduceBackend`] for the three producers: RocketMQ 5 (one `SendMessage` per message, many
//! in flight), JMQ4 (one batch `PRODUCE_MESSAGE` per chunk) and NATS JetStream (one publish
//! per message with its `Nats-Msg-Id` property or a fresh one, in order on the connection, acks
//! awaited together).

use async_nats::header::NATS_MESSAGE_ID;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;

use super::ProduceBackend;
use crate::error::Result;
use crate::jmq::producer::{JmqProducer, SendReceipt as JmqSendReceipt};
use crate::message::Message;
use crate::nats::JetStream;
use crate::publisher::{PublishAck, PublishOptions};
use crate::rocketmq::producer::{Producer, SendReceipt};

impl ProduceBackend for Producer {
    type Receipt = SendReceipt;
    fn send_chunk(
        &self,
        messages: Vec<Message>,
    ) -> BoxFuture<'static, Result<Vec<Result<SendReceipt>>>> {
        let p = self.clone();
        async move { p.send_each(messages).await }.boxed()
    }
}

impl ProduceBackend for JmqProducer {
    type Receipt = JmqSendReceipt;
    fn send_chunk(
        &self,
        messages: Vec<Message>,
    ) -> BoxFuture<'static, Result<Vec<Result<JmqSendReceipt>>>> {
        let p = self.clone();
        async move { Ok(p.send_batch(&messages).await?.into_iter().map(Ok).collect()) }.boxed()
    }
}

impl ProduceBackend for JetStream {
    type Receipt = PublishAck;
    fn send_chunk(
        &self,
        messages: Vec<Message>,
    ) -> BoxFuture<'static, Result<Vec<Result<PublishAck>>>> {
        let js = self.clone();
        async move {
            let options = PublishOptions::default();
            // Handed to the connection one after the other (the stream stores them in produce
            // order); their acks are awaited together.
            let mut acks = Vec::with_capacity(messages.len());
            for m in messages {
                if let Err(e) = crate::nats::check_message(&m) {
                    acks.push(Err(e));
                    continue;
                }
                let headers = crate::nats::message_headers(&m);
                // A `Nats-Msg-Id` property names the message (a resend is then de-duplicated by
                // the stream); without one the message gets a fresh id.
                let id = match m.properties().get(NATS_MESSAGE_ID.as_ref() as &str) {
                    Some(id) => id.clone(),
                    None => nuid::next().to_string(),
                };
                acks.push(
                    js.send_raw(m.topic(), &id, &headers, m.body().clone(), &options)
                        .await,
                );
            }
            Ok(join_all(acks.into_iter().map(|sent| async move { sent?.await })).await)
        }
        .boxed()
    }
}
