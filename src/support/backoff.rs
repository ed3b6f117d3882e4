//! Capped exponential back-off with jitter, for waiting on a busy lock.
//!
//! Each wait is drawn at random from the upper half of the current step, and the step
//! doubles up to a cap, so waiters that collide once spread out instead of polling in
//! step with each other.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    step: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        // A zero step would poll the database in a hot loop.
        let min = min.max(Duration::from_millis(1));
        Self {
            step: min,
            max: max.max(min),
        }
    }

    /// The next wait.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = self.step.saturating_mul(2).min(self.max);
        let half = step / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(80));
        let waits: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
        for (w, step) in waits.iter().zip([10u64, 20, 40, 80, 80, 80]) {
            assert!(*w >= Duration::from_millis(step) / 2, "{w:?} {step}");
            assert!(*w <= Duration::from_millis(step), "{w:?} {step}");
        }
    }
}
