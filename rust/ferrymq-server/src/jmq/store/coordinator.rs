//! The coordinator's partition assignment (reference §7.5).

use std::time::{Duration, Instant};

use super::{codes, JmqStore, COORDINATOR_MIN_CONNECTIONS};

impl JmqStore {
    /// The coordinator's assignment for `member` (a client IP): partition groups are shared by
    /// up to [`COORDINATOR_MIN_CONNECTIONS`] members, then dealt out round-robin.
    pub fn assign(
        &self,
        topic: &str,
        app: &str,
        member: &str,
        session_timeout: Duration,
    ) -> std::result::Result<Vec<i16>, i32> {
        self.sync_topic(topic);
        let now = Instant::now();
        let mut st = self.state.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return Err(codes::FW_TOPIC_NOT_EXIST);
        };
        let members = t.members.entry(app.to_string()).or_default();
        members.retain(|_, until| *until > now);
        members.insert(
            member.to_string(),
            crate::duration::deadline(now, session_timeout),
        );
        let mut names: Vec<&String> = members.keys().collect();
        names.sort();
        let me = names.iter().position(|n| *n == member).unwrap_or(0);
        let m = names.len();
        let mut out = Vec::new();
        for (i, g) in t.groups.iter().enumerate() {
            if m <= COORDINATOR_MIN_CONNECTIONS || i % m == me {
                out.extend(g.partitions.iter().copied());
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}
