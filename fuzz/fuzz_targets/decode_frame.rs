//! Arbitrary bytes through every JMQ4 decoder (frames, payloads, messages, batches,
//! compressed bodies): a decoder may return an error, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrymq_core::jmq::fuzz_decode(data);
});
