//! The listener task: one connection outside the application's pool that listens on
//! the family's channels, keeps the lock table's oid to tell its payloads from another
//! table's, and hands what it hears to the registry; it reconnects with back-off.

use std::sync::Weak;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};
use tokio::time::Instant;

use super::registry::Shared;

/// The first pause before the listener tries to connect again after a failure.
const RETRY_MIN: Duration = Duration::from_millis(500);

/// The longest pause between two connection attempts of the listener.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// How long after asking the server for the lock table's oid the listener may ask
/// again, for a payload that names another oid.
const ASK_AGAIN: Duration = Duration::from_secs(1);

/// The listener task: listens on the channel and wakes the waiters of each key
/// announced, reconnecting with back-off when the connection fails. Failures are
/// logged and never reach an acquisition, which keeps polling meanwhile.
pub(super) async fn listen(
    weak: Weak<Shared>,
    app_pool: PgPool,
    channels: [String; 2],
    identity: String,
) {
    // The listener's connection is made like the application's, but is not one of its
    // pool's: a listener never takes a connection the application may be waiting for.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with((*app_pool.connect_options()).clone());
    drop(app_pool);
    let mut table = Table {
        identity,
        oid: None,
        asked: None,
    };
    let mut pause = RETRY_MIN;
    loop {
        let failure = match connect(&pool, &channels).await {
            Ok(mut listener) => {
                pause = RETRY_MIN;
                // Listening from now on: a release before this point was not heard.
                match weak.upgrade() {
                    Some(shared) => shared.wake_all(),
                    None => return,
                }
                loop {
                    match listener.try_recv().await {
                        Ok(Some(n)) => {
                            let named = match table.ours(&mut listener, n.payload()).await {
                                Ok(named) => named,
                                Err(e) => break e,
                            };
                            match (weak.upgrade(), named) {
                                (Some(shared), Some(named)) => shared.heard(n.channel(), named),
                                (Some(_), None) => {}
                                (None, _) => return,
                            }
                        }
                        // The connection was lost (notifications may have been lost with
                        // it); the next call reconnects and listens again.
                        Ok(None) => match weak.upgrade() {
                            Some(shared) => shared.wake_all(),
                            None => return,
                        },
                        Err(e) => break e,
                    }
                }
            }
            Err(e) => e,
        };
        tracing::warn!(channel = %channels[0], error = %failure, retry_in = ?pause,
            "the release listener failed; waiters poll until it is back");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
        if weak.strong_count() == 0 {
            return;
        }
    }
}

/// The lock table's identity, as the listener last asked the server for it.
struct Table {
    /// `notify_table.sql`, rendered.
    identity: String,
    /// The table's oid, once known.
    oid: Option<i64>,
    /// When the server was last asked.
    asked: Option<Instant>,
}

impl Table {
    /// What `payload` (`<table oid>:<rest>`) names after the oid, when the oid is this
    /// table's; `None` for another table's payload, or one that names none. The server
    /// is asked for the table's oid when it is not known, and again when a payload
    /// names another oid, at most once a second: the table may have been created again
    /// (a new oid) since it was last asked.
    async fn ours<'p>(
        &mut self,
        conn: &mut PgListener,
        payload: &'p str,
    ) -> Result<Option<&'p str>, sqlx::Error> {
        let Some((oid, named)) = payload
            .split_once(':')
            .and_then(|(oid, named)| Some((oid.parse::<i64>().ok()?, named)))
        else {
            return Ok(None);
        };
        if self.oid != Some(oid) && self.asked.is_none_or(|at| at.elapsed() >= ASK_AGAIN) {
            self.asked = Some(Instant::now());
            self.oid = sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(self.identity.clone()))
                .fetch_one(&mut *conn)
                .await?;
        }
        Ok((self.oid == Some(oid)).then_some(named))
    }
}

async fn connect(pool: &PgPool, channels: &[String; 2]) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // The pool is the listener's own: its closing is no event to watch for.
    listener.ignore_pool_close_event(true);
    listener
        .listen_all(channels.iter().map(String::as_str))
        .await?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    /// Every notification sqlock sends names its table by oid first, as the listener
    /// expects (`Table::ours`): one without it is dropped, and its waiters wait for
    /// their next poll.
    #[test]
    fn every_payload_names_its_table_first() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/postgres");
        let mut notifying = 0;
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            let calls = code.matches("pg_notify(").count();
            if calls == 0 {
                continue;
            }
            notifying += 1;
            let prefixed = code
                .matches("CAST(CAST('\"{table}\"' AS regclass) AS oid)::TEXT || ':' ||")
                .count();
            assert_eq!(
                calls,
                prefixed,
                "{}: a payload without its table",
                path.display()
            );
        }
        assert!(notifying >= 8, "the notifying statements were not found");
    }
}
