//! What an operator sees of the read-write locks: [`Locker::rwlocks`] and
//! [`RwLockInfo`], read from the same rows as [`Locker::list`].

use std::collections::BTreeMap;

use crate::support::error::Result;
use crate::support::validate::{parent_of, Shared, OWNER_ID_CHARS, WRITE_MARKER};

use super::admin::LockInfo;
use super::locker::Locker;

/// A read-write lock that is held or waited for, as [`Locker::rwlocks`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockInfo {
    /// The lock's name, as given to [`Locker::read_lock`] and [`Locker::write_lock`].
    pub name: String,
    /// The writer's hold, when the write side holds the name: the name's own row,
    /// whose strategy reads `write`.
    pub writer: Option<LockInfo>,
    /// The reads that hold the name, each a lease of its own (its key is internal:
    /// the name followed by `@read:` and the reader's owner
    /// id).
    pub readers: Vec<LockInfo>,
    /// The writers that wait for the name: each holds an intent, a lease of its own
    /// (its key is internal: the name followed by `@write:`
    /// and the writer's owner id), so that later readers wait behind it.
    pub waiting_writers: Vec<LockInfo>,
}

impl Locker {
    /// The read-write locks of this table that are held or waited for, by name, as
    /// [`list`](Self::list) shows their rows (at most [`MAX_LISTED`](crate::MAX_LISTED)
    /// rows are read). Times are the database's.
    ///
    /// # Errors
    ///
    /// A database error, or the missing-table error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), sqlock::Error> {
    /// # let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await?;
    /// # sqlock::migrate(&pool).await?;
    /// let locker = sqlock::Locker::new(pool)?;
    /// let read = locker.read_lock("report").acquire().await?;
    /// let locks = locker.rwlocks().await?;
    /// assert_eq!(locks[0].name, "report");
    /// assert_eq!(locks[0].readers.len(), 1);
    /// assert!(locks[0].writer.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rwlocks(&self) -> Result<Vec<RwLockInfo>> {
        Ok(RwLockInfo::from_locks(self.list().await?))
    }
}

impl RwLockInfo {
    /// The read-write locks that the rows `locks` (from [`Locker::list`]) hold or wait
    /// for, sorted by name; rows of anything else are left out. For a listing and its
    /// read-write locks from one read of the table.
    pub fn from_locks(locks: impl IntoIterator<Item = LockInfo>) -> Vec<RwLockInfo> {
        let mut by_name: BTreeMap<String, RwLockInfo> = BTreeMap::new();
        for lock in locks {
            if lock.strategy == "write" && !lock.owner.is_empty() {
                let name = lock.key.clone();
                of(&mut by_name, &name).writer = Some(lock);
            } else if let Some((name, Shared::Read)) = parent_of(&lock.key) {
                let name = name.to_owned();
                of(&mut by_name, &name).readers.push(lock);
            } else if let Some(name) = intent_of(&lock.key) {
                let name = name.to_owned();
                of(&mut by_name, &name).waiting_writers.push(lock);
            }
        }
        by_name.into_values().collect()
    }
}

/// The name of a waiting writer's intent key: `<name>@write:<owner>`.
fn intent_of(key: &str) -> Option<&str> {
    let cut = key.len().checked_sub(OWNER_ID_CHARS + WRITE_MARKER.len())?;
    let name = key.get(..cut)?;
    (key.get(cut..)?.starts_with(WRITE_MARKER) && !name.is_empty()).then_some(name)
}

/// The entry of `name` in `by_name`, made empty if there is none yet.
fn of<'m>(by_name: &'m mut BTreeMap<String, RwLockInfo>, name: &str) -> &'m mut RwLockInfo {
    by_name
        .entry(name.to_owned())
        .or_insert_with(|| RwLockInfo {
            name: name.to_owned(),
            writer: None,
            readers: Vec::new(),
            waiting_writers: Vec::new(),
        })
}
