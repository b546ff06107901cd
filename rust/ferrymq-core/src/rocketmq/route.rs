//! Topic routes: the queues of a topic and the brokers serving them, cached per client.
//!
//! * Concurrent lookups of one uncached topic share a single `QueryRoute` (single flight).
//! * The periodic refresh replaces a route only when its queues changed (so the round-robin
//!   position survives) and keeps the old route when the refresh fails.
//! * Queue selection for publishing follows the Java `PublishingLoadBalancer`: writable leader
//!   queues, round robin, distinct brokers, isolated endpoints skipped unless nothing else is
//!   left; FIFO messages take the SipHash queue of their group regardless of isolation.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::future::{BoxFuture, FutureExt, Shared};
use parking_lot::Mutex;

use super::endpoints::Endpoints;
use super::isolation::Isolation;
use crate::error::{Error, Result};
use crate::proto;
use crate::selector;

/// The route of one topic.
#[derive(Debug)]
pub struct TopicRoute {
    topic: String,
    queues: Vec<proto::MessageQueue>,
    queue_endpoints: Vec<Endpoints>,
    writable_leaders: Vec<usize>,
    endpoints: Vec<Endpoints>,
    index: AtomicUsize,
}

fn is_writable(q: &proto::MessageQueue) -> bool {
    q.permission == proto::Permission::Write as i32
        || q.permission == proto::Permission::ReadWrite as i32
}

fn is_leader(q: &proto::MessageQueue) -> bool {
    q.broker.as_ref().is_some_and(|b| b.id == 0)
}

impl TopicRoute {
    /// Build from a `QueryRoute` answer.
    pub fn new(topic: impl Into<String>, queues: Vec<proto::MessageQueue>) -> Result<Self> {
        let topic = topic.into();
        let mut queue_endpoints = Vec::with_capacity(queues.len());
        let mut endpoints: Vec<Endpoints> = Vec::new();
        for q in &queues {
            let ep = q
                .broker
                .as_ref()
                .and_then(|b| b.endpoints.as_ref())
                .ok_or_else(|| {
                    Error::protocol(format!(
                        "route of {topic:?}: a queue has no broker endpoints"
                    ))
                })
                .and_then(Endpoints::from_proto)?;
            if !endpoints.contains(&ep) {
                endpoints.push(ep.clone());
            }
            queue_endpoints.push(ep);
        }
        let writable_leaders = queues
            .iter()
            .enumerate()
            .filter(|(_, q)| is_writable(q) && is_leader(q))
            .map(|(i, _)| i)
            .collect();
        // Start the round robin at a random place so producers do not all hit queue 0 first.
        let start = usize::try_from(seed() % 4096).unwrap_or(0);
        Ok(Self {
            topic,
            queues,
            queue_endpoints,
            writable_leaders,
            endpoints,
            index: AtomicUsize::new(start),
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// Every queue, in route order.
    pub fn queues(&self) -> &[proto::MessageQueue] {
        &self.queues
    }
    /// The endpoints of queue `i`.
    pub fn queue_endpoints(&self, i: usize) -> &Endpoints {
        &self.queue_endpoints[i]
    }
    /// Indices of the writable queues on leader brokers (the FIFO candidates).
    pub fn writable_leaders(&self) -> &[usize] {
        &self.writable_leaders
    }
    /// Every distinct broker endpoint of the route.
    pub fn endpoints(&self) -> &[Endpoints] {
        &self.endpoints
    }

    /// The queue of FIFO `group`: SipHash floor-mod over the writable leader queues.
    pub fn fifo_queue(&self, group: &str) -> Option<usize> {
        if self.writable_leaders.is_empty() {
            return None;
        }
        let i = selector::fifo_queue_index(group, self.writable_leaders.len());
        Some(self.writable_leaders[i])
    }

    /// Up to `count` candidate queues for one publish, one per broker, starting at the next
    /// round-robin position; isolated endpoints are skipped unless every broker is isolated.
    pub fn take_queues(&self, isolation: &Isolation, count: usize) -> Vec<usize> {
        let n = self.writable_leaders.len();
        if n == 0 || count == 0 {
            return Vec::new();
        }
        let next = self.index.fetch_add(1, Ordering::Relaxed);
        let mut picked: Vec<usize> = Vec::with_capacity(count.min(n));
        let mut brokers: Vec<&str> = Vec::with_capacity(count.min(n));
        let check_isolation = !isolation.is_empty();
        for skip_isolated in [true, false] {
            for k in 0..n {
                let qi = self.writable_leaders[(next.wrapping_add(k)) % n];
                let broker = self.queues[qi]
                    .broker
                    .as_ref()
                    .map_or("", |b| b.name.as_str());
                if brokers.contains(&broker) {
                    continue;
                }
                if skip_isolated
                    && check_isolation
                    && isolation.is_isolated(&self.queue_endpoints[qi])
                {
                    continue;
                }
                brokers.push(broker);
                picked.push(qi);
                if picked.len() >= count {
                    return picked;
                }
            }
            if !picked.is_empty() {
                break;
            }
        }
        picked
    }
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(0);
    h.finish()
}

type SharedResult = std::result::Result<Arc<TopicRoute>, Arc<Error>>;
type SharedFetch = Shared<BoxFuture<'static, SharedResult>>;

enum Slot {
    Ready(Arc<TopicRoute>),
    Loading(SharedFetch),
}

/// Route cache of one client.
#[derive(Default)]
pub struct RouteCache {
    map: Mutex<HashMap<String, Slot>>,
}

impl std::fmt::Debug for RouteCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteCache")
            .field("topics", &self.topics())
            .finish()
    }
}

/// Re-create a shared error for one caller (errors are not `Clone`).
pub fn replicate(e: &Error) -> Error {
    match e.rocketmq_code() {
        Some(code) if code < crate::status::GRPC_BASE => {
            let name = crate::status::name(code);
            let msg = e.message();
            let msg = msg
                .strip_prefix(name)
                .and_then(|m| m.strip_prefix(": "))
                .unwrap_or(msg);
            Error::rocketmq_status(code, msg)
        }
        _ => Error::new(e.kind(), e.to_string()),
    }
}

impl RouteCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached route of `topic`, if any.
    pub fn cached(&self, topic: &str) -> Option<Arc<TopicRoute>> {
        match self.map.lock().get(topic) {
            Some(Slot::Ready(r)) => Some(Arc::clone(r)),
            _ => None,
        }
    }

    /// The route of `topic`: cached, or fetched with `fetch` (shared by concurrent callers).
    pub async fn get_or_fetch<F, Fut>(
        self: &Arc<Self>,
        topic: &str,
        fetch: F,
    ) -> Result<Arc<TopicRoute>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<TopicRoute>> + Send + 'static,
    {
        let shared = {
            let mut map = self.map.lock();
            match map.get(topic) {
                Some(Slot::Ready(r)) => return Ok(Arc::clone(r)),
                Some(Slot::Loading(f)) => f.clone(),
                None => {
                    let me = Arc::clone(self);
                    let key = topic.to_string();
                    let fut = fetch();
                    let shared = async move {
                        let res: SharedResult = fut.await.map(Arc::new).map_err(Arc::new);
                        let mut map = me.map.lock();
                        match &res {
                            Ok(r) => {
                                map.insert(key, Slot::Ready(Arc::clone(r)));
                            }
                            Err(_) => {
                                map.remove(&key);
                            }
                        }
                        res
                    }
                    .boxed()
                    .shared();
                    map.insert(topic.to_string(), Slot::Loading(shared.clone()));
                    shared
                }
            }
        };
        shared.await.map_err(|e| replicate(&e))
    }

    /// Refresh `topic` with `fetch`. The route is replaced only if its queues changed; on
    /// failure the old route stays and the error is returned.
    pub async fn refresh<Fut>(&self, topic: &str, fetch: Fut) -> Result<Arc<TopicRoute>>
    where
        Fut: Future<Output = Result<TopicRoute>>,
    {
        let fresh = fetch.await?;
        let mut map = self.map.lock();
        if let Some(Slot::Ready(old)) = map.get(topic) {
            if old.queues == fresh.queues {
                return Ok(Arc::clone(old));
            }
        }
        let fresh = Arc::new(fresh);
        map.insert(topic.to_string(), Slot::Ready(Arc::clone(&fresh)));
        Ok(fresh)
    }

    /// Topics with a cached route.
    pub fn topics(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .map
            .lock()
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Ready(_)))
            .map(|(k, _)| k.clone())
            .collect();
        v.sort();
        v
    }

    /// Every cached route.
    pub fn routes(&self) -> Vec<Arc<TopicRoute>> {
        self.map
            .lock()
            .values()
            .filter_map(|s| match s {
                Slot::Ready(r) => Some(Arc::clone(r)),
                Slot::Loading(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// A queue of `broker` (`host:port`) with permission READ_WRITE.
    pub(crate) fn queue(topic: &str, id: i32, broker: &str, addr: &str) -> proto::MessageQueue {
        let ep = Endpoints::parse_access_point(addr).unwrap().endpoints;
        proto::MessageQueue {
            topic: Some(proto::Resource {
                resource_namespace: String::new(),
                name: topic.into(),
            }),
            id,
            permission: proto::Permission::ReadWrite as i32,
            broker: Some(proto::Broker {
                name: broker.into(),
                id: 0,
                endpoints: Some(ep.to_proto()),
            }),
            accept_message_types: vec![proto::MessageType::Normal as i32],
        }
    }

    fn two_brokers() -> TopicRoute {
        TopicRoute::new(
            "t",
            vec![
                queue("t", 0, "a", "127.0.0.1:1"),
                queue("t", 1, "a", "127.0.0.1:1"),
                queue("t", 0, "b", "127.0.0.1:2"),
                queue("t", 1, "b", "127.0.0.1:2"),
            ],
        )
        .unwrap()
    }

    #[test]
    fn take_queues_prefers_distinct_unisolated_brokers() {
        let r = two_brokers();
        let iso = Isolation::new();
        let qs = r.take_queues(&iso, 3);
        assert_eq!(qs.len(), 2, "one queue per broker");
        assert_ne!(r.queue_endpoints(qs[0]), r.queue_endpoints(qs[1]));

        let a = r.queue_endpoints(0).clone();
        iso.isolate(&a);
        for _ in 0..8 {
            let qs = r.take_queues(&iso, 3);
            assert_eq!(qs.len(), 1);
            assert_ne!(r.queue_endpoints(qs[0]), &a);
        }
        iso.isolate(r.queue_endpoints(2));
        assert_eq!(
            r.take_queues(&iso, 3).len(),
            2,
            "all isolated: ignore isolation"
        );
    }

    #[test]
    fn non_writable_and_follower_queues_are_skipped() {
        let mut ro = queue("t", 0, "a", "127.0.0.1:1");
        ro.permission = proto::Permission::Read as i32;
        let mut follower = queue("t", 1, "a", "127.0.0.1:1");
        follower.broker.as_mut().unwrap().id = 1;
        let rw = queue("t", 2, "a", "127.0.0.1:1");
        let r = TopicRoute::new("t", vec![ro, follower, rw]).unwrap();
        assert_eq!(r.writable_leaders(), &[2]);
        assert_eq!(r.fifo_queue("any"), Some(2));
    }

    #[test]
    fn fifo_queue_is_java_compatible() {
        let qs = (0..8).map(|i| queue("t", i, "a", "127.0.0.1:1")).collect();
        let r = TopicRoute::new("t", qs).unwrap();
        assert_eq!(r.fifo_queue("group-a"), Some(6));
        assert_eq!(r.fifo_queue("order-42"), Some(5));
    }

    #[tokio::test]
    async fn concurrent_lookups_share_one_fetch() {
        let cache = Arc::new(RouteCache::new());
        let calls = Arc::new(AtomicU32::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let cache = Arc::clone(&cache);
            let calls = Arc::clone(&calls);
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_fetch("t", || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(two_brokers())
                    })
                    .await
                    .unwrap()
            }));
        }
        let mut routes = Vec::new();
        for t in tasks {
            routes.push(t.await.unwrap());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(routes.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])));
        assert!(cache.cached("t").is_some());
    }

    #[tokio::test]
    async fn failed_fetch_is_shared_and_not_cached() {
        let cache = Arc::new(RouteCache::new());
        let e = cache
            .get_or_fetch("t", || async {
                Err(Error::rocketmq_status(
                    crate::status::TOPIC_NOT_FOUND,
                    "no t",
                ))
            })
            .await
            .unwrap_err();
        assert_eq!(e.rocketmq_code(), Some(crate::status::TOPIC_NOT_FOUND));
        assert_eq!(e.message(), "TOPIC_NOT_FOUND: no t");
        assert!(cache.cached("t").is_none());
    }

    #[tokio::test]
    async fn failed_refresh_keeps_the_old_route() {
        let cache = Arc::new(RouteCache::new());
        let first = cache
            .get_or_fetch("t", || async { Ok(two_brokers()) })
            .await
            .unwrap();
        let err = cache
            .refresh("t", async { Err(Error::connection("down")) })
            .await;
        assert!(err.is_err());
        assert!(Arc::ptr_eq(&cache.cached("t").unwrap(), &first));
        let same = cache
            .refresh("t", async { Ok(two_brokers()) })
            .await
            .unwrap();
        assert!(Arc::ptr_eq(&same, &first), "unchanged route keeps its Arc");
        let changed = cache
            .refresh("t", async {
                TopicRoute::new("t", vec![queue("t", 0, "a", "127.0.0.1:1")])
            })
            .await
            .unwrap();
        assert!(!Arc::ptr_eq(&changed, &first));
        assert_eq!(cache.topics(), vec!["t".to_string()]);
    }
}
