//! How long a flow that failed for a passing cause waits before it starts again.

use std::time::Duration;

/// The first pause after a transient failure.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest pause: a cluster down for an hour is tried once a minute.
pub const CAP: Duration = Duration::from_secs(60);
/// How long a flow must run without failing for its next failure to start from [`FIRST`] again.
pub const RESET_AFTER: Duration = Duration::from_secs(60);

/// Exponential backoff: 1 s, 2 s, 4 s ... up to 60 s, back to 1 s after a minute of running.
///
/// ```
/// use std::time::Duration;
/// use strait_core::flows::Backoff;
/// let mut b = Backoff::default();
/// assert_eq!(b.failed(Duration::from_secs(3)), Duration::from_secs(1));
/// assert_eq!(b.failed(Duration::ZERO), Duration::from_secs(2));
/// assert_eq!(b.failed(Duration::from_secs(120)), Duration::from_secs(1)); // it had run long enough
/// ```
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// The flow failed after running for `ran`; returns how long to wait before starting it.
    pub fn failed(&mut self, ran: Duration) -> Duration {
        if ran >= RESET_AFTER {
            self.failures = 0;
        }
        let pause = FIRST.saturating_mul(1u32 << self.failures.min(16)).min(CAP);
        self.failures = self.failures.saturating_add(1);
        pause
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_cap_and_reset_after_a_long_run() {
        let mut b = Backoff::default();
        let pauses: Vec<u64> = (0..9).map(|_| b.failed(Duration::from_secs(1)).as_secs()).collect();
        assert_eq!(pauses, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(b.failed(RESET_AFTER), FIRST);
        assert_eq!(b.failed(RESET_AFTER - Duration::from_millis(1)), Duration::from_secs(2));
    }
}
