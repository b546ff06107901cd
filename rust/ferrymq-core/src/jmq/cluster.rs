//! The JMQ4 session shared by producers and consumers: one [`Connection`] per broker, the
//! FETCH_CLUSTER metadata cache, broker health and weights.
//!
//! * Metadata is fetched per topic on first use, cached, refreshed in the background every
//!   `metadata_refresh`, and dropped at once when a broker answers with a code that says it is
//!   stale (132, 187–193, see [`codes::refreshes_metadata`]).
//! * FETCH_HEALTH runs every `health_interval` against the brokers in use. The real server always
//!   reports 0, so ferrymq reads the point as a *penalty*: weight / (1 + point). A broker that
//!   fails the check (or a request) is weighted down to a tenth until it answers again.
//! * With `prefer_nearby`, or a topic policy that says `nearby`, partition groups led by a broker
//!   the server marks as nearby (same region as the client's ADD_CONNECTION) are chosen first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio_util::sync::CancellationToken;

use super::client::{ConnectOptions, Connection};
use super::codes;
use super::command::{BrokerMeta, FetchCluster, FetchHealth, PartitionGroupMeta, TopicMeta};
use crate::error::{Error, ErrorKind, Result};

/// Settings of a JMQ4 session.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Bootstrap `host:port` (any broker).
    pub bootstrap: String,
    /// Identity and connection pacing.
    pub connect: ConnectOptions,
    /// Background metadata refresh period.
    pub metadata_refresh: Duration,
    /// FETCH_HEALTH period.
    pub health_interval: Duration,
    /// Prefer partition groups whose leader is in the client's region.
    pub prefer_nearby: bool,
}

impl ClusterOptions {
    /// Options for `bootstrap` with everything else at its default.
    pub fn new(bootstrap: impl Into<String>, connect: ConnectOptions) -> Self {
        ClusterOptions {
            bootstrap: bootstrap.into(),
            connect,
            metadata_refresh: Duration::from_secs(30),
            health_interval: Duration::from_secs(10),
            prefer_nearby: true,
        }
    }
}

/// The cached route of one topic.
#[derive(Debug, Clone)]
pub struct TopicRoute {
    /// FETCH_CLUSTER metadata of the topic.
    pub meta: TopicMeta,
    /// Brokers by id (the leaders of its partition groups).
    pub brokers: HashMap<i32, BrokerMeta>,
    /// When it was fetched.
    pub fetched: Instant,
}

impl TopicRoute {
    /// Every partition, sorted.
    pub fn partitions(&self) -> Vec<i16> {
        let mut v: Vec<i16> = self
            .meta
            .partition_groups
            .iter()
            .flat_map(|g| g.partitions.iter().copied())
            .collect();
        v.sort_unstable();
        v
    }

    /// The group holding `partition`.
    pub fn group_of(&self, partition: i16) -> Option<&PartitionGroupMeta> {
        self.meta
            .partition_groups
            .iter()
            .find(|g| g.partitions.contains(&partition))
    }

    /// The leader broker of a group, if known.
    pub fn leader(&self, group: &PartitionGroupMeta) -> Option<&BrokerMeta> {
        self.brokers.get(&group.leader)
    }

    /// The leader broker of `partition`: an invalid argument when the topic has no such
    /// partition, `FW_TOPIC_NO_PARTITIONGROUP` when its group has no known leader.
    pub fn partition_leader(&self, partition: i16) -> Result<&BrokerMeta> {
        let topic = &self.meta.topic;
        let g = self.group_of(partition).ok_or_else(|| {
            Error::invalid(
                "partition",
                format!("topic {topic:?} has no partition {partition}"),
            )
        })?;
        self.leader(g).ok_or_else(|| {
            codes::error(
                codes::FW_TOPIC_NO_PARTITIONGROUP,
                format!("no leader for partition {partition} of {topic:?}"),
            )
        })
    }

    /// Distinct leader brokers of the topic, sorted by id.
    pub fn leaders(&self) -> Vec<BrokerMeta> {
        let mut v: Vec<BrokerMeta> = self
            .meta
            .partition_groups
            .iter()
            .filter_map(|g| self.brokers.get(&g.leader).cloned())
            .collect();
        v.sort_by_key(|b| b.id);
        v.dedup_by_key(|b| b.id);
        v
    }
}

#[derive(Debug, Clone, Copy)]
struct Health {
    point: f64,
    failing: bool,
}

struct Inner {
    options: ClusterOptions,
    conns: tokio::sync::Mutex<HashMap<String, Connection>>,
    routes: RwLock<HashMap<String, Arc<TopicRoute>>>,
    health: RwLock<HashMap<i32, Health>>,
    closed: AtomicBool,
    cancel: CancellationToken,
}

/// A JMQ4 session. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("bootstrap", &self.inner.options.bootstrap)
            .field("app", &self.inner.options.connect.app)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connect to the bootstrap broker (failing fast on a wrong address, app or token) and
    /// start the background refresh and health tasks.
    pub async fn connect(options: ClusterOptions) -> Result<Cluster> {
        options.connect.validate()?;
        let inner = Arc::new(Inner {
            options,
            conns: tokio::sync::Mutex::new(HashMap::new()),
            routes: RwLock::new(HashMap::new()),
            health: RwLock::new(HashMap::new()),
            closed: AtomicBool::new(false),
            cancel: CancellationToken::new(),
        });
        let c = Cluster { inner };
        let boot = c.inner.options.bootstrap.clone();
        c.connection(&boot).await?;
        tokio::spawn(background(Arc::downgrade(&c.inner), c.inner.cancel.clone()));
        Ok(c)
    }

    /// The options.
    pub fn options(&self) -> &ClusterOptions {
        &self.inner.options
    }

    /// The app name as brokers compare it.
    pub fn app(&self) -> &str {
        self.inner.options.connect.app_name()
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            Err(Error::closed("the JMQ4 client is closed"))
        } else {
            Ok(())
        }
    }

    /// The connection to `addr`, opened (with ADD_CONNECTION) if needed.
    pub async fn connection(&self, addr: &str) -> Result<Connection> {
        self.check_open()?;
        let mut conns = self.inner.conns.lock().await;
        if let Some(c) = conns.get(addr) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let c = Connection::connect(addr, &self.inner.options.connect).await?;
        conns.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// The connection to broker `b`.
    pub async fn broker_connection(&self, b: &BrokerMeta) -> Result<Connection> {
        self.connection(&b.address()).await
    }

    /// Any open connection (the bootstrap broker first).
    pub async fn any_connection(&self) -> Result<Connection> {
        let boot = self.inner.options.bootstrap.clone();
        match self.connection(&boot).await {
            Ok(c) => Ok(c),
            Err(e) if e.kind() == ErrorKind::Closed => Err(e),
            Err(e) => {
                let known: Vec<String> = {
                    let routes = self.inner.routes.read();
                    routes
                        .values()
                        .flat_map(|r| r.brokers.values().map(BrokerMeta::address))
                        .collect()
                };
                for addr in known {
                    if let Ok(c) = self.connection(&addr).await {
                        return Ok(c);
                    }
                }
                Err(e)
            }
        }
    }

    /// The route of `topic`, from the cache when fresh.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        if let Some(r) = self.inner.routes.read().get(topic) {
            if r.fetched.elapsed() < self.inner.options.metadata_refresh {
                return Ok(r.clone());
            }
        }
        self.refresh(&[topic.to_string()]).await?;
        self.inner
            .routes
            .read()
            .get(topic)
            .cloned()
            .ok_or_else(|| Error::internal(format!("no route for {topic} after refresh")))
    }

    /// FETCH_CLUSTER for `topics`, replacing their cached routes. A topic that does not exist
    /// or that the app may not use is an error naming it.
    pub async fn refresh(&self, topics: &[String]) -> Result<()> {
        let conn = self.any_connection().await?;
        let resp = conn
            .call(&FetchCluster {
                topics: topics.to_vec(),
                app: self.app().to_string(),
            })
            .await?;
        let brokers: HashMap<i32, BrokerMeta> =
            resp.brokers.into_iter().map(|b| (b.id, b)).collect();
        let mut first_error = None;
        let mut routes = self.inner.routes.write();
        for meta in resp.topics {
            if meta.code != codes::SUCCESS {
                routes.remove(&meta.topic);
                if first_error.is_none() {
                    let why = match meta.code {
                        codes::FW_TOPIC_NOT_EXIST => {
                            format!("topic {:?} does not exist", meta.topic)
                        }
                        codes::CN_NO_PERMISSION => format!(
                            "app {:?} has no subscription to topic {:?}",
                            self.app(),
                            meta.topic
                        ),
                        _ => format!("metadata of topic {:?}", meta.topic),
                    };
                    first_error = Some(codes::error(meta.code, why));
                }
                continue;
            }
            let mine = meta
                .partition_groups
                .iter()
                .filter_map(|g| brokers.get(&g.leader).map(|b| (b.id, b.clone())))
                .collect();
            routes.insert(
                meta.topic.clone(),
                Arc::new(TopicRoute {
                    meta,
                    brokers: mine,
                    fetched: Instant::now(),
                }),
            );
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Drop the cached route of `topic` (after a stale-metadata code).
    pub fn invalidate(&self, topic: &str) {
        self.inner.routes.write().remove(topic);
    }

    /// React to a broker code: drop the route when the code says it is stale.
    pub fn on_code(&self, topic: &str, code: i32) {
        if codes::refreshes_metadata(code) {
            self.invalidate(topic);
        }
    }

    /// Record that a request to broker `id` failed at the connection level.
    pub fn mark_failing(&self, id: i32) {
        let mut h = self.inner.health.write();
        let e = h.entry(id).or_insert(Health {
            point: 0.0,
            failing: false,
        });
        e.failing = true;
    }

    /// Record a health point for broker `id`.
    pub fn set_health(&self, id: i32, point: f64) {
        self.inner.health.write().insert(
            id,
            Health {
                point: if point.is_finite() {
                    point.max(0.0)
                } else {
                    0.0
                },
                failing: false,
            },
        );
    }

    /// The factor health applies to a broker's weight (1.0 when healthy).
    pub fn health_factor(&self, id: i32) -> f64 {
        match self.inner.health.read().get(&id) {
            None => 1.0,
            Some(h) if h.failing => 0.1,
            Some(h) => 1.0 / (1.0 + h.point),
        }
    }

    /// Run FETCH_HEALTH once against every broker in the cached routes.
    pub async fn check_health(&self) {
        let brokers: Vec<BrokerMeta> = {
            let routes = self.inner.routes.read();
            let mut v: Vec<BrokerMeta> = routes.values().flat_map(|r| r.leaders()).collect();
            v.sort_by_key(|b| b.id);
            v.dedup_by_key(|b| b.id);
            v
        };
        for b in brokers {
            let r = match self.broker_connection(&b).await {
                Ok(c) => c.call_timeout(&FetchHealth, Duration::from_secs(3)).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(h) => self.set_health(b.id, h.point),
                Err(_) => self.mark_failing(b.id),
            }
        }
    }

    /// Refresh every cached route now.
    pub async fn refresh_all(&self) -> Result<()> {
        let topics: Vec<String> = self.inner.routes.read().keys().cloned().collect();
        if topics.is_empty() {
            return Ok(());
        }
        self.refresh(&topics).await
    }

    /// The effective weight of partition group `g` of `route` for producing: the policy weight
    /// of its leader (or the broker's), times the health factor.
    pub fn group_weight(&self, route: &TopicRoute, g: &PartitionGroupMeta) -> f64 {
        let Some(b) = route.leader(g) else {
            return 0.0;
        };
        if b.permission & 2 == 0 {
            return 0.0;
        }
        let policy = route.meta.producer_policy.as_ref().and_then(|p| {
            p.weights
                .iter()
                .find(|(id, _)| id.parse::<i32>().ok() == Some(b.id))
                .map(|(_, w)| f64::from(*w))
        });
        let base = policy.unwrap_or(f64::from(b.weight.max(1)));
        base.max(0.0) * self.health_factor(b.id)
    }

    /// Whether nearby groups should be preferred for `route`.
    pub fn nearby_first(&self, route: &TopicRoute, producing: bool) -> bool {
        let policy = if producing {
            route.meta.producer_policy.as_ref().map(|p| p.nearby)
        } else {
            route.meta.consumer_policy.as_ref().map(|p| p.nearby)
        };
        self.inner.options.prefer_nearby || policy.unwrap_or(false)
    }

    /// Close: REMOVE_* and REMOVE_CONNECTION on every connection, stop background tasks.
    pub async fn close(&self) {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.inner.cancel.cancel();
        let conns: Vec<Connection> = self
            .inner
            .conns
            .lock()
            .await
            .drain()
            .map(|(_, c)| c)
            .collect();
        futures::future::join_all(conns.iter().map(Connection::close)).await;
    }

    /// Whether [`Cluster::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn background(inner: std::sync::Weak<Inner>, cancel: CancellationToken) {
    let (refresh, health) = match inner.upgrade() {
        Some(i) => (i.options.metadata_refresh, i.options.health_interval),
        None => return,
    };
    let mut refresh_tick = tokio::time::interval(refresh.max(Duration::from_millis(100)));
    let mut health_tick = tokio::time::interval(health.max(Duration::from_millis(100)));
    refresh_tick.tick().await;
    health_tick.tick().await;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = refresh_tick.tick() => {
                let Some(i) = inner.upgrade() else { return };
                let c = Cluster { inner: i };
                if let Err(e) = c.refresh_all().await {
                    tracing::debug!(target: "ferrymq::jmq", "metadata refresh failed: {e}");
                }
            }
            _ = health_tick.tick() => {
                let Some(i) = inner.upgrade() else { return };
                Cluster { inner: i }.check_health().await;
            }
        }
    }
}

/// Pick an index with probability proportional to `weights` (all zero: uniform).
pub fn weighted_pick(weights: &[f64]) -> Option<usize> {
    if weights.is_empty() {
        return None;
    }
    let total: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    let r = fastrand::f64();
    if total <= 0.0 {
        return Some(((r * weights.len() as f64) as usize).min(weights.len() - 1));
    }
    let mut x = r * total;
    for (i, w) in weights.iter().enumerate() {
        if *w > 0.0 {
            if x < *w {
                return Some(i);
            }
            x -= *w;
        }
    }
    weights.iter().rposition(|w| *w > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_pick_follows_weights() {
        let mut counts = [0usize; 3];
        for _ in 0..30_000 {
            counts[weighted_pick(&[1.0, 0.0, 9.0]).unwrap()] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!(counts[2] > counts[0] * 5, "{counts:?}");
        assert!(weighted_pick(&[]).is_none());
        assert!(weighted_pick(&[0.0, 0.0]).is_some());
    }
}
