//! Durations and points in time given by users, checked once before any arithmetic.
//!
//! Every timeout, wait, interval or delay a caller passes goes through [`seconds_f64`],
//! [`seconds_int`] or [`micros`] (the binding picks by the Python type). The rule is the same
//! everywhere: NaN and infinities are refused, negative values are refused, zero is refused where
//! the parameter is a [`Lower::Positive`] timeout, and anything above [`MAX`] (ten years) is
//! refused rather than clamped, with an error naming the parameter and the limit. Ten years
//! keeps `Instant + duration` and millisecond/nanosecond wire fields far from overflow.
//!
//! [`deadline`] adds a duration to an `Instant` without ever panicking, for the places that
//! see durations which did not come through this module (e.g. from the wire).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// The largest accepted duration, in seconds: ten years of 365.25 days.
pub const MAX_SECS: u64 = 315_576_000;

/// The largest accepted duration.
pub const MAX: Duration = Duration::from_secs(MAX_SECS);

/// The latest accepted point in time, in Unix seconds: 9999-12-31T23:59:59Z, the end of what
/// a Python `datetime` can hold.
pub const MAX_UNIX_SECS: u64 = 253_402_300_799;

/// The lower bound a duration parameter allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lower {
    /// A timeout or interval: must be more than zero.
    Positive,
    /// A wait or delay: zero allowed (e.g. `poll(0)` returns at once).
    NonNegative,
}

fn check_low(field: &str, shown: impl std::fmt::Display, zero: bool, bound: Lower) -> Result<()> {
    if zero && bound == Lower::Positive {
        return Err(Error::invalid(
            field,
            format!("{shown} s is not a positive number of seconds"),
        ));
    }
    Ok(())
}

fn too_large(field: &str, shown: impl std::fmt::Display) -> Error {
    Error::invalid(
        field,
        format!("{shown} s is more than the maximum of {MAX_SECS} s (10 years)"),
    )
}

fn negative(field: &str, shown: impl std::fmt::Display) -> Error {
    Error::invalid(
        field,
        format!("{shown} s is negative; a number of seconds must not be"),
    )
}

/// Seconds as a float.
pub fn seconds_f64(field: &str, secs: f64, bound: Lower) -> Result<Duration> {
    if secs.is_nan() || secs.is_infinite() {
        return Err(Error::invalid(
            field,
            format!("{secs} is not a finite number of seconds"),
        ));
    }
    if secs < 0.0 {
        return Err(negative(field, secs));
    }
    if secs > MAX_SECS as f64 {
        return Err(too_large(field, secs));
    }
    // Within [0, MAX_SECS] the conversion cannot fail; a positive value too small for a
    // nanosecond still counts as positive.
    let d = Duration::try_from_secs_f64(secs).map_err(|e| Error::invalid(field, e))?;
    check_low(field, secs, secs == 0.0, bound)?;
    Ok(d.max(if secs > 0.0 {
        Duration::from_nanos(1)
    } else {
        Duration::ZERO
    }))
}

/// Whole seconds (a Python `int` of any size that fits an `i128`).
pub fn seconds_int(field: &str, secs: i128, bound: Lower) -> Result<Duration> {
    if secs < 0 {
        return Err(negative(field, secs));
    }
    if secs > i128::from(MAX_SECS) {
        return Err(too_large(field, secs));
    }
    check_low(field, secs, secs == 0, bound)?;
    Ok(Duration::from_secs(secs as u64))
}

/// Microseconds (a `datetime.timedelta`, read exactly).
pub fn micros(field: &str, us: i128, bound: Lower) -> Result<Duration> {
    let shown = us as f64 / 1e6;
    if us < 0 {
        return Err(negative(field, shown));
    }
    if us > i128::from(MAX_SECS) * 1_000_000 {
        return Err(too_large(field, shown));
    }
    check_low(field, shown, us == 0, bound)?;
    Ok(Duration::from_micros(us as u64))
}

/// A point in time given as Unix seconds: from the epoch to [`MAX_UNIX_SECS`].
pub fn unix_time(field: &str, secs: f64) -> Result<SystemTime> {
    if secs.is_nan() || secs.is_infinite() || secs < 0.0 || secs > MAX_UNIX_SECS as f64 {
        return Err(Error::invalid(
            field,
            format!(
                "{secs} is not a time from the Unix epoch to 9999-12-31 \
                 (0 to {MAX_UNIX_SECS} Unix seconds)"
            ),
        ));
    }
    Ok(UNIX_EPOCH + Duration::from_secs_f64(secs))
}

/// `now + d`, or the latest representable instant not after it: never panics.
pub fn deadline(now: Instant, d: Duration) -> Instant {
    if let Some(t) = now.checked_add(d) {
        return t;
    }
    // Out of range (only for durations that bypassed the checks above): settle for the
    // largest step that fits, which is still centuries away.
    let mut step = d;
    loop {
        step /= 2;
        if let Some(t) = now.checked_add(step) {
            return t;
        }
        if step.is_zero() {
            return now;
        }
    }
}

/// [`deadline`] for a tokio instant (keeps tokio's paused clock in tests).
pub fn tokio_deadline(now: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::from_std(deadline(now.into_std(), d))
}

/// Milliseconds from the Unix epoch to `t` (0 before it).
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// A protobuf timestamp from Unix milliseconds.
pub fn timestamp_ms(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

/// A protobuf duration from a `Duration`.
pub fn to_proto_duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn refused(r: Result<Duration>, needle: &str) {
        let e = r.expect_err("should be refused");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let s = e.to_string();
        assert!(s.contains("t_field"), "{s}");
        assert!(s.contains(needle), "{s}");
    }

    #[test]
    fn floats_in_range() {
        for (secs, bound, want) in [
            (1.5, Lower::Positive, Duration::from_millis(1500)),
            (0.0, Lower::NonNegative, Duration::ZERO),
            (-0.0, Lower::NonNegative, Duration::ZERO),
            (MAX_SECS as f64, Lower::Positive, MAX),
            (1e-12, Lower::Positive, Duration::from_nanos(1)),
        ] {
            assert_eq!(seconds_f64("t_field", secs, bound).unwrap(), want, "{secs}");
        }
    }

    #[test]
    fn floats_out_of_range_are_refused() {
        for b in [Lower::Positive, Lower::NonNegative] {
            refused(seconds_f64("t_field", f64::NAN, b), "finite");
            refused(seconds_f64("t_field", f64::INFINITY, b), "finite");
            refused(seconds_f64("t_field", f64::NEG_INFINITY, b), "finite");
            refused(seconds_f64("t_field", -1.0, b), "negative");
            refused(seconds_f64("t_field", 1e20, b), "maximum of 315576000 s");
            refused(seconds_f64("t_field", f64::MAX, b), "maximum");
            refused(seconds_f64("t_field", MAX_SECS as f64 + 1.0, b), "maximum");
        }
        refused(seconds_f64("t_field", 0.0, Lower::Positive), "positive");
    }

    #[test]
    fn ints() {
        assert_eq!(
            seconds_int("t_field", 3, Lower::Positive).unwrap(),
            Duration::from_secs(3)
        );
        assert_eq!(
            seconds_int("t_field", 0, Lower::NonNegative).unwrap(),
            Duration::ZERO
        );
        refused(seconds_int("t_field", 0, Lower::Positive), "positive");
        for (secs, needle) in [
            (-1, "negative"),
            (1 << 63, "maximum"),
            (1 << 64, "maximum"),
            (i128::MAX, "maximum"),
            (i128::MIN, "negative"),
        ] {
            refused(seconds_int("t_field", secs, Lower::NonNegative), needle);
        }
    }

    #[test]
    fn micros_exact() {
        assert_eq!(
            micros("t_field", 1, Lower::Positive).unwrap(),
            Duration::from_micros(1)
        );
        // timedelta.max and timedelta.min
        let max_us = (999_999_999i128 * 86_400 + 86_399) * 1_000_000 + 999_999;
        refused(micros("t_field", max_us, Lower::NonNegative), "maximum");
        refused(
            micros(
                "t_field",
                -999_999_999i128 * 86_400 * 1_000_000,
                Lower::NonNegative,
            ),
            "negative",
        );
        refused(micros("t_field", 0, Lower::Positive), "positive");
    }

    #[test]
    fn unix_times() {
        assert_eq!(unix_time("f", 0.0).unwrap(), UNIX_EPOCH);
        assert!(unix_time("f", MAX_UNIX_SECS as f64).is_ok());
        for bad in [
            -1.0,
            1e20,
            f64::NAN,
            f64::INFINITY,
            MAX_UNIX_SECS as f64 + 1.0,
        ] {
            let e = unix_time("f", bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
            assert!(e.to_string().contains("9999"));
        }
    }

    #[test]
    fn deadline_never_panics() {
        let now = Instant::now();
        assert_eq!(
            deadline(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        let far = deadline(now, Duration::MAX);
        assert!(far > now + MAX);
        assert!(deadline(now, Duration::from_secs(u64::MAX / 2)) > now + MAX);
    }
}
