//! The embedded broker over the classic remoting protocol (remoting reference §2–§9).
//!
//! Every endpoint `broker-<i>` listens on a second loopback port. A connection reads framed
//! commands (JSON or binary headers), answers in JSON headers as a default Java server does, and
//! closes on the first frame it cannot decode. Each listener plays two roles:
//!
//! * **name server**: `GET_ROUTEINFO_BY_TOPIC` lists every endpoint holding queues of the
//!   topic, with that endpoint's remoting address; never authenticated;
//! * **broker** of its endpoint's queues: pulls ([`super::remoting_pull`]), sends and batches
//!   ([`super::remoting_send`]), min/max/search offsets, consumer offsets (the same entries as
//!   gRPC `UpdateOffset`), topic creation and heartbeats. When the broker has credentials, every
//!   broker request must carry a valid ACL signature (§9), else `NO_PERMISSION`.
//!
//! The connection type, replies and header-field readers the handlers share are in
//! [`super::remoting_wire`].
//!
//! Any other request code is answered `REQUEST_CODE_NOT_SUPPORTED`. Requests run in arrival
//! order on their connection, except pulls, which may wait for messages and so run on their own
//! task; replies carry the request's `opaque`. Shutdown closes the port and cuts connections;
//! an endpoint made unavailable (`refuse`) drops new connections, and its socket faults (hang,
//! cut) apply to remoting connections too.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::config::Credentials;
use super::endpoint::{Core, Endpoint};
use super::fault::{FaultIo, Unavailable};
use super::remoting_wire::{field, flag_field, number, refuse, reply, Answer, Conn, CLUSTER};
use super::store::{valid_resource_name, Topic, TopicType};
use super::{remoting_pull, remoting_send};
use crate::message::MessageKind;
use crate::proto;
use crate::remoting::codec::{decode_frame, RemotingCommand, DEFAULT_MAX_FRAME};
use crate::remoting::codes::{request as rq, response as rs};

/// Oldest client version that gets routes in standard JSON (`V4_9_4`).
const STANDARD_JSON_VERSION: i32 = 401;

/// Accept connections on `listener` for `ep` until the broker shuts down.
pub(crate) fn spawn_listener(
    core: Arc<Core>,
    ep: Arc<Endpoint>,
    listener: TcpListener,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = core.shutdown.cancelled() => return,
                r = listener.accept() => r,
            };
            match accepted {
                Ok((sock, peer)) => {
                    if *ep.unavailable.lock() == Some(Unavailable::Refuse) {
                        drop(sock);
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    let io = FaultIo::new(sock, ep.faults.io.clone());
                    let conn = Arc::new(Conn {
                        core: core.clone(),
                        ep: ep.clone(),
                        peer,
                        closed: core.shutdown.child_token(),
                    });
                    tokio::spawn(serve(conn, io));
                }
                Err(e) => {
                    tracing::warn!(target: "ferrymq::broker", "remoting accept: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    })
}

/// Serve one connection until the peer closes it, a frame is bad, or the broker stops.
async fn serve(conn: Arc<Conn>, io: FaultIo) {
    let _closed = conn.closed.clone().drop_guard();
    let (mut rd, mut wr) = tokio::io::split(io);
    let (tx, mut rx) = mpsc::channel::<RemotingCommand>(256);
    let writer = async move {
        let mut out = BytesMut::with_capacity(8 * 1024);
        while let Some(c) = rx.recv().await {
            out.clear();
            c.encode(&mut out);
            while let Ok(more) = rx.try_recv() {
                more.encode(&mut out);
            }
            if wr.write_all(&out).await.is_err() {
                return;
            }
        }
    };
    let reader = async {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            match decode_frame(&mut buf, DEFAULT_MAX_FRAME) {
                Ok(Some(cmd)) => {
                    if cmd.is_response() {
                        continue; // nothing is ever asked of clients
                    }
                    if matches!(cmd.code, rq::PULL_MESSAGE | rq::LITE_PULL_MESSAGE) {
                        let (conn, tx) = (conn.clone(), tx.clone());
                        tokio::spawn(async move {
                            let answer = match authenticate(&conn, &cmd) {
                                Ok(()) => {
                                    remoting_pull::pull(&conn, &cmd).await.unwrap_or_else(|e| e)
                                }
                                Err(e) => e,
                            };
                            if !cmd.is_oneway() {
                                let _ = tx.send(answer).await;
                            }
                        });
                        continue;
                    }
                    let answer = dispatch(&conn, &cmd);
                    if !cmd.is_oneway() && tx.send(answer).await.is_err() {
                        return;
                    }
                }
                Ok(None) => match rd.read_buf(&mut buf).await {
                    Ok(n) if n > 0 => {}
                    _ => return,
                },
                Err(e) => {
                    tracing::debug!(target: "ferrymq::broker", "remoting {}: {e}", conn.peer);
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = reader => {}
        () = writer => {}
        () = conn.closed.cancelled() => {}
    }
}

/// Answer one request other than a pull.
fn dispatch(conn: &Conn, req: &RemotingCommand) -> RemotingCommand {
    let answer = match req.code {
        rq::GET_ROUTEINFO_BY_TOPIC => route(conn, req),
        code => authenticate(conn, req).and_then(|()| match code {
            rq::SEND_MESSAGE | rq::SEND_MESSAGE_V2 | rq::SEND_BATCH_MESSAGE => {
                remoting_send::send(conn, req)
            }
            rq::GET_MAX_OFFSET => max_offset(conn, req),
            rq::GET_MIN_OFFSET => min_offset(conn, req),
            rq::SEARCH_OFFSET_BY_TIMESTAMP => search_offset(conn, req),
            rq::QUERY_CONSUMER_OFFSET => query_consumer_offset(conn, req),
            rq::UPDATE_CONSUMER_OFFSET => update_consumer_offset(conn, req),
            rq::UPDATE_AND_CREATE_TOPIC => create_topic(conn, req),
            rq::HEART_BEAT => heartbeat(conn, req),
            other => Err(refuse(
                req,
                rs::REQUEST_CODE_NOT_SUPPORTED,
                format!(" request type {other} not supported"),
            )),
        }),
    };
    answer.unwrap_or_else(|e| e)
}

// ---- ACL -----------------------------------------------------------------------------------

/// Check the ACL signature of a broker request when the broker has credentials (§9).
pub(crate) fn authenticate(conn: &Conn, req: &RemotingCommand) -> Result<(), RemotingCommand> {
    match &conn.core.config.credentials {
        None => Ok(()),
        Some(creds) => {
            check_signature(creds, req).map_err(|why| refuse(req, rs::NO_PERMISSION, why))
        }
    }
}

fn check_signature(creds: &Credentials, req: &RemotingCommand) -> Result<(), String> {
    let Some(access_key) = req.ext("AccessKey") else {
        return Err("username cannot be null.".into());
    };
    if access_key != creds.access_key {
        return Err(format!("User:{access_key} not found."));
    }
    let Some(given) = req.ext("Signature") else {
        return Err("check signature failed.".into());
    };
    // The client's signer: one implementation of the rule.
    let expected = crate::remoting::acl::sign(&req.ext_fields, &req.body, &creds.secret_key);
    // Compared without an early exit.
    let same = given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        Ok(())
    } else {
        Err("check signature failed.".into())
    }
}

// ---- name server ---------------------------------------------------------------------------

/// The remoting permission bits of a queue permission.
pub(crate) fn perm_bits(p: proto::Permission) -> i32 {
    match p {
        proto::Permission::ReadWrite => 6,
        proto::Permission::Read => 4,
        proto::Permission::Write => 2,
        _ => 0,
    }
}

/// `GET_ROUTEINFO_BY_TOPIC`: the topic's endpoints, each with its queue count and permission
/// (the union of its queues' permissions).
fn route(conn: &Conn, req: &RemotingCommand) -> Answer {
    let name = field(req, "topic")?;
    let core = &conn.core;
    let topic = Some(name)
        .filter(|n| valid_resource_name(n))
        .and_then(|n| core.store.topic_or_create(n, &core.config))
        .ok_or_else(|| {
            refuse(
                req,
                rs::TOPIC_NOT_EXIST,
                format!(
                    "No topic route info in name server for the topic: {name}\n\
                     See https://rocketmq.apache.org/docs/bestPractice/06FAQ for further details."
                ),
            )
        })?;
    let mut brokers = Vec::new();
    let mut queues = Vec::new();
    for (b, idx) in topic.by_broker.iter().enumerate() {
        let ep = &core.endpoints[b];
        let (Some(addr), false) = (ep.remoting.addr, idx.is_empty()) else {
            continue;
        };
        let perm = idx
            .iter()
            .fold(0, |p, i| p | perm_bits(topic.queues[*i].permission()));
        brokers.push(serde_json::json!({
            "brokerAddrs": {"0": addr.to_string()},
            "brokerName": ep.name,
            "cluster": CLUSTER,
            "enableActingMaster": false,
        }));
        queues.push(serde_json::json!({
            "brokerName": ep.name,
            "perm": perm,
            "readQueueNums": idx.len(),
            "topicSysFlag": 0,
            "writeQueueNums": idx.len(),
        }));
    }
    let mut body = serde_json::json!({
        "brokerDatas": brokers,
        "filterServerTable": {},
        "queueDatas": queues,
    })
    .to_string();
    if req.version < STANDARD_JSON_VERSION && !flag_field(req, "acceptStandardJsonOnly") {
        // Older clients get the historical dialect: broker ids as bare integer keys.
        body = body.replace("\"brokerAddrs\":{\"0\":", "\"brokerAddrs\":{0:");
    }
    Ok(reply(req, rs::SUCCESS, None).with_body(body.into_bytes()))
}

// ---- offsets -------------------------------------------------------------------------------

/// The topic and queue id named by a request, the queue being this endpoint's.
fn queue_fields(req: &RemotingCommand) -> Result<(&str, i32), RemotingCommand> {
    Ok((field(req, "topic")?, number(req, "queueId")?))
}

/// `(min, max)` of a queue of this endpoint; `(0, 0)` for unknown topics and queues.
fn bounds(conn: &Conn, topic: &str, queue_id: i32) -> (u64, u64) {
    conn.queue(topic, queue_id).map_or((0, 0), |q| {
        let st = q.state.lock();
        (st.base, st.end())
    })
}

fn offset_reply(req: &RemotingCommand, offset: impl ToString) -> RemotingCommand {
    reply(req, rs::SUCCESS, None).with_ext("offset", offset)
}

fn max_offset(conn: &Conn, req: &RemotingCommand) -> Answer {
    let (topic, queue_id) = queue_fields(req)?;
    Ok(offset_reply(req, bounds(conn, topic, queue_id).1))
}

fn min_offset(conn: &Conn, req: &RemotingCommand) -> Answer {
    let (topic, queue_id) = queue_fields(req)?;
    Ok(offset_reply(req, bounds(conn, topic, queue_id).0))
}

/// `SEARCH_OFFSET_BY_TIMESTAMP` by store time: `LOWER` is the first offset stored at or after
/// the time (max when none), `UPPER` the last stored at or before it (max - 1 when all are).
fn search_offset(conn: &Conn, req: &RemotingCommand) -> Answer {
    let (topic, queue_id) = queue_fields(req)?;
    let ts: i64 = number(req, "timestamp")?;
    let upper = req
        .ext("boundaryType")
        .is_some_and(|b| b.eq_ignore_ascii_case("UPPER"));
    let Some(q) = conn.queue(topic, queue_id) else {
        return Ok(offset_reply(req, 0));
    };
    let st = q.state.lock();
    let offset = if st.messages.is_empty() {
        st.base
    } else if upper {
        let after = st.messages.partition_point(|m| m.store_ms <= ts) as u64;
        st.base + after.saturating_sub(1)
    } else {
        st.base + st.messages.partition_point(|m| m.store_ms < ts) as u64
    };
    Ok(offset_reply(req, offset))
}

fn query_consumer_offset(conn: &Conn, req: &RemotingCommand) -> Answer {
    let group = field(req, "consumerGroup")?;
    let (topic, queue_id) = queue_fields(req)?;
    let zero_if_missing = req
        .ext("setZeroIfNotFound")
        .is_none_or(|v| !v.eq_ignore_ascii_case("false"));
    let (committed, base) = conn.queue(topic, queue_id).map_or((None, 0), |q| {
        let st = q.state.lock();
        (st.offsets.get(group).copied(), st.base)
    });
    match committed {
        Some(o) => Ok(offset_reply(req, o)),
        // Never committed: 0 while offset 0 is still retained, unless the caller asked to know.
        None if zero_if_missing && base == 0 => Ok(offset_reply(req, 0)),
        None => Err(refuse(
            req,
            rs::QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe",
        )),
    }
}

fn update_consumer_offset(conn: &Conn, req: &RemotingCommand) -> Answer {
    let group = field(req, "consumerGroup")?;
    let (topic_name, queue_id) = queue_fields(req)?;
    let offset: i64 = number(req, "commitOffset")?;
    let core = &conn.core;
    if core.store.group(group).is_none() {
        return Err(refuse(
            req,
            rs::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("subscription group not exist, {group}"),
        ));
    }
    let Some(topic) = core.store.topic(topic_name) else {
        return Err(refuse(
            req,
            rs::TOPIC_NOT_EXIST,
            format!("topic:{topic_name} not exist"),
        ));
    };
    let Some(q) = topic.queue(conn.ep.index, queue_id) else {
        return Err(refuse(
            req,
            rs::INVALID_PARAMETER,
            format!("queueId[{queue_id}] is illegal, topic:[{topic_name}]"),
        ));
    };
    q.state.lock().offsets.insert(group.to_string(), offset);
    Ok(reply(req, rs::SUCCESS, None))
}

// ---- admin and heartbeat -------------------------------------------------------------------

/// `UPDATE_AND_CREATE_TOPIC`: create the topic with its queues on this endpoint. An existing
/// topic keeps its queues; the permission applies to its queues on this endpoint.
fn create_topic(conn: &Conn, req: &RemotingCommand) -> Answer {
    let name = field(req, "topic")?;
    let read: usize = number(req, "readQueueNums")?;
    let write: usize = number(req, "writeQueueNums")?;
    let perm: i32 = number(req, "perm")?;
    if !valid_resource_name(name) {
        return Err(refuse(
            req,
            rs::INVALID_PARAMETER,
            format!("The specified topic {name} contains illegal characters"),
        ));
    }
    let ty = req
        .ext("attributes")
        .and_then(|a| {
            a.split(',').find_map(|kv| {
                kv.trim()
                    .trim_start_matches('+')
                    .strip_prefix("message.type=")
            })
        })
        .map_or(Ok(TopicType::Only(MessageKind::Normal)), TopicType::parse)
        .map_err(|e| refuse(req, rs::INVALID_PARAMETER, e.to_string()))?;
    let store = &conn.core.store;
    let topic: Arc<Topic> = match store.topic(name) {
        Some(t) => t,
        None => store
            .create_topic_on(name, ty, conn.ep.index, read.max(write))
            .map_err(|e| refuse(req, rs::INVALID_PARAMETER, e.to_string()))?,
    };
    let p = match perm & 6 {
        6 => proto::Permission::ReadWrite,
        4 => proto::Permission::Read,
        2 => proto::Permission::Write,
        _ => proto::Permission::None,
    };
    for i in &topic.by_broker[conn.ep.index] {
        topic.queues[*i].set_permission(p);
    }
    // What the Java broker answers: success, with this remark.
    Ok(reply(
        req,
        rs::SUCCESS,
        Some("not set any response code".into()),
    ))
}

/// `HEART_BEAT`: groups named by the consumers are created (as the broker's
/// `autoCreateSubscriptionGroup` does) and their subscriptions recorded.
fn heartbeat(conn: &Conn, req: &RemotingCommand) -> Answer {
    if let Ok(data) = serde_json::from_slice::<serde_json::Value>(&req.body) {
        let consumers = data.get("consumerDataSet").and_then(|v| v.as_array());
        for c in consumers.into_iter().flatten() {
            let Some(group) = c.get("groupName").and_then(|g| g.as_str()) else {
                continue;
            };
            if conn
                .core
                .store
                .group_or_create(group, &conn.core.config)
                .is_none()
            {
                continue;
            }
            let subs = c.get("subscriptionDataSet").and_then(|v| v.as_array());
            let mut known = conn.ep.remoting.subscriptions.lock();
            for s in subs.into_iter().flatten() {
                if let Some(topic) = s.get("topic").and_then(|t| t.as_str()) {
                    let expr = s.get("subString").and_then(|e| e.as_str()).unwrap_or("*");
                    known.insert((group.to_string(), topic.to_string()), expr.to_string());
                }
            }
        }
    }
    Ok(reply(req, rs::SUCCESS, None))
}
