//! SQLite: statements from `sql/sqlite/`, results through `RETURNING`.
//!
//! Every lock statement is one autocommit statement, so two processes sharing a file
//! never deadlock on a read-then-write transaction; `SQLITE_BUSY` and `SQLITE_LOCKED`
//! (after sqlx's busy timeout) count as contention and are retried. SQLite has no row
//! locks (no for-update strategy) and no scheduler inside.
//!
//! Presence markers are files beside the database (see `presence.rs`): an acquisition
//! that finds a key busy, where such files exist, asks who holds it and takes the lease
//! when the holder's marker file is free, its process gone; a semaphore's does the same
//! for its permits (`strategy/semaphore/steps.rs`).

use std::path::{Path, PathBuf};

use sqlx::SqlitePool;

use crate::support::error::Class;
use crate::support::validate::TableName;

use super::backend::{sql, Backend, Base, CommonTemplates, GoneOwners};
use super::dialect::Dialect;
use super::fence::fence_connection;
use super::marker_file::{gone_owner, marker_dir};
use super::outcome::{Grant, Listed};
use super::runner::{grants, ints, texts, On};
use super::statement::json_array;
use super::statement::{Mode, Statement, Target};
use super::values::{Acquire, Marker};

/// A SQLite database file and one lock table in it.
#[derive(Debug)]
pub(crate) struct Sqlite {
    base: Base<sqlx::Sqlite>,
    /// Who holds a live lease on a key, after an acquisition found it busy.
    presence_holder: Statement<Acquire<'static>>,
    /// How many live leases the owner of a marker file holds (the sweep's question).
    presence_leases: Statement<Marker<'static>>,
    /// The folder of presence marker files beside the database; `None` in memory.
    markers: Option<PathBuf>,
}

impl Sqlite {
    pub(crate) fn new(pool: SqlitePool, table: &TableName, mode: Mode) -> Self {
        let target = Target {
            table,
            placeholders: Dialect::Sqlite.placeholders(),
            mode,
        };
        let markers = marker_dir(&pool.connect_options());
        Self {
            base: Base::new(pool, &target, &CommonTemplates::sqlite()),
            presence_holder: target.render(sql!("sqlite", "presence_holder")),
            presence_leases: target.render(sql!("sqlite", "presence_leases")),
            markers,
        }
    }

    /// The folder of presence marker files, `None` for an in-memory database.
    pub(crate) fn markers(&self) -> Option<&Path> {
        self.markers.as_deref()
    }

    /// Removes the marker files of owners whose process is gone (the file's lock is
    /// free) and who hold no lease an acquisition could take over: how many. Each file
    /// is removed while this holds its lock, so that no acquisition is using it for a
    /// takeover meanwhile; a marker still needed for one is kept, and removed by a later
    /// sweep once its leases are gone.
    pub(crate) async fn sweep_markers(&self) -> Result<u64, sqlx::Error> {
        let Some(dir) = self.markers.as_deref() else {
            return Ok(0);
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(owner) = name.to_str() else {
                continue;
            };
            // Locked by us until dropped: the owner's process is gone.
            let Some(lock) = gone_owner(dir, owner) else {
                continue;
            };
            let leases = ints(
                On::Pool(self.pool(), false),
                &self.presence_leases,
                &Marker(owner),
            )
            .await?;
            if leases.first().copied().unwrap_or(0) == 0
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
            drop(lock);
        }
        Ok(removed)
    }
}

impl Backend for Sqlite {
    type Db = sqlx::Sqlite;

    const DIALECT: Dialect = Dialect::Sqlite;

    const MARKERS_IN_FILES: bool = true;

    const QUEUED_FLAG: bool = false;

    fn base(&self) -> &Base<sqlx::Sqlite> {
        &self.base
    }

    /// By primary result code.
    fn classify(e: &sqlx::Error) -> Class {
        let Some(db) = e.as_database_error() else {
            return Class::Other;
        };
        let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
        match code & 0xff {
            // SQLITE_BUSY, SQLITE_LOCKED
            5 | 6 => Class::Contention,
            // SQLITE_ERROR carries "no such table" for a missing table.
            1 if db.message().contains("no such table") => Class::MissingTable,
            _ => Class::Other,
        }
    }

    /// `rows` with `gone` set for each holder whose presence marker file is there and
    /// free: its process died, and the next acquisition takes its holds at once (as
    /// `lease_acquire` finds). The file is locked only for the look.
    fn with_gone(&self, mut rows: Vec<Listed>) -> Vec<Listed> {
        let Some(dir) = self.markers.as_deref() else {
            return rows;
        };
        for row in &mut rows {
            if !row.owner.is_empty() && row.strategy != "for-update" {
                row.gone = gone_owner(dir, &row.owner).is_some();
            }
        }
        rows
    }

    fn markers_outside(&self) -> bool {
        self.markers.as_deref().is_some_and(Path::is_dir)
    }

    /// Of `owners`, those whose marker file is there and free, each file locked until
    /// the answer is dropped.
    fn gone_owners(&self, owners: &[String]) -> GoneOwners {
        let mut gone = GoneOwners::default();
        let Some(dir) = self.markers.as_deref() else {
            return gone;
        };
        let mut names = Vec::new();
        for owner in owners {
            if names.contains(owner) {
                continue;
            }
            if let Some(file) = gone_owner(dir, owner) {
                names.push(owner.clone());
                gone.held.push(file);
            }
        }
        gone.count = names.len();
        gone.json = json_array(&names);
        gone.owners = names;
        gone
    }

    /// When the key is busy and presence markers exist beside the database: asks who
    /// holds it, and when the holder's marker file is free (its process gone), sends
    /// the acquisition again, allowed to take that owner's lease, while holding the
    /// marker so that the answer cannot change meanwhile.
    async fn lease_acquire(&self, a: &Acquire<'_>) -> Result<Vec<Grant>, sqlx::Error> {
        let s = &self.common().lease_acquire;
        let rows = grants(self.pool(), s, a, false).await?;
        let Some(dir) = self.markers.as_deref() else {
            return Ok(rows);
        };
        if !rows.is_empty() || !dir.is_dir() {
            return Ok(rows);
        }
        let holders = texts(On::Pool(self.pool(), false), &self.presence_holder, a).await?;
        let Some(holder) = holders.first() else {
            return Ok(rows);
        };
        let Some(marker) = gone_owner(dir, holder) else {
            return Ok(rows);
        };
        let again = Acquire { gone: holder, ..*a };
        let taken = grants(self.pool(), s, &again, false).await;
        drop(marker);
        taken
    }
}

fence_connection!(sqlx::SqliteConnection, Sqlite, "sqlite");
