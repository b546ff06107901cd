//! End-to-end tests of the broker over loopback with a raw tonic client.

use std::time::Duration;

use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::Request;

use super::*;
use crate::proto;
use crate::proto::messaging_service_client::MessagingServiceClient;
use crate::proto::telemetry_command::Command;
use crate::status as code;

pub(super) struct Client {
    pub rpc: MessagingServiceClient<Channel>,
    pub id: String,
    pub telemetry_tx: Option<mpsc::Sender<proto::TelemetryCommand>>,
    pub telemetry_rx: Option<tonic::Streaming<proto::TelemetryCommand>>,
}

pub(super) fn req<T>(id: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    if !id.is_empty() {
        r.metadata_mut()
            .insert("x-mq-client-id", MetadataValue::try_from(id).unwrap());
    }
    r
}

pub(super) fn res(name: &str) -> Option<proto::Resource> {
    Some(proto::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

pub(super) fn message(topic: &str, body: &'static [u8]) -> proto::Message {
    proto::Message {
        topic: res(topic),
        user_properties: Default::default(),
        system_properties: Some(proto::SystemProperties {
            message_id: crate::message_id::generate(),
            ..Default::default()
        }),
        body: bytes::Bytes::from_static(body),
    }
}

impl Client {
    pub async fn connect(addr: std::net::SocketAddr, id: &str) -> Client {
        let ch = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Client {
            rpc: MessagingServiceClient::new(ch),
            id: id.into(),
            telemetry_tx: None,
            telemetry_rx: None,
        }
    }

    /// Open Telemetry, send settings, return the merged echo.
    pub async fn settings(&mut self, settings: proto::Settings) -> proto::Settings {
        let (tx, rx) = mpsc::channel(8);
        tx.send(proto::TelemetryCommand {
            status: None,
            command: Some(Command::Settings(settings)),
        })
        .await
        .unwrap();
        let mut stream = self
            .rpc
            .telemetry(req(
                &self.id,
                tokio_stream::wrappers::ReceiverStream::new(rx),
            ))
            .await
            .unwrap()
            .into_inner();
        let echo = stream.message().await.unwrap().unwrap();
        assert_eq!(echo.status.unwrap().code, code::OK);
        self.telemetry_tx = Some(tx);
        self.telemetry_rx = Some(stream);
        match echo.command {
            Some(Command::Settings(s)) => s,
            other => panic!("expected settings, got {other:?}"),
        }
    }

    pub async fn consumer(&mut self, group: &str) -> proto::Settings {
        self.settings(proto::Settings {
            client_type: Some(proto::ClientType::SimpleConsumer as i32),
            pub_sub: Some(proto::settings::PubSub::Subscription(proto::Subscription {
                group: res(group),
                ..Default::default()
            })),
            ..Default::default()
        })
        .await
    }

    pub async fn producer(&mut self, topics: &[&str]) -> proto::Settings {
        self.settings(proto::Settings {
            client_type: Some(proto::ClientType::Producer as i32),
            pub_sub: Some(proto::settings::PubSub::Publishing(proto::Publishing {
                topics: topics.iter().map(|t| res(t).unwrap()).collect(),
                ..Default::default()
            })),
            ..Default::default()
        })
        .await
    }

    pub async fn send(&mut self, msgs: Vec<proto::Message>) -> proto::SendMessageResponse {
        self.rpc
            .send_message(req(&self.id, proto::SendMessageRequest { messages: msgs }))
            .await
            .unwrap()
            .into_inner()
    }

    pub async fn receive(
        &mut self,
        group: &str,
        topic: &str,
        batch: i32,
        invisible: Duration,
    ) -> (i32, Vec<proto::Message>) {
        let mut r = req(
            &self.id,
            proto::ReceiveMessageRequest {
                group: res(group),
                message_queue: Some(proto::MessageQueue {
                    topic: res(topic),
                    id: -1,
                    ..Default::default()
                }),
                batch_size: batch,
                invisible_duration: Some(store::proto_duration(invisible)),
                long_polling_timeout: Some(store::proto_duration(Duration::from_millis(100))),
                ..Default::default()
            },
        );
        r.set_timeout(Duration::from_secs(10));
        let mut s = self.rpc.receive_message(r).await.unwrap().into_inner();
        let mut status = 0;
        let mut out = vec![];
        while let Some(m) = s.message().await.unwrap() {
            match m.content {
                Some(proto::receive_message_response::Content::Status(st)) => status = st.code,
                Some(proto::receive_message_response::Content::Message(m)) => out.push(m),
                _ => {}
            }
        }
        (status, out)
    }

    pub async fn ack(&mut self, group: &str, topic: &str, m: &proto::Message) -> i32 {
        let sp = m.system_properties.as_ref().unwrap();
        self.rpc
            .ack_message(req(
                &self.id,
                proto::AckMessageRequest {
                    group: res(group),
                    topic: res(topic),
                    entries: vec![proto::AckMessageEntry {
                        message_id: sp.message_id.clone(),
                        receipt_handle: sp.receipt_handle.clone().unwrap(),
                        lite_topic: None,
                    }],
                },
            ))
            .await
            .unwrap()
            .into_inner()
            .status
            .unwrap()
            .code
    }
}

pub(super) fn fast() -> BrokerConfig {
    BrokerConfig {
        long_polling_min: Duration::from_millis(50),
        ..BrokerConfig::for_tests()
    }
}

#[tokio::test]
async fn orphaned_transaction_is_checked_back_then_committed() {
    let broker = Broker::start(BrokerConfig {
        transaction_check_delay: Duration::from_millis(50),
        transaction_check_interval: Duration::from_millis(50),
        ..fast()
    })
    .await
    .unwrap();
    broker.create_topic("tx", "TRANSACTION", 1).unwrap();
    let mut p = Client::connect(broker.addresses()[0], "p1").await;
    p.producer(&["tx"]).await;
    let mut m = message("tx", b"half");
    m.system_properties.as_mut().unwrap().message_type = proto::MessageType::Transaction as i32;
    let sent = p.send(vec![m]).await;
    let entry = &sent.entries[0];
    assert!(!entry.transaction_id.is_empty());
    assert_eq!(broker.transaction_counts().pending, 1);
    let cmd = p
        .telemetry_rx
        .as_mut()
        .unwrap()
        .message()
        .await
        .unwrap()
        .unwrap();
    let Some(Command::RecoverOrphanedTransactionCommand(rec)) = cmd.command else {
        panic!("expected a check-back, got {cmd:?}");
    };
    assert_eq!(rec.transaction_id, entry.transaction_id);
    // As the proxy: the transaction id is the message id, and the check-back carries it and
    // the check count as properties.
    assert_eq!(entry.transaction_id, entry.message_id);
    let props = &rec.message.as_ref().unwrap().user_properties;
    assert_eq!(props["__transactionId__"], entry.transaction_id);
    assert_eq!(props["TRANSACTION_CHECK_TIMES"], "1");
    let r = p
        .rpc
        .end_transaction(req(
            "p1",
            proto::EndTransactionRequest {
                topic: res("tx"),
                message_id: entry.message_id.clone(),
                transaction_id: entry.transaction_id.clone(),
                resolution: proto::TransactionResolution::Commit as i32,
                source: proto::TransactionSource::SourceServerCheck as i32,
                trace_context: String::new(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, code::OK);
    let counts = broker.transaction_counts();
    assert_eq!((counts.pending, counts.committed), (0, 1));
    assert!(counts.checks >= 1);
    let stored = broker.messages("tx", 10).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0].message.user_properties["__transactionId__"],
        entry.transaction_id
    );
    assert!(stored[0]
        .message
        .user_properties
        .contains_key("TRANSACTION_CHECK_TIMES"));
}

/// The accounted size of `m` once a send filled in what the broker adds: a store host (of the
/// longest loopback form, so the real one is at most this long), the body digest and the type.
fn accounted_as_sent(mut m: proto::Message, kind: proto::MessageType) -> usize {
    let sp = m.system_properties.as_mut().unwrap();
    sp.store_host = "127.0.0.1:65535".into();
    sp.body_digest = Some(super::send::body_digest(&m.body));
    sp.message_type = kind as i32;
    store::accounted_size(&m)
}

#[tokio::test]
async fn delayed_messages_count_against_the_bound_until_recalled() {
    let delayed = || {
        let mut m = message("d", b"x");
        m.system_properties.as_mut().unwrap().delivery_timestamp =
            Some(store::timestamp_ms(store::now_ms() + 60_000));
        m
    };
    // Room for two and a half.
    let one = accounted_as_sent(delayed(), proto::MessageType::Delay);
    let broker = Broker::start(BrokerConfig {
        max_body_size: 10,
        max_topic_bytes: 2 * one + one / 2,
        ..fast()
    })
    .await
    .unwrap();
    broker.create_topic("d", "DELAY", 1).unwrap();
    let mut c = Client::connect(broker.addresses()[0], "c").await;
    let a = c.send(vec![delayed()]).await;
    c.send(vec![delayed()]).await;
    assert_eq!(
        c.send(vec![delayed()]).await.status.unwrap().code,
        code::MULTIPLE_RESULTS
    );
    let r = c
        .rpc
        .recall_message(req(
            "c",
            proto::RecallMessageRequest {
                topic: res("d"),
                recall_handle: a.entries[0].recall_handle.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, code::OK);
    assert_eq!(c.send(vec![delayed()]).await.status.unwrap().code, code::OK);
}
