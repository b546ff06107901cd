//! The channel against a bare HTTP/2 server on loopback: a connection the server closes
//! gracefully, and a streaming request body the server gives no window to.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tower_service::Service;

use super::{Dial, H2Channel};

/// A request body fed from a channel: it ends when the sender is dropped.
struct Fed(mpsc::Receiver<Bytes>);

impl http_body::Body for Fed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|d| d.map(|d| Ok(Frame::data(d))))
    }
}

fn request(body: Fed) -> http::Request<tonic::body::Body> {
    http::Request::builder()
        .method("POST")
        .uri("/apache.rocketmq.v2.MessagingService/QueryRoute")
        .header("content-type", "application/grpc")
        .body(tonic::body::Body::new(body))
        .unwrap()
}

/// A unary request: one empty gRPC message.
fn unary() -> http::Request<tonic::body::Body> {
    let (tx, rx) = mpsc::channel(1);
    tx.try_send(Bytes::from_static(&[0; 5])).unwrap();
    request(Fed(rx))
}

/// Answer with status OK and no message.
fn answer_ok(mut respond: h2::server::SendResponse<Bytes>) {
    let mut stream = respond
        .send_response(http::Response::new(()), false)
        .unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    stream.send_trailers(trailers).unwrap();
}

fn channel(addr: String) -> H2Channel {
    H2Channel::new(Dial {
        addr,
        tls: None,
        connect_timeout: Duration::from_secs(5),
    })
    .unwrap()
}

#[tokio::test]
async fn a_call_after_the_server_said_goaway_goes_to_a_new_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (closing_tx, closing_rx) = oneshot::channel();
    tokio::spawn(async move {
        // The first connection: one call left open (as telemetry is), then a graceful GOAWAY.
        let (socket, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::handshake(socket).await.unwrap();
        let (_, mut respond) = conn.accept().await.unwrap().unwrap();
        let open = respond
            .send_response(http::Response::new(()), false)
            .unwrap();
        conn.graceful_shutdown();
        // A PING sent after the GOAWAY: its answer means the client has read the GOAWAY.
        let mut ping = conn.ping_pong().unwrap();
        let pong = ping.ping(h2::Ping::opaque());
        tokio::pin!(pong);
        loop {
            tokio::select! {
                r = &mut pong => { r.unwrap(); break; }
                _ = conn.accept() => {}
            }
        }
        closing_tx.send(()).unwrap();
        tokio::spawn(async move {
            let _open = open;
            while conn.accept().await.is_some() {}
        });
        // The next connection answers every call.
        let (socket, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::handshake(socket).await.unwrap();
        while let Some(Ok((_, respond))) = conn.accept().await {
            answer_ok(respond);
        }
    });
    let mut channel = channel(addr);
    let held = channel.call(unary()).await.unwrap();
    closing_rx.await.unwrap();
    let answer = channel
        .call(unary())
        .await
        .expect("a call after GOAWAY is sent on a new connection");
    assert_eq!(answer.status(), http::StatusCode::OK);
    drop(held);
}

#[tokio::test]
async fn a_streaming_body_is_read_no_faster_than_the_window_opens() {
    const WINDOW: u32 = 64;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (got_tx, mut got_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let mut conn = h2::server::Builder::new()
            .initial_window_size(WINDOW)
            .handshake::<_, Bytes>(socket)
            .await
            .unwrap();
        // A first call, answered: the client has the server's SETTINGS before the second.
        let (_, respond) = conn.accept().await.unwrap().unwrap();
        answer_ok(respond);
        let (request, mut respond) = conn.accept().await.unwrap().unwrap();
        let _open = respond
            .send_response(http::Response::new(()), false)
            .unwrap();
        // Read without releasing capacity: the stream's window stays shut after WINDOW bytes.
        let mut body = request.into_body();
        tokio::spawn(async move { while conn.accept().await.is_some() {} });
        while let Some(Ok(d)) = body.data().await {
            got_tx.send(d.len()).unwrap();
        }
    });
    let (tx, rx) = mpsc::channel(1);
    let mut channel = channel(addr);
    channel.call(unary()).await.unwrap();
    let call = tokio::spawn(async move { channel.call(request(Fed(rx))).await.map(drop) });
    // 100-byte frames into a one-slot queue: once the window is used up, the channel stops
    // taking frames, so the queue fills and the sender waits.
    let frame = Bytes::from(vec![7u8; 100]);
    let mut sent = 0;
    let blocked = loop {
        match tokio::time::timeout(Duration::from_millis(500), tx.send(frame.clone())).await {
            Ok(r) => {
                r.unwrap();
                sent += 1;
                assert!(
                    sent < 50,
                    "the channel took {sent} frames through a {WINDOW}-byte window"
                );
            }
            Err(_) => break sent,
        }
    };
    let mut received = 0;
    while let Ok(n) = got_rx.try_recv() {
        received += n;
    }
    assert!(
        received <= WINDOW as usize,
        "{received} bytes past a {WINDOW}-byte window"
    );
    assert!(
        blocked <= 3,
        "{blocked} frames taken through a {WINDOW}-byte window"
    );
    call.abort();
}
