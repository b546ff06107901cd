//! JMQ4 codec throughput: encoding and decoding single and batched messages, in bytes per second
//! (criterion prints GiB/s), next to a plain memcpy of the same number of bytes measured in the
//! same run.
//!
//!     cargo bench -p ferrymq-core --bench jmq_codec
//!
//! Cases (bodies of 1 KiB, not compressed, so the codec itself is measured):
//! * `single`: one MESSAGE in a PRODUCE_MESSAGE frame (client encode, server decode).
//! * `array100`: 100 MESSAGEs in one FETCH_TOPIC_MESSAGE response (broker encode, client decode
//!   down to the messages).
//! * `batch100`: 100 messages in one batch MESSAGE (§6.4) inside a PRODUCE_MESSAGE frame; decode
//!   includes unpacking the inner messages.

use bytes::{Bytes, BytesMut};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ferrymq_core::jmq::codec::{
    decode_frame, encode_frame_with, Header, QosLevel, Reader, VERSION,
};
use ferrymq_core::jmq::command::{
    AnyRequest, FetchTopicMessageResponse, Payload, ProduceMessage, ProduceTopic, TopicMessages,
};
use ferrymq_core::jmq::message::{encode_batch, BatchItem, SysCode, WireMessage};

const BODY: usize = 1024;

fn message(i: usize) -> WireMessage {
    let mut m = WireMessage {
        partition: 1,
        index: i as i64,
        send_time: 1_700_000_000_000,
        business_id: Some(format!("order-{i}")),
        attributes: Some("k=v".into()),
        app: Some("bench_app".into()),
        ..WireMessage::default()
    };
    m.set_body(Bytes::from(vec![(i % 251) as u8; BODY]));
    m
}

fn produce(messages: Vec<WireMessage>) -> ProduceMessage {
    ProduceMessage {
        topics: vec![ProduceTopic {
            topic: "bench".into(),
            tx_id: None,
            timeout: 5000,
            qos: 1,
            messages,
        }],
        app: "bench_app".into(),
    }
}

fn batch_message(n: usize) -> WireMessage {
    let items: Vec<BatchItem> = (0..n)
        .map(|i| BatchItem {
            body: Bytes::from(vec![(i % 251) as u8; BODY]),
            business_id: Some(format!("order-{i}")),
            attributes: Some("k=v".into()),
            ..BatchItem::default()
        })
        .collect();
    let mut body = BytesMut::new();
    encode_batch(&items, &mut body).unwrap();
    let mut m = WireMessage {
        partition: 1,
        sys_code: SysCode {
            batch: true,
            ..SysCode::default()
        },
        flag: n as i16,
        app: Some("bench_app".into()),
        ..WireMessage::default()
    };
    m.set_body(body.freeze());
    m
}

fn encode<P: Payload>(p: &P, ty_header: &Header, out: &mut BytesMut) {
    out.clear();
    encode_frame_with(ty_header, out, |d| p.encode(VERSION, d)).unwrap();
}

/// (name, encoder into a reused buffer, decoder of a read buffer).
type Case = (
    &'static str,
    Box<dyn Fn(&mut BytesMut)>,
    Box<dyn Fn(BytesMut) -> Box<dyn std::any::Any>>,
);

fn codec(c: &mut Criterion) {
    let req_header = Header::request(50, 1, QosLevel::Receive);
    let resp_header = Header::response_to(&Header::request(30, 2, QosLevel::Receive), -30, 0, None);
    let cases: Vec<Case> = vec![
        (
            "single",
            {
                let p = produce(vec![message(0)]);
                let h = req_header.clone();
                Box::new(move |out: &mut BytesMut| encode(&p, &h, out))
            },
            Box::new(|mut b: BytesMut| {
                let f = decode_frame(&mut b, usize::MAX).unwrap().unwrap();
                let r =
                    AnyRequest::decode(f.header.command_type, f.header.version, f.payload).unwrap();
                assert!(
                    matches!(&r, AnyRequest::ProduceMessage(p) if p.topics[0].messages.len() == 1)
                );
                Box::new(r)
            }),
        ),
        (
            "array100",
            {
                let p = FetchTopicMessageResponse {
                    data: vec![TopicMessages {
                        topic: "bench".into(),
                        messages: (0..100).map(message).collect(),
                        code: 0,
                    }],
                };
                let h = resp_header.clone();
                Box::new(move |out: &mut BytesMut| encode(&p, &h, out))
            },
            Box::new(|mut b: BytesMut| {
                let f = decode_frame(&mut b, usize::MAX).unwrap().unwrap();
                let r = FetchTopicMessageResponse::decode(&mut Reader::new(f.payload), VERSION)
                    .unwrap();
                assert_eq!(r.data[0].messages.len(), 100);
                Box::new(r)
            }),
        ),
        (
            "batch100",
            {
                let p = produce(vec![batch_message(100)]);
                let h = req_header.clone();
                Box::new(move |out: &mut BytesMut| {
                    // Encoding includes building the batch body from its items.
                    let m = batch_message(100);
                    let mut p2 = p.clone();
                    p2.topics[0].messages[0] = m;
                    encode(&p2, &h, out);
                })
            },
            Box::new(|mut b: BytesMut| {
                let f = decode_frame(&mut b, usize::MAX).unwrap().unwrap();
                match AnyRequest::decode(f.header.command_type, f.header.version, f.payload)
                    .unwrap()
                {
                    AnyRequest::ProduceMessage(p) => {
                        let items = p.topics[0].messages[0].unpack(usize::MAX).unwrap();
                        assert_eq!(items.len(), 100);
                        Box::new((p, items))
                    }
                    _ => unreachable!(),
                }
            }),
        ),
    ];
    for (name, enc, dec) in cases {
        let mut frame = BytesMut::new();
        enc(&mut frame);
        let frame = frame.freeze();
        let len = frame.len();
        let mut g = c.benchmark_group(format!("jmq_codec/{name}"));
        g.throughput(Throughput::Bytes(len as u64));
        g.sample_size(30);
        g.warm_up_time(std::time::Duration::from_millis(500));
        g.measurement_time(std::time::Duration::from_secs(2));
        g.bench_with_input(BenchmarkId::new("encode", len), &(), |b, ()| {
            let mut out = BytesMut::with_capacity(len + 64);
            b.iter(|| {
                enc(&mut out);
                black_box(out.len())
            });
        });
        g.bench_with_input(BenchmarkId::new("decode", len), &frame, |b, f| {
            // The frame is handed over as a read buffer would hold it; making that buffer and
            // dropping the decoded result (which owns it, zero-copy) are not timed.
            b.iter_batched(
                || BytesMut::from(&f[..]),
                &dec,
                criterion::BatchSize::SmallInput,
            );
        });
        g.bench_with_input(BenchmarkId::new("memcpy", len), &frame, |b, f| {
            let mut dst = vec![0u8; len];
            b.iter(|| {
                dst.copy_from_slice(black_box(&f[..]));
                black_box(dst.as_ptr())
            });
        });
        g.finish();
    }
}

criterion_group!(benches, codec);
criterion_main!(benches);
