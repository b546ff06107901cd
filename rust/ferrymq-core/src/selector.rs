//! Queue selection shared by producers.
//!
//! FIFO messages go to the queue of their message group, computed exactly as the Java client's
//! `PublishingLoadBalancer.takeMessageQueueByMessageGroup`: SipHash-2-4 with key bytes `00..0f`
//! over the UTF-8 group, read as a signed 64-bit integer, floor-modulo the number of writable
//! leader queues. Producers sharing a topic with Java producers therefore keep per-group order.

use std::hash::Hasher;

use siphasher::sip::SipHasher24;

/// SipHash key half `k0` (key bytes `00 01 … 07`, little-endian).
pub const SIP_K0: u64 = 0x0706_0504_0302_0100;
/// SipHash key half `k1` (key bytes `08 09 … 0f`, little-endian).
pub const SIP_K1: u64 = 0x0f0e_0d0c_0b0a_0908;

/// The Java-compatible hash of a message group, as a signed 64-bit integer.
pub fn message_group_hash(group: &str) -> i64 {
    let mut h = SipHasher24::new_with_keys(SIP_K0, SIP_K1);
    h.write(group.as_bytes());
    // Guava's `asLong()` reinterprets the 64 output bits as signed.
    #[allow(clippy::cast_possible_wrap)]
    let signed = h.finish() as i64;
    signed
}

/// Index of the queue for `group` among `n` candidate queues (`n > 0`); never negative.
pub fn fifo_queue_index(group: &str, n: usize) -> usize {
    assert!(n > 0, "fifo_queue_index needs at least one queue");
    let n = i64::try_from(n).expect("queue count fits in i64");
    // rem_euclid is Guava's LongMath.mod for a positive modulus.
    usize::try_from(message_group_hash(group).rem_euclid(n)).expect("non-negative")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_reference_vector() {
        let h = SipHasher24::new_with_keys(SIP_K0, SIP_K1);
        assert_eq!(h.finish(), 0x726f_db47_dd0e_0e31);
    }

    #[test]
    fn java_vectors() {
        let cases: &[(&str, i64, [usize; 3])] = &[
            ("group-a", 4_825_829_110_184_656_078, [2, 6, 14]),
            ("order-42", -7_687_897_554_513_327_571, [1, 5, 13]),
            ("2", -1_926_782_290_642_853_668, [0, 4, 12]),
            ("1", 4_126_362_672_500_276_448, [0, 0, 0]),
            ("foo哈哈😄2222哈哈", -705_383_726_186_849_630, [2, 2, 2]),
        ];
        for (group, hash, idx) in cases {
            assert_eq!(message_group_hash(group), *hash, "hash of {group}");
            for (n, want) in [4usize, 8, 16].iter().zip(idx) {
                assert_eq!(fifo_queue_index(group, *n), *want, "{group} mod {n}");
            }
        }
    }
}
