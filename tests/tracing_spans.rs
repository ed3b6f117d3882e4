//! The tracing spans and events, read back through a subscriber of the test's own: an
//! acquisition and a release each run in a span with the key, strategy, owner and
//! token; a busy answer is a debug event; a loss a warning with its reason. On SQLite,
//! whose statements need no server (the spans are made above the database layer).
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// What the subscriber saw: each span with its fields, each event with its level and
/// fields (the message as `message`).
#[derive(Debug, Default)]
struct Seen {
    spans: HashMap<u64, (&'static str, HashMap<String, String>)>,
    events: Vec<(Level, HashMap<String, String>)>,
}

#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Seen>>,
    next: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("sqlock")
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = HashMap::new();
        span.record(&mut Fields(&mut fields));
        let name = span.metadata().name();
        self.seen.lock().unwrap().spans.insert(id, (name, fields));
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut seen = self.seen.lock().unwrap();
        if let Some((_, fields)) = seen.spans.get_mut(&span.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        let level = *event.metadata().level();
        self.seen.lock().unwrap().events.push((level, fields));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

impl Recorder {
    /// The spans named `name`, with their fields.
    fn spans(&self, name: &str) -> Vec<HashMap<String, String>> {
        let seen = self.seen.lock().unwrap();
        seen.spans
            .values()
            .filter(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
            .collect()
    }

    /// The events of `level` whose message is `message`, with their fields.
    fn events(&self, level: Level, message: &str) -> Vec<HashMap<String, String>> {
        let seen = self.seen.lock().unwrap();
        seen.events
            .iter()
            .filter(|(l, f)| *l == level && f.get("message").is_some_and(|m| m == message))
            .map(|(_, f)| f.clone())
            .collect()
    }
}

// The runtime is the test's thread alone, so every task of the test runs where the
// subscriber is the default.
#[tokio::test(flavor = "current_thread")]
async fn acquisitions_releases_busy_answers_and_losses_are_traced() -> anyhow::Result<()> {
    let recorder = Recorder::default();
    let _default = tracing::subscriber::set_default(recorder.clone());
    let backends = common::backends_of("tracing_spans", &[sqlock::Dialect::Sqlite]).await;
    let b = &backends[0];
    b.fresh_table().await?;
    let a = b
        .builder()
        .await?
        .renew_interval(Duration::from_millis(20))
        .build()?;
    let other = b.locker().await?;

    let guard = a.acquire("traced").await?;
    let token = guard.fencing_token().to_string();
    let owner = a.owner().to_string();
    let acquired = recorder.spans("sqlock.acquire");
    assert!(
        acquired
            .iter()
            .any(|f| f.get("key").is_some_and(|k| k == "traced")
                && f.get("strategy").is_some_and(|s| s == "lease")
                && f.get("owner") == Some(&owner)
                && f.get("token") == Some(&token)),
        "{acquired:?}"
    );

    assert!(other.try_acquire("traced").await?.is_none());
    assert!(!recorder.events(Level::DEBUG, "lock busy").is_empty());

    assert!(guard.release().await?);
    let released = recorder.spans("sqlock.release");
    assert!(
        released
            .iter()
            .any(|f| f.get("key").is_some_and(|k| k == "traced")
                && f.get("owner") == Some(&owner)
                && f.get("token") == Some(&token)),
        "{released:?}"
    );

    // A writer's wait: its intent's acquisition and its write side's, each in a span
    // of its own, with its own key and token.
    let write = a.write_lock("traced-rw").acquire().await?;
    let write_token = write.fencing_token().to_string();
    let acquired = recorder.spans("sqlock.acquire");
    let intent = format!("traced-rw@write:{owner}");
    assert!(
        acquired
            .iter()
            .any(|f| f.get("key") == Some(&intent) && f.contains_key("token")),
        "{acquired:?}"
    );
    assert!(
        acquired
            .iter()
            .any(|f| f.get("key").is_some_and(|k| k == "traced-rw")
                && f.get("token") == Some(&write_token)),
        "{acquired:?}"
    );
    assert!(write.release().await?);

    // A loss: the lease released by force, found by the next renewal.
    let guard = a.acquire("lost").await?;
    assert!(other.force_release_now("lost").await?);
    tokio::time::timeout(Duration::from_secs(60), guard.lost().wait()).await?;
    let lost = recorder.events(Level::WARN, "lock lost");
    assert!(
        lost.iter()
            .any(|f| f.get("key").is_some_and(|k| k == "lost")
                && f.get("owner") == Some(&owner)
                && f.contains_key("reason")),
        "{lost:?}"
    );
    Ok(())
}
