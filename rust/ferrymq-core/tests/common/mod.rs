//! What the JMQ4 end-to-end tests share.

use std::time::Duration;

use ferrymq_core::jmq::client::ConnectOptions;
use ferrymq_core::jmq::cluster::ClusterOptions;
use ferrymq_server::jmq::server::{JmqServer, DEFAULT_APP, DEFAULT_TOKEN};

/// A client of `s` as its default app, with a 5 s request timeout.
pub fn cluster_opts(s: &JmqServer) -> ClusterOptions {
    let connect = ConnectOptions {
        app: DEFAULT_APP.into(),
        token: DEFAULT_TOKEN.into(),
        request_timeout: Duration::from_secs(5),
        ..ConnectOptions::default()
    };
    let addr = ferrymq_core::jmq::parse_endpoint(&s.endpoint()).unwrap();
    ClusterOptions::new(addr, connect)
}
