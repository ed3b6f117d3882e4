//! Progress lines on stderr, each stamped with the seconds since the run started.

use std::time::Instant;

/// The run's clock, and its progress lines.
#[derive(Debug)]
pub(crate) struct Progress {
    started: Instant,
}

impl Progress {
    /// Starts the clock.
    pub(crate) fn start() -> Self {
        Self {
            started: Instant::now(),
        }
    }

    /// Prints one progress line.
    pub(crate) fn note(&self, what: &str) {
        eprintln!("[{:6.1}s] {what}", self.secs());
    }

    /// Seconds since the run started.
    pub(crate) fn secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}
