//! The client layer following changes made on a running broker (embedded, over loopback):
//! `ReconnectEndpoints` moves it to a new connection, the periodic route refresh picks up a
//! queue that became writable, and the periodic settings sync applies new server settings.

use std::time::Duration;

use crate::proto;
use crate::rocketmq::client::{Client, ClientOptions, NoCommands};
use crate::test_support::wait_for;
use ferrymq_server::broker::{Broker, BrokerConfig};

async fn broker() -> Broker {
    Broker::start(BrokerConfig::for_tests()).await.unwrap()
}

async fn producer(b: &Broker, topic: &str) -> Client {
    let mut o = ClientOptions::new(b.access_point());
    o.route_refresh_interval = Duration::from_millis(100);
    o.settings_sync_interval = Duration::from_millis(100);
    let c = Client::new(
        o,
        proto::ClientType::Producer,
        None,
        proto::settings::PubSub::Publishing(proto::Publishing {
            topics: vec![proto::Resource {
                resource_namespace: String::new(),
                name: topic.into(),
            }],
            ..Default::default()
        }),
        std::sync::Arc::new(NoCommands),
    )
    .unwrap();
    c.start().await.unwrap();
    c.route(topic).await.unwrap();
    c
}

fn connections(b: &Broker) -> (u64, u64) {
    let s = &b.endpoint_stats()[0];
    (s.connections_accepted, s.connections_open)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_endpoints_opens_a_new_connection_and_closes_the_old() {
    let b = broker().await;
    b.create_topic("t", "NORMAL", 1).unwrap();
    let c = producer(&b, "t").await;
    c.heartbeat_all().await;
    assert_eq!(connections(&b), (1, 1));
    b.reconnect_endpoints(c.client_id()).unwrap();
    wait_for("a new connection", || connections(&b).0 == 2).await;
    wait_for("the old one closed", || connections(&b).1 == 1).await;
    wait_for("telemetry on the new one", || {
        b.clients(0)
            .unwrap()
            .iter()
            .any(|s| s.client_id == c.client_id() && s.connected())
    })
    .await;
    c.heartbeat(c.access_endpoints()).await.unwrap();
    assert_eq!(connections(&b), (2, 1));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_refresh_picks_up_a_queue_that_became_writable() {
    let b = broker().await;
    b.create_topic("t", "NORMAL", 2).unwrap();
    b.set_queue_permission("t", 0, 1, "READ").unwrap();
    let c = producer(&b, "t").await;
    assert_eq!(c.route("t").await.unwrap().writable_leaders().len(), 1);
    b.set_queue_permission("t", 0, 1, "READ_WRITE").unwrap();
    wait_for("the refreshed route", || {
        c.routes()
            .cached("t")
            .is_some_and(|r| r.writable_leaders().len() == 2)
    })
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_sync_applies_settings_changed_on_the_server() {
    let b = broker().await;
    b.create_topic("t", "NORMAL", 1).unwrap();
    let c = producer(&b, "t").await;
    assert_eq!(c.settings().max_body_size, 4 * 1024 * 1024);
    assert_eq!(c.settings().retry_policy.max_attempts, 3);
    b.update_settings(Some(1000), Some(5)).unwrap();
    wait_for("the new settings", || {
        let s = c.settings();
        s.max_body_size == 1000 && s.retry_policy.max_attempts == 5
    })
    .await;
    c.shutdown().await;
}
