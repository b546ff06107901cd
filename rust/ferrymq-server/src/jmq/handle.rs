//! Request handling of the embedded JMQ4 server: the connection's binding (app, region,
//! producers, consumers), the app checks, and one answer per command (reference §5 to §8).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::Mutex;

use super::codec::{command_type as ct, Header};
use super::codes;
use super::command::{
    AddConnectionResponse, AnyRequest, BrokerMeta, ClientIdsResponse, CommitAckResponse,
    CommitResponse, CoordinatorEntry, FetchAssignedPartitionResponse, FetchClusterResponse,
    FetchHealthResponse, FetchIndexResponse, FetchPartitionMessageResponse,
    FetchProduceFeedbackResponse, FetchTopicMessageResponse, FindCoordinatorResponse,
    PartitionMessages, Payload, PrepareResponse, ProduceItem, ProduceMessageResponse,
    ProduceResult, RollbackResponse, TopicMessages,
};
use super::server::{coordinator_of, Inner, NodeInfo};
use super::store::{Fetched, JmqStore};

/// What a connection has bound: its app (after ADD_CONNECTION), region, client IP, and the
/// topics it added producers and consumers for.
#[derive(Debug, Default)]
struct ConnState {
    app: Option<String>,
    region: Option<String>,
    ip: String,
    producers: HashSet<String>,
    consumers: HashSet<String>,
}

impl ConnState {
    /// The topics noted for producers (`produce`) or for consumers.
    fn noted(&mut self, produce: bool) -> &mut HashSet<String> {
        if produce {
            &mut self.producers
        } else {
            &mut self.consumers
        }
    }
}

/// One connection of one node.
pub(super) struct Ctx {
    pub(super) inner: Arc<Inner>,
    node: usize,
    conn: u64,
    peer: SocketAddr,
    state: Mutex<ConnState>,
}

impl Ctx {
    pub(super) fn new(inner: Arc<Inner>, node: usize, conn: u64, peer: SocketAddr) -> Ctx {
        Ctx {
            inner,
            node,
            conn,
            peer,
            state: Mutex::new(ConnState {
                ip: peer.ip().to_string(),
                ..ConnState::default()
            }),
        }
    }
}

/// The answer to a request: a typed response, or a BooleanAck with a code and message.
pub(super) enum Reply {
    Typed(i8, BytesMut),
    Ack(i32, Option<String>),
}

fn typed<P: Payload>(p: &P, version: u8) -> Reply {
    let mut b = BytesMut::new();
    match p.encode(version, &mut b) {
        Ok(()) => Reply::Typed(P::TYPE, b),
        Err(e) => Reply::Ack(codes::CN_UNKNOWN_ERROR, Some(e.to_string())),
    }
}

/// ADD_PRODUCER (`produce`) / ADD_CONSUMER: check that `app` may produce to (consume) each
/// topic, note the topics on the connection, and answer an id per topic.
fn add_client<const T: i8>(
    ctx: &Ctx,
    store: &JmqStore,
    app: &str,
    topics: &[String],
    produce: bool,
    v: u8,
) -> Reply {
    for t in topics {
        if store.check_subscription(t, app, produce) != codes::SUCCESS {
            let may = if produce { "produce to" } else { "consume" };
            return Reply::Ack(
                codes::CN_NO_PERMISSION,
                Some(format!("app {app:?} may not {may} topic {t:?}")),
            );
        }
    }
    ctx.state
        .lock()
        .noted(produce)
        .extend(topics.iter().cloned());
    let kind = if produce { 'p' } else { 'c' };
    let ids = topics
        .iter()
        .map(|t| (t.clone(), format!("{kind}{}-{t}", ctx.conn)))
        .collect();
    typed(&ClientIdsResponse::<T> { ids }, v)
}

/// REMOVE_PRODUCER (`produce`) / REMOVE_CONSUMER: forget the topics on the connection.
fn remove_client(ctx: &Ctx, topics: &[String], produce: bool) -> Reply {
    let mut st = ctx.state.lock();
    let noted = st.noted(produce);
    for t in topics {
        noted.remove(t);
    }
    Reply::Ack(codes::SUCCESS, None)
}

/// Answer each partition of each topic of a request: (topic, answers) in request order.
fn per_partition<P, A>(
    topics: &[(String, Vec<P>)],
    mut answer: impl FnMut(&str, &P) -> A,
) -> Vec<(String, Vec<A>)> {
    topics
        .iter()
        .map(|(t, parts)| (t.clone(), parts.iter().map(|p| answer(t, p)).collect()))
        .collect()
}

fn strip_group(app: &str) -> &str {
    app.split('.').next().unwrap_or(app)
}

fn broker_meta(ctx: &Ctx, node: &NodeInfo) -> BrokerMeta {
    let region = ctx.state.lock().region.clone();
    BrokerMeta {
        id: node.id,
        host: ctx.inner.advertised_host.clone(),
        port: i32::from(node.addr.port()),
        data_center: node.region.clone(),
        nearby: region.as_deref().is_none_or(|r| r == node.region),
        weight: 100,
        sys_code: 0,
        permission: 3,
    }
}

#[allow(clippy::too_many_lines)]
pub(super) async fn handle(ctx: &Ctx, h: &Header, req: AnyRequest) -> Reply {
    let inner = &ctx.inner;
    let v = h.version;
    let node_id = inner.nodes[ctx.node].id;
    let latency = inner.faults.lock().latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let injected = inner.faults.lock().take(h.command_type);
    if let Some(code) = injected {
        if !matches!(
            req,
            AnyRequest::ProduceMessage(_) | AnyRequest::FetchTopicMessage(_)
        ) {
            return Reply::Ack(code, Some("injected fault".into()));
        }
    }
    if let AnyRequest::AddConnection(r) = &req {
        let app = strip_group(&r.app).to_string();
        if !inner.store.authenticate(&app, &r.token) {
            return Reply::Ack(
                codes::CN_AUTHENTICATION_ERROR,
                Some(format!("authentication failed for app {app:?}")),
            );
        }
        let mut st = ctx.state.lock();
        st.app = Some(app);
        st.region = r.region.clone();
        if !r.ip.is_empty() {
            st.ip = r.ip.clone();
        }
        drop(st);
        return typed(
            &AddConnectionResponse {
                connection_id: Some(format!("c{}-{}", node_id, ctx.conn)),
                notification: None,
            },
            v,
        );
    }
    let Some(app) = ctx.state.lock().app.clone() else {
        return Reply::Ack(
            codes::FW_CONNECTION_NOT_EXISTS,
            Some("ADD_CONNECTION must be the first command".into()),
        );
    };
    if let Some(req_app) = req.app() {
        if strip_group(req_app) != app {
            return Reply::Ack(
                codes::FW_CONNECTION_NOT_EXISTS,
                Some(format!("app {req_app:?} does not match the connection")),
            );
        }
    }
    let store = &inner.store;
    match req {
        AnyRequest::AddConnection(_) => unreachable!("handled above"),
        AnyRequest::RemoveConnection => {
            ctx.state.lock().app = None;
            Reply::Ack(codes::SUCCESS, None)
        }
        AnyRequest::Heartbeat => Reply::Ack(codes::SUCCESS, None),
        AnyRequest::FetchHealth => {
            let point = inner
                .faults
                .lock()
                .health
                .get(&node_id)
                .copied()
                .unwrap_or(0.0);
            typed(&FetchHealthResponse { point }, v)
        }
        AnyRequest::AddProducer(r) => {
            add_client::<{ -ct::ADD_PRODUCER }>(ctx, store, &app, &r.topics, true, v)
        }
        AnyRequest::AddConsumer(r) => {
            add_client::<{ -ct::ADD_CONSUMER }>(ctx, store, &app, &r.topics, false, v)
        }
        AnyRequest::RemoveProducer(r) => remove_client(ctx, &r.topics, true),
        AnyRequest::RemoveConsumer(r) => remove_client(ctx, &r.topics, false),
        AnyRequest::FetchCluster(r) => {
            let mut topics = Vec::with_capacity(r.topics.len());
            let mut leaders = Vec::new();
            for t in &r.topics {
                let (meta, l) = store.topic_meta(t, &app);
                topics.push(meta);
                leaders.extend(l);
            }
            leaders.sort_unstable();
            leaders.dedup();
            let brokers = inner
                .nodes
                .iter()
                .filter(|n| leaders.contains(&n.id))
                .map(|n| broker_meta(ctx, n))
                .collect();
            typed(&FetchClusterResponse { topics, brokers }, v)
        }
        AnyRequest::FindCoordinator(r) => {
            let none = inner.faults.lock().no_coordinator;
            let coord = coordinator_of(inner, &app);
            let coordinators = r
                .topics
                .iter()
                .map(|t| CoordinatorEntry {
                    topic: t.clone(),
                    broker: (!none).then(|| broker_meta(ctx, coord)),
                    code: if none {
                        codes::FW_COORDINATOR_NOT_AVAILABLE
                    } else {
                        codes::SUCCESS
                    },
                })
                .collect();
            typed(&FindCoordinatorResponse { coordinators }, v)
        }
        AnyRequest::FetchAssignedPartition(r) => {
            let none = inner.faults.lock().no_coordinator;
            if none || coordinator_of(inner, &app).id != node_id {
                return Reply::Ack(
                    codes::FW_COORDINATOR_NOT_AVAILABLE,
                    Some("this broker is not the coordinator".into()),
                );
            }
            let member = ctx.state.lock().ip.clone();
            let data = r
                .topics
                .iter()
                .map(|(t, timeout, _)| {
                    let session = Duration::from_millis(u64::try_from(*timeout).unwrap_or(0))
                        .max(Duration::from_secs(1));
                    match store.assign(t, &app, &member, session) {
                        Ok(p) => (t.clone(), p, codes::SUCCESS),
                        Err(code) => (t.clone(), Vec::new(), code),
                    }
                })
                .collect();
            typed(&FetchAssignedPartitionResponse { data }, v)
        }
        AnyRequest::FetchTopicMessage(r) => {
            let ack_timeout = Duration::from_millis(if r.ack_timeout > 0 {
                r.ack_timeout as u64
            } else {
                30_000
            });
            let long_poll = (r.topics.len() == 1 && r.long_poll_timeout > 0)
                .then(|| Duration::from_millis(r.long_poll_timeout as u64));
            let deadline = long_poll.map(|d| crate::duration::deadline(Instant::now(), d));
            loop {
                let changed = store.changed().notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let mut data = Vec::with_capacity(r.topics.len());
                let mut any = false;
                for (t, count) in &r.topics {
                    let code = if let Some(code) = injected {
                        code
                    } else if !ctx.state.lock().consumers.contains(t) {
                        codes::FW_CONSUMER_NOT_EXISTS
                    } else {
                        codes::SUCCESS
                    };
                    let f = if code == codes::SUCCESS {
                        store.fetch_topic(
                            node_id,
                            ctx.conn,
                            t,
                            &app,
                            usize::try_from(*count).unwrap_or(1),
                            ack_timeout,
                        )
                    } else {
                        Fetched::failed(code)
                    };
                    any |= !f.messages.is_empty() || f.code != codes::SUCCESS;
                    data.push(TopicMessages {
                        topic: t.clone(),
                        messages: f.messages,
                        code: f.code,
                    });
                }
                let now = Instant::now();
                let Some(deadline) = deadline.filter(|d| !any && now < *d) else {
                    return typed(&FetchTopicMessageResponse { data }, v);
                };
                // Wake on new messages or released partitions; re-check now and then for
                // occupations that time out.
                let wait = (deadline - now).min(Duration::from_millis(200));
                tokio::select! {
                    () = &mut changed => {}
                    () = tokio::time::sleep(wait) => {}
                }
            }
        }
        AnyRequest::FetchPartitionMessage(r) => {
            let data = per_partition(&r.topics, |t, p| {
                let (messages, code) = store.fetch_partition(
                    node_id,
                    t,
                    &app,
                    p.partition,
                    p.index,
                    usize::try_from(p.count).unwrap_or(1),
                );
                PartitionMessages {
                    partition: p.partition,
                    messages,
                    code,
                }
            });
            typed(&FetchPartitionMessageResponse { data }, v)
        }
        AnyRequest::CommitAck(r) => {
            let data = per_partition(&r.topics, |t, (p, items)| {
                (*p, store.commit_ack(t, &app, *p, items))
            });
            typed(&CommitAckResponse::<{ -ct::COMMIT_ACK }> { data }, v)
        }
        AnyRequest::CommitAckIndex(r) => {
            let data = per_partition(&r.topics, |t, (p, i)| {
                (*p, store.commit_index(t, &app, *p, *i))
            });
            typed(&CommitAckResponse::<{ -ct::COMMIT_ACK_INDEX }> { data }, v)
        }
        AnyRequest::FetchIndex(r) => {
            let data = per_partition(&r.topics, |t, p| store.fetch_index(t, &app, *p));
            typed(&FetchIndexResponse { data }, v)
        }
        AnyRequest::ProduceMessage(r) => {
            let data = r
                .topics
                .into_iter()
                .map(|t| {
                    let n = t.messages.len();
                    let (code, items) = if let Some(code) = injected {
                        (code, vec![ProduceItem::FAILED; n])
                    } else {
                        store.produce(
                            node_id,
                            &t.topic,
                            &app,
                            t.tx_id.as_deref(),
                            t.messages,
                            Some(ctx.peer),
                        )
                    };
                    ProduceResult {
                        topic: t.topic,
                        code,
                        items,
                    }
                })
                .collect();
            typed(&ProduceMessageResponse { data }, v)
        }
        AnyRequest::Prepare(r) => {
            if !ctx.state.lock().producers.contains(&r.topic) {
                return Reply::Ack(
                    codes::FW_PRODUCER_NOT_EXISTS,
                    Some(format!("no ADD_PRODUCER for topic {:?}", r.topic)),
                );
            }
            let timeout = if r.timeout > 0 {
                Duration::from_millis(r.timeout as u64)
            } else {
                Duration::from_secs(600)
            };
            let (tx_id, code) = match store.prepare(&r.topic, &app, r.transaction_id, timeout) {
                Ok(tx_id) => (Some(tx_id), codes::SUCCESS),
                Err(code) => (None, code),
            };
            typed(&PrepareResponse { tx_id, code }, v)
        }
        AnyRequest::Commit(r) => typed(
            &CommitResponse {
                code: store.commit(&r.topic, &app, &r.tx_id),
            },
            v,
        ),
        AnyRequest::Rollback(r) => typed(
            &RollbackResponse {
                code: store.rollback(&r.topic, &app, &r.tx_id),
            },
            v,
        ),
        AnyRequest::FetchProduceFeedback(r) => typed(
            &FetchProduceFeedbackResponse {
                data: store.feedback(&r.topic, &app),
                code: codes::SUCCESS,
            },
            v,
        ),
    }
}
