//! Server settings that change while clients run: the largest message body and the producers'
//! send attempts (a consumer group's retry policy changes by replacing the group).
//!
//! Like the proxy, the broker does not push settings on its own: it answers every `Settings` a
//! client sends on its Telemetry stream with the values in force at that moment, so a running
//! client sees a change at its next settings sync (Java: every 5 min) or when its stream is
//! re-opened. Sends are checked against the new body limit at once.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use super::config::BrokerConfig;
use crate::error::{Error, Result};
use crate::proto;

/// The run-time values, starting from the configuration.
#[derive(Debug)]
pub struct LiveSettings {
    max_body_size: AtomicUsize,
    producer_max_attempts: AtomicI32,
}

impl LiveSettings {
    /// The configured values.
    pub fn new(config: &BrokerConfig) -> Self {
        Self {
            max_body_size: AtomicUsize::new(config.max_body_size),
            producer_max_attempts: AtomicI32::new(config.producer_max_attempts),
        }
    }

    /// The largest message body accepted now.
    pub fn max_body_size(&self) -> usize {
        self.max_body_size.load(Ordering::Relaxed)
    }

    /// The send attempts echoed to producers now.
    pub fn producer_max_attempts(&self) -> i32 {
        self.producer_max_attempts.load(Ordering::Relaxed)
    }

    /// Change the values given (`None` keeps one), after checking them all; `max_topic_bytes`
    /// bounds the body size as it does in the configuration.
    pub fn update(
        &self,
        max_body_size: Option<usize>,
        producer_max_attempts: Option<i32>,
        max_topic_bytes: usize,
    ) -> Result<()> {
        if let Some(n) = max_body_size {
            if n == 0 || n > max_topic_bytes {
                return Err(Error::invalid(
                    "max_body_size",
                    format!("{n} is not from 1 to max_topic_bytes ({max_topic_bytes})"),
                ));
            }
        }
        if let Some(n) = producer_max_attempts {
            if !(1..=100).contains(&n) {
                return Err(Error::invalid(
                    "producer_max_attempts",
                    format!("{n} is not from 1 to 100"),
                ));
            }
        }
        if let Some(n) = max_body_size {
            self.max_body_size.store(n, Ordering::Relaxed);
        }
        if let Some(n) = producer_max_attempts {
            self.producer_max_attempts.store(n, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Put the values in force into a producer's merged settings (consumers' are untouched).
    pub fn apply(&self, merged: &mut proto::Settings) {
        if let Some(proto::settings::PubSub::Publishing(p)) = merged.pub_sub.as_mut() {
            p.max_body_size = i32::try_from(self.max_body_size()).unwrap_or(i32::MAX);
            if let Some(b) = merged.backoff_policy.as_mut() {
                b.max_attempts = self.producer_max_attempts();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::telemetry::merge_settings;

    fn producer_settings() -> proto::Settings {
        proto::Settings {
            client_type: Some(proto::ClientType::Producer as i32),
            pub_sub: Some(proto::settings::PubSub::Publishing(
                proto::Publishing::default(),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn updates_reach_the_next_merged_settings() {
        let config = BrokerConfig::default();
        let live = LiveSettings::new(&config);
        live.update(Some(1000), Some(7), config.max_topic_bytes)
            .unwrap();
        let mut m = merge_settings(&producer_settings(), None, &config);
        live.apply(&mut m);
        let Some(proto::settings::PubSub::Publishing(p)) = &m.pub_sub else {
            panic!("publishing");
        };
        assert_eq!(p.max_body_size, 1000);
        assert_eq!(m.backoff_policy.unwrap().max_attempts, 7);
        assert_eq!(live.max_body_size(), 1000);
    }

    #[test]
    fn bad_values_name_the_field_and_change_nothing() {
        let config = BrokerConfig::default();
        let live = LiveSettings::new(&config);
        let e = live
            .update(Some(10), Some(0), config.max_topic_bytes)
            .unwrap_err();
        assert!(e.message().starts_with("producer_max_attempts"), "{e}");
        let e = live
            .update(Some(0), None, config.max_topic_bytes)
            .unwrap_err();
        assert!(e.message().starts_with("max_body_size"), "{e}");
        assert_eq!(live.max_body_size(), config.max_body_size);
        assert_eq!(live.producer_max_attempts(), config.producer_max_attempts);
    }
}
