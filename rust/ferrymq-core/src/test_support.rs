//! Helpers shared by the crate's unit tests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::remoting::codec::{decode_frame, RemotingCommand, DEFAULT_MAX_FRAME};

/// Poll `cond` every 5 ms until it holds; fails the test, naming `what`, after 20 s.
pub(crate) async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A remoting server on loopback that answers every request with `answer(request, its own
/// address)`; returns that address.
pub(crate) async fn remoting_server(
    answer: impl Fn(&RemotingCommand, &str) -> RemotingCommand + Send + Sync + 'static,
) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let (me, answer) = (addr.clone(), Arc::new(answer));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let (me, answer) = (me.clone(), Arc::clone(&answer));
            tokio::spawn(async move {
                let mut buf = BytesMut::new();
                loop {
                    while let Ok(Some(c)) = decode_frame(&mut buf, DEFAULT_MAX_FRAME) {
                        let mut out = BytesMut::new();
                        answer(&c, &me).encode(&mut out);
                        s.write_all(&out).await.unwrap();
                    }
                    if s.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
            });
        }
    });
    addr
}
