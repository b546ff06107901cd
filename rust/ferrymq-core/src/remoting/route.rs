//! Topic routes from the name servers, and their cache.
//!
//! A route lists, per broker name, how many queues a topic has for reading and writing with
//! their permission bits, and per broker name the addresses by broker id (id 0 is the
//! master). Reads and writes go to masters: a readable queue is `(broker name, 0..read
//! queues)` of an entry with the read bit; a writable one is `(broker name, 0..write queues)`
//! of an entry with the write bit whose broker has a master.
//!
//! [`RouteCache`] asks the name servers (rotating to the next one when one fails), keeps each
//! topic's route for a refresh interval, lets concurrent lookups of one topic share a single
//! request, keeps serving the previous route when a refresh fails, and can be told to refresh
//! early after a connection error.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Deserialize;

use super::codec::RemotingCommand;
use super::codes::{request, response, status_error};
use super::connection::Connection;
use crate::error::{Error, Result};
use crate::rocketmq::pull::QueueRef;

/// Permission bit: readable.
pub const PERM_READ: i32 = 4;
/// Permission bit: writable.
pub const PERM_WRITE: i32 = 2;
/// How long a route is used before it is fetched again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// Queue counts and permissions of a topic on one broker.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueData {
    /// Broker name.
    pub broker_name: String,
    /// Number of readable queues.
    #[serde(default)]
    pub read_queue_nums: i32,
    /// Number of writable queues.
    #[serde(default)]
    pub write_queue_nums: i32,
    /// Permission bits.
    #[serde(default)]
    pub perm: i32,
    /// Topic system flag.
    #[serde(default)]
    pub topic_sys_flag: i32,
}

/// The addresses of one broker name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerData {
    /// Cluster name.
    #[serde(default)]
    pub cluster: String,
    /// Broker name.
    pub broker_name: String,
    /// `host:port` by broker id (`"0"` is the master).
    #[serde(default)]
    pub broker_addrs: BTreeMap<String, String>,
}

/// A topic route (`TopicRouteData`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRoute {
    /// Queue counts per broker.
    #[serde(default)]
    pub queue_datas: Vec<QueueData>,
    /// Addresses per broker.
    #[serde(default)]
    pub broker_datas: Vec<BrokerData>,
}

impl TopicRoute {
    /// Parse the JSON body of a route reply (standard JSON, quoted map keys).
    pub fn parse(body: &[u8]) -> Result<TopicRoute> {
        serde_json::from_slice(body)
            .map_err(|e| Error::protocol("topic route JSON does not parse").with_source(e))
    }

    /// The master address of `broker`.
    pub fn master_addr(&self, broker: &str) -> Option<&str> {
        self.broker_datas
            .iter()
            .find(|b| b.broker_name == broker)
            .and_then(|b| b.broker_addrs.get("0"))
            .map(String::as_str)
    }

    /// Readable queues, sorted by broker then id.
    pub fn read_queues(&self) -> Vec<QueueRef> {
        self.queues(|q| q.perm & PERM_READ != 0, |q| q.read_queue_nums)
    }

    /// Writable queues on brokers with a master, sorted by broker then id.
    pub fn write_queues(&self) -> Vec<QueueRef> {
        self.queues(
            |q| q.perm & PERM_WRITE != 0 && self.master_addr(&q.broker_name).is_some(),
            |q| q.write_queue_nums,
        )
    }

    /// The queues of the entries `keep` accepts, `count` of each, sorted by broker then id.
    fn queues(
        &self,
        keep: impl Fn(&QueueData) -> bool,
        count: impl Fn(&QueueData) -> i32,
    ) -> Vec<QueueRef> {
        let mut out: Vec<QueueRef> = self
            .queue_datas
            .iter()
            .filter(|q| keep(q))
            .flat_map(|q| {
                (0..count(q).max(0)).map(|id| QueueRef {
                    broker: q.broker_name.clone(),
                    id,
                })
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<(Arc<TopicRoute>, Instant)>>>;

/// Routes by topic, fetched from the name servers.
#[derive(Debug)]
pub struct RouteCache {
    name_servers: Vec<Connection>,
    next: AtomicUsize,
    timeout: Duration,
    refresh: Duration,
    slots: Mutex<HashMap<String, Slot>>,
}

impl RouteCache {
    /// A cache over `name_servers` (at least one), with a per-request `timeout`.
    pub fn new(name_servers: Vec<Connection>, timeout: Duration) -> Result<Self> {
        if name_servers.is_empty() {
            return Err(Error::invalid("endpoints", "no name server address"));
        }
        Ok(RouteCache {
            name_servers,
            next: AtomicUsize::new(0),
            timeout,
            refresh: REFRESH_INTERVAL,
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// The name-server connections.
    pub fn name_servers(&self) -> &[Connection] {
        &self.name_servers
    }

    fn slot(&self, topic: &str) -> Slot {
        self.slots
            .lock()
            .entry(topic.to_string())
            .or_default()
            .clone()
    }

    /// The route of `topic`: cached while fresh, else fetched (one request for all concurrent
    /// callers). A failed refresh keeps the previous route.
    pub async fn get(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        let slot = self.slot(topic);
        let mut guard = slot.lock().await;
        if let Some((route, at)) = guard.as_ref() {
            if at.elapsed() < self.refresh {
                return Ok(route.clone());
            }
        }
        match self.fetch(topic).await {
            Ok(route) => {
                let route = Arc::new(route);
                *guard = Some((route.clone(), Instant::now()));
                Ok(route)
            }
            Err(e) => match guard.as_ref() {
                Some((old, _)) if e.status().is_none() => {
                    tracing::warn!(
                        target: "ferrymq::remoting",
                        "route refresh of {topic} failed, keeping the previous route: {e}"
                    );
                    Ok(old.clone())
                }
                _ => Err(e),
            },
        }
    }

    /// Make the next [`RouteCache::get`] of `topic` ask the name servers (the current route
    /// stays as a fallback).
    pub fn invalidate(&self, topic: &str) {
        let slot = self.slots.lock().get(topic).cloned();
        if let Some(slot) = slot {
            if let Ok(mut g) = slot.try_lock() {
                if let Some((_, at)) = g.as_mut() {
                    *at = Instant::now()
                        .checked_sub(self.refresh)
                        .unwrap_or_else(Instant::now);
                }
            }
        }
    }

    /// Ask the name servers for `topic`'s route, trying each once, starting after the last
    /// one that worked.
    pub async fn fetch(&self, topic: &str) -> Result<TopicRoute> {
        let n = self.name_servers.len();
        let start = self.next.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..n {
            let idx = (start + i) % n;
            let ns = &self.name_servers[idx];
            let cmd = RemotingCommand::request(request::GET_ROUTEINFO_BY_TOPIC)
                .with_ext("topic", topic)
                .with_ext("acceptStandardJsonOnly", "true");
            match ns.request(cmd, self.timeout).await {
                Ok(resp) if resp.code == response::SUCCESS => {
                    self.next.store(idx, Ordering::Relaxed);
                    return TopicRoute::parse(&resp.body)
                        .map_err(|e| e.context(format!("route of {topic} from {}", ns.addr())));
                }
                Ok(resp) if resp.code == response::TOPIC_NOT_EXIST => {
                    self.next.store(idx, Ordering::Relaxed);
                    return Err(status_error(resp.code, resp.remark.as_deref())
                        .context(format!("route of {topic}")));
                }
                Ok(resp) => {
                    last = Some(
                        status_error(resp.code, resp.remark.as_deref())
                            .context(format!("route of {topic} from {}", ns.addr())),
                    );
                }
                Err(e) => last = Some(e.context(format!("route of {topic}"))),
            }
            self.next.store((idx + 1) % n, Ordering::Relaxed);
        }
        Err(last.unwrap_or_else(|| Error::connection("no name server")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::remoting_server;

    const ROUTE: &str = r#"{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false},{"brokerAddrs":{"1":"10.0.0.2:10911"},"brokerName":"broker-b","cluster":"c"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":2},{"brokerName":"broker-b","perm":6,"readQueueNums":1,"writeQueueNums":1}]}"#;

    #[test]
    fn parses_and_selects_queues() {
        let r = TopicRoute::parse(ROUTE.as_bytes()).unwrap();
        assert_eq!(r.master_addr("broker-a"), Some("127.0.0.1:10911"));
        assert_eq!(r.master_addr("broker-b"), None);
        let read: Vec<String> = r.read_queues().iter().map(QueueRef::key).collect();
        assert_eq!(
            read,
            [
                "broker-a:0",
                "broker-a:1",
                "broker-a:2",
                "broker-a:3",
                "broker-b:0"
            ]
        );
        let write: Vec<String> = r.write_queues().iter().map(QueueRef::key).collect();
        assert_eq!(write, ["broker-a:0", "broker-a:1"]);
        assert!(TopicRoute::parse(b"{\"brokerDatas\":[{\"brokerAddrs\":{0:\"x\"}}]}").is_err());
    }

    #[tokio::test]
    async fn rotates_name_servers_and_caches() {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let good = remoting_server(move |c, _| {
            h.fetch_add(1, Ordering::SeqCst);
            let code = if c.ext("topic") == Some("t") { 0 } else { 17 };
            let mut resp = RemotingCommand::response(code, c.opaque, None);
            if code == 0 {
                resp.body = ROUTE.into();
            }
            resp
        })
        .await;
        let cache = RouteCache::new(
            vec![
                Connection::new("127.0.0.1:1", None),
                Connection::new(good, None),
            ],
            Duration::from_secs(2),
        )
        .unwrap();
        let (a, b) = tokio::join!(cache.get("t"), cache.get("t"));
        assert_eq!(a.unwrap(), b.unwrap());
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        cache.invalidate("t");
        cache.get("t").await.unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        let e = cache.get("nope").await.unwrap_err();
        assert_eq!(e.status().unwrap().code, 17);
    }
}
