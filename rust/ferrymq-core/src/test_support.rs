//! Helpers shared by the crate's unit tests.

use std::time::{Duration, Instant};

/// Poll `cond` every 5 ms until it holds; fails the test, naming `what`, after 20 s.
pub(crate) async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
