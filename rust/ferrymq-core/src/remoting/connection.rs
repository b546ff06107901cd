//! One remoting connection to one `host:port`.
//!
//! [`Connection`] is a cheap `Clone` handle. Requests go over a bounded channel to a
//! connection task, which owns the socket and the read buffer: it assigns each request an
//! `opaque` unique among those in flight, writes the frame (coalescing what is queued), splits
//! frames off the read buffer and hands each response to the waiter registered under its
//! opaque. Requests the server sends to us (response bit clear) are answered with
//! `REQUEST_CODE_NOT_SUPPORTED`, unless they are oneway.
//!
//! The socket is opened lazily by the first request. When it breaks (EOF, I/O or protocol
//! error) every request in flight fails with a connection error and the task ends; the next
//! request opens a new one. Every request has its own deadline (a long-polling pull needs the
//! suspend time plus slack). When credentials are set, requests are signed just before they
//! are queued, after the caller has set every field.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use super::acl;
use super::codec::{decode_frame, RemotingCommand, DEFAULT_MAX_FRAME, FLAG_ONEWAY};
use super::codes;
use crate::error::{Error, Result};
use crate::rocketmq::metadata::Credentials;

/// Capacity of the request channel of one connection.
const QUEUE_CAPACITY: usize = 1024;
/// How long to wait for the TCP connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

type Reply = oneshot::Sender<Result<RemotingCommand>>;

enum Command {
    Request {
        cmd: RemotingCommand,
        reply: Option<Reply>,
        deadline: Instant,
    },
    Close,
}

struct Inner {
    addr: String,
    credentials: Option<Credentials>,
    tx: Mutex<Option<mpsc::Sender<Command>>>,
}

/// A remoting connection handle (lazy, reconnecting). Cloning is cheap; clones share the
/// socket.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A handle to `addr` (`host:port`); nothing is opened until the first request.
    pub fn new(addr: impl Into<String>, credentials: Option<Credentials>) -> Self {
        Connection {
            inner: Arc::new(Inner {
                addr: addr.into(),
                credentials,
                tx: Mutex::new(None),
            }),
        }
    }

    /// The peer address.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Hand `command` to the connection task, starting one when there is none (or the last
    /// one ended).
    async fn enqueue(&self, mut command: Command) -> Result<()> {
        loop {
            let running = {
                let mut slot = self.inner.tx.lock();
                if let Some(tx) = slot.as_ref().filter(|tx| !tx.is_closed()) {
                    tx.clone()
                } else {
                    // Queued before the task starts: a task whose connect fails at once (a
                    // refused loopback port) answers it with the reason, instead of closing
                    // the channel before it arrives.
                    let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
                    tx.try_send(command).map_err(|_| {
                        Error::internal("a new remoting request channel refused a request")
                    })?;
                    tokio::spawn(run(self.inner.addr.clone(), rx));
                    *slot = Some(tx);
                    return Ok(());
                }
            };
            match running.send(command).await {
                Ok(()) => return Ok(()),
                // That task was just ending (it closes its channel first): start a new one.
                Err(mpsc::error::SendError(c)) => {
                    command = c;
                    let mut slot = self.inner.tx.lock();
                    if slot.as_ref().is_some_and(|tx| tx.same_channel(&running)) {
                        *slot = None;
                    }
                }
            }
        }
    }

    fn prepare(&self, cmd: &mut RemotingCommand) {
        if let Some(c) = &self.inner.credentials {
            acl::sign_command(cmd, c);
        }
    }

    /// Send `cmd` and wait at most `timeout` for its response (whatever its code).
    pub async fn request(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        cmd.flag &= !(FLAG_ONEWAY | super::codec::FLAG_RESPONSE);
        self.prepare(&mut cmd);
        let code = cmd.code;
        let (reply, rx) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        let fut = async {
            self.enqueue(Command::Request {
                cmd,
                reply: Some(reply),
                deadline,
            })
            .await?;
            rx.await.map_err(|_| {
                Error::connection(format!(
                    "remoting connection to {} ended before the answer",
                    self.inner.addr
                ))
            })?
        };
        tokio::time::timeout(timeout, fut).await.map_err(|_| {
            Error::timeout(format!(
                "request {code} to {} got no answer within {timeout:?}",
                self.inner.addr
            ))
        })?
    }

    /// Send `cmd` without waiting for an answer (the oneway bit is set; the server sends none).
    pub async fn send_oneway(&self, mut cmd: RemotingCommand) -> Result<()> {
        cmd.flag |= FLAG_ONEWAY;
        self.prepare(&mut cmd);
        self.enqueue(Command::Request {
            cmd,
            reply: None,
            deadline: Instant::now(),
        })
        .await
    }

    /// Close the socket (requests in flight fail); a later request opens a new one.
    pub async fn close(&self) {
        let tx = self.inner.tx.lock().take();
        if let Some(tx) = tx {
            let _ = tx.send(Command::Close).await;
        }
    }
}

struct Task {
    addr: String,
    pending: HashMap<i32, (Reply, Instant)>,
    next_opaque: i32,
}

impl Task {
    fn fail_all(&mut self, why: &str) {
        for (_, (reply, _)) in self.pending.drain() {
            let _ = reply.send(Err(Error::connection(format!(
                "remoting connection to {}: {why}",
                self.addr
            ))));
        }
    }

    fn opaque(&mut self) -> i32 {
        loop {
            let o = self.next_opaque;
            self.next_opaque = self.next_opaque.wrapping_add(1);
            if !self.pending.contains_key(&o) {
                return o;
            }
        }
    }

    /// Encode a queued command into `out`; `false` on Close.
    fn take(&mut self, command: Command, out: &mut BytesMut) -> bool {
        match command {
            Command::Close => false,
            Command::Request {
                mut cmd,
                reply,
                deadline,
            } => {
                cmd.opaque = self.opaque();
                cmd.encode(out);
                if let Some(reply) = reply {
                    self.pending.insert(cmd.opaque, (reply, deadline));
                }
                true
            }
        }
    }

    fn on_frame(&mut self, cmd: RemotingCommand, out: &mut BytesMut) {
        if cmd.is_response() {
            match self.pending.remove(&cmd.opaque) {
                Some((reply, _)) => {
                    let _ = reply.send(Ok(cmd));
                }
                None => tracing::debug!(
                    target: "ferrymq::remoting",
                    "{}: answer with unknown opaque {} (code {}) dropped",
                    self.addr, cmd.opaque, cmd.code
                ),
            }
        } else if !cmd.is_oneway() {
            RemotingCommand::response(
                codes::response::REQUEST_CODE_NOT_SUPPORTED,
                cmd.opaque,
                Some(format!("request code {} not supported", cmd.code)),
            )
            .encode(out);
        }
    }
}

async fn run(addr: String, mut rx: mpsc::Receiver<Command>) {
    let mut task = Task {
        addr: addr.clone(),
        pending: HashMap::new(),
        next_opaque: 1,
    };
    let why = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr)).await {
        Err(_) => "connect timed out".to_string(),
        Ok(Err(e)) => format!("cannot connect ({e})"),
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            serve(&mut task, stream, &mut rx).await
        }
    };
    tracing::debug!(target: "ferrymq::remoting", "connection to {addr} ended: {why}");
    task.fail_all(&why);
    rx.close();
    while let Some(c) = rx.recv().await {
        if let Command::Request {
            reply: Some(reply), ..
        } = c
        {
            let _ = reply.send(Err(Error::connection(format!(
                "remoting connection to {addr}: {why}"
            ))));
        }
    }
}

async fn serve(task: &mut Task, stream: TcpStream, rx: &mut mpsc::Receiver<Command>) -> String {
    let (mut reader, mut writer) = stream.into_split();
    let mut rbuf = BytesMut::with_capacity(64 * 1024);
    let mut wbuf = BytesMut::with_capacity(64 * 1024);
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            c = rx.recv() => {
                let Some(c) = c else { return "all handles dropped".into() };
                if !task.take(c, &mut wbuf) {
                    return "closed".into();
                }
                // Coalesce what is already queued into one write.
                while wbuf.len() < 1024 * 1024 {
                    match rx.try_recv() {
                        Ok(c) => {
                            if !task.take(c, &mut wbuf) {
                                return "closed".into();
                            }
                        }
                        Err(_) => break,
                    }
                }
                if let Err(e) = writer.write_all(&wbuf).await {
                    return format!("write failed ({e})");
                }
                wbuf.clear();
            }
            n = reader.read_buf(&mut rbuf) => {
                match n {
                    Ok(0) => return "closed by the peer".into(),
                    Err(e) => return format!("read failed ({e})"),
                    Ok(_) => {}
                }
                loop {
                    match decode_frame(&mut rbuf, DEFAULT_MAX_FRAME) {
                        Ok(Some(cmd)) => task.on_frame(cmd, &mut wbuf),
                        Ok(None) => break,
                        Err(e) => return format!("undecodable frame ({e})"),
                    }
                }
                if !wbuf.is_empty() {
                    if let Err(e) = writer.write_all(&wbuf).await {
                        return format!("write failed ({e})");
                    }
                    wbuf.clear();
                }
            }
            _ = sweep.tick() => {
                // Waiters whose deadline passed have given up; forget them.
                let now = Instant::now();
                task.pending.retain(|_, (reply, deadline)| *deadline > now && !reply.is_closed());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A tiny server: answers each request with code 0 and the request's fields, after the
    /// delay named in field `sleepMs`; closes on field `close`; on field `poke` it first sends
    /// the client a request of its own. Uses binary headers when `binary` is set.
    async fn echo_server(binary: bool) -> (String, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                tokio::spawn(async move {
                    let (mut r, w) = s.into_split();
                    let w = Arc::new(tokio::sync::Mutex::new(w));
                    let mut buf = BytesMut::new();
                    loop {
                        while let Ok(Some(cmd)) = decode_frame(&mut buf, DEFAULT_MAX_FRAME) {
                            if cmd.is_response() {
                                continue;
                            }
                            if cmd.ext("close").is_some() {
                                let _ = w.lock().await.shutdown().await;
                                return;
                            }
                            if cmd.ext("poke").is_some() {
                                let mut out = BytesMut::new();
                                let mut p = RemotingCommand::request(40);
                                p.opaque = 777;
                                p.encode(&mut out);
                                w.lock().await.write_all(&out).await.unwrap();
                            }
                            let delay = cmd.ext("sleepMs").and_then(|v| v.parse().ok());
                            let w = w.clone();
                            tokio::spawn(async move {
                                if let Some(ms) = delay {
                                    tokio::time::sleep(Duration::from_millis(ms)).await;
                                }
                                let mut resp = RemotingCommand::response(0, cmd.opaque, None);
                                resp.ext_fields.clone_from(&cmd.ext_fields);
                                resp.body = cmd.body.clone();
                                let mut out = BytesMut::new();
                                if binary {
                                    resp.encode_binary(&mut out);
                                } else {
                                    resp.encode(&mut out);
                                }
                                let _ = w.lock().await.write_all(&out).await;
                            });
                        }
                        match r.read_buf(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                    }
                });
            }
        });
        (addr, h)
    }

    /// Request code 1 with field `key` set to `value`, waiting at most `timeout`.
    async fn ask(
        c: &Connection,
        key: &str,
        value: impl ToString,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        c.request(RemotingCommand::request(1).with_ext(key, value), timeout)
            .await
    }

    #[tokio::test]
    async fn concurrent_requests_are_correlated() {
        for binary in [false, true] {
            let (addr, _h) = echo_server(binary).await;
            let c = Connection::new(&addr, None);
            let mut joins = Vec::new();
            for i in 0..50u64 {
                let c = c.clone();
                joins.push(tokio::spawn(async move {
                    let cmd = RemotingCommand::request(30)
                        .with_ext("i", i)
                        .with_ext("sleepMs", (50 - i) % 7);
                    c.request(cmd, Duration::from_secs(5)).await.unwrap()
                }));
            }
            for (i, j) in joins.into_iter().enumerate() {
                assert_eq!(j.await.unwrap().ext("i"), Some(i.to_string().as_str()));
            }
        }
    }

    #[tokio::test]
    async fn eof_fails_in_flight_and_reconnects() {
        let (addr, _h) = echo_server(false).await;
        let c = Connection::new(&addr, None);
        let slow = {
            let c = c.clone();
            tokio::spawn(async move { ask(&c, "sleepMs", 2000, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let e = ask(&c, "close", 1, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Connection, "{e}");
        let e = slow.await.unwrap().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Connection, "{e}");
        // The next request opens a new socket.
        let ok = ask(&c, "x", "y", Duration::from_secs(5)).await.unwrap();
        assert_eq!(ok.ext("x"), Some("y"));
    }

    #[tokio::test]
    async fn timeouts_and_server_requests() {
        let (addr, _h) = echo_server(false).await;
        let c = Connection::new(&addr, None);
        let e = ask(&c, "sleepMs", 500, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Timeout);
        // The server's own request is answered (and does not disturb ours).
        let ok = ask(&c, "poke", 1, Duration::from_secs(5)).await.unwrap();
        assert_eq!(ok.code, 0);
        c.send_oneway(RemotingCommand::request(15)).await.unwrap();
        let nobody = Connection::new("127.0.0.1:1", None);
        let e = nobody
            .request(RemotingCommand::request(1), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Connection, "{e}");
    }

    #[tokio::test]
    async fn signs_requests() {
        let (addr, _h) = echo_server(false).await;
        let creds = Credentials::new("AK", "SK", None).unwrap();
        let c = Connection::new(&addr, Some(creds));
        let r = c
            .request(
                RemotingCommand::request(30).with_ext("topic", "t"),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(r.ext("AccessKey"), Some("AK"));
        assert!(r.ext("Signature").is_some());
    }

    #[test]
    fn a_refused_connection_says_so_every_time() {
        // A refused loopback connect fails within microseconds, on a runtime worker that may
        // run the new connection task before the request reaches its channel: the request must
        // still get the reason, never a bare "is closing". Driven from a thread outside the
        // runtime, as the Python binding does, with pauses that let the workers park.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let reused = Connection::new(format!("127.0.0.1:{port}"), None);
        for i in 0..100 {
            let fresh = Connection::new(format!("127.0.0.1:{port}"), None);
            for c in [&fresh, &reused] {
                let e = rt
                    .block_on(ask(c, "i", i, Duration::from_secs(5)))
                    .unwrap_err();
                assert_eq!(e.kind(), crate::ErrorKind::Connection, "{e}");
                assert!(e.to_string().contains("cannot connect"), "attempt {i}: {e}");
            }
            std::thread::sleep(Duration::from_millis([0, 1, 20][i % 3]));
        }
    }
}
