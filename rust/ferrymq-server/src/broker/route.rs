//! QueryRoute and QueryAssignment answers.
//!
//! A route lists, for every endpoint ("broker-<i>", leader id 0, its own loopback address), that
//! endpoint's queues of the topic in the proxy's order — read-only, write-only, read-write, none
//! — with their permission and the topic's accepted message types.
//!
//! Assignments follow the proxy's POP mode: one per endpoint that has a readable queue, with
//! queue id `-1` ("any queue of this broker") and, like the proxy's, no accepted message types;
//! ReceiveMessage then pops from every readable queue of the named broker.

use std::net::SocketAddr;

use super::endpoint::Core;
use super::store::{readable, Topic};
use crate::proto;

/// The `Endpoints` message of a socket address.
pub fn endpoints_of(addr: SocketAddr) -> proto::Endpoints {
    proto::Endpoints {
        scheme: if addr.is_ipv4() {
            proto::AddressScheme::IPv4 as i32
        } else {
            proto::AddressScheme::IPv6 as i32
        },
        addresses: vec![proto::Address {
            host: addr.ip().to_string(),
            port: i32::from(addr.port()),
        }],
    }
}

fn broker_of(core: &Core, i: usize) -> proto::Broker {
    let ep = &core.endpoints[i];
    proto::Broker {
        name: ep.name.clone(),
        id: 0,
        endpoints: Some(endpoints_of(ep.addr)),
    }
}

fn perm_rank(p: proto::Permission) -> u8 {
    match p {
        proto::Permission::Read => 0,
        proto::Permission::Write => 1,
        proto::Permission::ReadWrite => 2,
        _ => 3,
    }
}

/// The message queues of a route answer.
pub(crate) fn route(core: &Core, topic: &Topic, namespace: &str) -> Vec<proto::MessageQueue> {
    let resource = proto::Resource {
        resource_namespace: namespace.to_string(),
        name: topic.name.to_string(),
    };
    let types = topic.topic_type().proto_types();
    let mut out = Vec::with_capacity(topic.queues.len());
    for (b, idx) in topic.by_broker.iter().enumerate() {
        let broker = broker_of(core, b);
        let mut qs: Vec<_> = idx.iter().map(|i| &topic.queues[*i]).collect();
        qs.sort_by_key(|q| (perm_rank(q.permission()), q.id));
        for q in qs {
            out.push(proto::MessageQueue {
                topic: Some(resource.clone()),
                id: q.id,
                permission: q.permission() as i32,
                broker: Some(broker.clone()),
                accept_message_types: types.clone(),
            });
        }
    }
    out
}

/// The assignments of a QueryAssignment answer.
pub(crate) fn assignments(core: &Core, topic: &Topic, namespace: &str) -> Vec<proto::Assignment> {
    let resource = proto::Resource {
        resource_namespace: namespace.to_string(),
        name: topic.name.to_string(),
    };
    // The proxy's assignments carry no accept_message_types.
    topic
        .by_broker
        .iter()
        .enumerate()
        .filter(|(_, idx)| idx.iter().any(|i| readable(topic.queues[*i].permission())))
        .map(|(b, _)| proto::Assignment {
            message_queue: Some(proto::MessageQueue {
                topic: Some(resource.clone()),
                id: -1,
                permission: proto::Permission::ReadWrite as i32,
                broker: Some(broker_of(core, b)),
                accept_message_types: Vec::new(),
            }),
        })
        .collect()
}
