//! Latency samples and their percentiles.

use std::time::Duration;

/// Latencies in microseconds, kept whole: a benchmark run records at most a few
/// hundred thousand, and exact percentiles need no histogram.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples {
    micros: Vec<u32>,
    sorted: bool,
}

impl Samples {
    /// Records one latency.
    pub(crate) fn push(&mut self, d: Duration) {
        self.micros
            .push(u32::try_from(d.as_micros()).unwrap_or(u32::MAX));
        self.sorted = false;
    }

    /// Adds the samples of another run.
    pub(crate) fn extend(&mut self, other: &Samples) {
        self.micros.extend_from_slice(&other.micros);
        self.sorted = false;
    }

    /// How many latencies were recorded.
    pub(crate) fn len(&self) -> usize {
        self.micros.len()
    }

    /// The `p`-th percentile (0 to 100) in microseconds, by the nearest-rank method;
    /// `None` without samples.
    pub(crate) fn percentile(&mut self, p: f64) -> Option<u32> {
        if self.micros.is_empty() {
            return None;
        }
        if !self.sorted {
            self.micros.sort_unstable();
            self.sorted = true;
        }
        let n = self.micros.len();
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        Some(self.micros[rank.clamp(1, n) - 1])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut s = Samples::default();
        assert_eq!(s.percentile(50.0), None);
        for us in (1..=100).rev() {
            s.push(Duration::from_micros(us));
        }
        assert_eq!(s.percentile(50.0), Some(50));
        assert_eq!(s.percentile(99.0), Some(99));
        assert_eq!(s.percentile(100.0), Some(100));
        assert_eq!(s.percentile(0.0), Some(1));
        assert_eq!(s.len(), 100);
    }
}
