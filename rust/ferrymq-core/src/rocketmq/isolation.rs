//! Endpoint isolation (rocketmq-v2 reference §7): an endpoint whose send failed is avoided by
//! queue selection until a heartbeat to it succeeds again.

use std::collections::HashSet;

use parking_lot::RwLock;

use super::endpoints::Endpoints;

/// The set of isolated endpoints of one client.
#[derive(Debug, Default)]
pub struct Isolation {
    set: RwLock<HashSet<Endpoints>>,
}

impl Isolation {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Isolate `endpoints`; returns whether it was newly isolated.
    pub fn isolate(&self, endpoints: &Endpoints) -> bool {
        if self.set.read().contains(endpoints) {
            return false;
        }
        let added = self.set.write().insert(endpoints.clone());
        if added {
            tracing::warn!(target: "ferrymq::rocketmq", endpoints = %endpoints, "endpoint isolated after a failed request");
        }
        added
    }

    /// Let `endpoints` rejoin (after a successful heartbeat); returns whether it was isolated.
    pub fn rejoin(&self, endpoints: &Endpoints) -> bool {
        if !self.set.read().contains(endpoints) {
            return false;
        }
        let removed = self.set.write().remove(endpoints);
        if removed {
            tracing::info!(target: "ferrymq::rocketmq", endpoints = %endpoints, "isolated endpoint rejoined after a successful heartbeat");
        }
        removed
    }

    /// Whether `endpoints` is isolated.
    pub fn is_isolated(&self, endpoints: &Endpoints) -> bool {
        let set = self.set.read();
        !set.is_empty() && set.contains(endpoints)
    }

    /// Whether nothing is isolated (the fast path of queue selection).
    pub fn is_empty(&self) -> bool {
        self.set.read().is_empty()
    }

    /// The isolated endpoints, sorted by key.
    pub fn snapshot(&self) -> Vec<Endpoints> {
        let mut v: Vec<_> = self.set.read().iter().cloned().collect();
        v.sort_by(|a, b| a.key().cmp(b.key()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isolate_and_rejoin() {
        let iso = Isolation::new();
        let a = Endpoints::parse_access_point("a:1").unwrap().endpoints;
        let b = Endpoints::parse_access_point("b:1").unwrap().endpoints;
        assert!(iso.is_empty());
        assert!(iso.isolate(&a));
        assert!(!iso.isolate(&a));
        assert!(iso.is_isolated(&a));
        assert!(!iso.is_isolated(&b));
        assert_eq!(iso.snapshot(), vec![a.clone()]);
        assert!(!iso.rejoin(&b));
        assert!(iso.rejoin(&a));
        assert!(iso.is_empty());
    }
}
