//! Retrying statements that lost a deadlock or serialization race.
//!
//! The server rolled such a statement back, so running it again is safe. Releases,
//! extensions and operators' calls must not give up easily: under `SERIALIZABLE`
//! isolation with many pollers on one key, a release can lose several races in a row,
//! and a release that fails leaves the lock taken until it expires.

use std::future::Future;
use std::time::Duration;

use super::Failure;
use crate::support::backoff::Backoff;
use crate::support::error::{Class, Error, Result};

/// How often a statement that lost a race is tried again before the call gives up.
/// With the back-off below the tries span about two seconds, plus what each try
/// waits in the database (on MariaDB a release or extension waits a second at most on
/// a row lock before it asks, without waiting, whether the lease is still ours).
const RETRIES: u32 = 40;

/// Runs a statement again while it loses deadlock or serialization races, with a
/// jittered back-off so that the retries of several losers do not collide again.
pub(crate) async fn retry_contention<T, F, Fut>(statement: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    retry_failure(statement).await.map_err(Error::from)
}

/// [`retry_contention`], answering the last failure with its class.
pub(crate) async fn retry_failure<T, F, Fut>(mut statement: F) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(64));
    let mut tries = 0;
    loop {
        match statement().await {
            Err(f) if f.class == Class::Contention && tries < RETRIES => {
                tries += 1;
                tokio::time::sleep(backoff.next_delay()).await;
            }
            other => return other,
        }
    }
}
