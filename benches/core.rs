//! Criterion benches of the pure-Rust core: hot paths that run once per message.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ferrymq_core::{message_id, selector, Message};

fn per_message(c: &mut Criterion) {
    let mut g = c.benchmark_group("per_message");
    g.throughput(Throughput::Elements(1));
    g.bench_function("message_id", |b| b.iter(message_id::generate));
    g.bench_function("fifo_queue_index", |b| {
        b.iter(|| selector::fifo_queue_index(black_box("order-42"), 8));
    });
    g.bench_function("message_build_100B", |b| {
        let body = bytes::Bytes::from(vec![7u8; 100]);
        b.iter(|| {
            Message::builder("bench", body.clone())
                .tag("t")
                .keys(["k"])
                .build()
                .unwrap()
        });
    });
    g.finish();
}

criterion_group!(benches, per_message);
criterion_main!(benches);
