//! Arbitrary bytes through every remoting decoder (frames with JSON or binary headers, stored
//! messages of pull bodies, batch records, properties): a decoder may return an error, never
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrymq_core::remoting::fuzz_decode(data);
});
