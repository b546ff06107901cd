//! The managed publisher over the producers of the shared message model: RocketMQ 5
//! ([`crate::rocketmq::producer::Producer`]) and JMQ4 ([`crate::jmq::producer::JmqProducer`]).
//!
//! One attempt is one `SendMessage` (RocketMQ) or `PRODUCE_MESSAGE` (JMQ4); the producer's own
//! retries to another broker or leader happen inside it. A message built from subject, headers
//! and body gets the flight id as its key, so it stays the same on every retry and a message can
//! be found by it (on JMQ4 the first key is the `businessId`); the message id is the
//! producer's. `traceparent` / `tracestate` headers become the message's trace context. Neither
//! protocol has server-side de-duplication or JetStream expectations:
//! options other than `message_id` are refused.

use std::future::Future;
use std::sync::Arc;

use futures::FutureExt;

use super::{AckFuture, Flight, Outgoing, PublishAck, PublishBackend, SendFuture};
use crate::error::{Error, Result};
use crate::jmq::producer::JmqProducer;
use crate::message::Message;
use crate::metrics::ClientMetrics;
use crate::rocketmq::producer::Producer;
use crate::trace_context::{TRACEPARENT, TRACESTATE};

fn build(
    subject: &str,
    headers: &[(String, String)],
    out_body: &bytes::Bytes,
    key: Option<&str>,
) -> Result<Message> {
    let mut b = Message::builder(subject, out_body.clone());
    if let Some(k) = key {
        b = b.keys([k]);
    }
    for (k, v) in headers {
        // The W3C headers are the message's trace context, as they are on NATS (where the
        // context travels in exactly these headers): RocketMQ and JMQ4 carry it their own way.
        b = match k.as_str() {
            TRACEPARENT => b.trace_context(v.clone()),
            TRACESTATE => b.trace_state(v.clone()),
            _ => b.property(k.clone(), v.clone()),
        };
    }
    b.build()
}

/// What the shared message model can carry of `out`: no JetStream expectations, and a valid
/// message (shared with the binding's lazily connected JMQ4 producer).
pub fn validate(out: &Outgoing) -> Result<()> {
    if let Some(field) = out.options.first_expectation() {
        return Err(Error::invalid(
            field,
            "JetStream expectations (expected_*) are only supported on NATS JetStream",
        ));
    }
    if out.message.is_none() {
        build(&out.subject, &out.headers, &out.body, None)?;
    }
    Ok(())
}

/// One attempt of `flight` as the shared message model (the caller's `Message`, or one built
/// from subject, headers as properties and body with the flight id as key), sent by `send`.
fn send_message<F>(flight: &Flight, send: impl FnOnce(Message) -> F) -> SendFuture
where
    F: Future<Output = Result<PublishAck>> + Send + 'static,
{
    let msg = match flight.message() {
        Some(m) => Ok(m.clone()),
        None => build(
            flight.subject(),
            flight.headers(),
            flight.body(),
            Some(flight.id()),
        ),
    };
    let ack: Result<AckFuture> = msg.map(|m| send(m).boxed());
    async move { ack }.boxed()
}

/// Send one attempt of `flight` with a JMQ4 `producer` (shared with the binding's lazily
/// connected producer). The stream of the ack is the topic, its sequence the partition index.
pub fn send_jmq(producer: JmqProducer, flight: &Flight) -> SendFuture {
    send_message(flight, |msg| async move {
        let r = producer.send(&msg).await?;
        Ok(PublishAck {
            message_id: r.message_id(),
            stream: r.topic,
            sequence: u64::try_from(r.index).unwrap_or_default(),
            duplicate: false,
            domain: None,
        })
    })
}

impl PublishBackend for JmqProducer {
    fn send(&self, flight: &Arc<Flight>) -> SendFuture {
        send_jmq(self.clone(), flight)
    }
    fn validate(&self, out: &Outgoing) -> Result<()> {
        validate(out)
    }
    fn describe(&self) -> String {
        "JMQ4 producer".to_string()
    }
    fn metrics(&self) -> Option<ClientMetrics> {
        Some(JmqProducer::metrics(self).clone())
    }
}

impl PublishBackend for Producer {
    /// The stream of the ack is the topic, its sequence the queue offset.
    fn send(&self, flight: &Arc<Flight>) -> SendFuture {
        let producer = self.clone();
        send_message(flight, |msg| async move {
            let r = producer.send(msg).await?;
            Ok(PublishAck {
                message_id: r.message_id,
                stream: r.topic,
                sequence: u64::try_from(r.offset).unwrap_or_default(),
                duplicate: false,
                domain: None,
            })
        })
    }
    fn validate(&self, out: &Outgoing) -> Result<()> {
        validate(out)
    }
    fn describe(&self) -> String {
        "RocketMQ producer".to_string()
    }
    fn metrics(&self) -> Option<ClientMetrics> {
        Some(Producer::metrics(self).clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w3c_headers_become_the_trace_context() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let headers = [
            ("k".to_string(), "v".to_string()),
            (TRACEPARENT.to_string(), parent.to_string()),
            (TRACESTATE.to_string(), "a=1".to_string()),
        ];
        let m = build("t", &headers, &bytes::Bytes::from_static(b"x"), None).unwrap();
        let tc = m.trace_context().expect("a trace context");
        assert_eq!(
            tc.pairs().collect::<Vec<_>>(),
            [(TRACEPARENT, parent), (TRACESTATE, "a=1")]
        );
        assert_eq!(m.properties().len(), 1);
        assert_eq!(m.properties().get("k").map(String::as_str), Some("v"));
        let bad = [(TRACEPARENT.to_string(), "nonsense".to_string())];
        let e = build("t", &bad, &bytes::Bytes::new(), None).unwrap_err();
        assert!(e.to_string().contains("trace"), "{e}");
    }
}
