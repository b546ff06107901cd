//! The consumption retry policy a broker issues to a consumer group (`Settings.backoff_policy`).
//!
//! A failed non-FIFO message is made invisible for [`RetryPolicy::next_attempt_delay`] of its
//! delivery attempt; a failed FIFO message is retried locally after that delay until
//! [`RetryPolicy::max_attempts`] is reached, then forwarded to the dead-letter queue.

use std::time::Duration;

use crate::proto;
use crate::rocketmq::message_view::from_proto_duration;

/// How the delay grows from one attempt to the next.
#[derive(Debug, Clone, PartialEq)]
pub enum Backoff {
    /// `min(initial * multiplier^(attempt-1), max)`.
    Exponential {
        /// Delay after the first attempt.
        initial: Duration,
        /// Upper bound.
        max: Duration,
        /// Growth factor per attempt.
        multiplier: f64,
    },
    /// An explicit list: the n-th failed attempt waits `delays[n-1]` (the last entry repeats).
    Customized(Vec<Duration>),
}

/// A consumer group's retry policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    max_attempts: u32,
    backoff: Backoff,
}

/// The delays the stock proxy issues by default (`messageDelayLevel` 3 and up).
const DEFAULT_DELAYS_SECS: [u64; 18] = [
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

impl Default for RetryPolicy {
    /// The stock proxy's default for a consumer group: 17 attempts, customized delays.
    fn default() -> Self {
        Self {
            max_attempts: 17,
            backoff: Backoff::Customized(
                DEFAULT_DELAYS_SECS
                    .iter()
                    .map(|s| Duration::from_secs(*s))
                    .collect(),
            ),
        }
    }
}

impl RetryPolicy {
    /// A policy from its parts (`max_attempts` is at least 1).
    pub fn new(max_attempts: u32, backoff: Backoff) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            backoff,
        }
    }

    /// Read the policy a broker sent; missing parts fall back to the defaults.
    pub fn from_proto(p: &proto::RetryPolicy) -> Self {
        use proto::retry_policy::Strategy;
        let default = Self::default();
        let max_attempts = u32::try_from(p.max_attempts)
            .ok()
            .filter(|n| *n > 0)
            .unwrap_or(default.max_attempts);
        let backoff = match &p.strategy {
            Some(Strategy::ExponentialBackoff(e)) => Backoff::Exponential {
                initial: e
                    .initial
                    .as_ref()
                    .map_or(Duration::from_secs(1), from_proto_duration),
                max: e
                    .max
                    .as_ref()
                    .map_or(Duration::from_secs(60), from_proto_duration),
                multiplier: if e.multiplier.is_finite() && e.multiplier >= 1.0 {
                    f64::from(e.multiplier)
                } else {
                    1.0
                },
            },
            Some(Strategy::CustomizedBackoff(c)) if !c.next.is_empty() => {
                Backoff::Customized(c.next.iter().map(from_proto_duration).collect())
            }
            _ => default.backoff,
        };
        Self {
            max_attempts,
            backoff,
        }
    }

    /// The most delivery attempts a message gets (the first delivery included).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The back-off schedule.
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// How long to wait after delivery attempt `attempt` (1-based) failed.
    pub fn next_attempt_delay(&self, attempt: i32) -> Duration {
        let attempt = u32::try_from(attempt).unwrap_or(1).max(1);
        match &self.backoff {
            Backoff::Customized(delays) => {
                let i = (attempt as usize).min(delays.len()) - 1;
                delays[i]
            }
            Backoff::Exponential {
                initial,
                max,
                multiplier,
            } => {
                let exp = i32::try_from(attempt - 1).unwrap_or(i32::MAX);
                let secs = initial.as_secs_f64() * multiplier.powi(exp);
                if !secs.is_finite() || secs >= max.as_secs_f64() {
                    *max
                } else {
                    Duration::from_secs_f64(secs)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rocketmq::message_view::to_proto_duration;

    #[test]
    fn customized_delays_repeat_the_last_entry() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_attempts(), 17);
        assert_eq!(p.next_attempt_delay(1), Duration::from_secs(1));
        assert_eq!(p.next_attempt_delay(2), Duration::from_secs(5));
        assert_eq!(p.next_attempt_delay(100), Duration::from_secs(7200));
        assert_eq!(p.next_attempt_delay(0), Duration::from_secs(1));
    }

    #[test]
    fn exponential_is_capped() {
        let wire = proto::RetryPolicy {
            max_attempts: 4,
            strategy: Some(proto::retry_policy::Strategy::ExponentialBackoff(
                proto::ExponentialBackoff {
                    initial: Some(to_proto_duration(Duration::from_millis(10))),
                    max: Some(to_proto_duration(Duration::from_millis(1000))),
                    multiplier: 2.0,
                },
            )),
        };
        let p = RetryPolicy::from_proto(&wire);
        assert_eq!(p.max_attempts(), 4);
        assert_eq!(p.next_attempt_delay(1), Duration::from_millis(10));
        assert_eq!(p.next_attempt_delay(3), Duration::from_millis(40));
        assert_eq!(p.next_attempt_delay(30), Duration::from_millis(1000));
    }

    #[test]
    fn missing_parts_fall_back_to_defaults() {
        let p = RetryPolicy::from_proto(&proto::RetryPolicy::default());
        assert_eq!(p, RetryPolicy::default());
    }
}
