//! [`RemotingClient`]: routes, offsets, pulls and sends over the remoting protocol.
//!
//! The client is a cheap `Clone` handle. It keeps one [`Connection`] per name server and per
//! broker address, and a [`RouteCache`]. Every broker call goes to the master of the queue's
//! broker, names the broker in `bname` (a 5.x proxy forwards by it) and is signed when
//! credentials are set. A connection error makes the next route lookup of that topic ask the
//! name servers again. Sends live in [`super::send`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::codec::RemotingCommand;
use super::codes::{request, response, status_error};
use super::connection::Connection;
use super::route::{RouteCache, TopicRoute};
use super::stored::{decode_stored, StoredMessage};
use crate::error::{Error, ErrorKind, Result};
use crate::metrics::{ClientIdentity, ClientMetrics, System};
use crate::rocketmq::metadata::Credentials;
use crate::rocketmq::pull::QueueRef;

/// The topic whose permissions govern auto-creation.
pub(super) const DEFAULT_TOPIC: &str = "TBW102";
/// Pull system flags: use the subscription in the request, and allow the broker to hold it.
const PULL_FLAG_SUBSCRIPTION: i32 = 4;
const PULL_FLAG_SUSPEND: i32 = 2;

/// How to reach a RocketMQ cluster over remoting.
#[derive(Debug, Clone)]
pub struct RemotingOptions {
    /// Name servers, `"remoting://h:p[;h:p]"` or `"h:p[;h:p]"` (or a 5.x proxy's remoting port
    /// in cluster mode).
    pub endpoints: String,
    /// Access key and secret for brokers with authentication.
    pub credentials: Option<Credentials>,
    /// Deadline of a request (a long-polling pull adds its suspend time). Default 3 s.
    pub request_timeout: Duration,
    /// Namespace: topics and groups are sent as `"<namespace>%<name>"`, as the Java client
    /// does.
    pub namespace: Option<String>,
}

impl RemotingOptions {
    /// Options for `endpoints` with the defaults.
    pub fn new(endpoints: impl Into<String>) -> Self {
        RemotingOptions {
            endpoints: endpoints.into(),
            credentials: None,
            request_timeout: Duration::from_secs(3),
            namespace: None,
        }
    }
}

/// Parse `"remoting://h:p;h:p"` (or without the scheme) into `host:port` strings.
pub fn parse_endpoints(endpoints: &str) -> Result<Vec<String>> {
    let s = endpoints.trim();
    let s = match s.get(..11) {
        Some(p) if p.eq_ignore_ascii_case("remoting://") => &s[11..],
        _ => s,
    };
    let mut out = Vec::new();
    for part in s.split([';', ',']).map(str::trim).filter(|p| !p.is_empty()) {
        let ok = part
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok || part.contains('/') {
            return Err(Error::invalid(
                "endpoints",
                format!("{part:?} is not host:port"),
            ));
        }
        out.push(part.to_string());
    }
    if out.is_empty() {
        return Err(Error::invalid(
            "endpoints",
            format!("{endpoints:?} names no name server"),
        ));
    }
    Ok(out)
}

/// A tag filter: `"*"` (everything) or `"a || b"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagFilter {
    expression: String,
    tags: Option<HashSet<String>>,
}

impl TagFilter {
    /// Parse a tag expression; blank means `"*"`.
    pub fn parse(expression: &str) -> Result<Self> {
        let e = expression.trim();
        if e.is_empty() || e == "*" {
            return Ok(TagFilter {
                expression: "*".into(),
                tags: None,
            });
        }
        let tags: HashSet<String> = e
            .split("||")
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        if tags.is_empty() || tags.contains("*") {
            return Err(Error::invalid(
                "tag_filter",
                format!("{expression:?} is not \"*\" or \"tag || tag\""),
            ));
        }
        let mut sorted: Vec<&str> = tags.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        Ok(TagFilter {
            expression: sorted.join(" || "),
            tags: Some(tags),
        })
    }

    /// The expression sent to the broker.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether a message with `tag` passes.
    pub fn matches(&self, tag: Option<&str>) -> bool {
        match &self.tags {
            None => true,
            Some(set) => tag.is_some_and(|t| set.contains(t)),
        }
    }
}

/// How a pull ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullStatus {
    /// Messages were returned.
    Found,
    /// Nothing new at this offset (after any long-poll hold).
    NoNewMessages,
    /// Nothing matched the filter; continue from `next_begin_offset` at once.
    RetryImmediately,
    /// The offset is not valid; `next_begin_offset` is the broker's suggestion.
    OffsetIllegal,
}

/// The answer of [`RemotingClient::pull`].
#[derive(Debug, Clone)]
pub struct PullOutcome {
    /// How the pull ended.
    pub status: PullStatus,
    /// Messages in queue order (only those passing the tag filter).
    pub messages: Vec<StoredMessage>,
    /// Where to pull next.
    pub next_begin_offset: i64,
    /// The queue's first offset at the time of the pull.
    pub min_offset: i64,
    /// The queue's end offset (exclusive) at the time of the pull.
    pub max_offset: i64,
}

#[derive(Debug)]
pub(super) struct Inner {
    options: RemotingOptions,
    routes: RouteCache,
    brokers: Mutex<HashMap<String, Connection>>,
    closed: AtomicBool,
    /// Round-robin position over writable queues.
    pub(super) round_robin: AtomicUsize,
    /// What the sends record (`remoting/send.rs`).
    pub(super) metrics: ClientMetrics,
}

/// A remoting client (cheap to clone; clones share connections and routes).
#[derive(Debug, Clone)]
pub struct RemotingClient {
    pub(super) inner: Arc<Inner>,
}

impl RemotingClient {
    /// A client for `options`; no I/O until the first call.
    pub fn new(options: RemotingOptions) -> Result<Self> {
        let addrs = parse_endpoints(&options.endpoints)?;
        Error::require_positive("request_timeout", options.request_timeout)?;
        let identity = ClientIdentity::new(System::RocketMq, String::new());
        let identity = match addrs.first() {
            Some(a) => identity.with_address(a),
            None => identity,
        };
        let ns = addrs
            .into_iter()
            .map(|a| Connection::new(a, options.credentials.clone()))
            .collect();
        let routes = RouteCache::new(ns, options.request_timeout)?;
        Ok(RemotingClient {
            inner: Arc::new(Inner {
                options,
                routes,
                brokers: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(false),
                round_robin: AtomicUsize::new(fastrand::usize(..1024)),
                metrics: ClientMetrics::new(identity),
            }),
        })
    }

    /// The options.
    pub fn options(&self) -> &RemotingOptions {
        &self.inner.options
    }

    /// The client's metrics: one `send` per send request (a message, or a batch request of
    /// up to [`super::send::MAX_BATCH_MESSAGES`] messages), timed over its retries, which are
    /// counted apart. Messages sent as system `rocketmq` without a client id (remoting sends
    /// name a producer group only), server the first name server.
    pub fn metrics(&self) -> &ClientMetrics {
        &self.inner.metrics
    }

    pub(super) fn check_open(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            Err(Error::closed("the remoting client is shut down"))
        } else {
            Ok(())
        }
    }

    /// A topic or group name as sent (with the namespace prefix, if any).
    pub fn wrap(&self, name: &str) -> String {
        match self.inner.options.namespace.as_deref() {
            Some(ns) if !ns.is_empty() && !name.starts_with(&format!("{ns}%")) => {
                format!("{ns}%{name}")
            }
            _ => name.to_string(),
        }
    }

    pub(super) fn timeout(&self) -> Duration {
        self.inner.options.request_timeout
    }

    fn broker_connection(&self, addr: &str) -> Connection {
        self.inner
            .brokers
            .lock()
            .entry(addr.to_string())
            .or_insert_with(|| Connection::new(addr, self.inner.options.credentials.clone()))
            .clone()
    }

    /// The route of `topic`.
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        self.check_open()?;
        self.inner.routes.get(&self.wrap(topic)).await
    }

    /// The readable queues of `topic`, sorted.
    pub async fn read_queues(&self, topic: &str) -> Result<Vec<QueueRef>> {
        Ok(self.route(topic).await?.read_queues())
    }

    /// The writable queues of `topic` on masters, sorted.
    pub async fn write_queues(&self, topic: &str) -> Result<Vec<QueueRef>> {
        Ok(self.route(topic).await?.write_queues())
    }

    /// Send `cmd` to the master of `broker` for `topic` and return the reply, whatever its
    /// code. Connection errors and timeouts make the next route lookup refresh.
    pub(super) async fn call(
        &self,
        topic: &str,
        broker: &str,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        let route = self.route(topic).await?;
        let Some(addr) = route.master_addr(broker) else {
            self.inner.routes.invalidate(&self.wrap(topic));
            return Err(Error::connection(format!(
                "broker {broker} of topic {topic} has no master in the route"
            )));
        };
        if cmd.ext("bname").is_none() && cmd.ext("n").is_none() {
            cmd.set_ext("bname", broker);
        }
        let r = self.broker_connection(addr).request(cmd, timeout).await;
        if let Err(e) = &r {
            if matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout) {
                self.inner.routes.invalidate(&self.wrap(topic));
            }
        }
        r
    }

    async fn offset_call(
        &self,
        code: i32,
        topic: &str,
        q: &QueueRef,
        extra: &[(&str, String)],
    ) -> Result<i64> {
        let mut cmd = RemotingCommand::request(code)
            .with_ext("topic", self.wrap(topic))
            .with_ext("queueId", q.id);
        for (k, v) in extra {
            cmd.set_ext(*k, v);
        }
        let resp = self.call(topic, &q.broker, cmd, self.timeout()).await?;
        if resp.code != response::SUCCESS {
            return Err(status_error(resp.code, resp.remark.as_deref()));
        }
        resp.ext_i64("offset")
    }

    /// The first offset still stored in the queue.
    pub async fn min_offset(&self, topic: &str, q: &QueueRef) -> Result<i64> {
        self.offset_call(request::GET_MIN_OFFSET, topic, q, &[])
            .await
            .map_err(|e| e.context(format!("min offset of {topic}/{}", q.key())))
    }

    /// The offset the next message will get (exclusive end).
    pub async fn max_offset(&self, topic: &str, q: &QueueRef) -> Result<i64> {
        self.offset_call(request::GET_MAX_OFFSET, topic, q, &[])
            .await
            .map_err(|e| e.context(format!("max offset of {topic}/{}", q.key())))
    }

    /// The first offset stored at or after `timestamp_ms` (store time); the max offset when
    /// every message is older.
    pub async fn search_offset(&self, topic: &str, q: &QueueRef, timestamp_ms: i64) -> Result<i64> {
        self.offset_call(
            request::SEARCH_OFFSET_BY_TIMESTAMP,
            topic,
            q,
            &[
                ("timestamp", timestamp_ms.to_string()),
                ("boundaryType", "LOWER".to_string()),
            ],
        )
        .await
        .map_err(|e| e.context(format!("offset at {timestamp_ms} of {topic}/{}", q.key())))
    }

    /// The offset `group` committed on the queue, `None` if it never did.
    pub async fn query_consumer_offset(
        &self,
        group: &str,
        topic: &str,
        q: &QueueRef,
    ) -> Result<Option<i64>> {
        let what = || format!("committed offset of {group} on {topic}/{}", q.key());
        let cmd = RemotingCommand::request(request::QUERY_CONSUMER_OFFSET)
            .with_ext("consumerGroup", self.wrap(group))
            .with_ext("topic", self.wrap(topic))
            .with_ext("queueId", q.id)
            .with_ext("setZeroIfNotFound", "false");
        let resp = self
            .call(topic, &q.broker, cmd, self.timeout())
            .await
            .map_err(|e| e.context(what()))?;
        match resp.code {
            response::SUCCESS => resp
                .ext_i64("offset")
                .map(Some)
                .map_err(|e| e.context(what())),
            response::QUERY_NOT_FOUND => Ok(None),
            c => Err(status_error(c, resp.remark.as_deref()).context(what())),
        }
    }

    /// Commit `offset` (the next offset to read) for `group` on the queue. A group the broker
    /// does not know yet is created by one non-blocking pull, then the commit is retried.
    pub async fn update_consumer_offset(
        &self,
        group: &str,
        topic: &str,
        q: &QueueRef,
        offset: i64,
    ) -> Result<()> {
        let what = || format!("commit offset {offset} of {group} on {topic}/{}", q.key());
        for attempt in 0..2 {
            let cmd = RemotingCommand::request(request::UPDATE_CONSUMER_OFFSET)
                .with_ext("consumerGroup", self.wrap(group))
                .with_ext("topic", self.wrap(topic))
                .with_ext("queueId", q.id)
                .with_ext("commitOffset", offset);
            let resp = self
                .call(topic, &q.broker, cmd, self.timeout())
                .await
                .map_err(|e| e.context(what()))?;
            match resp.code {
                response::SUCCESS => return Ok(()),
                response::SUBSCRIPTION_GROUP_NOT_EXIST if attempt == 0 => {
                    // A pull naming the group makes the broker create it.
                    let _ = self.pull(group, topic, q, 0, 1, None, None).await;
                }
                c => return Err(status_error(c, resp.remark.as_deref()).context(what())),
            }
        }
        Err(Error::internal("unreachable: commit loop ended").context(what()))
    }

    /// One pull of at most `max_msgs` messages from `offset`. With `suspend`, the broker may
    /// hold the request that long (plus up to 5 s) waiting for new messages.
    #[allow(clippy::too_many_arguments)]
    pub async fn pull(
        &self,
        group: &str,
        topic: &str,
        q: &QueueRef,
        offset: i64,
        max_msgs: i32,
        filter: Option<&TagFilter>,
        suspend: Option<Duration>,
    ) -> Result<PullOutcome> {
        let what = || format!("pull {topic}/{} @ {offset}", q.key());
        if offset < 0 {
            return Err(Error::invalid("offset", "must not be negative"));
        }
        let suspend = suspend.filter(|d| !d.is_zero());
        let mut sys_flag = PULL_FLAG_SUBSCRIPTION;
        let mut timeout = self.timeout();
        if let Some(s) = suspend {
            sys_flag |= PULL_FLAG_SUSPEND;
            timeout = s + timeout.max(Duration::from_secs(10));
        }
        let cmd = RemotingCommand::request(request::PULL_MESSAGE)
            .with_ext("consumerGroup", self.wrap(group))
            .with_ext("topic", self.wrap(topic))
            .with_ext("queueId", q.id)
            .with_ext("queueOffset", offset)
            .with_ext("maxMsgNums", max_msgs.max(1))
            .with_ext("sysFlag", sys_flag)
            .with_ext("commitOffset", 0)
            .with_ext("suspendTimeoutMillis", suspend.map_or(0, |s| s.as_millis()))
            .with_ext("subscription", filter.map_or("*", TagFilter::expression))
            .with_ext("subVersion", 0)
            .with_ext("expressionType", "TAG");
        let resp = self
            .call(topic, &q.broker, cmd, timeout)
            .await
            .map_err(|e| e.context(what()))?;
        let status = match resp.code {
            response::SUCCESS => PullStatus::Found,
            response::PULL_NOT_FOUND => PullStatus::NoNewMessages,
            response::PULL_RETRY_IMMEDIATELY => PullStatus::RetryImmediately,
            response::PULL_OFFSET_MOVED => PullStatus::OffsetIllegal,
            c => return Err(status_error(c, resp.remark.as_deref()).context(what())),
        };
        let next_begin_offset = resp
            .ext_i64("nextBeginOffset")
            .map_err(|e| e.context(what()))?;
        let mut messages = if status == PullStatus::Found {
            decode_stored(&resp.body).map_err(|e| e.context(what()))?
        } else {
            Vec::new()
        };
        if let Some(f) = filter {
            messages.retain(|m| f.matches(m.tag()));
        }
        Ok(PullOutcome {
            status,
            messages,
            next_begin_offset,
            min_offset: resp.ext_i64("minOffset").unwrap_or(0),
            max_offset: resp.ext_i64("maxOffset").unwrap_or(next_begin_offset),
        })
    }

    /// Create (or update) `topic` with `queues` read and write queues on one broker, given by
    /// address (`host:port`) or by broker name (resolved through the route of `TBW102`).
    pub async fn create_topic(&self, broker: &str, topic: &str, queues: i32) -> Result<()> {
        self.check_open()?;
        crate::message::validate_topic(topic)?;
        if queues < 1 {
            return Err(Error::invalid("queues", "must be at least 1"));
        }
        let addr = if broker.contains(':') {
            broker.to_string()
        } else {
            let route = self.inner.routes.get(DEFAULT_TOPIC).await?;
            route
                .master_addr(broker)
                .ok_or_else(|| Error::invalid("broker", format!("no master for {broker:?}")))?
                .to_string()
        };
        let cmd = RemotingCommand::request(request::UPDATE_AND_CREATE_TOPIC)
            .with_ext("topic", self.wrap(topic))
            .with_ext("defaultTopic", DEFAULT_TOPIC)
            .with_ext("readQueueNums", queues)
            .with_ext("writeQueueNums", queues)
            .with_ext("perm", 6)
            .with_ext("topicFilterType", "SINGLE_TAG")
            .with_ext("topicSysFlag", 0)
            .with_ext("order", "false");
        let resp = self
            .broker_connection(&addr)
            .request(cmd, self.timeout())
            .await?;
        if resp.code != response::SUCCESS {
            return Err(status_error(resp.code, resp.remark.as_deref())
                .context(format!("create topic {topic} on {addr}")));
        }
        self.inner.routes.invalidate(&self.wrap(topic));
        Ok(())
    }

    /// Close every connection; later calls fail with [`ErrorKind::Closed`].
    pub async fn shutdown(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let conns: Vec<Connection> = self.inner.brokers.lock().drain().map(|(_, c)| c).collect();
        for c in conns.iter().chain(self.inner.routes.name_servers()) {
            c.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            parse_endpoints("remoting://a:9876;b:1").unwrap(),
            ["a:9876", "b:1"]
        );
        assert_eq!(parse_endpoints(" h:2 ").unwrap(), ["h:2"]);
        for bad in ["", "remoting://", "h", "h:0", "h:x", "http://h:1"] {
            assert!(parse_endpoints(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tag_filters() {
        let all = TagFilter::parse(" * ").unwrap();
        assert!(all.matches(None) && all.matches(Some("x")));
        let f = TagFilter::parse("b || a").unwrap();
        assert_eq!(f.expression(), "a || b");
        assert!(f.matches(Some("a")) && !f.matches(Some("c")) && !f.matches(None));
        assert!(TagFilter::parse("||").is_err());
    }

    #[test]
    fn options_are_checked() {
        assert!(RemotingClient::new(RemotingOptions::new("nope")).is_err());
        let mut o = RemotingOptions::new("h:1");
        o.namespace = Some("ns".into());
        let c = RemotingClient::new(o).unwrap();
        assert_eq!(c.wrap("t"), "ns%t");
        assert_eq!(c.wrap("ns%t"), "ns%t");
    }
}
