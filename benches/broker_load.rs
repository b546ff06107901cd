//! Load benchmark of the embedded broker over loopback, driven by a raw tonic client in the same
//! process (so client and broker share the machine's cores, as in a CI run).
//!
//! `cargo bench --bench broker_load` prints, for 100-byte messages:
//! * batched SendMessage (batches of `BATCH` messages, `BATCH_INFLIGHT` calls in flight): msg/s;
//! * unary SendMessage (one message per call, `UNARY_INFLIGHT` in flight): RPC/s;
//! * unary Heartbeat: RPC/s (the cost of an RPC without storage);
//! * ReceiveMessage + AckMessage (batches of 256, acks batched): msg/s;
//! * one call at a time (`sync_send`, `sync_ack`): SendMessage of one message, then AckMessage of
//!   one received message, each awaited before the next, from the bench's main thread through
//!   ferrymq's own HTTP/2 channel with a RocketMQ client's headers (what a blocking
//!   `Producer.send` and a simple consumer's `ack` do from Python): per call, the broker's and
//!   the client's CPU and context switches (voluntary + involuntary, summed over the threads);
//! * the floors under one call at a time, on the broker's runtime: `floor_tcp`, a bare TCP round
//!   trip of about a send's sizes (what the kernel and tokio cost), and `floor_h2`, an `h2`
//!   server answering every SendMessage with one canned answer (what HTTP/2 adds; read its
//!   instructions, not its context switches: its task wakes itself while it runs, which
//!   tokio answers with a yield and a wake-up of another worker).
//!
//! Targets (issue 3, 2 cores): >= 1M msg/s batched, >= 100k unary RPC/s.
//!
//! The broker and the client run on two separate runtimes (threads `fmq-broker*` and
//! `fmq-bench*`), and the bench reads each thread's CPU time from `/proc/self/task`, so besides
//! the wall-clock rate (which on a shared machine depends on what else runs) it prints the
//! broker's CPU cost per message / RPC and the rate that cost allows on 2 dedicated cores. The
//! client's CPU per operation is printed too: the wall rate is bounded by client + broker CPU
//! on the cores the machine gives the process.
//! The global allocator is mimalloc, as in the Python extension (`--features system-alloc`
//! measures with the system allocator).
//! `BENCH_SECS` (default 3) sets the duration of each phase; `BENCH_THREADS` (default 2) the
//! worker threads of each runtime (`BENCH_BROKER_THREADS` the broker's alone);
//! `BENCH_SIGNED=1` gives the broker credentials and signs the one-at-a-time phases' requests;
//! `BENCH_PHASES` (comma-separated names, default all) the phases to run; `BENCH_SYNC_CALLS`
//! makes the one-at-a-time phases a fixed number of calls instead of `BENCH_SECS` (for
//! `valgrind --tool=callgrind --separate-threads=yes`, which counts instructions per thread).

#![allow(clippy::print_stdout)] // a bench binary reports on stdout

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// The allocator the Python extension ships (`--features system-alloc`: the system's).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use ferrymq_core::proto;
use ferrymq_core::proto::messaging_service_client::MessagingServiceClient;
use ferrymq_core::proto::telemetry_command::Command;
use ferrymq_core::rocketmq::connection::{ConnectionOptions, Connections, Stub};
use ferrymq_core::rocketmq::metadata::RequestMetadata;
use ferrymq_core::rocketmq::{ClientOptions, Endpoints, Producer};
use ferrymq_server::broker::{Broker, BrokerConfig, Credentials, GroupConfig, WhenFull};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

const BODY: usize = 100;
const BATCH: usize = 256;
const BATCH_INFLIGHT: usize = 16;
const UNARY_INFLIGHT: usize = 256;

fn req<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("x-mq-client-id", MetadataValue::from_static("bench-client"));
    if signed() {
        static SIGNER: std::sync::OnceLock<RequestMetadata> = std::sync::OnceLock::new();
        SIGNER
            .get_or_init(|| RequestMetadata::new("bench-client", "", client_credentials()).unwrap())
            .apply(r.metadata_mut());
    }
    r
}

fn res(name: &str) -> Option<proto::Resource> {
    Some(proto::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

fn message(topic: &str, body: &bytes::Bytes, queue: i32) -> proto::Message {
    proto::Message {
        topic: res(topic),
        user_properties: Default::default(),
        system_properties: Some(proto::SystemProperties {
            message_id: ferrymq_core::message_id::generate(),
            queue_id: queue,
            ..Default::default()
        }),
        body: body.clone(),
    }
}

/// The client's HTTP/2 connections: `BENCH_CHANNELS` (default 1, what a RocketMQ client opens
/// per endpoint).
async fn channels(addr: std::net::SocketAddr) -> Vec<MessagingServiceClient<Channel>> {
    let n: usize = std::env::var("BENCH_CHANNELS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1);
    let mut v = Vec::new();
    for _ in 0..n {
        let ch = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .initial_connection_window_size(16 * 1024 * 1024)
            .initial_stream_window_size(8 * 1024 * 1024)
            .tcp_nodelay(true)
            .connect()
            .await
            .unwrap();
        v.push(
            MessagingServiceClient::new(ch)
                .max_decoding_message_size(usize::MAX)
                .max_encoding_message_size(usize::MAX),
        );
    }
    v
}

/// The CPU seconds (utime + stime) a thread of this process has used, from its `stat`.
fn thread_cpu(task: &std::path::Path) -> f64 {
    let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
    // Fields after the parenthesised command: state is field 3; utime 14, stime 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ut: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let st: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    (ut + st) as f64 / 100.0
}

/// The context switches (voluntary + involuntary) of a thread of this process, from its `status`.
fn thread_switches(task: &std::path::Path) -> u64 {
    let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
    status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// The threads of this process, each with its name.
fn threads() -> Vec<(String, std::path::PathBuf)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            (comm, t.path())
        })
        .collect()
}

/// CPU seconds used so far by this process's threads whose name starts with `prefix`.
fn cpu_of(prefix: &str) -> f64 {
    threads()
        .iter()
        .filter(|(comm, _)| comm.starts_with(prefix))
        .map(|(_, path)| thread_cpu(path))
        .sum()
}

/// CPU seconds and context switches so far of the broker's threads (`fmq-broker*`) and of all
/// the others (the client: the bench's main thread and its runtime).
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    broker_cpu: f64,
    broker_switches: u64,
    client_cpu: f64,
    client_switches: u64,
}

fn usage() -> Usage {
    let mut u = Usage::default();
    for (comm, path) in threads() {
        let (cpu, switches) = (thread_cpu(&path), thread_switches(&path));
        if comm.starts_with("fmq-broker") {
            u.broker_cpu += cpu;
            u.broker_switches += switches;
        } else {
            u.client_cpu += cpu;
            u.client_switches += switches;
        }
    }
    u
}

/// A phase's figures: wall rate, and the broker's and the bench client's CPU per operation.
struct Rate {
    per_sec: f64,
    broker_cpu_per_op: f64,
    client_cpu_per_op: f64,
}

impl Rate {
    fn capacity_2_cores(&self) -> f64 {
        if self.broker_cpu_per_op > 0.0 {
            2.0 / self.broker_cpu_per_op
        } else {
            f64::INFINITY
        }
    }
}

fn report(name: &str, unit: &str, r: &Rate, what: &str) {
    println!(
        "broker_load/{name:<14} {:>11.0} {unit}/s wall | broker CPU {:>6.2} us/{op} -> {:>11.0} {unit}/s on 2 broker cores | client CPU {:>6.2} us/{op}  ({what})",
        r.per_sec,
        r.broker_cpu_per_op * 1e6,
        r.capacity_2_cores(),
        r.client_cpu_per_op * 1e6,
        op = unit.trim_end_matches('s'),
    );
}

/// Run `inflight` loops of `call` for `secs`; returns the rate and the broker's CPU per op.
async fn drive<F, Fut>(secs: f64, inflight: usize, call: F) -> Rate
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = u64> + Send,
{
    let call = Arc::new(call);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_of("fmq-broker");
    let client0 = cpu_of("fmq-bench");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..inflight {
        let (call, stop, done) = (call.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = call(i).await;
                done.fetch_add(n, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed) as f64;
    Rate {
        per_sec: n / start.elapsed().as_secs_f64(),
        broker_cpu_per_op: (cpu_of("fmq-broker") - cpu0) / n.max(1.0),
        client_cpu_per_op: (cpu_of("fmq-bench") - client0) / n.max(1.0),
    }
}

/// The figures of a one-call-at-a-time phase, per call.
struct SyncRate {
    calls: usize,
    per_sec: f64,
    broker_cpu_us: f64,
    client_cpu_us: f64,
    broker_switches: f64,
    client_switches: f64,
}

fn report_sync(name: &str, r: &SyncRate, what: &str) {
    println!(
        "broker_load/{name:<14} {:>11.0} RPCs/s wall | broker CPU {:>6.2} us/RPC, {:>5.2} ctx \
         switches/RPC | client CPU {:>6.2} us/RPC, {:>5.2} ctx switches/RPC  ({what}; {} calls)",
        r.per_sec, r.broker_cpu_us, r.broker_switches, r.client_cpu_us, r.client_switches, r.calls,
    );
}

/// Await `call(i)` for i = 0, 1, ... one after another on this thread (as a blocking call from
/// Python drives its future on the caller's thread), at most `limit` times, for `secs` or, with
/// `BENCH_SYNC_CALLS`, for that many calls.
async fn one_at_a_time<F, Fut>(secs: f64, limit: usize, mut call: F) -> SyncRate
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let fixed = sync_calls();
    let limit = fixed.map_or(limit, |n| n.min(limit));
    let u0 = usage();
    let start = Instant::now();
    let mut n = 0;
    while n < limit && (fixed.is_some() || start.elapsed().as_secs_f64() < secs) {
        call(n).await;
        n += 1;
    }
    let wall = start.elapsed().as_secs_f64();
    let u1 = usage();
    let per = |d: f64| d / (n.max(1) as f64);
    SyncRate {
        calls: n,
        per_sec: n as f64 / wall,
        broker_cpu_us: per(u1.broker_cpu - u0.broker_cpu) * 1e6,
        client_cpu_us: per(u1.client_cpu - u0.client_cpu) * 1e6,
        broker_switches: per((u1.broker_switches - u0.broker_switches) as f64),
        client_switches: per((u1.client_switches - u0.client_switches) as f64),
    }
}

/// `BENCH_SYNC_CALLS`: a fixed number of calls per one-at-a-time phase.
fn sync_calls() -> Option<usize> {
    std::env::var("BENCH_SYNC_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// `BENCH_SIGNED=1`: the broker checks signatures, and the one-at-a-time phases sign.
fn signed() -> bool {
    std::env::var("BENCH_SIGNED").is_ok_and(|v| v == "1")
}

/// The client credentials of the one-at-a-time phases (`None` unless [`signed`]).
fn client_credentials() -> Option<ferrymq_core::rocketmq::Credentials> {
    signed()
        .then(|| ferrymq_core::rocketmq::Credentials::new("bench-ak", "bench-sk", None).unwrap())
}

/// Warm-up calls before each one-at-a-time phase (connection, routes, allocator).
const SYNC_WARMUP: usize = 300;

/// `Producer::send` of one 100-byte message after another (a blocking `Producer.send`).
async fn sync_send(secs: f64, access_point: &str, body: &bytes::Bytes) -> SyncRate {
    let mut options = ClientOptions::new(access_point);
    options.credentials = client_credentials();
    let p = Producer::new(options, vec!["sync".into()], None).unwrap();
    p.start().await.unwrap();
    let msg = || {
        ferrymq_core::Message::builder("sync", body.clone())
            .build()
            .unwrap()
    };
    for _ in 0..SYNC_WARMUP {
        p.send(msg()).await.unwrap();
    }
    let r = one_at_a_time(secs, usize::MAX, |_| {
        let p = &p;
        async move {
            p.send(msg()).await.unwrap();
        }
    })
    .await;
    p.close().await;
    r
}

/// `msg` with a RocketMQ client's headers and a 10 s deadline.
fn client_request<T>(md: &RequestMetadata, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    md.apply(r.metadata_mut());
    r.set_timeout(Duration::from_secs(10));
    r
}

/// The receipt handles of up to `n` messages of `topic` received for group `bench` (one minute
/// invisible), after sending them.
async fn received(
    stub: &mut Stub,
    md: &RequestMetadata,
    topic: &str,
    n: usize,
    body: &bytes::Bytes,
) -> Vec<proto::AckMessageEntry> {
    let mut sent = 0;
    while sent < n {
        let msgs = (0..BATCH)
            .map(|j| message(topic, body, (j % 8) as i32))
            .collect();
        let resp = stub
            .send_message(client_request(
                md,
                proto::SendMessageRequest { messages: msgs },
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(resp.status.unwrap().code, 20000);
        sent += BATCH;
    }
    let mut entries = Vec::with_capacity(n);
    while entries.len() < n {
        let mut s = stub
            .receive_message(client_request(
                md,
                proto::ReceiveMessageRequest {
                    group: res("bench"),
                    message_queue: Some(proto::MessageQueue {
                        topic: res(topic),
                        id: -1,
                        ..Default::default()
                    }),
                    batch_size: 1024,
                    invisible_duration: Some(prost_types::Duration {
                        seconds: 60,
                        nanos: 0,
                    }),
                    long_polling_timeout: Some(prost_types::Duration {
                        seconds: 0,
                        nanos: 100_000_000,
                    }),
                    ..Default::default()
                },
            ))
            .await
            .unwrap()
            .into_inner();
        let before = entries.len();
        while let Some(m) = s.message().await.unwrap() {
            if let Some(proto::receive_message_response::Content::Message(m)) = m.content {
                let sp = m.system_properties.unwrap();
                entries.push(proto::AckMessageEntry {
                    message_id: sp.message_id,
                    receipt_handle: sp.receipt_handle.unwrap(),
                    lite_topic: None,
                });
            }
        }
        if entries.len() == before {
            break;
        }
    }
    entries.truncate(n);
    entries
}

/// AckMessage of one received message after another (a simple consumer's `ack`), through the
/// HTTP/2 channel and headers of ferrymq's client. The acked messages are received first
/// (enough for `secs` at 20,000 acks/s).
async fn sync_ack(secs: f64, access_point: &str, body: &bytes::Bytes) -> SyncRate {
    let endpoints = Endpoints::parse_access_point(access_point)
        .unwrap()
        .endpoints;
    let mut stub = Connections::new(ConnectionOptions::default())
        .unwrap()
        .stub(&endpoints)
        .unwrap();
    let md = RequestMetadata::new("bench-client", "", client_credentials()).unwrap();
    // With a fixed number of calls, as many messages for any number up to 3000, so that two
    // callgrind runs of different lengths differ only by their acks.
    let want = sync_calls().map_or((secs * 20_000.0) as usize, |n| n.max(3000)) + SYNC_WARMUP;
    let entries = received(&mut stub, &md, "acks", want, body).await;
    let ack = |stub: &mut Stub, e: &proto::AckMessageEntry| {
        let r = client_request(
            &md,
            proto::AckMessageRequest {
                group: res("bench"),
                topic: res("acks"),
                entries: vec![e.clone()],
            },
        );
        let mut stub = stub.clone();
        async move {
            let resp = stub.ack_message(r).await.unwrap().into_inner();
            assert_eq!(resp.status.unwrap().code, 20000);
        }
    };
    let (warm, timed) = entries.split_at(SYNC_WARMUP.min(entries.len()));
    for e in warm {
        ack(&mut stub, e).await;
    }
    one_at_a_time(secs, timed.len(), |i| ack(&mut stub, &timed[i])).await
}

/// The floor under one call at a time: a bare TCP round trip of about a sync send's sizes (a
/// 400-byte request, a 150-byte answer) to a task on the broker's runtime that reads a request
/// and writes the answer: what the kernel and the runtime cost without HTTP/2 or gRPC.
async fn floor_tcp(secs: f64, broker_rt: &tokio::runtime::Handle) -> SyncRate {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const REQUEST: usize = 400;
    const ANSWER: usize = 150;
    let listener = broker_rt
        .spawn(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .await
        .unwrap()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    broker_rt.spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        sock.set_nodelay(true).unwrap();
        let mut buf = vec![0u8; 16 << 10];
        let answer = vec![7u8; ANSWER];
        let mut have = 0;
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => have += n,
            }
            while have >= REQUEST {
                have -= REQUEST;
                if sock.write_all(&answer).await.is_err() {
                    return;
                }
            }
        }
    });
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    sock.set_nodelay(true).unwrap();
    let request = vec![1u8; REQUEST];
    let mut answer = vec![0u8; ANSWER];
    for _ in 0..SYNC_WARMUP {
        sock.write_all(&request).await.unwrap();
        sock.read_exact(&mut answer).await.unwrap();
    }
    // Each call borrows the one connection (uncontended: one call at a time).
    let conn = tokio::sync::Mutex::new((sock, answer));
    one_at_a_time(secs, usize::MAX, |_| async {
        let mut conn = conn.lock().await;
        let (sock, answer) = &mut *conn;
        sock.write_all(&request).await.unwrap();
        sock.read_exact(answer).await.unwrap();
    })
    .await
}

/// Another floor: an `h2` server on the broker's runtime answering every request with one
/// canned SendMessage answer, read and answered in the connection's task (no gRPC service).
async fn floor_h2(secs: f64, broker_rt: &tokio::runtime::Handle, body: &bytes::Bytes) -> SyncRate {
    use futures::StreamExt as _;
    let listener = broker_rt
        .spawn(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .await
        .unwrap()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = {
        use prost::Message as _;
        let msg = proto::SendMessageResponse {
            status: Some(proto::Status {
                code: 20000,
                message: "OK".into(),
            }),
            entries: vec![proto::SendResultEntry {
                status: Some(proto::Status {
                    code: 20000,
                    message: "OK".into(),
                }),
                message_id: "01AABBCCDDEEFF00112233445566".into(),
                offset: 12345,
                ..Default::default()
            }],
        };
        let mut b = vec![0u8; 5];
        msg.encode(&mut b).unwrap();
        let n = (b.len() - 5) as u32;
        b[1..5].copy_from_slice(&n.to_be_bytes());
        bytes::Bytes::from(b)
    };
    broker_rt.spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        sock.set_nodelay(true).unwrap();
        let mut conn = h2::server::Builder::new()
            .initial_window_size(8 << 20)
            .initial_connection_window_size(16 << 20)
            .handshake::<_, bytes::Bytes>(sock)
            .await
            .unwrap();
        let mut inflight = futures::stream::FuturesUnordered::new();
        loop {
            tokio::select! {
                biased;
                Some(()) = inflight.next(), if !inflight.is_empty() => {}
                r = conn.accept() => {
                    let Some(Ok((req, mut respond))) = r else { return };
                    let answer = answer.clone();
                    inflight.push(async move {
                        let mut body = req.into_body();
                        while let Some(Ok(d)) = body.data().await {
                            let _ = body.flow_control().release_capacity(d.len());
                        }
                        let head = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(())
                            .unwrap();
                        let mut send = respond.send_response(head, false).unwrap();
                        send.send_data(answer, false).unwrap();
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        send.send_trailers(trailers).unwrap();
                    });
                }
            }
        }
    });
    let access_point = addr.to_string();
    let endpoints = Endpoints::parse_access_point(&access_point)
        .unwrap()
        .endpoints;
    let stub = Connections::new(ConnectionOptions::default())
        .unwrap()
        .stub(&endpoints)
        .unwrap();
    let md = RequestMetadata::new("bench-client", "", None).unwrap();
    let send = |_| {
        let mut stub = stub.clone();
        let r = client_request(
            &md,
            proto::SendMessageRequest {
                messages: vec![message("sync", body, 0)],
            },
        );
        async move {
            let resp = stub.send_message(r).await.unwrap().into_inner();
            assert_eq!(resp.status.unwrap().code, 20000);
        }
    };
    for i in 0..SYNC_WARMUP {
        send(i).await;
    }
    one_at_a_time(secs, usize::MAX, send).await
}

/// Whether `BENCH_PHASES` (comma-separated; all when unset) names `phase`.
fn wanted(phase: &str) -> bool {
    std::env::var("BENCH_PHASES").map_or(true, |v| v.split(',').any(|p| p.trim() == phase))
}

async fn settings(client: &mut MessagingServiceClient<Channel>, group: &str) {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(proto::TelemetryCommand {
        status: None,
        command: Some(Command::Settings(proto::Settings {
            client_type: Some(proto::ClientType::SimpleConsumer as i32),
            pub_sub: Some(proto::settings::PubSub::Subscription(proto::Subscription {
                group: res(group),
                ..Default::default()
            })),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut s = client
        .telemetry(req(tokio_stream::wrappers::ReceiverStream::new(rx)))
        .await
        .unwrap()
        .into_inner();
    s.message().await.unwrap().unwrap();
    std::mem::forget((tx, s));
}

/// Drive SendMessage with `requests`, one in-flight loop each; a call counts its messages.
async fn send_phase(
    secs: f64,
    clients: &Arc<Vec<MessagingServiceClient<Channel>>>,
    requests: Vec<proto::SendMessageRequest>,
) -> Rate {
    let per_call = requests[0].messages.len() as u64;
    let (c, requests) = (clients.clone(), Arc::new(requests));
    drive(secs, requests.len(), move |i| {
        let mut client = c[i % c.len()].clone();
        let r = requests[i].clone();
        async move {
            let resp = client.send_message(req(r)).await.unwrap().into_inner();
            assert_eq!(resp.status.unwrap().code, 20000);
            per_call
        }
    })
    .await
}

async fn run(secs: f64, broker: &Broker, broker_rt: tokio::runtime::Handle) {
    for topic in ["batch", "unary", "recv", "sync", "acks"] {
        broker.create_topic(topic, "NORMAL", 8).unwrap();
    }
    broker.create_group(GroupConfig::new("bench")).unwrap();
    let addr = broker.addresses()[0];
    let clients = Arc::new(channels(addr).await);
    let body = bytes::Bytes::from(vec![b'x'; BODY]);
    // The client's settings (a simple consumer of group `bench`): receives need them.
    let mut first = clients[0].clone();
    settings(&mut first, "bench").await;

    // Batched SendMessage, then unary SendMessage.
    let mut batched = None;
    if wanted("send_batched") {
        let r = send_phase(
            secs,
            &clients,
            (0..BATCH_INFLIGHT)
                .map(|i| proto::SendMessageRequest {
                    messages: (0..BATCH)
                        .map(|_| message("batch", &body, (i % 8) as i32))
                        .collect(),
                })
                .collect(),
        )
        .await;
        report(
            "send_batched",
            "msgs",
            &r,
            &format!("batches of {BATCH} x {BODY} B, {BATCH_INFLIGHT} in flight"),
        );
        batched = Some(r);
    }
    let mut unary = None;
    if wanted("send_unary") {
        let r = send_phase(
            secs,
            &clients,
            (0..UNARY_INFLIGHT)
                .map(|i| proto::SendMessageRequest {
                    messages: vec![message("unary", &body, (i % 8) as i32)],
                })
                .collect(),
        )
        .await;
        report(
            "send_unary",
            "RPCs",
            &r,
            &format!("1 x {BODY} B per call, {UNARY_INFLIGHT} in flight"),
        );
        unary = Some(r);
    }

    // Unary Heartbeat.
    if wanted("heartbeat") {
        let c = clients.clone();
        let hb = drive(secs, UNARY_INFLIGHT, move |i| {
            let mut client = c[i % c.len()].clone();
            async move {
                let resp = client
                    .heartbeat(req(proto::HeartbeatRequest {
                        group: res("bench"),
                        client_type: proto::ClientType::SimpleConsumer as i32,
                    }))
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(resp.status.unwrap().code, 20000);
                1
            }
        })
        .await;
        report(
            "heartbeat",
            "RPCs",
            &hb,
            &format!("{UNARY_INFLIGHT} in flight"),
        );
    }

    if wanted("receive_ack") {
        receive_ack(secs, &clients, &body).await;
    }

    // One call at a time.
    let access_point = broker.access_point();
    if wanted("sync_send") {
        let r = sync_send(secs, &access_point, &body).await;
        report_sync(
            "sync_send",
            &r,
            &format!("Producer::send of 1 x {BODY} B, 1 in flight"),
        );
    }
    if wanted("sync_ack") {
        let r = sync_ack(secs, &access_point, &body).await;
        report_sync("sync_ack", &r, "AckMessage of 1 message, 1 in flight");
    }
    if wanted("floor_h2") {
        let r = floor_h2(secs, &broker_rt, &body).await;
        report_sync(
            "floor_h2",
            &r,
            "h2 server, one canned SendMessage answer, 1 in flight",
        );
    }
    if wanted("floor_tcp") {
        let r = floor_tcp(secs, &broker_rt).await;
        report_sync(
            "floor_tcp",
            &r,
            "bare TCP round trip, 400 B request, 150 B answer, 1 in flight",
        );
    }

    let verdict = |r: Option<Rate>, target: f64| match r {
        None => "not run",
        Some(r) if r.capacity_2_cores() >= target => "met",
        Some(_) => "NOT met",
    };
    println!(
        "targets on 2 broker cores (from broker CPU per op): send_batched >= 1,000,000 msg/s: {}; \
         send_unary >= 100,000 RPC/s: {}",
        verdict(batched, 1e6),
        verdict(unary, 1e5)
    );
}

/// ReceiveMessage + AckMessage: pre-fill, then drain with batched receives and acks.
async fn receive_ack(
    secs: f64,
    clients: &Arc<Vec<MessagingServiceClient<Channel>>>,
    body: &bytes::Bytes,
) {
    let fill = ((secs * 200_000.0) as usize).max(100_000);
    let mut filler = clients[0].clone();
    let mut sent = 0;
    while sent < fill {
        let msgs = (0..BATCH)
            .map(|j| message("recv", body, (j % 8) as i32))
            .collect();
        filler
            .send_message(req(proto::SendMessageRequest { messages: msgs }))
            .await
            .unwrap();
        sent += BATCH;
    }
    let c = clients.clone();
    let received = Arc::new(AtomicU64::new(0));
    let r2 = received.clone();
    let recv = drive(secs, 8, move |i| {
        let mut client = c[i % c.len()].clone();
        let received = r2.clone();
        async move {
            let mut s = client
                .receive_message(req(proto::ReceiveMessageRequest {
                    group: res("bench"),
                    message_queue: Some(proto::MessageQueue {
                        topic: res("recv"),
                        id: -1,
                        ..Default::default()
                    }),
                    batch_size: 256,
                    invisible_duration: Some(prost_types::Duration {
                        seconds: 60,
                        nanos: 0,
                    }),
                    long_polling_timeout: Some(prost_types::Duration {
                        seconds: 0,
                        nanos: 100_000_000,
                    }),
                    ..Default::default()
                }))
                .await
                .unwrap()
                .into_inner();
            let mut entries = Vec::new();
            while let Some(m) = s.message().await.unwrap() {
                if let Some(proto::receive_message_response::Content::Message(m)) = m.content {
                    let sp = m.system_properties.unwrap();
                    entries.push(proto::AckMessageEntry {
                        message_id: sp.message_id,
                        receipt_handle: sp.receipt_handle.unwrap(),
                        lite_topic: None,
                    });
                }
            }
            let n = entries.len() as u64;
            if n > 0 {
                let resp = client
                    .ack_message(req(proto::AckMessageRequest {
                        group: res("bench"),
                        topic: res("recv"),
                        entries,
                    }))
                    .await
                    .unwrap()
                    .into_inner();
                assert_eq!(resp.status.unwrap().code, 20000);
            }
            received.fetch_add(n, Ordering::Relaxed);
            n
        }
    })
    .await;
    report(
        "receive_ack",
        "msgs",
        &recv,
        &format!(
            "receive batches of 256 + batched acks, 8 in flight; {} of {fill} drained",
            received.load(Ordering::Relaxed)
        ),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run a short smoke.
    let is_bench = std::env::args().any(|a| a == "--bench");
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if is_bench { 3.0 } else { 0.2 });
    let env_threads = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(default)
    };
    let threads = env_threads("BENCH_THREADS", 2);
    let runtime = |name: &'static str, threads: usize| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .unwrap()
    };
    let broker_rt = runtime("fmq-broker", env_threads("BENCH_BROKER_THREADS", threads));
    let client_rt = runtime("fmq-bench", threads);
    let broker = broker_rt.block_on(async {
        Broker::start(BrokerConfig {
            max_topic_bytes: 1 << 30,
            when_full: WhenFull::DropOldest,
            long_polling_min: Duration::from_millis(100),
            min_invisible: Duration::ZERO,
            credentials: signed().then(|| Credentials {
                access_key: "bench-ak".into(),
                secret_key: "bench-sk".into(),
            }),
            ..BrokerConfig::default()
        })
        .await
        .unwrap()
    });
    client_rt.block_on(run(secs, &broker, broker_rt.handle().clone()));
    broker_rt.block_on(broker.shutdown());
}
