//! The broker's HTTP/2 server on the wire, through a raw `h2` client: what a unary answer looks
//! like whichever way it is served (by `unary`, or by tonic's server when the request's body is
//! not whole on arrival or is compressed), and the deadline, as tonic's server answered them.

use std::time::{Duration, Instant};

use bytes::{BufMut as _, Bytes, BytesMut};
use http::HeaderMap;

use super::tests::{message, res};
use super::*;
use crate::proto;
use crate::status as code;

/// An answer as it came: the head, the data frames joined, the trailers.
struct Answer {
    head: http::response::Parts,
    data: Bytes,
    trailers: Option<HeaderMap>,
}

impl Answer {
    /// The `grpc-status` of the answer: from its trailers, or from its head when there are
    /// none (a trailers-only answer).
    fn grpc_status(&self) -> &str {
        let from = self.trailers.as_ref().unwrap_or(&self.head.headers);
        from.get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn grpc_message(&self) -> &str {
        let from = self.trailers.as_ref().unwrap_or(&self.head.headers);
        from.get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// How the request's body is sent.
enum Body {
    /// With the headers, in one write.
    Whole,
    /// After the headers have arrived: the server sees the call before its body.
    Late,
    /// With trailers that carry the client id (not in the headers): tonic's server merges
    /// request trailers into the call's metadata.
    IdInTrailers,
}

/// `message` framed as one gRPC message (`flag` 1 says compressed).
fn framed(message: &impl prost::Message, flag: u8) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(flag);
    b.put_u32(message.encoded_len() as u32);
    message.encode(&mut b).unwrap();
    b.freeze()
}

async fn connect(broker: &Broker) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(broker.addresses()[0])
        .await
        .unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    method: &str,
    extra: &[(&'static str, &'static str)],
    body: Bytes,
    how: Body,
) -> Answer {
    let mut request = http::Request::post(format!(
        "http://127.0.0.1/apache.rocketmq.v2.MessagingService/{method}"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let id = http::HeaderValue::from_static("wire-client");
    if !matches!(how, Body::IdInTrailers) {
        request.headers_mut().insert("x-mq-client-id", id.clone());
    }
    for (k, v) in extra {
        request
            .headers_mut()
            .insert(*k, http::HeaderValue::from_static(v));
    }
    let mut send = send.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request, false).unwrap();
    if let Body::Late = how {
        // Long enough for the headers to be read and the call started without its body.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Body::IdInTrailers = how {
        stream.send_data(body, false).unwrap();
        let mut trailers = HeaderMap::new();
        trailers.insert("x-mq-client-id", id);
        stream.send_trailers(trailers).unwrap();
    } else {
        stream.send_data(body, true).unwrap();
    }
    let (head, mut recv) = response.await.unwrap().into_parts();
    let mut data = BytesMut::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.unwrap();
    Answer {
        head,
        data: data.freeze(),
        trailers,
    }
}

fn decode<M: prost::Message + Default>(data: &Bytes) -> M {
    assert_eq!(data[0], 0, "uncompressed");
    let len = u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize;
    assert_eq!(len, data.len() - 5, "one message");
    M::decode(&data[5..]).unwrap()
}

fn send_request() -> proto::SendMessageRequest {
    proto::SendMessageRequest {
        messages: vec![message("wire", b"hello")],
    }
}

#[tokio::test]
async fn a_unary_answer_is_the_same_whether_its_body_came_whole_or_late() {
    let broker = Broker::start(BrokerConfig::for_tests()).await.unwrap();
    broker.create_topic("wire", "NORMAL", 1).unwrap();
    let mut send = connect(&broker).await;
    let mut offsets = Vec::new();
    for how in [Body::Whole, Body::Late, Body::IdInTrailers, Body::Whole] {
        let a = call(
            &mut send,
            "SendMessage",
            &[],
            framed(&send_request(), 0),
            how,
        )
        .await;
        assert_eq!(a.head.status, 200);
        let names: Vec<_> = a.head.headers.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type"], "no other header (no date)");
        assert_eq!(a.head.headers["content-type"], "application/grpc");
        let trailers = a.trailers.as_ref().expect("trailers");
        assert_eq!(trailers.len(), 1, "{trailers:?}");
        assert_eq!(a.grpc_status(), "0");
        let answer: proto::SendMessageResponse = decode(&a.data);
        assert_eq!(answer.status.unwrap().code, code::OK);
        offsets.push(answer.entries[0].offset);
    }
    assert_eq!(offsets, [0, 1, 2, 3], "each one stored once");
    broker.shutdown().await;
}

#[tokio::test]
async fn requests_unary_does_not_take_get_tonics_answers() {
    let broker = Broker::start(BrokerConfig::for_tests()).await.unwrap();
    broker.create_topic("wire", "NORMAL", 1).unwrap();
    let mut send = connect(&broker).await;
    // A compressed message without a grpc-encoding: tonic's server refuses it.
    let a = call(
        &mut send,
        "SendMessage",
        &[],
        framed(&send_request(), 1),
        Body::Whole,
    )
    .await;
    assert_eq!(a.grpc_status(), "13", "{}", a.grpc_message());
    // An encoding the server does not accept.
    let a = call(
        &mut send,
        "SendMessage",
        &[("grpc-encoding", "gzip")],
        framed(&send_request(), 1),
        Body::Whole,
    )
    .await;
    assert_eq!(a.grpc_status(), "12", "{}", a.grpc_message());
    // A body that is not a message.
    let a = call(
        &mut send,
        "SendMessage",
        &[],
        Bytes::from_static(&[0, 0, 0, 0, 2, 0xff, 0xff]),
        Body::Whole,
    )
    .await;
    assert_eq!(a.grpc_status(), "13", "{}", a.grpc_message());
    // A method the service does not have.
    let a = call(&mut send, "NoSuchMethod", &[], Bytes::new(), Body::Whole).await;
    assert_eq!(a.grpc_status(), "12");
    assert!(a.trailers.is_none(), "trailers-only");
    // Nothing was stored, and the connection still serves.
    let a = call(
        &mut send,
        "SendMessage",
        &[],
        framed(&send_request(), 0),
        Body::Whole,
    )
    .await;
    let answer: proto::SendMessageResponse = decode(&a.data);
    assert_eq!(answer.entries[0].offset, 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_call_open_at_its_deadline_is_cancelled() {
    let broker = Broker::start(BrokerConfig::for_tests()).await.unwrap();
    broker.create_topic("wire", "NORMAL", 1).unwrap();
    broker
        .set_latency(0, Some(Rpc::SendMessage), Duration::from_secs(5))
        .unwrap();
    let mut send = connect(&broker).await;
    let started = Instant::now();
    let a = call(
        &mut send,
        "SendMessage",
        &[("grpc-timeout", "200m")],
        framed(&send_request(), 0),
        Body::Whole,
    )
    .await;
    assert_eq!(a.grpc_status(), "1");
    assert_eq!(a.grpc_message(), "Timeout%20expired", "percent-encoded");
    assert!(a.trailers.is_none(), "trailers-only");
    assert!(started.elapsed() < Duration::from_secs(4));
    // Other calls on the connection are served meanwhile and after.
    let heartbeat = proto::HeartbeatRequest {
        group: res("g"),
        client_type: proto::ClientType::Producer as i32,
    };
    let a = call(
        &mut send,
        "Heartbeat",
        &[],
        framed(&heartbeat, 0),
        Body::Whole,
    )
    .await;
    assert_eq!(a.grpc_status(), "0");
    broker.shutdown().await;
}
