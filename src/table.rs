//! The lock table a handle works on: its pool and rendered statements, its owner id,
//! its settings, and the keepers that work on it (the watchdog, the release listener).
//!
//! This is what the strategies, the guards and the keepers share. The public
//! [`Locker`](crate::Locker) is a handle to one of these; nothing here knows of it.

#[cfg(feature = "postgres")]
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::dialect::{DbPool, GaleraCheck, Statements};
use crate::strategy_name::Strategy;
use crate::watchdog::Watchdog;

/// The settings of a handle, which the handles made from it copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) ttl: Duration,
    pub(crate) poll_min: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) auto_renew: bool,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) strategy: Strategy,
    pub(crate) keepalive: Duration,
}

/// One handle's view of the lock table: everything its guards and requests share.
#[derive(Debug)]
pub(crate) struct LockTable {
    pub(crate) db: DbPool,
    pub(crate) stmts: Statements,
    pub(crate) owner: Uuid,
    pub(crate) owner_text: String,
    pub(crate) settings: Settings,
    pub(crate) watchdog: Watchdog,
    /// The release listener shared by the handles of one family, when waiters are
    /// woken by notifications.
    #[cfg(feature = "postgres")]
    pub(crate) notifier: Option<Arc<crate::notify::Notifier>>,
    /// Whether the server is a Galera node, checked before the first acquisition that
    /// needs to know.
    pub(crate) galera: GaleraCheck,
}

impl LockTable {
    /// A table handle with a new owner id.
    pub(crate) fn new(
        db: DbPool,
        stmts: Statements,
        settings: Settings,
        #[cfg(feature = "postgres")] notifier: Option<Arc<crate::notify::Notifier>>,
    ) -> Self {
        let owner = Uuid::new_v4();
        let owner_text = owner.hyphenated().to_string();
        let watchdog = Watchdog::new(
            settings.renew_interval,
            db.clone(),
            stmts.clone(),
            owner_text.clone(),
        );
        Self {
            db,
            stmts,
            owner,
            owner_text,
            settings,
            watchdog,
            #[cfg(feature = "postgres")]
            notifier,
            galera: GaleraCheck::new(),
        }
    }

    /// Another handle on the same table, pool and settings, with an owner id of its own.
    pub(crate) fn sibling(&self) -> Self {
        Self::new(
            self.db.clone(),
            self.stmts.clone(),
            self.settings,
            #[cfg(feature = "postgres")]
            self.notifier.clone(),
        )
    }
}
