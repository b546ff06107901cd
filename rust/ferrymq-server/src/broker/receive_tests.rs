//! What happens to received messages when the receive's answer or its connection is lost, and
//! to a FIFO group's stale acks (raw tonic client over loopback).

use std::time::Duration;

use super::tests::{fast, message, req, res, Client};
use super::*;
use crate::proto;
use crate::status as code;

async fn setup(fifo: bool) -> (Broker, Client) {
    let broker = Broker::start(BrokerConfig {
        auto_renew_invisible: Duration::from_millis(200),
        ..fast()
    })
    .await
    .unwrap();
    let ty = if fifo { "FIFO" } else { "NORMAL" };
    broker.create_topic("t", ty, 1).unwrap();
    broker
        .create_group(GroupConfig {
            fifo,
            ..GroupConfig::new("g")
        })
        .unwrap();
    let mut c = Client::connect(broker.addresses()[0], "c").await;
    c.consumer("g").await;
    let mut m = message("t", b"x");
    if fifo {
        m.system_properties.as_mut().unwrap().message_group = Some("mg".into());
    }
    let mut p = Client::connect(broker.addresses()[0], "p").await;
    p.producer(&["t"]).await;
    assert_eq!(p.send(vec![m]).await.status.unwrap().code, code::OK);
    (broker, c)
}

/// A receive with auto-renewal, as a push consumer sends it, under the call deadline `deadline`.
async fn receive_auto_renew(
    c: &mut Client,
    deadline: Duration,
) -> std::result::Result<Vec<proto::Message>, tonic::Status> {
    let mut r = req(
        &c.id,
        proto::ReceiveMessageRequest {
            group: res("g"),
            message_queue: Some(proto::MessageQueue {
                topic: res("t"),
                id: -1,
                ..Default::default()
            }),
            batch_size: 8,
            auto_renew: true,
            long_polling_timeout: Some(store::proto_duration(Duration::from_millis(50))),
            ..Default::default()
        },
    );
    r.set_timeout(deadline);
    let mut s = c.rpc.receive_message(r).await?.into_inner();
    let mut out = vec![];
    while let Some(m) = s.message().await? {
        if let Some(proto::receive_message_response::Content::Message(m)) = m.content {
            out.push(m);
        }
    }
    Ok(out)
}

fn attempt(m: &proto::Message) -> i32 {
    m.system_properties
        .as_ref()
        .and_then(|s| s.delivery_attempt)
        .unwrap_or(0)
}

#[tokio::test]
async fn an_answer_dropped_before_its_messages_were_written_puts_them_back() {
    let (broker, mut c) = setup(false).await;
    let topic = broker.core.store.topic("t").unwrap();
    let queue = topic.queues[0].clone();
    let group: Arc<str> = "g".into();
    let client = telemetry_liveness(&broker, "c");
    let mut out = pop::PopOutcome::default();
    queue.state.lock().pop(
        &pop::Pop {
            group: &group,
            fifo: false,
            max_attempts: 16,
            max: 8,
            invisible: Duration::from_secs(60),
            filter: &pop::Filter::All,
            now: std::time::Instant::now(),
            renew: Some(&client),
            conn: None,
            renew_max: Duration::from_secs(3600),
            renew_slice: Duration::from_secs(60),
            nonces: &broker.core.nonces,
        },
        &mut out,
    );
    assert_eq!(out.deliveries.len(), 1);
    let d = &out.deliveries[0];
    let handed = handout::Handed {
        queue: queue.clone(),
        offset: d.stored.offset,
        nonce: d.nonce,
    };
    let item = |m| proto::ReceiveMessageResponse { content: Some(m) };
    let mut answer = handout::Handout::new(
        topic.clone(),
        group.clone(),
        vec![
            (
                item(proto::receive_message_response::Content::Status(
                    Default::default(),
                )),
                None,
            ),
            (
                item(proto::receive_message_response::Content::Message(
                    Default::default(),
                )),
                Some(handed),
            ),
        ],
    );
    // The status went out, then the call was cut: the message never did.
    use futures::StreamExt;
    assert!(answer.next().await.is_some());
    drop(answer);
    // Auto-renewed for a live client, yet the same client receives it again at once, as a
    // first delivery.
    let got = receive_auto_renew(&mut c, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(attempt(&got[0]), 1);
}

fn telemetry_liveness(broker: &Broker, client_id: &str) -> Arc<cursor::Liveness> {
    broker.core.endpoints[0]
        .clients
        .liveness(client_id)
        .expect("the client sent settings")
}

#[tokio::test]
async fn auto_renewal_stops_when_the_receive_connection_closes() {
    let (broker, mut c) = setup(false).await;
    let addr = broker.addresses()[0];
    // Receive on a second connection of the same (live) client, then lose that connection.
    let mut lost = Client::connect(addr, "c").await;
    let got = receive_auto_renew(&mut lost, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    drop(lost);
    // The client session lives on (its telemetry stream is open on `c`): only the renewal of
    // what went over the lost connection stops, and the message comes back after one slice.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let again = loop {
        let got = receive_auto_renew(&mut c, Duration::from_secs(5))
            .await
            .unwrap();
        if !got.is_empty() || tokio::time::Instant::now() > deadline {
            break got;
        }
    };
    assert_eq!(again.len(), 1, "still held by auto-renewal");
    assert_eq!(attempt(&again[0]), 2);
}

#[tokio::test]
async fn auto_renewal_goes_on_while_the_receive_connection_lives() {
    let (_broker, mut c) = setup(false).await;
    let got = receive_auto_renew(&mut c, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    // Receives that long-poll over several renewal slices (200 ms) get nothing.
    let until = tokio::time::Instant::now() + Duration::from_millis(800);
    while tokio::time::Instant::now() < until {
        let none = receive_auto_renew(&mut c, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(none.is_empty(), "redelivered while renewed");
    }
    assert_eq!(c.ack("g", "t", &got[0]).await, code::OK);
}

/// The one message of `t`, received and then, once its invisible duration is over, received
/// again: both deliveries.
async fn received_twice(c: &mut Client) -> (Vec<proto::Message>, Vec<proto::Message>) {
    let (_, first) = c.receive("g", "t", 8, Duration::from_millis(100)).await;
    assert_eq!(first.len(), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let again = loop {
        let (_, got) = c.receive("g", "t", 8, Duration::from_secs(30)).await;
        if !got.is_empty() || tokio::time::Instant::now() > deadline {
            break got;
        }
    };
    assert_eq!(again.len(), 1);
    (first, again)
}

#[tokio::test]
async fn a_stale_handle_acks_ok_for_a_normal_group_and_is_refused_for_a_fifo_one() {
    for (fifo, stale) in [(false, code::OK), (true, code::INVALID_RECEIPT_HANDLE)] {
        let (_broker, mut c) = setup(fifo).await;
        let (first, again) = received_twice(&mut c).await;
        // The first handle is stale: the message is out again. For a FIFO group the ack must not
        // pass for a success (the group's next message would run before the redelivery).
        assert_eq!(c.ack("g", "t", &first[0]).await, stale, "fifo={fifo}");
        assert_eq!(c.ack("g", "t", &again[0]).await, code::OK);
        // Acked: a repeated ack has no effect and is not an error.
        assert_eq!(c.ack("g", "t", &again[0]).await, code::OK);
    }
}
