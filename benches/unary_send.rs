//! The client-side cost of one unary `SendMessage`, without Python: the RocketMQ producer's
//! `send_each` (what `send_batch`, `produce` + `flush` and the produce batcher use) against the
//! embedded broker running in a CHILD process, so the CPU this process uses is the client's only.
//!
//! `cargo bench -p ferrymq-core --bench unary_send` prints, for 100-byte messages, per phase:
//! messages/s (wall), client CPU µs per message (utime + stime of this process), broker CPU µs
//! per message (the child's), and context switches per message of this process. Phases:
//! * `send_each`: `Producer::send_each` on chunks of `UNARY_CHUNK` (1000) messages, one chunk
//!   after another (as `send_batch(1000)`; 64 sends in flight inside a chunk);
//! * `raw_tonic`: the floor, a bare tonic stub sending the same unary requests (one message,
//!   one `x-mq-client-id` header), 64 in flight: what a send costs through tonic alone.
//!
//! `UNARY_MESSAGES` (default 100000) messages per phase, `UNARY_ROUNDS` (default 3) rounds of
//! both phases alternating (the machine is shared: compare phases within a round),
//! `BENCH_THREADS` (default 2) worker threads of the client runtime. Profile with
//! `CARGO_PROFILE_BENCH_DEBUG=1` and `perf record -g` on the bench binary; `UNARY_PHASES=send_each`
//! runs one phase only.

#![allow(clippy::print_stdout)] // a bench binary reports on stdout

use std::io::{BufRead as _, Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use ferrymq_core::proto;
use ferrymq_core::proto::messaging_service_client::MessagingServiceClient;
use ferrymq_core::rocketmq::{ClientOptions, Producer};
use ferrymq_core::Message;
use ferrymq_server::broker::{Broker, BrokerConfig, WhenFull};
use futures::StreamExt as _;

const ROLE: &str = "UNARY_SEND_ROLE";
const TOPIC: &str = "unary";
const BODY: usize = 100;
const INFLIGHT: usize = 64;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// utime + stime (seconds) and context switches of process `pid` ("self" for this one).
fn usage(pid: &str) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let cpu = stat.rsplit_once(')').map_or(0.0, |(_, rest)| {
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
        ticks as f64 / 100.0
    });
    let mut switches = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            for line in status.lines() {
                if line.contains("ctxt_switches:") {
                    switches += line
                        .split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
    }
    (cpu, switches)
}

/// The child: an embedded broker whose access point goes to stdout; it lives until stdin closes.
fn serve() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_usize("BENCH_THREADS", 2))
        .thread_name("fmq-broker")
        .enable_all()
        .build()
        .unwrap();
    let broker = rt.block_on(async {
        Broker::start(BrokerConfig {
            when_full: WhenFull::DropOldest,
            ..BrokerConfig::default()
        })
        .await
        .unwrap()
    });
    broker.create_topic(TOPIC, "NORMAL", 8).unwrap();
    println!("{}", broker.access_point());
    std::io::stdout().flush().unwrap();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(broker);
}

struct Phase {
    rate: f64,
    client_us: f64,
    broker_us: f64,
    switches: f64,
}

async fn measure<F: std::future::Future<Output = usize>>(broker_pid: &str, run: F) -> Phase {
    let (c0, s0) = usage("self");
    let (b0, _) = usage(broker_pid);
    let start = Instant::now();
    let n = run.await as f64;
    let wall = start.elapsed().as_secs_f64();
    let (c1, s1) = usage("self");
    let (b1, _) = usage(broker_pid);
    Phase {
        rate: n / wall,
        client_us: (c1 - c0) / n * 1e6,
        broker_us: (b1 - b0) / n * 1e6,
        switches: (s1 - s0) as f64 / n,
    }
}

fn messages(n: usize, body: &bytes::Bytes) -> Vec<Message> {
    (0..n)
        .map(|_| Message::builder(TOPIC, body.clone()).build().unwrap())
        .collect()
}

async fn send_each(p: &Producer, total: usize, chunk: usize, body: &bytes::Bytes) -> usize {
    let mut sent = 0;
    while sent < total {
        let n = chunk.min(total - sent);
        let results = p.send_each(messages(n, body)).await.unwrap();
        assert!(results.iter().all(Result::is_ok), "a send failed");
        sent += n;
    }
    total
}

async fn raw_tonic(
    stub: &MessagingServiceClient<tonic::transport::Channel>,
    total: usize,
    body: &bytes::Bytes,
) -> usize {
    futures::stream::iter((0..total).map(|i| {
        let mut stub = stub.clone();
        let mut req = tonic::Request::new(proto::SendMessageRequest {
            messages: vec![proto::Message {
                topic: Some(proto::Resource {
                    resource_namespace: String::new(),
                    name: TOPIC.into(),
                }),
                user_properties: Default::default(),
                system_properties: Some(proto::SystemProperties {
                    message_id: ferrymq_core::message_id::generate(),
                    queue_id: i32::try_from(i % 8).unwrap_or(0),
                    ..Default::default()
                }),
                body: body.clone(),
            }],
        });
        req.metadata_mut().insert(
            "x-mq-client-id",
            tonic::metadata::MetadataValue::from_static("bench-client"),
        );
        async move {
            let r = stub.send_message(req).await.unwrap().into_inner();
            assert_eq!(r.status.map(|s| s.code), Some(20000));
        }
    }))
    .buffer_unordered(INFLIGHT)
    .count()
    .await
}

fn report(name: &str, p: &Phase) {
    println!(
        "unary_send/{name:<10} {:>9.0} msg/s | client CPU {:>6.1} us/msg | broker CPU {:>6.1} \
         us/msg | client ctx switches {:>5.2}/msg",
        p.rate, p.client_us, p.broker_us, p.switches
    );
}

fn main() {
    if std::env::var(ROLE).as_deref() == Ok("broker") {
        serve();
        return;
    }
    // `cargo bench` passes `--bench`; nothing else to parse.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, "broker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let access_point = line.trim().to_string();
    let broker_pid = child.id().to_string();

    let total = env_usize("UNARY_MESSAGES", 100_000);
    let chunk = env_usize("UNARY_CHUNK", 1000);
    let rounds = env_usize("UNARY_ROUNDS", 3);
    let phases = std::env::var("UNARY_PHASES").unwrap_or_else(|_| "send_each,raw_tonic".into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_usize("BENCH_THREADS", 2))
        .thread_name("fmq-bench")
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let body = bytes::Bytes::from(vec![b'x'; BODY]);
        let mut o = ClientOptions::new(access_point.clone());
        o.request_timeout = Some(Duration::from_secs(10));
        let p = Producer::new(o, vec![TOPIC.into()], None).unwrap();
        p.start().await.unwrap();
        let channel = tonic::transport::Channel::from_shared(format!("http://{access_point}"))
            .unwrap()
            .tcp_nodelay(true)
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(16 << 20)
            .connect()
            .await
            .unwrap();
        let stub = MessagingServiceClient::new(channel);
        // Warm-up: connections, routes, allocator.
        send_each(&p, 5_000, chunk, &body).await;
        raw_tonic(&stub, 5_000, &body).await;
        println!(
            "unary_send: {total} x {BODY} B per phase, chunks of {chunk}, {INFLIGHT} in flight, \
             broker in process {broker_pid}"
        );
        for round in 1..=rounds {
            for phase in phases.split(',') {
                let r = match phase {
                    "send_each" => measure(&broker_pid, send_each(&p, total, chunk, &body)).await,
                    "raw_tonic" => measure(&broker_pid, raw_tonic(&stub, total, &body)).await,
                    other => panic!("unknown phase {other:?}"),
                };
                report(&format!("{phase}#{round}"), &r);
            }
        }
        p.close().await;
    });
    drop(child.stdin.take());
    let _ = child.wait();
}
