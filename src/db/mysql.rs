//! MariaDB: statements from `sql/mysql/`, results through `INSERT ... RETURNING` and,
//! where MariaDB has no `RETURNING` (UPDATE), through `LAST_INSERT_ID(expr)` and
//! matched-row counts; statements told not to wait on row locks, followed by reads
//! that wait on nothing; Galera clusters; the event scheduler for the scheduled sweep.

use std::time::Duration;

use sqlx::mysql::MySqlDatabaseError;
use sqlx::{MySql, MySqlPool, Row as _};
use tokio::sync::OnceCell;

use crate::support::backoff::Backoff;
use crate::support::error::{Class, Error};
use crate::support::validate::TableName;

use super::backend::{
    sql, Backend, Base, CommonTemplates, ForUpdate, ForUpdateTemplates, RowLocks,
};
use super::dialect::Dialect;
use super::fence::fence_connection;
use super::outcome::{Failure, Grant, Renewal};
use super::runner::{grants, ints, texts, On, Runner};
use super::scheduling::{SchedulerState, SchedulerStatements, Scheduling};
use super::statement::{batch_json, batch_names, Mode, Statement, Target};
use super::transaction::DbTransaction;
use super::values::{Acquire, Held, Key, Nothing, Renew, Schedule, Sweep};

/// How often an acquisition is sent while the key's fence bucket is in use by another
/// statement: with pauses of at most 16 ms, about a second.
const BUCKET_TRIES: u32 = 70;

/// A MariaDB database (a server on its own, or a Galera node) and one lock table in it.
#[derive(Debug)]
pub(crate) struct MariaDb {
    base: Base<MySql>,
    for_update: ForUpdate,
    /// The acquisition as a node of a Galera cluster sends it: waiting on nothing, like
    /// the other, but without SKIP LOCKED for the fence bucket, which Galera's
    /// replication does not bear (commits then fail with error 1180).
    lease_acquire_galera: Statement<Acquire<'static>>,
    /// Whether the key has a row, read before the for-update transaction.
    for_update_probe: Statement<Key<'static>>,
    /// Whether a lease is still ours, by a read that waits on no row lock; asked when a
    /// release or extension found its row locked.
    lease_held: Statement<Held<'static>>,
    /// Which leases of a batch survived, after a short renewal count.
    lease_survivors: Statement<Renew<'static>>,
    /// The renewal of the survivors after a renewal met a locked row.
    lease_renew_again: Statement<Renew<'static>>,
    /// The sweep's first step, locking the rows to reclaim with SKIP LOCKED (MariaDB's
    /// DELETE cannot skip locked rows itself).
    sweep_claim: Statement<Sweep<'static>>,
    /// The size of the Galera cluster the server belongs to, if any.
    galera_check: Statement<Nothing>,
    /// The answer of `galera_check`, asked once, before the first acquisition that
    /// needs it: the cluster's size, or `None` for a server on its own.
    galera: OnceCell<Option<i64>>,
    scheduler: SchedulerStatements,
    /// Whether the table's event exists (DROP EVENT IF EXISTS does not say).
    scheduled: Statement<Nothing>,
}

impl MariaDb {
    pub(crate) fn new(pool: MySqlPool, table: &TableName, mode: Mode) -> Self {
        let target = Target {
            table,
            placeholders: Dialect::MySql.placeholders(),
            mode,
        };
        Self {
            base: Base::new(pool, &target, &CommonTemplates::mysql()),
            lease_acquire_galera: target
                .render(&without_skip_locked(sql!("mysql", "lease_acquire"))),
            for_update: ForUpdate::render(&ForUpdateTemplates::mysql(), &target),
            for_update_probe: target.render(sql!("mysql", "for_update_probe")),
            lease_held: target.render(sql!("mysql", "lease_held")),
            lease_survivors: target.render(sql!("mysql", "lease_survivors")),
            lease_renew_again: target.render(sql!("mysql", "lease_renew_again")),
            sweep_claim: target.render(sql!("mysql", "sweep_claim")),
            galera_check: target.render(sql!("mysql", "galera_check")),
            galera: OnceCell::new(),
            scheduler: SchedulerStatements {
                check: target.render(sql!("mysql", "sweep_scheduler")),
                schedule: target.render(sql!("mysql", "sweep_schedule")),
                unschedule: target.render(sql!("mysql", "sweep_unschedule")),
            },
            scheduled: target.render(sql!("mysql", "sweep_scheduled")),
        }
    }

    /// The size of the Galera cluster this server is a node of, when it is one of more
    /// than one node; `None` for a server on its own (or a server without wsrep at
    /// all). Asked once.
    pub(crate) async fn galera_cluster_size(&self) -> Result<Option<i64>, sqlx::Error> {
        self.galera
            .get_or_try_init(|| async {
                match ints(On::Pool(self.pool(), false), &self.galera_check, &Nothing).await {
                    Ok(sizes) => Ok(sizes.into_iter().next().filter(|&n| n > 1)),
                    // ER_UNKNOWN_SYSTEM_VARIABLE: a server without wsrep is no Galera node.
                    Err(e) if error_number(&e) == Some(1193) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await
            .copied()
    }
}

/// The acquisition's text with the fence bucket locked, waited for at zero, rather than
/// skipped when locked: what a Galera node is sent.
fn without_skip_locked(template: &str) -> String {
    let text = template.replace("FOR UPDATE SKIP LOCKED", "FOR UPDATE");
    debug_assert_ne!(
        text, template,
        "lease_acquire.sql no longer skips a locked bucket"
    );
    text
}

/// MariaDB's error number of `e`, if it is a MariaDB error.
fn error_number(e: &sqlx::Error) -> Option<u16> {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .map(|d| d.number())
}

impl Backend for MariaDb {
    type Db = MySql;

    const DIALECT: Dialect = Dialect::MySql;

    fn base(&self) -> &Base<MySql> {
        &self.base
    }

    /// By error number.
    fn classify(e: &sqlx::Error) -> Class {
        match error_number(e) {
            // ER_LOCK_DEADLOCK (also a Galera certification failure), ER_LOCK_WAIT_TIMEOUT,
            // ER_LOCK_NOWAIT
            Some(1213 | 1205 | 3572) => Class::Contention,
            // ER_NO_SUCH_TABLE, ER_UNKNOWN_SEQUENCES
            Some(1146 | 4091) => Class::MissingTable,
            // ER_PARSE_ERROR, ER_SP_DOES_NOT_EXIST: MySQL has neither RETURNING nor NEXTVAL
            Some(1064 | 1305) => Class::Unsupported,
            _ => Class::Other,
        }
    }

    /// ER_LOCK_WAIT_TIMEOUT or ER_LOCK_NOWAIT.
    fn is_lock_wait_timeout(e: &sqlx::Error) -> bool {
        matches!(error_number(e), Some(1205 | 3572))
    }

    /// ER_ERROR_DURING_COMMIT: a NEXTVAL in an explicit transaction whose write to the
    /// sequence met another transaction's under a lock wait timeout of zero.
    fn is_sequence_busy(e: &sqlx::Error) -> bool {
        matches!(error_number(e), Some(1180))
    }

    /// On a node of a Galera cluster, for the reason given at `lease_acquire`: there the
    /// RETURNING rows of several keys may come before a certification failure (or,
    /// the statement retried by the node, before a second result), which sqlx cannot
    /// read.
    async fn rows_in_transaction(&self) -> Result<bool, sqlx::Error> {
        Ok(self.galera_cluster_size().await?.is_some())
    }

    /// On a node of a Galera cluster the statement runs in an explicit transaction:
    /// Galera certifies an autocommit statement at its COMMIT, after MariaDB has sent
    /// the RETURNING row, and sqlx cannot read an error that follows rows. In an
    /// explicit transaction the certification failure is the COMMIT's own error.
    async fn lease_acquire(&self, a: &Acquire<'_>) -> Result<Vec<Grant>, sqlx::Error> {
        if self.galera_cluster_size().await?.is_some() {
            return grants(self.pool(), &self.lease_acquire_galera, a, true).await;
        }
        let s = &self.common().lease_acquire;
        // No row at all: the key's fence bucket was in use by another statement (see
        // lease_acquire.sql), which holds it for that statement only; sent again after
        // a pause, for about a second at most.
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(16));
        for _ in 1..BUCKET_TRIES {
            let rows = grants(self.pool(), s, a, false).await?;
            if !rows.is_empty() {
                return Ok(rows);
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
        grants(self.pool(), s, a, false).await
    }

    async fn still_held(&self, h: &Held<'_>) -> Result<bool, sqlx::Error> {
        Ok(!ints(On::Pool(self.pool(), false), &self.lease_held, h)
            .await?
            .is_empty())
    }

    /// sqlx connects with CLIENT_FOUND_ROWS: the count is of matched rows, so a full
    /// count means every lease of the batch was renewed (each with the name it holds in
    /// shared mode, if it is a read or a permit: those names are counted too, once
    /// each, and a hold is renewed only with its name). A row locked by another
    /// transaction fails the statement at once (it is told not to wait): the row of a
    /// lease that lapsed may be a for-update holder's, so the survivors are asked for,
    /// which waits on nothing, and renewed alone, waiting out short locks.
    async fn lease_renew(
        &self,
        r: &Renew<'_>,
        batch: &[(String, i64)],
    ) -> Result<Renewal, sqlx::Error> {
        let matched =
            match MySql::execute(On::Pool(self.pool(), false), &self.common().lease_renew, r).await
            {
                Ok(rows) => Some(rows),
                Err(e) if Self::classify(&e) == Class::Contention => None,
                Err(e) => return Err(e),
            };
        let full = batch.len() + batch_names(batch.iter().map(|(k, _)| k.as_str()));
        if matched.is_some_and(|m| usize::try_from(m).is_ok_and(|m| m >= full)) {
            return Ok(Renewal {
                survivors: None,
                statements: 1,
            });
        }
        let survivors = texts(On::Pool(self.pool(), false), &self.lease_survivors, r).await?;
        if matched.is_some() {
            return Ok(Renewal {
                survivors: Some(survivors),
                statements: 2,
            });
        }
        let again = batch_json(
            batch
                .iter()
                .filter(|(k, _)| survivors.contains(k))
                .map(|(k, t)| (k.as_str(), *t)),
        );
        let again = Renew {
            batch: &again,
            ..*r
        };
        let renewed = MySql::execute(
            On::Pool(self.pool(), false),
            &self.lease_renew_again,
            &again,
        )
        .await?;
        let full = survivors.len() + batch_names(survivors.iter().map(String::as_str));
        if usize::try_from(renewed).is_ok_and(|m| m >= full) {
            Ok(Renewal {
                survivors: Some(survivors),
                statements: 3,
            })
        } else {
            // Another lease was lost in between: the next tick sorts it out.
            Err(sqlx::Error::Protocol(
                "a lease was lost while its batch was renewed".into(),
            ))
        }
    }

    /// In two steps of one transaction: lock the rows to reclaim, passing over rows
    /// another transaction holds (SKIP LOCKED, which MariaDB's DELETE lacks), then
    /// delete them by key.
    async fn sweep(&self, s: &Sweep<'_>) -> Result<u64, sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        let keys = texts::<MySql, _>(On::Conn(&mut *tx), &self.sweep_claim, s).await?;
        if keys.is_empty() {
            tx.commit().await?;
            return Ok(0);
        }
        let claimed = batch_json(keys.iter().map(|k| (k.as_str(), 0)));
        let claimed = Sweep {
            claimed: &claimed,
            ..*s
        };
        let deleted = MySql::execute(On::Conn(&mut *tx), &self.common().sweep, &claimed).await?;
        tx.commit().await?;
        Ok(deleted)
    }
}

impl RowLocks for MariaDb {
    fn for_update(&self) -> &ForUpdate {
        &self.for_update
    }

    /// Galera certifies a transaction's writes across the cluster only at COMMIT; a
    /// row lock taken by `SELECT ... FOR UPDATE` stays on the node that took it. A
    /// holder on one node therefore does not exclude a holder on another.
    async fn check_row_locks(&self) -> Result<(), Failure> {
        match self
            .galera_cluster_size()
            .await
            .map_err(|e| self.failure(e))?
        {
            Some(nodes) => Err(Failure {
                class: Class::Unsupported,
                error: Error::GaleraCluster { nodes },
            }),
            None => Ok(()),
        }
    }

    async fn prepare(&self, k: &Key<'_>) -> Result<(), sqlx::Error> {
        if ints(On::Pool(self.pool(), false), &self.for_update_probe, k)
            .await?
            .is_empty()
        {
            MySql::execute(On::Pool(self.pool(), false), &self.for_update.ensure, k).await?;
        }
        Ok(())
    }

    fn lend(tx: sqlx::Transaction<'static, MySql>) -> DbTransaction {
        DbTransaction::MySql(tx)
    }
}

impl Scheduling for MariaDb {
    async fn scheduler(&self) -> Result<SchedulerState, sqlx::Error> {
        let row = self
            .scheduler
            .check
            .bind::<MySql>(&Nothing)
            .fetch_one(self.pool())
            .await?;
        let scheduler: Option<String> = row.try_get(0)?;
        let on = scheduler.is_some_and(|v| v.eq_ignore_ascii_case("ON"));
        let has_procedure = row.try_get::<i64, _>(1)? != 0;
        let ready = match (on, has_procedure) {
            (true, true) => Ok(()),
            (true, false) => Err(Error::MissingSweepProcedure {
                name: format!("{}_sweep", self.table().as_str()),
                dialect: Self::DIALECT.name(),
            }),
            (false, _) => Err(Error::SchedulerUnavailable {
                dialect: Self::DIALECT.name(),
                hint: "the event scheduler is off: set event_scheduler=ON in the server's \
                       configuration (or SET GLOBAL event_scheduler = ON until the next \
                       restart)"
                    .into(),
            }),
        };
        Ok(SchedulerState {
            ready,
            seconds: Ok(()),
            installed: true,
        })
    }

    fn plan(secs: u64) -> Result<String, String> {
        Ok(format!("EVERY {secs} SECOND"))
    }

    async fn schedule(&self, s: &Schedule<'_>) -> Result<Option<i64>, sqlx::Error> {
        self.scheduler
            .schedule
            .bind::<MySql>(s)
            .execute(self.pool())
            .await?;
        Ok(None)
    }

    async fn unschedule(&self) -> Result<bool, sqlx::Error> {
        let row = self
            .scheduled
            .bind::<MySql>(&Nothing)
            .fetch_one(self.pool())
            .await?;
        let existed = row.try_get::<i64, _>(0)? > 0;
        self.scheduler
            .unschedule
            .bind::<MySql>(&Nothing)
            .execute(self.pool())
            .await?;
        Ok(existed)
    }
}

fence_connection!(sqlx::MySqlConnection, MariaDb, "mysql");
