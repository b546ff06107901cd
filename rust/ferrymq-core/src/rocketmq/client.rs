//! [`Client`]: the shared RocketMQ v2 client layer, a cheap `Clone` handle (async-nats style)
//! that producers and consumers build on.
//!
//! It owns the channels ([`super::connection`]), the request headers ([`super::metadata`]), the
//! telemetry sessions ([`super::telemetry`], which reach the client only through the
//! `SessionOwner` trait it implements), the route cache ([`super::route`]), endpoint
//! isolation ([`super::isolation`]), the settings in force ([`super::settings`]) and the periodic
//! tasks (heartbeat, route refresh, settings sync). Background tasks hold only a weak reference:
//! dropping the last handle stops them; [`Client::shutdown`] also tells the brokers
//! (`NotifyClientTermination`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

pub use super::connection::deadline;
use super::connection::{ConnectionOptions, Connections, Stub, TlsOptions};
use super::endpoints::{Address, Endpoints};
use super::isolation::Isolation;
use super::message_view::MessageView;
use super::metadata::{Credentials, RequestMetadata};
use super::route::{RouteCache, TopicRoute};
use super::settings::{self, EffectiveSettings};
use super::telemetry::{CommandStream, Session, SessionOwner};
use crate::duration::to_proto_duration;
use crate::error::{Error, ErrorKind, Result};
use crate::proto;
use crate::status;

/// Options shared by every RocketMQ client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Access point: `"host:port[;host:port]"`, optionally `rocketmq://…`.
    pub endpoints: String,
    /// Access key / secret key for request signing.
    pub credentials: Option<Credentials>,
    /// Namespace put in every resource and in `x-mq-namespace`.
    pub namespace: String,
    /// TLS; `None` means plaintext (unless the endpoint scheme asks for TLS).
    pub tls: Option<TlsOptions>,
    /// Deadline of unary RPCs until the server sends its own (default 3 s).
    pub request_timeout: Option<Duration>,
    /// Send attempts (producers); overrides the server's value when set.
    pub max_attempts: Option<u32>,
    /// Heartbeat period (Java: 10 s).
    pub heartbeat_interval: Duration,
    /// Route refresh period (Java: 30 s).
    pub route_refresh_interval: Duration,
    /// Settings re-sync period (Java: 5 min).
    pub settings_sync_interval: Duration,
}

impl ClientOptions {
    /// Defaults for `endpoints`.
    pub fn new(endpoints: impl Into<String>) -> Self {
        Self {
            endpoints: endpoints.into(),
            credentials: None,
            namespace: String::new(),
            tls: None,
            request_timeout: None,
            max_attempts: None,
            heartbeat_interval: Duration::from_secs(10),
            route_refresh_interval: Duration::from_secs(30),
            settings_sync_interval: Duration::from_secs(300),
        }
    }
}

/// How long a new endpoint's session may take to receive its settings before use.
const NEW_ENDPOINT_SETTINGS_WAIT: Duration = Duration::from_secs(3);

const CREATED: u8 = 0;
const RUNNING: u8 = 1;
const CLOSED: u8 = 2;

/// A RocketMQ v2 client handle. Clone it freely; all clones share one state.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    options: ClientOptions,
    client_id: String,
    client_type: proto::ClientType,
    group: Option<String>,
    access: Endpoints,
    metadata: RequestMetadata,
    connections: Connections,
    routes: Arc<RouteCache>,
    isolation: Isolation,
    pub_sub: RwLock<proto::settings::PubSub>,
    local: EffectiveSettings,
    effective: RwLock<Arc<EffectiveSettings>>,
    sessions: Mutex<HashMap<Endpoints, Arc<Session>>>,
    handler: Arc<dyn CommandHandler>,
    cancel: CancellationToken,
    state: AtomicU8,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client_id", &self.inner.client_id)
            .field("endpoints", &self.inner.access)
            .field("namespace", &self.inner.options.namespace)
            .field("client_type", &self.inner.client_type)
            .field("credentials", &self.inner.options.credentials)
            .finish_non_exhaustive()
    }
}

/// What a client does with server → client telemetry commands. Every method has a default, so a
/// role implements only what it supports.
pub trait CommandHandler: Send + Sync + 'static {
    /// The broker asks how an orphaned transaction ended (`RecoverOrphanedTransactionCommand`).
    /// Resolve it with an `EndTransaction` of `transaction_id` to `endpoints`.
    fn recover_orphaned_transaction(
        &self,
        client: Client,
        endpoints: Endpoints,
        message: MessageView,
        transaction_id: String,
    ) -> BoxFuture<'static, ()> {
        let _ = (client, endpoints, transaction_id);
        tracing::warn!(
            target: "ferrymq::rocketmq",
            message_id = %message.message_id(),
            "orphaned-transaction check received, but this client has no transaction checker"
        );
        Box::pin(async {})
    }

    /// The broker asks the client to consume `message` as a check (`VerifyMessageCommand`);
    /// answer a status code and message for the `VerifyMessageResult`.
    fn verify_message(
        &self,
        client: Client,
        message: MessageView,
    ) -> BoxFuture<'static, (i32, String)> {
        let _ = (client, message);
        Box::pin(async {
            (
                status::NOT_IMPLEMENTED,
                "this client has no message listener".to_string(),
            )
        })
    }
}

/// A handler that supports nothing beyond the defaults.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCommands;
impl CommandHandler for NoCommands {}

/// `Ok` for `OK` (and `MULTIPLE_RESULTS`, which the caller inspects per entry), else the error.
pub fn check_status(status: Option<&proto::Status>) -> Result<()> {
    match status {
        None => Err(Error::protocol("the broker answered without a status")),
        Some(s) if s.code == status::OK || s.code == status::MULTIPLE_RESULTS => Ok(()),
        Some(s) => Err(Error::rocketmq_status(s.code, s.message.clone())),
    }
}

impl Client {
    /// A client of `client_type` (with `group` for consumers) announcing `pub_sub`. No I/O
    /// happens until [`Client::start`]; bad options fail here, naming the field.
    pub fn new(
        options: ClientOptions,
        client_type: proto::ClientType,
        group: Option<String>,
        pub_sub: proto::settings::PubSub,
        handler: Arc<dyn CommandHandler>,
    ) -> Result<Self> {
        let ap = Endpoints::parse_access_point(&options.endpoints)?;
        let tls = match (&options.tls, ap.tls) {
            (Some(t), _) => Some(t.clone()),
            (None, true) => Some(TlsOptions::default()),
            (None, false) => None,
        };
        if let Some(t) = options.request_timeout {
            Error::require_positive("request_timeout", t)?;
        }
        if options.max_attempts == Some(0) {
            return Err(Error::invalid("max_attempts", "must be at least 1"));
        }
        for (name, d) in [
            ("heartbeat_interval", options.heartbeat_interval),
            ("route_refresh_interval", options.route_refresh_interval),
            ("settings_sync_interval", options.settings_sync_interval),
        ] {
            Error::require_positive(name, d)?;
        }
        if options
            .namespace
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(Error::invalid("namespace", "must not contain whitespace"));
        }
        let connections = Connections::new(ConnectionOptions {
            tls,
            ..ConnectionOptions::default()
        })?;
        let client_id = super::metadata::new_client_id();
        let metadata =
            RequestMetadata::new(&client_id, &options.namespace, options.credentials.clone())?;
        let local = EffectiveSettings::local(
            options
                .request_timeout
                .unwrap_or(settings::DEFAULT_REQUEST_TIMEOUT),
            options
                .max_attempts
                .unwrap_or(settings::DEFAULT_PRODUCER_MAX_ATTEMPTS),
        );
        Ok(Self {
            inner: Arc::new(ClientInner {
                client_id,
                client_type,
                group,
                access: ap.endpoints,
                metadata,
                connections,
                routes: Arc::new(RouteCache::new()),
                isolation: Isolation::new(),
                pub_sub: RwLock::new(pub_sub),
                effective: RwLock::new(Arc::new(local.clone())),
                local,
                sessions: Mutex::new(HashMap::new()),
                handler,
                cancel: CancellationToken::new(),
                state: AtomicU8::new(CREATED),
                options,
            }),
        })
    }

    pub(crate) fn upgrade(weak: &Weak<ClientInner>) -> Option<Client> {
        weak.upgrade().map(|inner| Client { inner })
    }

    fn weak(&self) -> Weak<ClientInner> {
        Arc::downgrade(&self.inner)
    }

    /// Open telemetry with the access point, send the settings and wait for the server's, then
    /// start the periodic tasks. Any failure is returned (and the client stays unstarted).
    pub async fn start(&self) -> Result<()> {
        match self.inner.state.load(Ordering::Acquire) {
            RUNNING => return Ok(()),
            CLOSED => return Err(Error::closed("the client is closed")),
            _ => {}
        }
        let timeout = self.settings().request_timeout.max(Duration::from_secs(3));
        let session = Session::new(self.inner.access.clone());
        let opened = session.open(&*self.inner, timeout).await?;
        let gen = session.settings_generation();
        self.inner
            .sessions
            .lock()
            .insert(self.inner.access.clone(), Arc::clone(&session));
        tokio::spawn(Arc::clone(&session).run(
            self.weak(),
            self.inner.cancel.child_token(),
            Some(opened),
        ));
        if !session.wait_settings(gen, timeout).await {
            self.inner.state.store(CLOSED, Ordering::Release);
            self.inner.cancel.cancel();
            return Err(Error::timeout(format!(
                "{} did not answer the client settings within {:.1}s",
                self.inner.access,
                timeout.as_secs_f64()
            )));
        }
        if self
            .inner
            .state
            .compare_exchange(CREATED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::closed("the client was closed during start-up"));
        }
        tokio::spawn(periodic(self.weak(), self.inner.cancel.child_token()));
        Ok(())
    }

    /// Whether [`Client::start`] succeeded and [`Client::shutdown`] has not run.
    pub fn is_running(&self) -> bool {
        self.inner.state.load(Ordering::Acquire) == RUNNING
    }

    /// Fail with `ClientClosed` unless running.
    pub fn check_running(&self) -> Result<()> {
        match self.inner.state.load(Ordering::Acquire) {
            RUNNING => Ok(()),
            CREATED => Err(Error::closed(
                "the client is not started; call start() first",
            )),
            _ => Err(Error::closed("the client is closed")),
        }
    }

    /// The client id sent in `x-mq-client-id`.
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }
    /// The access point.
    pub fn access_endpoints(&self) -> &Endpoints {
        &self.inner.access
    }
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.inner.options.namespace
    }
    /// The options this client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }
    /// The consumer group, if any.
    pub fn group(&self) -> Option<&str> {
        self.inner.group.as_deref()
    }
    /// The client type.
    pub fn client_type(&self) -> proto::ClientType {
        self.inner.client_type
    }
    /// A resource in this client's namespace.
    pub fn resource(&self, name: &str) -> proto::Resource {
        proto::Resource {
            resource_namespace: self.inner.options.namespace.clone(),
            name: name.to_string(),
        }
    }
    /// The settings in force (server-merged once telemetry answered).
    pub fn settings(&self) -> Arc<EffectiveSettings> {
        Arc::clone(&self.inner.effective.read())
    }
    /// The OTLP collector the server asks this client to export its metrics to
    /// (`Settings.metric`: on, with endpoints), as `host:port`; `None` otherwise.
    pub fn metric_collector(&self) -> Option<String> {
        let settings = self.settings();
        let metric = settings.raw.as_ref()?.metric.as_ref().filter(|m| m.on)?;
        let endpoints = Endpoints::from_proto(metric.endpoints.as_ref()?).ok()?;
        endpoints.addresses().first().map(Address::authority)
    }

    /// Endpoint isolation state.
    pub fn isolation(&self) -> &Isolation {
        &self.inner.isolation
    }
    /// The route cache.
    pub fn routes(&self) -> &RouteCache {
        &self.inner.routes
    }

    /// A gRPC stub for `endpoints` (shared channel).
    pub fn stub(&self, endpoints: &Endpoints) -> Result<Stub> {
        self.inner.connections.stub(endpoints)
    }

    /// Wrap `msg` in a request carrying every header of the reference §5.1.
    pub fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        self.inner.metadata.apply(req.metadata_mut());
        req
    }

    /// Wrap `msg` with headers and a `grpc-timeout` of `timeout`.
    pub fn request_with_timeout<T>(&self, msg: T, timeout: Duration) -> tonic::Request<T> {
        let mut req = self.request(msg);
        req.set_timeout(timeout);
        req
    }

    /// The settings command this client sends first on every telemetry stream.
    pub fn settings_command(&self) -> proto::TelemetryCommand {
        self.inner.settings_command()
    }

    /// Replace what the client announces (a consumer's subscriptions, a producer's topics) and
    /// re-send the settings on every telemetry stream.
    pub async fn set_pub_sub(&self, pub_sub: proto::settings::PubSub) {
        *self.inner.pub_sub.write() = pub_sub;
        self.sync_settings().await;
    }

    /// Re-send the settings on every telemetry stream (re-opening broken ones).
    pub async fn sync_settings(&self) {
        let sessions: Vec<_> = self.inner.sessions.lock().values().cloned().collect();
        for s in sessions {
            s.resync(self.settings_command()).await;
        }
    }

    /// Make sure `endpoints` has a telemetry session; a new one may take up to 3 s to receive
    /// its settings (Java's wait on a new endpoint).
    pub async fn ensure_session(&self, endpoints: &Endpoints) {
        if self.inner.cancel.is_cancelled() {
            return;
        }
        let session = {
            let mut sessions = self.inner.sessions.lock();
            if sessions.contains_key(endpoints) {
                return;
            }
            let s = Session::new(endpoints.clone());
            sessions.insert(endpoints.clone(), Arc::clone(&s));
            s
        };
        tokio::spawn(Arc::clone(&session).run(self.weak(), self.inner.cancel.child_token(), None));
        session.wait_settings(0, NEW_ENDPOINT_SETTINGS_WAIT).await;
    }

    /// React to an RPC failure against `endpoints`: lost settings are re-sent.
    pub async fn on_rpc_error(&self, endpoints: &Endpoints, err: &Error) {
        if err.rocketmq_code() == Some(status::UNRECOGNIZED_CLIENT_TYPE) {
            let session = self.inner.sessions.lock().get(endpoints).cloned();
            if let Some(s) = session {
                let gen = s.settings_generation();
                s.resync(self.settings_command()).await;
                s.wait_settings(gen, NEW_ENDPOINT_SETTINGS_WAIT).await;
            }
        }
    }

    /// `QueryRoute` for `topic` through the access point.
    pub async fn query_route(&self, topic: &str) -> Result<TopicRoute> {
        let mut stub = self.stub(&self.inner.access)?;
        let timeout = self.settings().request_timeout;
        let req = self.request_with_timeout(
            proto::QueryRouteRequest {
                topic: Some(self.resource(topic)),
                endpoints: Some(self.inner.access.to_proto()),
            },
            timeout,
        );
        let resp = deadline(timeout, stub.query_route(req))
            .await
            .map_err(|e| e.context(format!("route of topic {topic:?}")))?
            .into_inner();
        check_status(resp.status.as_ref())
            .map_err(|e| e.context(format!("route of topic {topic:?}")))?;
        TopicRoute::new(topic, resp.message_queues)
    }

    /// The route of `topic`: cached, or fetched (concurrent callers share one request).
    pub async fn route(&self, topic: &str) -> Result<Arc<TopicRoute>> {
        if let Some(r) = self.inner.routes.cached(topic) {
            return Ok(r);
        }
        let me = self.clone();
        let t = topic.to_string();
        let route = self
            .inner
            .routes
            .get_or_fetch(topic, move || async move { me.query_route(&t).await })
            .await?;
        for ep in route.endpoints() {
            self.ensure_session(ep).await;
        }
        Ok(route)
    }

    /// Refresh every cached route; failures keep the old route.
    pub async fn refresh_routes(&self) {
        for topic in self.inner.routes.topics() {
            match self
                .inner
                .routes
                .refresh(&topic, self.query_route(&topic))
                .await
            {
                Ok(route) => {
                    for ep in route.endpoints() {
                        self.ensure_session(ep).await;
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "ferrymq::rocketmq", topic = %topic, error = %e, "route refresh failed; keeping the cached route");
                }
            }
        }
    }

    /// Every endpoint this client talks to: the access point and every route's brokers.
    pub fn all_endpoints(&self) -> Vec<Endpoints> {
        let mut v = vec![self.inner.access.clone()];
        for r in self.inner.routes.routes() {
            for ep in r.endpoints() {
                if !v.contains(ep) {
                    v.push(ep.clone());
                }
            }
        }
        for ep in self.inner.isolation.snapshot() {
            if !v.contains(&ep) {
                v.push(ep);
            }
        }
        without_covered(v)
    }

    /// One heartbeat to `endpoints`. Success lets an isolated endpoint rejoin; lost settings
    /// are re-sent.
    pub async fn heartbeat(&self, endpoints: &Endpoints) -> Result<()> {
        let timeout = self.settings().request_timeout;
        let req = self.request_with_timeout(
            proto::HeartbeatRequest {
                group: self.inner.group.as_deref().map(|g| self.resource(g)),
                client_type: self.inner.client_type as i32,
            },
            timeout,
        );
        let mut stub = self.stub(endpoints)?;
        let result = match deadline(timeout, stub.heartbeat(req)).await {
            Ok(resp) => check_status(resp.into_inner().status.as_ref()),
            Err(e) => Err(e),
        };
        match &result {
            Ok(()) => {
                self.inner.isolation.rejoin(endpoints);
            }
            Err(e) => {
                tracing::debug!(target: "ferrymq::rocketmq", endpoints = %endpoints, error = %e, "heartbeat failed");
                if e.rocketmq_code() == Some(status::UNRECOGNIZED_CLIENT_TYPE) {
                    let session = self.inner.sessions.lock().get(endpoints).cloned();
                    if let Some(s) = session {
                        s.resync(self.settings_command()).await;
                    }
                } else if matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout) {
                    let session = self.inner.sessions.lock().get(endpoints).cloned();
                    if let Some(s) = session {
                        s.reconnect();
                    }
                }
            }
        }
        result
    }

    /// Heartbeat every endpoint concurrently.
    pub async fn heartbeat_all(&self) {
        let eps = self.all_endpoints();
        futures::future::join_all(eps.iter().map(|ep| self.heartbeat(ep))).await;
    }

    /// Stop: tell every broker (`NotifyClientTermination`), stop the background tasks and close
    /// the telemetry streams. Idempotent.
    pub async fn shutdown(&self) {
        let prev = self.inner.state.swap(CLOSED, Ordering::AcqRel);
        if prev == CLOSED {
            return;
        }
        if prev == RUNNING {
            let timeout = self.settings().request_timeout;
            let eps = without_covered(self.inner.sessions.lock().keys().cloned().collect());
            let notify = eps.iter().map(|ep| {
                let req = self.request_with_timeout(
                    proto::NotifyClientTerminationRequest {
                        group: self.inner.group.as_deref().map(|g| self.resource(g)),
                    },
                    timeout,
                );
                let stub = self.stub(ep);
                async move {
                    let mut stub = stub?;
                    let resp = deadline(timeout, stub.notify_client_termination(req)).await?;
                    check_status(resp.into_inner().status.as_ref())
                }
            });
            for r in futures::future::join_all(notify).await {
                if let Err(e) = r {
                    tracing::debug!(target: "ferrymq::rocketmq", error = %e, "NotifyClientTermination failed");
                }
            }
        }
        self.inner.cancel.cancel();
        self.inner.sessions.lock().clear();
    }
}

impl SessionOwner for ClientInner {
    fn settings_command(&self) -> proto::TelemetryCommand {
        let local = &self.local;
        proto::TelemetryCommand {
            status: None,
            command: Some(proto::telemetry_command::Command::Settings(
                proto::Settings {
                    client_type: Some(self.client_type as i32),
                    access_point: Some(self.access.to_proto()),
                    backoff_policy: Some(local.retry_policy.to_proto()),
                    request_timeout: Some(to_proto_duration(local.request_timeout)),
                    pub_sub: Some(self.pub_sub.read().clone()),
                    user_agent: Some(proto::Ua {
                        language: proto::Language::Python as i32,
                        version: format!("ferrymq-{}", crate::VERSION),
                        platform: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
                        hostname: super::metadata::hostname().to_string(),
                    }),
                    metric: None,
                    client_properties: HashMap::new(),
                },
            )),
        }
    }

    fn open_timeout(&self) -> Duration {
        self.effective
            .read()
            .request_timeout
            .max(Duration::from_secs(3))
    }

    fn stub(&self, endpoints: &Endpoints) -> Result<Stub> {
        self.connections.stub(endpoints)
    }

    fn request(&self, commands: CommandStream) -> tonic::Request<CommandStream> {
        let mut req = tonic::Request::new(commands);
        self.metadata.apply(req.metadata_mut());
        req
    }

    fn server_settings(&self, s: &proto::Settings) {
        let merged = self.local.merge_server(s, self.options.max_attempts);
        tracing::debug!(target: "ferrymq::rocketmq", settings = ?merged, "server settings applied");
        *self.effective.write() = Arc::new(merged);
    }

    fn recover_orphaned_transaction(
        self: Arc<Self>,
        endpoints: Endpoints,
        message: MessageView,
        transaction_id: String,
    ) -> BoxFuture<'static, ()> {
        let client = Client { inner: self };
        let handler = Arc::clone(&client.inner.handler);
        handler.recover_orphaned_transaction(client, endpoints, message, transaction_id)
    }

    fn verify_message(self: Arc<Self>, message: MessageView) -> BoxFuture<'static, (i32, String)> {
        let client = Client { inner: self };
        let handler = Arc::clone(&client.inner.handler);
        handler.verify_message(client, message)
    }

    fn reset_channel(&self, endpoints: &Endpoints) {
        self.connections.reset(endpoints);
    }
}

/// Drop multi-address endpoints (an access point) whose every address is also a single-address
/// endpoint of the list: requests to them would only repeat those to the brokers.
fn without_covered(mut v: Vec<Endpoints>) -> Vec<Endpoints> {
    let singles: std::collections::HashSet<super::endpoints::Address> = v
        .iter()
        .filter(|e| e.addresses().len() == 1)
        .map(|e| e.addresses()[0].clone())
        .collect();
    v.retain(|e| e.addresses().len() == 1 || e.addresses().iter().any(|a| !singles.contains(a)));
    v
}

/// The periodic tasks of a running client.
async fn periodic(weak: Weak<ClientInner>, cancel: CancellationToken) {
    let (hb, rr, ss) = match Client::upgrade(&weak) {
        Some(c) => (
            c.inner.options.heartbeat_interval,
            c.inner.options.route_refresh_interval,
            c.inner.options.settings_sync_interval,
        ),
        None => return,
    };
    let start = tokio::time::Instant::now();
    let mut heartbeat = tokio::time::interval_at(start + hb, hb);
    let mut refresh = tokio::time::interval_at(start + rr, rr);
    let mut sync = tokio::time::interval_at(start + ss, ss);
    for i in [&mut heartbeat, &mut refresh, &mut sync] {
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    }
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            _ = heartbeat.tick() => {
                let Some(c) = Client::upgrade(&weak) else { break };
                c.heartbeat_all().await;
            }
            _ = refresh.tick() => {
                let Some(c) = Client::upgrade(&weak) else { break };
                c.refresh_routes().await;
            }
            _ = sync.tick() => {
                let Some(c) = Client::upgrade(&weak) else { break };
                c.sync_settings().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producer(endpoints: &str) -> Result<Client> {
        Client::new(
            ClientOptions::new(endpoints),
            proto::ClientType::Producer,
            None,
            proto::settings::PubSub::Publishing(proto::Publishing::default()),
            Arc::new(NoCommands),
        )
    }

    #[test]
    fn bad_options_name_the_field() {
        let e = producer("nope").unwrap_err();
        assert!(e.message().starts_with("endpoints"), "{e}");
        let mut o = ClientOptions::new("127.0.0.1:1");
        o.max_attempts = Some(0);
        let e = Client::new(
            o,
            proto::ClientType::Producer,
            None,
            proto::settings::PubSub::Publishing(proto::Publishing::default()),
            Arc::new(NoCommands),
        )
        .unwrap_err();
        assert!(e.message().starts_with("max_attempts"), "{e}");
    }

    #[tokio::test]
    async fn start_against_nothing_fails_with_a_connection_error() {
        let c = producer("127.0.0.1:1").unwrap();
        let e = c.start().await.unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout),
            "{e:?}"
        );
        assert!(!c.is_running());
        assert_eq!(c.check_running().unwrap_err().kind(), ErrorKind::Closed);
    }

    #[test]
    fn access_points_covered_by_brokers_are_skipped() {
        let ep = |s: &str| Endpoints::parse_access_point(s).unwrap().endpoints;
        let v = without_covered(vec![ep("a:1;b:1"), ep("a:1"), ep("b:1")]);
        assert_eq!(v, vec![ep("a:1"), ep("b:1")]);
        let v = without_covered(vec![ep("a:1;c:1"), ep("a:1")]);
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn settings_command_announces_the_client() {
        let c = producer("127.0.0.1:8081").unwrap();
        let cmd = c.settings_command();
        let Some(proto::telemetry_command::Command::Settings(s)) = cmd.command else {
            panic!("not settings");
        };
        assert_eq!(s.client_type, Some(proto::ClientType::Producer as i32));
        assert_eq!(
            s.user_agent.unwrap().language,
            proto::Language::Python as i32
        );
        assert!(format!("{c:?}").contains("client_id"));
    }
}
