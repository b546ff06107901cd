//! The managed publisher over the JMQ4 producer ([`crate::jmq::producer::JmqProducer`]).
//!
//! One attempt is one `PRODUCE_MESSAGE` (the producer's own retries to another leader happen
//! inside it). The flight id becomes the first key, i.e. the JMQ4 `businessId`, so it stays the
//! same on every retry. JMQ4 has no JetStream expectations: they are refused.

use std::sync::Arc;

use futures::FutureExt;

use super::rocketmq::{check_no_expectations, to_message};
use super::{AckFuture, Flight, Outgoing, PublishAck, PublishBackend, SendFuture};
use crate::error::Result;
use crate::jmq::producer::{JmqProducer, SendReceipt};

/// The common ack of a JMQ4 receipt: the stream is the topic, the sequence the partition index.
pub fn ack_of(r: &SendReceipt) -> PublishAck {
    PublishAck {
        message_id: r.message_id(),
        stream: r.topic.clone(),
        sequence: u64::try_from(r.index).unwrap_or_default(),
        duplicate: false,
        domain: None,
    }
}

/// Send one attempt of `flight` with `producer` (shared with the binding's lazily connected
/// producer).
pub fn send_with(producer: JmqProducer, flight: &Flight) -> SendFuture {
    let msg = to_message(flight);
    async move {
        let msg = msg?;
        let ack: AckFuture = async move { Ok(ack_of(&producer.send(&msg).await?)) }.boxed();
        Ok(ack)
    }
    .boxed()
}

/// What JMQ4 can carry of `out` (shared with the binding).
pub fn validate_for_jmq(out: &Outgoing) -> Result<()> {
    check_no_expectations(out)?;
    super::rocketmq::validate_message(out)
}

impl PublishBackend for JmqProducer {
    fn send(&self, flight: &Arc<Flight>) -> SendFuture {
        send_with(self.clone(), flight)
    }
    fn validate(&self, out: &Outgoing) -> Result<()> {
        validate_for_jmq(out)
    }
    fn describe(&self) -> String {
        "JMQ4 producer".to_string()
    }
}
