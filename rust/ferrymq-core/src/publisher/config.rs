//! [`PublisherConfig`]: the settings of a publisher and their validation.

use std::time::Duration;

use crate::error::{Error, Result};

use super::flight::{Events, RetryPolicy};

/// The largest `max_in_flight`: the intake and event channels are sized from it.
pub const MAX_IN_FLIGHT: usize = 1_000_000;

/// Settings of a [`Publisher`] (the design's optional properties).
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// Prefix of generated ids; a NUID when `None`.
    pub id_prefix: Option<String>,
    /// Most messages waiting for their ack at once (default 50).
    pub max_in_flight: usize,
    /// Once the window is full, publishing resumes when at most this many are in flight
    /// (default 0: full sawtooth).
    pub refill_allowed_at: usize,
    /// Retries; `None` attempts each message once.
    pub retry: Option<RetryPolicy>,
    /// Longest the runner sleeps without re-checking its state (default 100 ms). The runner is
    /// event driven; this is only a safety net.
    pub poll_time: Duration,
    /// Longest the runner waits between checks of the hold (default 100 ms). The hold is lifted
    /// as soon as an ack brings the count to `refill_allowed_at`; this is only a safety net.
    pub hold_pause_time: Duration,
    /// How long after its publish a message may wait for its ack (default 5 s).
    pub wait_timeout: Duration,
    /// Which events to emit.
    pub events: Events,
    /// Capacity of the event channel (0: `2 * max_in_flight + 64`).
    pub event_capacity: usize,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        Self {
            id_prefix: None,
            max_in_flight: 50,
            refill_allowed_at: 0,
            retry: None,
            poll_time: Duration::from_millis(100),
            hold_pause_time: Duration::from_millis(100),
            wait_timeout: Duration::from_secs(5),
            events: Events::None,
            event_capacity: 0,
        }
    }
}

impl PublisherConfig {
    /// Check every field; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if self.max_in_flight == 0 || self.max_in_flight > MAX_IN_FLIGHT {
            return Err(Error::invalid(
                "max_in_flight",
                format!("{} is not from 1 to {MAX_IN_FLIGHT}", self.max_in_flight),
            ));
        }
        if self.refill_allowed_at >= self.max_in_flight {
            return Err(Error::invalid(
                "refill_allowed_at",
                format!(
                    "{} must be less than max_in_flight ({})",
                    self.refill_allowed_at, self.max_in_flight
                ),
            ));
        }
        for (field, d) in [
            ("poll_time", self.poll_time),
            ("hold_pause_time", self.hold_pause_time),
            ("wait_timeout", self.wait_timeout),
        ] {
            Error::require_positive(field, d)?;
            if d > crate::duration::MAX {
                return Err(Error::invalid(
                    field,
                    format!("must be at most {} s", crate::duration::MAX_SECS),
                ));
            }
        }
        if let Some(p) = &self.id_prefix {
            if p.is_empty() || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::invalid(
                    "id_prefix",
                    "must be non-empty, without whitespace or control characters",
                ));
            }
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        Ok(())
    }
}
