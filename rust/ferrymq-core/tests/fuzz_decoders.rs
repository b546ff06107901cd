//! A time-boxed mutation fuzzer over every decoder of untrusted bytes, on the stable toolchain.
//!
//! Seeds are the files under `tests/fuzz-corpus/<target>/` (valid frames and bodies made with
//! the crate's own encoders, plus decompression bombs). For `FERRYMQ_FUZZ_SECONDS` seconds
//! (default 5, split between the targets) each target runs random bytes and mutated seeds
//! (bit flips, byte changes, insertions, deletions, truncations, splices, repeated chunks and
//! interesting integers) through its decoders. A panic fails the test; errors are expected.
//! The executions per target are printed (`cargo test --test fuzz_decoders -- --nocapture`).
//!
//! `FERRYMQ_FUZZ_SEED` fixes the generator's seed (it is printed) to replay a run. To rewrite
//! the seed files: `FERRYMQ_FUZZ_WRITE_CORPUS=1 cargo test --test fuzz_decoders -- --ignored`.

#![allow(clippy::print_stdout)] // the executions per target are the test's report

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

type Decoder = fn(&[u8]);

const TARGETS: &[(&str, Decoder)] = &[
    ("jmq", ferrymq_core::jmq::fuzz_decode),
    ("remoting", ferrymq_core::remoting::fuzz_decode),
    ("nats-ack", ferrymq_core::nats::fuzz_decode_ack),
];

/// Every target of the clock-seeded run runs at least this many inputs, however slow the machine.
const MIN_EXECUTIONS: u64 = 200;

/// Inputs per target of the fixed-seed run.
const FIXED_EXECUTIONS: u64 = 4_000;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz-corpus")
        .join(target)
}

fn load(target: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .unwrap_or_else(|e| panic!("seed corpus of {target}: {e}"))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0x8000,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    u64::MAX,
];

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], input: &mut Vec<u8>) {
    for _ in 0..=rng.below(6) {
        let len = input.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                input.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = rng.below(len - i).max(1);
                input.drain(i..i + n);
            }
            4 if len > 0 => input.truncate(rng.below(len)),
            5 => {
                // an interesting integer, big or little endian, 1 to 8 bytes wide
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let width = [1, 2, 4, 8][rng.below(4)];
                let bytes = if rng.below(2) == 0 {
                    v.to_be_bytes()[8 - width..].to_vec()
                } else {
                    v.to_le_bytes()[..width].to_vec()
                };
                let i = rng.below(len + 1);
                let end = (i + width).min(len);
                input.splice(i..end, bytes);
            }
            6 => {
                // splice in part of another seed
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let a = rng.below(other.len());
                    let b = a + rng.below(other.len() - a) + 1;
                    let i = rng.below(len + 1);
                    input.splice(i..i, other[a..b].iter().copied());
                }
            }
            7 if len > 0 => {
                // repeat a chunk
                let a = rng.below(len);
                let b = (a + rng.below(64) + 1).min(len);
                let chunk = input[a..b].to_vec();
                for _ in 0..=rng.below(4) {
                    input.splice(b..b, chunk.iter().copied());
                }
            }
            _ => {}
        }
    }
}

fn budget() -> Duration {
    let secs = std::env::var("FERRYMQ_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(5.0);
    Duration::from_secs_f64(secs)
}

/// Runs `decode` over the seeds, then over random and mutated inputs drawn from `rng` until at
/// least `min` inputs ran and `budget` has passed; a panic fails the test with the input.
fn fuzz(name: &str, decode: Decoder, rng: &mut Rng, seed: u64, min: u64, budget: Duration) {
    let seeds = load(name);
    assert!(!seeds.is_empty(), "no seeds for {name}");
    // the seeds themselves first
    for s in &seeds {
        decode(s);
    }
    let mut runs = seeds.len() as u64;
    let started = Instant::now();
    while runs < min || started.elapsed() < budget {
        let input = if rng.below(8) == 0 {
            let n = rng.below(512);
            (0..n).map(|_| rng.next() as u8).collect()
        } else {
            let mut v = seeds[rng.below(seeds.len())].clone();
            mutate(rng, &seeds, &mut v);
            v
        };
        let outcome = std::panic::catch_unwind(|| decode(&input));
        if outcome.is_err() {
            panic!(
                "{name}: a decoder panicked on {} bytes (seed {seed}): {:02x?}",
                input.len(),
                &input[..input.len().min(256)]
            );
        }
        runs += 1;
    }
    println!(
        "decoder fuzz: {name}: {runs} executions in {:.1} s ({} seeds, seed {seed})",
        started.elapsed().as_secs_f64(),
        seeds.len()
    );
}

/// The same inputs on every run, however slow the machine: a fixed seed and a fixed count.
#[test]
fn decoders_survive_a_fixed_series() {
    const SEED: u64 = 0x5eed_f00d_0bad_cafe | 1;
    let mut rng = Rng(SEED);
    for &(name, decode) in TARGETS {
        fuzz(
            name,
            decode,
            &mut rng,
            SEED,
            FIXED_EXECUTIONS,
            Duration::ZERO,
        );
    }
}

/// New inputs on every run (a clock seed, printed), for the time budget.
#[test]
fn decoders_survive_mutated_seeds() {
    let seed = std::env::var("FERRYMQ_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        | 1;
    let per_target = budget() / TARGETS.len() as u32;
    println!("decoder fuzz: seed {seed}, {per_target:?} per target");
    let mut rng = Rng(seed);
    for &(name, decode) in TARGETS {
        fuzz(name, decode, &mut rng, seed, MIN_EXECUTIONS, per_target);
    }
}

// -- the seed corpus ------------------------------------------------------------------------

fn jmq_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use ferrymq_core::jmq::codec::{encode_frame_with, Header, QosLevel};
    use ferrymq_core::jmq::command::*;
    use ferrymq_core::jmq::compress::{compress, Compression};
    use ferrymq_core::jmq::message::{encode_batch, BatchItem, SysCode, WireMessage};

    let mut out = Vec::new();
    let items = vec![
        BatchItem {
            body: Bytes::from(vec![7u8; 300]),
            attributes: Some("a=b".into()),
            ..Default::default()
        };
        3
    ];
    let mut batch = BytesMut::new();
    encode_batch(&items, &mut batch).unwrap();
    out.push(("batch-body.bin", batch.to_vec()));
    let zlib_message = |body: &[u8], batch: bool| {
        let mut m = WireMessage {
            sys_code: SysCode {
                batch,
                compressed: true,
                compression: Compression::Zlib,
                ..Default::default()
            },
            flag: 3,
            ..Default::default()
        };
        m.set_body(compress(Compression::Zlib, body).unwrap().into());
        m
    };
    let m = zlib_message(&batch, true);
    let produce = |messages: Vec<WireMessage>| {
        let req = ProduceMessage {
            topics: vec![ProduceTopic {
                topic: "t".into(),
                messages,
                ..Default::default()
            }],
            app: "a".into(),
        };
        let mut f = BytesMut::new();
        encode_frame_with(&Header::request(50, 1, QosLevel::Receive), &mut f, |d| {
            req.encode(3, d)
        })
        .unwrap();
        f.to_vec()
    };
    out.push(("produce-zlib-batch.bin", produce(vec![m.clone()])));
    // a message whose zlib body inflates to 8 MiB, past the decoders' 1 MiB limit
    let bomb = zlib_message(&vec![0u8; 8 << 20], false);
    out.push(("produce-zlib-bomb.bin", produce(vec![bomb])));
    out.push((
        "zlib-bomb-body.bin",
        compress(Compression::Zlib, &vec![0u8; 4 << 20]).unwrap(),
    ));
    out.push((
        "snappy-body.bin",
        compress(Compression::Snappy, &[b'x'; 4096]).unwrap(),
    ));
    let resp = FetchTopicMessageResponse {
        data: vec![TopicMessages {
            topic: "t".into(),
            messages: vec![m],
            code: 0,
        }],
    };
    let mut f = BytesMut::new();
    let h = Header::response_to(&Header::request(30, 2, QosLevel::Receive), -30, 0, None);
    encode_frame_with(&h, &mut f, |d| resp.encode(3, d)).unwrap();
    out.push(("fetch-topic-response.bin", f.to_vec()));
    let mut f = BytesMut::new();
    encode_frame_with(&Header::request(10, 3, QosLevel::Receive), &mut f, |d| {
        FetchCluster {
            topics: vec!["x".into()],
            app: "a".into(),
        }
        .encode(3, d)
    })
    .unwrap();
    out.push(("fetch-cluster.bin", f.to_vec()));
    out
}

fn remoting_seeds() -> Vec<(&'static str, Vec<u8>)> {
    use ferrymq_core::jmq::compress::{compress, Compression};
    use ferrymq_core::remoting::stored::{encode_batch, encode_stored, StoredRecord};
    use ferrymq_core::remoting::stored::{SYSFLAG_BORNHOST_V6, SYSFLAG_COMPRESSED};
    use ferrymq_core::remoting::RemotingCommand;

    let record = |offset: i64, body: &[u8], properties: &str, sys_flag: i32| {
        let mut out = BytesMut::new();
        encode_stored(
            &StoredRecord {
                topic: "t",
                queue_id: 1,
                queue_offset: offset,
                physical_offset: offset * 100,
                sys_flag,
                flag: 0,
                born_timestamp_ms: 1_700_000_000_000,
                store_timestamp_ms: 1_700_000_000_001,
                born_host: ([127, 0, 0, 1], 1234),
                store_host: ([127, 0, 0, 1], 10911),
                reconsume_times: 0,
                body,
                properties,
            },
            &mut out,
        )
        .unwrap();
        out.to_vec()
    };
    let mut out = Vec::new();
    let mut pull_body = record(5, b"hello", "KEYS\u{1}a\u{2}TAGS\u{1}t\u{2}", 0);
    pull_body.extend(record(6, b"world", "UNIQ_KEY\u{1}X\u{2}", 0));
    out.push(("pull-body.bin", pull_body.clone()));
    // inflates to 8 MiB, past the decoders' 1 MiB limit
    let bomb = compress(Compression::Zlib, &vec![0u8; 8 << 20]).unwrap();
    out.push((
        "stored-zlib-bomb.bin",
        record(7, &bomb, "", SYSFLAG_COMPRESSED),
    ));
    out.push((
        "stored-v6-flag.bin",
        record(8, b"v6", "a\u{1}b\u{2}", SYSFLAG_BORNHOST_V6),
    ));
    let mut f = BytesMut::new();
    RemotingCommand::response(0, 3, Some("FOUND".into()))
        .with_ext("nextBeginOffset", 7)
        .with_body(pull_body.clone())
        .encode(&mut f);
    out.push(("pull-response-json.bin", f.to_vec()));
    let mut f = BytesMut::new();
    RemotingCommand::response(0, 3, None)
        .with_ext("nextBeginOffset", 7)
        .with_body(pull_body)
        .encode_binary(&mut f);
    out.push(("pull-response-binary.bin", f.to_vec()));
    let m = ferrymq_core::Message::builder("t", "b")
        .tag("x")
        .build()
        .unwrap();
    out.push((
        "send-batch-body.bin",
        encode_batch(&[m.clone(), m], &["A".into(), "B".into()])
            .unwrap()
            .to_vec(),
    ));
    out
}

fn nats_ack_seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("ack.json", br#"{"stream":"S","seq":42}"#.to_vec()),
        (
            "ack-duplicate-domain.json",
            br#"{ "stream" : "S", "seq": 18446744073709551615, "duplicate": true, "domain": "hub" }"#
                .to_vec(),
        ),
        (
            "ack-escaped.json",
            br#"{"stream":"S\u00e9\"x","seq":1,"domain":""}"#.to_vec(),
        ),
        (
            "api-error.json",
            br#"{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"}}"#
                .to_vec(),
        ),
    ]
}

/// Writes the seed corpus (run with `FERRYMQ_FUZZ_WRITE_CORPUS=1 ... -- --ignored`).
#[test]
#[ignore = "rewrites the checked-in seed corpus"]
fn write_seed_corpus() {
    if std::env::var("FERRYMQ_FUZZ_WRITE_CORPUS").as_deref() != Ok("1") {
        return;
    }
    for (target, seeds) in [
        ("jmq", jmq_seeds()),
        ("remoting", remoting_seeds()),
        ("nats-ack", nats_ack_seeds()),
    ] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
