//! Client settings: what a client announces on the telemetry stream, and the merged values the
//! server sends back, which override local ones (rocketmq-v2 reference §6, §7).

use std::time::Duration;

use crate::duration::to_proto_duration;
use crate::proto;

/// Default request timeout (Java `ClientConfiguration.requestTimeout`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Default largest message body (the proxy's `maxMessageSize`).
pub const DEFAULT_MAX_BODY_SIZE: usize = 4 * 1024 * 1024;
/// Default producer attempts (the proxy's `grpcClientProducerMaxAttempts`).
pub const DEFAULT_PRODUCER_MAX_ATTEMPTS: u32 = 3;

/// How long to wait between attempts.
#[derive(Debug, Clone, PartialEq)]
pub enum Backoff {
    /// `min(initial * multiplier^(attempt-1), max)`.
    Exponential {
        /// First delay.
        initial: Duration,
        /// Cap.
        max: Duration,
        /// Growth factor.
        multiplier: f32,
    },
    /// An explicit list; the last entry repeats.
    Customized(Vec<Duration>),
}

/// A retry policy: attempts and the delay before each retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, including the first (at least 1).
    pub max_attempts: u32,
    /// Delay schedule.
    pub backoff: Backoff,
}

impl RetryPolicy {
    /// Retry at once (the Java producer's local default before the server speaks).
    pub fn immediate(max_attempts: u32) -> Self {
        Self {
            max_attempts: max_attempts.max(1),
            backoff: Backoff::Exponential {
                initial: Duration::ZERO,
                max: Duration::ZERO,
                multiplier: 1.0,
            },
        }
    }

    /// The delay after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let attempt = attempt.max(1);
        match &self.backoff {
            Backoff::Exponential {
                initial,
                max,
                multiplier,
            } => {
                let exp = i32::try_from(attempt - 1).unwrap_or(i32::MAX);
                let factor = f64::from(multiplier.max(1.0)).powi(exp);
                let secs = initial.as_secs_f64() * factor;
                if !secs.is_finite() || secs >= max.as_secs_f64() {
                    *max
                } else {
                    Duration::from_secs_f64(secs)
                }
            }
            Backoff::Customized(next) => {
                let i = usize::try_from(attempt - 1).unwrap_or(usize::MAX);
                next.get(i)
                    .or_else(|| next.last())
                    .copied()
                    .unwrap_or(Duration::ZERO)
            }
        }
    }

    /// Read the server's policy.
    pub fn from_proto(p: &proto::RetryPolicy) -> Option<Self> {
        let backoff = match p.strategy.as_ref()? {
            proto::retry_policy::Strategy::ExponentialBackoff(e) => Backoff::Exponential {
                initial: duration(e.initial.as_ref()),
                max: duration(e.max.as_ref()),
                multiplier: e.multiplier,
            },
            proto::retry_policy::Strategy::CustomizedBackoff(c) => {
                Backoff::Customized(c.next.iter().map(|d| duration(Some(d))).collect())
            }
        };
        Some(Self {
            max_attempts: u32::try_from(p.max_attempts).unwrap_or(1).max(1),
            backoff,
        })
    }

    /// The wire form.
    pub fn to_proto(&self) -> proto::RetryPolicy {
        let strategy = match &self.backoff {
            Backoff::Exponential {
                initial,
                max,
                multiplier,
            } => proto::retry_policy::Strategy::ExponentialBackoff(proto::ExponentialBackoff {
                initial: Some(to_proto_duration(*initial)),
                max: Some(to_proto_duration(*max)),
                multiplier: *multiplier,
            }),
            Backoff::Customized(next) => {
                proto::retry_policy::Strategy::CustomizedBackoff(proto::CustomizedBackoff {
                    next: next.iter().map(|d| to_proto_duration(*d)).collect(),
                })
            }
        };
        proto::RetryPolicy {
            max_attempts: i32::try_from(self.max_attempts).unwrap_or(i32::MAX),
            strategy: Some(strategy),
        }
    }
}

/// The settings in force: local values until the server answers, then the server's merge.
#[derive(Debug, Clone)]
pub struct EffectiveSettings {
    /// Retry policy (producer: send attempts and throttling back-off; consumer: redelivery).
    pub retry_policy: RetryPolicy,
    /// Deadline of unary RPCs.
    pub request_timeout: Duration,
    /// Largest message body the server accepts (producers).
    pub max_body_size: usize,
    /// Whether a message's type must match its topic's (producers).
    pub validate_message_type: bool,
    /// Consumer group is FIFO (consumers; server-issued).
    pub fifo: Option<bool>,
    /// Receive batch size (consumers; server-issued).
    pub receive_batch_size: Option<i32>,
    /// Long-polling timeout (consumers; server-issued).
    pub long_polling_timeout: Option<Duration>,
    /// Whether these values came from the server.
    pub from_server: bool,
    /// The server's raw settings, for anything not modelled above.
    pub raw: Option<proto::Settings>,
}

impl EffectiveSettings {
    /// Local defaults.
    pub fn local(request_timeout: Duration, max_attempts: u32) -> Self {
        Self {
            retry_policy: RetryPolicy::immediate(max_attempts),
            request_timeout,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
            validate_message_type: true,
            fifo: None,
            receive_batch_size: None,
            long_polling_timeout: None,
            from_server: false,
            raw: None,
        }
    }

    /// Merge the server's echo. A user-configured `max_attempts` is kept (as Java's
    /// `inheritBackoff` does); everything else the server sends wins.
    pub fn merge_server(&self, s: &proto::Settings, user_max_attempts: Option<u32>) -> Self {
        let mut out = self.clone();
        if let Some(p) = s.backoff_policy.as_ref().and_then(RetryPolicy::from_proto) {
            out.retry_policy = RetryPolicy {
                max_attempts: user_max_attempts.unwrap_or(p.max_attempts).max(1),
                backoff: p.backoff,
            };
        }
        if let Some(t) = s.request_timeout.as_ref() {
            let t = duration(Some(t));
            if !t.is_zero() {
                out.request_timeout = t;
            }
        }
        match &s.pub_sub {
            Some(proto::settings::PubSub::Publishing(p)) => {
                if p.max_body_size > 0 {
                    out.max_body_size = usize::try_from(p.max_body_size).unwrap_or(usize::MAX);
                }
                out.validate_message_type = p.validate_message_type;
            }
            Some(proto::settings::PubSub::Subscription(sub)) => {
                if sub.fifo.is_some() {
                    out.fifo = sub.fifo;
                }
                if sub.receive_batch_size.is_some() {
                    out.receive_batch_size = sub.receive_batch_size;
                }
                if let Some(d) = sub.long_polling_timeout.as_ref() {
                    out.long_polling_timeout = Some(duration(Some(d)));
                }
            }
            None => {}
        }
        out.from_server = true;
        out.raw = Some(s.clone());
        out
    }
}

/// A protobuf duration as a std one (negative → zero).
pub fn duration(d: Option<&prost_types::Duration>) -> Duration {
    match d {
        None => Duration::ZERO,
        Some(d) => {
            let secs = u64::try_from(d.seconds).unwrap_or(0);
            let nanos = u32::try_from(d.nanos).unwrap_or(0);
            Duration::new(secs, nanos)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip() {
        let d = Duration::from_millis(1500);
        assert_eq!(duration(Some(&to_proto_duration(d))), d);
        let negative = prost_types::Duration {
            seconds: -1,
            nanos: 0,
        };
        assert_eq!(duration(Some(&negative)), Duration::ZERO);
    }

    #[test]
    fn exponential_schedule_of_the_proxy_default() {
        let p = RetryPolicy {
            max_attempts: 3,
            backoff: Backoff::Exponential {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(1000),
                multiplier: 2.0,
            },
        };
        let ms: Vec<u128> = (1..=9).map(|a| p.delay(a).as_millis()).collect();
        assert_eq!(ms, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(RetryPolicy::from_proto(&p.to_proto()).unwrap(), p);
    }

    #[test]
    fn customized_schedule_repeats_last() {
        let p = RetryPolicy {
            max_attempts: 5,
            backoff: Backoff::Customized(vec![Duration::from_secs(1), Duration::from_secs(5)]),
        };
        assert_eq!(p.delay(1), Duration::from_secs(1));
        assert_eq!(p.delay(2), Duration::from_secs(5));
        assert_eq!(p.delay(7), Duration::from_secs(5));
    }

    #[test]
    fn server_settings_override_but_keep_user_attempts() {
        let local = EffectiveSettings::local(Duration::from_secs(3), 3);
        let server = proto::Settings {
            backoff_policy: Some(
                RetryPolicy {
                    max_attempts: 7,
                    backoff: Backoff::Exponential {
                        initial: Duration::from_millis(10),
                        max: Duration::from_secs(1),
                        multiplier: 2.0,
                    },
                }
                .to_proto(),
            ),
            request_timeout: Some(to_proto_duration(Duration::from_secs(5))),
            pub_sub: Some(proto::settings::PubSub::Publishing(proto::Publishing {
                topics: vec![],
                max_body_size: 1024,
                validate_message_type: false,
            })),
            ..Default::default()
        };
        let m = local.merge_server(&server, None);
        assert_eq!(m.retry_policy.max_attempts, 7);
        assert_eq!(m.request_timeout, Duration::from_secs(5));
        assert_eq!(m.max_body_size, 1024);
        assert!(!m.validate_message_type);
        assert!(m.from_server);
        let m = local.merge_server(&server, Some(2));
        assert_eq!(m.retry_policy.max_attempts, 2);
        assert_eq!(m.retry_policy.delay(1), Duration::from_millis(10));
    }
}
