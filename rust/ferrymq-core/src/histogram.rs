//! Latency histograms: HDR-style log-linear buckets with three significant digits, in
//! nanoseconds, from 1 ns to one hour.
//!
//! [`LatencyHistogram`] wraps the `hdrhistogram` crate (the Rust port of Gil Tene's
//! HdrHistogram) for the buckets and the percentile walk, and keeps beside it what the buckets
//! only know approximately: the exact count, sum, minimum and maximum. A value above one hour is
//! recorded as one hour and counted in [`LatencyHistogram::clamped`]; nothing is dropped and
//! nothing panics. Percentiles follow the HDR convention: the value reported for `q` is the
//! highest value equivalent (within three significant digits) to the one at or below which `q`
//! percent of the recorded values lie, kept within the exact minimum and maximum, so reported
//! percentiles never decrease with `q` and never pass the maximum.
//!
//! `ferrymq bench` records send → ack and end-to-end latencies into it (through the binding's
//! `_native.LatencyHistogram`, one call per batch of values). The clients' metrics
//! ([`crate::metrics`]) keep one per series in the [`coarse`](LatencyHistogram::coarse) layout
//! (two significant digits from 1 µs: about 28 KB instead of about 256 KB).

use hdrhistogram::Histogram;

use crate::error::{Error, Result};

/// The highest value tracked: one hour in nanoseconds. Larger values are recorded as this.
pub const HIGHEST_NS: u64 = 3_600 * 1_000_000_000;

/// Significant decimal digits kept at every magnitude: a recorded value is off by at most one
/// part in a thousand.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Significant digits of [`LatencyHistogram::coarse`]: a recorded value is off by at most one
/// part in a hundred.
pub const COARSE_SIGNIFICANT_DIGITS: u8 = 2;

/// The resolution of [`LatencyHistogram::coarse`] in nanoseconds (1 µs): values below it share
/// its first buckets (their exact minimum is kept beside the buckets anyway).
pub const COARSE_LOWEST_NS: u64 = 1_000;

/// A latency histogram in nanoseconds (see the module documentation).
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    buckets: Histogram<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
    clamped: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram tracking 1 ns .. [`HIGHEST_NS`] at [`SIGNIFICANT_DIGITS`].
    pub fn new() -> Self {
        Self::with_bounds(1, SIGNIFICANT_DIGITS)
    }

    /// An empty histogram in the compact layout the clients' metrics keep per series:
    /// 1 µs ([`COARSE_LOWEST_NS`]) .. [`HIGHEST_NS`] at [`COARSE_SIGNIFICANT_DIGITS`] (about
    /// 28 KB of buckets). Count, sum, minimum and maximum stay exact; percentiles are within
    /// one part in a hundred (or 1 µs, below a millisecond). Two histograms merge only with
    /// one of the same layout.
    pub fn coarse() -> Self {
        Self::with_bounds(COARSE_LOWEST_NS, COARSE_SIGNIFICANT_DIGITS)
    }

    fn with_bounds(lowest: u64, digits: u8) -> Self {
        // Constant, valid bounds (pinned by tests): construction cannot fail.
        let buckets = Histogram::new_with_bounds(lowest, HIGHEST_NS, digits)
            .expect("constant histogram bounds are valid");
        Self {
            buckets,
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            clamped: 0,
        }
    }

    /// Record one value in nanoseconds; above [`HIGHEST_NS`] it is recorded as that and
    /// counted in [`clamped`](Self::clamped).
    pub fn record(&mut self, ns: u64) {
        let v = if ns > HIGHEST_NS {
            self.clamped += 1;
            HIGHEST_NS
        } else {
            ns
        };
        // `v` is within the tracked range, so this is a plain record.
        self.buckets.saturating_record(v);
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// The bytes its buckets take (what a histogram costs in memory, give or take a few words).
    pub fn bucket_bytes(&self) -> usize {
        self.buckets.distinct_values() * std::mem::size_of::<u64>()
    }

    /// Record every value of `values` (nanoseconds), as [`record`](Self::record) does.
    pub fn record_many(&mut self, values: impl IntoIterator<Item = u64>) {
        for v in values {
            self.record(v);
        }
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// How many of them were above [`HIGHEST_NS`] (recorded as [`HIGHEST_NS`]).
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// The exact sum of the values recorded (after clamping), in nanoseconds.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// The smallest value recorded (exact); `None` when empty.
    pub fn min(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// The largest value recorded (exact, after clamping); `None` when empty.
    pub fn max(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// The arithmetic mean of the values recorded (exact sum, after clamping); `None` when
    /// empty.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// The value at percentile `q` (0 to 100): `q` percent of the recorded values are at or
    /// below it, within three significant digits; 0 is the minimum and 100 the maximum.
    /// `None` when empty; a `q` outside 0..=100 (or NaN) is an invalid-argument error naming
    /// `q`.
    pub fn percentile(&self, q: f64) -> Result<Option<u64>> {
        if !(0.0..=100.0).contains(&q) {
            return Err(Error::invalid(
                "q",
                format!("{q} is not a percentile from 0 to 100"),
            ));
        }
        if self.count == 0 {
            return Ok(None);
        }
        if q == 0.0 {
            return Ok(Some(self.min));
        }
        if q == 100.0 {
            return Ok(Some(self.max));
        }
        let v = self.buckets.value_at_quantile(q / 100.0);
        Ok(Some(v.clamp(self.min, self.max)))
    }

    /// Add every value of `other` to this histogram. Both have the same bounds, so this
    /// cannot fail; an internal error would mean the crate broke that promise.
    pub fn merge(&mut self, other: &Self) -> Result<()> {
        self.buckets
            .add(&other.buckets)
            .map_err(|e| Error::internal(format!("latency histogram merge: {e:?}")))?;
        self.count += other.count;
        self.sum += other.sum;
        self.clamped += other.clamped;
        if other.count > 0 {
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        Ok(())
    }

    /// Forget every value.
    pub fn reset(&mut self) {
        self.buckets.reset();
        self.count = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
        self.clamped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    /// `got` is within `digits` significant digits of `want` (relative error ≤ 10^-digits),
    /// the precision the histogram promises.
    fn close(got: u64, want: f64) -> bool {
        ((got as f64) - want).abs() <= want * 1e-3 + 1.0
    }

    fn p(h: &LatencyHistogram, q: f64) -> u64 {
        h.percentile(q).unwrap().unwrap()
    }

    #[test]
    fn the_bounds_are_valid_and_the_range_spans_one_nanosecond_to_one_hour() {
        let mut h = LatencyHistogram::new();
        h.record(1);
        h.record(HIGHEST_NS);
        assert_eq!(h.count(), 2);
        assert_eq!(h.clamped(), 0);
        assert_eq!(h.min(), Some(1));
        assert_eq!(h.max(), Some(HIGHEST_NS));
        assert!(close(p(&h, 75.0), HIGHEST_NS as f64));
    }

    #[test]
    fn uniform_microseconds_give_their_percentiles_within_three_digits() {
        // 1 µs .. 100 ms in steps of 1 µs: the value at q percent is q% of 100 ms.
        let mut h = LatencyHistogram::new();
        h.record_many((1..=100_000u64).map(|us| us * 1_000));
        assert_eq!(h.count(), 100_000);
        assert_eq!(h.min(), Some(1_000));
        assert_eq!(h.max(), Some(100_000_000));
        let mean = h.mean().unwrap();
        assert!((mean - 50_000_500.0).abs() < 1e-6, "{mean}");
        for q in [1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99] {
            let want = q / 100.0 * 100_000_000.0;
            assert!(close(p(&h, q), want), "p{q}: {} vs {want}", p(&h, q));
        }
    }

    #[test]
    fn an_exponential_distribution_gives_its_quantiles_within_three_digits() {
        // 200,000 values at evenly spaced quantiles of an exponential with a 2 ms mean: the
        // value at q percent is -mean * ln(1 - q/100).
        let mean_ns = 2_000_000.0_f64;
        let n = 200_000;
        let mut h = LatencyHistogram::new();
        h.record_many((0..n).map(|i| {
            let u = (i as f64 + 0.5) / n as f64;
            (-mean_ns * (1.0 - u).ln()).round() as u64
        }));
        for q in [50.0_f64, 90.0, 99.0, 99.9] {
            let want = -mean_ns * (1.0 - q / 100.0).ln();
            let got = p(&h, q);
            // One value's step of the sample, plus the histogram's precision.
            let step = mean_ns / (n as f64 * (1.0 - q / 100.0));
            assert!(
                (got as f64 - want).abs() <= want * 1e-3 + step,
                "p{q}: {got} vs {want}"
            );
        }
        assert!((h.mean().unwrap() - mean_ns).abs() < mean_ns * 1e-3);
    }

    #[test]
    fn a_rare_slow_mode_shows_past_its_percentile() {
        // 99% at 1 ms, 1% at 250 ms.
        let mut h = LatencyHistogram::new();
        h.record_many(std::iter::repeat_n(1_000_000, 9_900));
        h.record_many(std::iter::repeat_n(250_000_000, 100));
        assert!(close(p(&h, 50.0), 1e6));
        assert!(close(p(&h, 99.0), 1e6));
        assert!(close(p(&h, 99.5), 2.5e8));
        assert!(close(p(&h, 99.9), 2.5e8));
        assert_eq!(p(&h, 100.0), 250_000_000);
    }

    #[test]
    fn percentiles_never_decrease_and_stay_within_min_and_max() {
        let mut h = LatencyHistogram::new();
        // Values in one bucket: its highest equivalent is above the exact maximum.
        h.record_many([1_000_001, 1_000_002, 1_000_003]);
        let mut last = 0;
        for i in 0..=1000 {
            let v = p(&h, f64::from(i) / 10.0);
            assert!(v >= last, "p{} = {v} < {last}", f64::from(i) / 10.0);
            assert!((1_000_001..=1_000_003).contains(&v));
            last = v;
        }
        assert_eq!(p(&h, 0.0), 1_000_001);
        assert_eq!(p(&h, 100.0), 1_000_003);
    }

    #[test]
    fn values_above_one_hour_are_clamped_and_counted_not_dropped() {
        let mut h = LatencyHistogram::new();
        h.record(0);
        h.record(HIGHEST_NS + 1);
        h.record(u64::MAX);
        assert_eq!(h.count(), 3);
        assert_eq!(h.clamped(), 2);
        assert_eq!(h.min(), Some(0));
        assert_eq!(h.max(), Some(HIGHEST_NS));
        assert!(close(p(&h, 50.0), HIGHEST_NS as f64));
    }

    #[test]
    fn an_empty_histogram_has_no_figures() {
        let h = LatencyHistogram::new();
        assert_eq!(h.count(), 0);
        assert_eq!((h.min(), h.max(), h.mean()), (None, None, None));
        assert_eq!(h.percentile(50.0).unwrap(), None);
    }

    #[test]
    fn a_percentile_outside_0_to_100_is_refused_naming_q() {
        let h = LatencyHistogram::new();
        for q in [-0.1, 100.1, f64::NAN, f64::INFINITY] {
            let e = h.percentile(q).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.to_string().starts_with("q: "), "{e}");
        }
    }

    #[test]
    fn merging_two_halves_equals_recording_all() {
        let values: Vec<u64> = (0..50_000u64).map(|i| 500 + i * i % 7_000_000).collect();
        let (a_values, b_values) = values.split_at(20_000);
        let mut all = LatencyHistogram::new();
        all.record_many(values.iter().copied());
        let mut a = LatencyHistogram::new();
        a.record_many(a_values.iter().copied());
        let mut b = LatencyHistogram::new();
        b.record_many(b_values.iter().copied());
        b.record(HIGHEST_NS * 2);
        all.record(HIGHEST_NS * 2);
        a.merge(&b).unwrap();
        a.merge(&LatencyHistogram::new()).unwrap();
        assert_eq!(a.count(), all.count());
        assert_eq!(a.clamped(), 1);
        assert_eq!(
            (a.min(), a.max(), a.mean()),
            (all.min(), all.max(), all.mean())
        );
        for q in [0.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            assert_eq!(p(&a, q), p(&all, q), "p{q}");
        }
        let mut empty = LatencyHistogram::new();
        empty.merge(&all).unwrap();
        assert_eq!(p(&empty, 99.0), p(&all, 99.0));
    }

    #[test]
    fn the_coarse_layout_is_small_and_within_two_digits() {
        let mut h = LatencyHistogram::coarse();
        assert!(h.bucket_bytes() <= 32 * 1024, "{}", h.bucket_bytes());
        assert!(LatencyHistogram::new().bucket_bytes() > 200 * 1024);
        h.record_many((1..=100_000u64).map(|us| us * 1_000));
        h.record(HIGHEST_NS);
        assert_eq!(h.min(), Some(1_000));
        assert_eq!(h.max(), Some(HIGHEST_NS));
        for q in [10.0, 50.0, 90.0, 99.0] {
            let want = q / 100.0 * 100_001.0 * 1_000.0;
            let got = p(&h, q) as f64;
            assert!(
                (got - want).abs() <= want * 1e-2 + 1_000.0,
                "p{q}: {got} vs {want}"
            );
        }
        // Below the resolution: the exact extremes still bound every percentile.
        let mut small = LatencyHistogram::coarse();
        small.record_many([10, 20, 30]);
        assert_eq!(
            (p(&small, 0.0), p(&small, 50.0), p(&small, 100.0)),
            (10, 30, 30)
        );
        let mut merged = LatencyHistogram::coarse();
        merged.merge(&h).unwrap();
        assert_eq!(p(&merged, 99.0), p(&h, 99.0));
    }

    #[test]
    fn reset_forgets_everything() {
        let mut h = LatencyHistogram::new();
        h.record_many([5, HIGHEST_NS + 5]);
        h.reset();
        assert_eq!((h.count(), h.clamped(), h.max()), (0, 0, None));
        h.record(7);
        assert_eq!((h.min(), h.max()), (Some(7), Some(7)));
    }
}
