//! What sqlock records through the `metrics` facade, read back through the facade's
//! in-memory recorder, which the first use installs for the whole test binary.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What the recorder has seen since the test binary started, by metric and labels
/// (`name{label=value,...}`, labels sorted): counters and gauges as they stand, and
/// how many samples each histogram has had. A snapshot of the recorder hands over
/// what changed since the one before (it resets what it read), so the changes are
/// summed here.
#[derive(Default)]
pub struct Seen {
    pub counters: HashMap<String, u64>,
    pub gauges: HashMap<String, f64>,
    pub samples: HashMap<String, usize>,
}

fn recorder() -> &'static (Snapshotter, Mutex<Seen>) {
    static RECORDER: OnceLock<(Snapshotter, Mutex<Seen>)> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the test binary installs no other recorder");
        (snapshotter, Mutex::new(Seen::default()))
    })
}

/// What the recorder has seen, brought up to date.
pub fn seen() -> MutexGuard<'static, Seen> {
    let (snapshotter, seen) = recorder();
    let mut seen = seen.lock().unwrap();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let id = format!("{}{{{}}}", key.name(), labels.join(","));
        match value {
            DebugValue::Counter(n) => *seen.counters.entry(id).or_default() += n,
            // Only ever incremented and decremented: each snapshot hands over the
            // change since the last one.
            DebugValue::Gauge(v) => *seen.gauges.entry(id).or_default() += v.into_inner(),
            DebugValue::Histogram(v) => *seen.samples.entry(id).or_default() += v.len(),
        }
    }
    seen
}

/// The series id of `name` for a lease of `table`, with `extra` labels.
pub fn series(name: &str, table: &str, extra: &[(&str, &str)]) -> String {
    let mut labels = vec!["strategy=lease".to_owned(), format!("table={table}")];
    labels.extend(extra.iter().map(|(k, v)| format!("{k}={v}")));
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

pub fn counter(id: &str) -> u64 {
    seen().counters.get(id).copied().unwrap_or(0)
}

pub fn gauge(id: &str) -> f64 {
    seen().gauges.get(id).copied().unwrap_or(0.0)
}

pub fn samples(id: &str) -> usize {
    seen().samples.get(id).copied().unwrap_or(0)
}
