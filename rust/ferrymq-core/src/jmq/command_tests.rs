//! Every command payload, requests and responses, with every field set, round-trips through
//! its layout in every header version and every request through [`AnyRequest`]; the layouts
//! with something particular are pinned byte for byte.

use bytes::{BufMut, Bytes, BytesMut};

use super::codec::{command_type as ct, Reader, BOOLEAN_ACK};
use super::command::*;
use super::message::WireMessage;

fn message(body: &'static [u8]) -> WireMessage {
    let mut m = WireMessage {
        partition: 2,
        flag: 1,
        business_id: Some("biz".into()),
        attributes: Some("k=v".into()),
        app: Some("app".into()),
        ..WireMessage::default()
    };
    m.set_body(Bytes::from_static(body));
    m
}

fn broker(id: i32) -> BrokerMeta {
    BrokerMeta {
        id,
        host: format!("h{id}"),
        port: 50_000 + id,
        data_center: "dc".into(),
        nearby: id % 2 == 0,
        weight: 7 * id,
        sys_code: 5,
        permission: 2,
    }
}

fn cluster() -> FetchClusterResponse {
    FetchClusterResponse {
        topics: vec![
            TopicMeta {
                topic: "t".into(),
                producer_policy: Some(ProducerPolicy {
                    nearby: true,
                    single: true,
                    archive: false,
                    weights: vec![("1".into(), 10), ("2".into(), -3)],
                    black_list: vec!["1.2.3.4".into()],
                    timeout: 100,
                }),
                consumer_policy: Some(ConsumerPolicy {
                    nearby: false,
                    paused: true,
                    archive: true,
                    retry: true,
                    seq: false,
                    ack_timeout: 1000,
                    batch_size: 10,
                    concurrent: 4,
                    delay: 9,
                    black_list: vec!["9.9.9.9".into(), "8.8.8.8".into()],
                    err_times: 3,
                    max_partition_num: 6,
                    read_retry_probability: 20,
                }),
                topic_type: topic_type::BROADCAST,
                partition_groups: vec![
                    PartitionGroupMeta {
                        id: 0,
                        leader: 1,
                        partitions: vec![0, 1],
                    },
                    PartitionGroupMeta {
                        id: 1,
                        leader: 2,
                        partitions: vec![2],
                    },
                ],
                code: 0,
                params: vec![("a".into(), "b".into())],
            },
            TopicMeta {
                topic: "u".into(),
                topic_type: topic_type::NONE,
                code: 189,
                ..TopicMeta::default()
            },
        ],
        brokers: vec![broker(1), broker(2)],
    }
}

/// A coordinator, sent without sysCode/permission, and a topic without one (-1).
fn coordinators() -> FindCoordinatorResponse {
    let mut coordinator = broker(3);
    coordinator.sys_code = 0;
    coordinator.permission = 3;
    FindCoordinatorResponse {
        coordinators: vec![
            CoordinatorEntry {
                topic: "a".into(),
                broker: Some(coordinator),
                code: 0,
            },
            CoordinatorEntry {
                topic: "b".into(),
                broker: None,
                code: 7,
            },
        ],
    }
}

/// Encode `p` at `version`, decode it back, and return what came back (the caller compares it
/// with what the version carries) and the bytes.
fn round_trip<P: Payload>(p: &P, version: u8) -> (P, Bytes) {
    let mut b = BytesMut::new();
    p.encode(version, &mut b).unwrap();
    let b = b.freeze();
    let mut r = Reader::new(b.clone());
    let back = P::decode(&mut r, version).unwrap();
    r.finish("test").unwrap();
    (back, b)
}

/// Round-trip at `version`, require the value back unchanged, and return the bytes.
fn bytes_of<P: Payload + PartialEq + std::fmt::Debug>(p: &P, version: u8) -> Bytes {
    let (back, b) = round_trip(p, version);
    assert_eq!(&back, p);
    b
}

/// Round-trip at every version and require the value back as `expect` leaves it for that
/// version (the fields the version does not carry at their defaults).
fn same_but<P: Payload + PartialEq + Clone + std::fmt::Debug>(
    p: P,
    out: &mut Vec<(i8, u8, Bytes)>,
    expect: impl Fn(u8, &mut P),
) {
    for v in 1..=4 {
        let (back, b) = round_trip(&p, v);
        let mut expected = p.clone();
        expect(v, &mut expected);
        assert_eq!(
            back,
            expected,
            "{} at version {v}",
            ct::name(P::TYPE.wrapping_abs())
        );
        out.push((P::TYPE, v, b));
    }
}

/// Round-trip at every version and require the value back unchanged.
fn same<P: Payload + PartialEq + Clone + std::fmt::Debug>(p: P, out: &mut Vec<(i8, u8, Bytes)>) {
    same_but(p, out, |_, _| {});
}

/// [`same`] for each payload in turn.
macro_rules! same {
    ($out:expr, $($p:expr),+ $(,)?) => {$(same($p, $out);)+};
}

/// Every payload with every field set, encoded at versions 1 to 4 (type, version, bytes).
fn every_payload() -> Vec<(i8, u8, Bytes)> {
    let mut out = Vec::new();
    let o = &mut out;
    same!(
        o,
        AddConnection {
            username: Some("u".into()),
            password: None,
            app: "a".into(),
            token: "t".into(),
            region: Some("r".into()),
            namespace: Some("n".into()),
            language: language::PYTHON,
            client_version: "v".into(),
            ip: "1.2.3.4".into(),
            time: 1_700_000_000_000,
            sequence: 3,
        },
        AddConnectionResponse {
            connection_id: Some("c".into()),
            notification: None,
        },
        RemoveConnection,
        Heartbeat,
        FetchHealth,
        BooleanAck,
        FetchHealthResponse { point: 2.5 },
    );
    let topics = vec!["a".to_string(), "b".to_string()];
    same!(
        o,
        AddConsumer {
            topics: topics.clone(),
            app: "x".into(),
            sequence: 4,
        },
        AddProducer {
            topics: topics.clone(),
            app: "x".into(),
            sequence: -4,
        },
        ClientIdsResponse::<{ -ct::ADD_CONSUMER }> {
            ids: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
        },
        ClientIdsResponse::<{ -ct::ADD_PRODUCER }> {
            ids: vec![("a".into(), "3".into())],
        },
        RemoveConsumer {
            topics: topics.clone(),
            app: "x".into(),
        },
        RemoveProducer {
            topics: topics.clone(),
            app: "x".into(),
        },
        FetchCluster {
            topics: topics.clone(),
            app: "x".into(),
        },
        FindCoordinator {
            topics,
            app: "x".into(),
        },
    );
    // FETCH_CLUSTER answers carry broker sysCode/permission from version 2 and topic params
    // in version 4 only.
    same_but(cluster(), o, |v, c| {
        for t in &mut c.topics {
            if v < 4 {
                t.params.clear();
            }
        }
        for b in &mut c.brokers {
            if v < 2 {
                b.sys_code = 0;
                b.permission = 3;
            }
        }
    });
    same!(
        o,
        coordinators(),
        FetchAssignedPartition {
            topics: vec![("t".into(), 60_000, true), ("u".into(), 1, false)],
            app: "a".into(),
        },
        FetchAssignedPartitionResponse {
            data: vec![("t".into(), vec![0, 3], 0), ("u".into(), vec![], 1)],
        },
        FetchTopicMessage {
            topics: vec![("t".into(), 10), ("u".into(), 1)],
            app: "a".into(),
            ack_timeout: 1,
            long_poll_timeout: 2,
        },
        FetchTopicMessageResponse {
            data: vec![TopicMessages {
                topic: "t".into(),
                messages: vec![message(b"one"), message(b"two")],
                code: 0,
            }],
        },
        FetchPartitionMessage {
            topics: vec![(
                "t".into(),
                vec![
                    PartitionFetch {
                        partition: 1,
                        count: 2,
                        index: -1,
                    },
                    PartitionFetch {
                        partition: 2,
                        count: 3,
                        index: 40,
                    },
                ],
            )],
            app: "a".into(),
        },
        FetchPartitionMessageResponse {
            data: vec![(
                "t".into(),
                vec![PartitionMessages {
                    partition: 1,
                    messages: vec![message(b"m")],
                    code: 184,
                }],
            )],
        },
        CommitAck {
            topics: vec![(
                "t".into(),
                vec![(
                    0,
                    vec![
                        AckItem {
                            partition: 0,
                            index: 3,
                            retry_type: RetryType::Exception,
                        },
                        AckItem {
                            partition: 0,
                            index: 4,
                            retry_type: RetryType::None,
                        },
                    ],
                )],
            )],
            app: "a".into(),
        },
        CommitAckIndex {
            topics: vec![("t".into(), vec![(0, 5), (1, 6)])],
            app: "a".into(),
        },
        // One topic with one partition: the count bug writes the right count.
        CommitAckResponse::<{ -ct::COMMIT_ACK }> {
            data: vec![("t".into(), vec![(0, 0)])],
        },
        CommitAckResponse::<{ -ct::COMMIT_ACK_INDEX }> {
            data: vec![("t".into(), vec![(1, 0)])],
        },
        FetchIndex {
            topics: vec![("t".into(), vec![0, 1])],
            app: "a".into(),
        },
    );
    // FETCH_INDEX answers carry the left and right indexes from version 3.
    same_but(
        FetchIndexResponse {
            data: vec![(
                "t".into(),
                vec![IndexEntry {
                    partition: 1,
                    index: 10,
                    code: 0,
                    left_index: 2,
                    right_index: 30,
                }],
            )],
        },
        o,
        |v, i| {
            if v < 3 {
                for (_, entries) in &mut i.data {
                    for e in entries {
                        e.left_index = -1;
                        e.right_index = -1;
                    }
                }
            }
        },
    );
    same!(
        o,
        ProduceMessage {
            topics: vec![ProduceTopic {
                topic: "t".into(),
                tx_id: Some("tx".into()),
                timeout: 3000,
                qos: 2,
                messages: vec![message(b"p")],
            }],
            app: "a".into(),
        },
        ProduceMessageResponse {
            data: vec![ProduceResult {
                topic: "t".into(),
                code: 0,
                items: vec![ProduceItem {
                    partition: 1,
                    index: 2,
                    start_time: 3,
                }],
            }],
        },
        Prepare {
            topic: "t".into(),
            app: "a".into(),
            sequence: 1,
            transaction_id: Some("user".into()),
            timeout: 9,
        },
        PrepareResponse {
            tx_id: Some("tx".into()),
            code: 0,
        },
        Commit {
            topic: "t".into(),
            app: "a".into(),
            tx_id: "tx".into(),
        },
        CommitResponse { code: 3 },
        Rollback {
            topic: "t".into(),
            app: "a".into(),
            tx_id: "tx".into(),
        },
        RollbackResponse { code: 4 },
        FetchProduceFeedback {
            app: "a".into(),
            topic: "t".into(),
            status: 1,
            long_poll_timeout: 5,
        },
        FetchProduceFeedbackResponse {
            data: vec![Feedback {
                topic: "t".into(),
                tx_id: "tx".into(),
                transaction_id: "user".into(),
            }],
            code: 0,
        },
    );
    out
}

#[test]
fn every_payload_round_trips_in_every_version() {
    let all = every_payload();
    // Every request type is covered, and so is its answer (a BooleanAck for those without one).
    let boolean_ack = [
        ct::REMOVE_CONNECTION,
        ct::REMOVE_CONSUMER,
        ct::REMOVE_PRODUCER,
        ct::HEARTBEAT,
    ];
    for &t in ct::KNOWN {
        assert!(all.iter().any(|(p, _, _)| *p == t), "request {t}");
        let answer = if boolean_ack.contains(&t) {
            BOOLEAN_ACK
        } else {
            -t
        };
        assert!(all.iter().any(|(p, _, _)| *p == answer), "answer to {t}");
    }
}

#[test]
fn every_request_decodes_through_any_request_exactly() {
    for (t, v, b) in every_payload() {
        if t < 0 {
            continue;
        }
        AnyRequest::decode(t, v, b.clone()).unwrap();
        // One byte too many is a protocol error: payloads must consume the frame exactly.
        let mut longer = BytesMut::from(&b[..]);
        longer.put_u8(0);
        assert!(AnyRequest::decode(t, v, longer.freeze()).is_err(), "{t}");
    }
    assert!(AnyRequest::decode(ct::FETCH_ACK_INDEX, 3, Bytes::new()).is_err());
}

#[test]
fn add_connection_golden() {
    let p = AddConnection {
        app: "a".into(),
        token: "t".into(),
        language: language::PYTHON,
        client_version: "v".into(),
        ip: "i".into(),
        time: 2,
        sequence: 3,
        ..AddConnection::default()
    };
    let expected: &[u8] = &[
        0, 0, 1, b'a', 1, b't', 0,
        0, // username, password, app, token, region, namespace (S1)
        3, // language PYTHON
        1, b'v', 1, b'i', // version, ip
        0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3,
    ];
    assert_eq!(&bytes_of(&p, 3)[..], expected);
    let r = AddConnectionResponse {
        connection_id: Some("c".into()),
        notification: Some("n".into()),
    };
    assert_eq!(&bytes_of(&r, 3)[..], &[1, b'c', 0, 1, b'n']);
}

#[test]
fn language_nine_is_refused() {
    let mut b = BytesMut::new();
    AddConnection {
        language: 9,
        ..AddConnection::default()
    }
    .encode(3, &mut b)
    .unwrap();
    assert!(AnyRequest::decode(ct::ADD_CONNECTION, 3, b.freeze()).is_err());
}

#[test]
fn fetch_cluster_golden_v3_and_version_fields() {
    let c = FetchClusterResponse {
        topics: vec![TopicMeta {
            topic: "t".into(),
            producer_policy: Some(ProducerPolicy {
                nearby: true,
                weights: vec![("1".into(), 10)],
                timeout: 100,
                ..ProducerPolicy::default()
            }),
            consumer_policy: Some(ConsumerPolicy {
                retry: true,
                ack_timeout: 1000,
                batch_size: 10,
                black_list: vec!["9.9.9.9".into()],
                ..ConsumerPolicy::default()
            }),
            topic_type: topic_type::TOPIC,
            partition_groups: vec![PartitionGroupMeta {
                id: 0,
                leader: 1,
                partitions: vec![0, 1],
            }],
            code: 0,
            params: vec![],
        }],
        brokers: vec![BrokerMeta {
            id: 1,
            host: "h".into(),
            port: 50088,
            data_center: "dc".into(),
            nearby: true,
            weight: 100,
            sys_code: 0,
            permission: 3,
        }],
    };
    let b = bytes_of(&c, 3);
    let mut e: Vec<u8> = vec![0, 1, 0, 1, b't'];
    e.extend([1, 1, 0, 0, 0, 1, 0, 1, b'1', 0, 10, 0, 0, 0, 0, 0, 100]); // producer policy
    e.extend([1, 0, 0, 0, 1, 0]); // consumer flag, nearby paused archive retry seq
    e.extend([0, 0, 3, 0xe8, 0, 10, 0]); // ackTimeout, batchSize, deleted bool
    e.extend([0, 0, 0, 0, 0, 0, 0, 0]); // concurrent, delay
    e.extend([0, 1, 0, 7]);
    e.extend(b"9.9.9.9");
    e.extend([0; 12]); // errTimes, maxPartitionNum, readRetryProbability
    e.extend([0]); // type BYTE
    e.extend([0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1]); // group
    e.extend([0, 0, 0, 0]); // code
    e.extend([
        0, 1, 0, 0, 0, 1, 0, 1, b'h', 0, 0, 0xc3, 0xa8, 0, 2, b'd', b'c', 1,
    ]);
    e.extend([0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 3]); // weight, sysCode, permission
    assert_eq!(&b[..], &e[..]);
    // Version 1: no sysCode/permission; version 4: params after code.
    assert_eq!(bytes_of(&c, 1).len(), b.len() - 8);
    let mut c4 = c.clone();
    c4.topics[0].params = vec![("k".into(), "v".into())];
    assert_eq!(bytes_of(&c4, 4).len(), b.len() + 8);
}

#[test]
fn find_coordinator_golden() {
    let mut e: Vec<u8> = vec![0, 2, 0, 1, b'a', 0, 0, 0, 3]; // count, topic, broker id
    e.extend([0, 2, b'h', b'3', 0, 0, 0xc3, 0x53]); // host, port 50003
    e.extend([0, 2, b'd', b'c', 0, 0, 0, 0, 21]); // dc, nearby, weight
    e.extend([0, 0, 0, 0]); // code: no sysCode/permission even in version 4
    e.extend([0, 1, b'b', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 7]); // topic, id -1 alone, code
    assert_eq!(&bytes_of(&coordinators(), 4)[..], &e[..]);
}

#[test]
fn commit_ack_response_reproduces_the_count_bug() {
    let resp: CommitAckResponse<{ -ct::COMMIT_ACK }> = CommitAckResponse {
        data: vec![("t".into(), vec![(0, 0), (1, 0), (2, 140)])],
    };
    let b = bytes_of(&resp, 3);
    assert_eq!(&b[..2], &[0, 3], "count is the number of cells, not topics");
}

#[test]
fn feedback_and_prepare_tails_follow_the_code() {
    let b = bytes_of(
        &FetchProduceFeedback {
            app: "a".into(),
            topic: "t".into(),
            status: 1,
            long_poll_timeout: 5,
        },
        3,
    );
    // app S2, topic S2, status BYTE, longPollTimeout INT: no count, a 4-byte tail.
    assert_eq!(b.len(), 3 + 3 + 1 + 4);
    let b = bytes_of(
        &Prepare {
            topic: "t".into(),
            app: "a".into(),
            sequence: 1,
            transaction_id: None,
            timeout: 7,
        },
        3,
    );
    assert_eq!(&b[b.len() - 4..], &[0, 0, 0, 7]);
}
