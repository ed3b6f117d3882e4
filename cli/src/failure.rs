//! Why a command failed and the exit status each failure gives: the tool's named exit
//! codes, the [`Failure`] every command returns, and the one exhaustive match
//! ([`exit_status`]) between them; also how a library or database error is said to the
//! user, each cause once.

use crate::duration;

/// Bad usage or input: a bad key, duration, table name or strategy, an unknown
/// command or option, an unsupported URL (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// The database is unreachable or the lock table is missing (`EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: i32 = 69;
/// Anything unexpected: a database error sqlock does not handle, a failed migration
/// (`EX_SOFTWARE`).
pub const EXIT_SOFTWARE: i32 = 70;
/// `run`: the lock was not acquired, busy with `--no-wait` or still busy when `--wait`
/// ran out; `release --force`: the lock was not held; `status`: the lock is free, or
/// its holder is gone (presence); `leader`: nobody leads
/// (`EX_TEMPFAIL`: try again later).
pub const EXIT_NOT_ACQUIRED: i32 = 75;
/// `run`: the lock was lost while the command ran, which was stopped; `elect`: so was
/// the leadership (without `--again`).
pub const EXIT_LOST: i32 = 76;
/// `release --force`: the key is held by a for-update lock, which cannot be released
/// by force: it ends with its holder's transaction (`EX_NOPERM`).
pub const EXIT_ROW_LOCKED: i32 = 77;
/// `run`: the command exists but could not be executed (as shells report it).
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// `run`: the command was not found (as shells report it).
pub const EXIT_NOT_FOUND: i32 = 127;

/// Why a command failed, as far as the exit status is concerned. Each carries the
/// message printed on stderr (lowercase, after `sqlock: `).
#[derive(Debug)]
pub enum Failure {
    /// Bad usage or input.
    Usage(String),
    /// The database cannot be used.
    Unavailable(String),
    /// The lock was not acquired.
    NotAcquired(String),
    /// There was no lock to release, or no leader to show: an answer, which the
    /// command printed (with `--json`, as its JSON object) before failing with it.
    NotHeld(String),
    /// The lock was lost.
    Lost(String),
    /// The lock cannot be released by force: a for-update lock.
    RowLocked(String),
    /// The command to run could not be executed.
    CannotExecute(String),
    /// The command to run was not found.
    NotFound(String),
    /// Anything else.
    Other(String),
}

/// The exit status of each kind of failure.
pub fn exit_status(failure: &Failure) -> i32 {
    match failure {
        Failure::Usage(_) => EXIT_USAGE,
        Failure::Unavailable(_) => EXIT_UNAVAILABLE,
        Failure::NotAcquired(_) | Failure::NotHeld(_) => EXIT_NOT_ACQUIRED,
        Failure::Lost(_) => EXIT_LOST,
        Failure::RowLocked(_) => EXIT_ROW_LOCKED,
        Failure::CannotExecute(_) => EXIT_CANNOT_EXECUTE,
        Failure::NotFound(_) => EXIT_NOT_FOUND,
        Failure::Other(_) => EXIT_SOFTWARE,
    }
}

impl Failure {
    pub(crate) fn message(&self) -> &str {
        match self {
            Self::Usage(m)
            | Self::Unavailable(m)
            | Self::NotAcquired(m)
            | Self::NotHeld(m)
            | Self::Lost(m)
            | Self::RowLocked(m)
            | Self::CannotExecute(m)
            | Self::NotFound(m)
            | Self::Other(m) => m,
        }
    }
}

impl From<sqlock::Error> for Failure {
    fn from(e: sqlock::Error) -> Self {
        use sqlock::Error as E;
        match e {
            E::EmptyKey
            | E::KeyTooLong { .. }
            | E::KeyContainsNul
            | E::TtlTooShort { .. }
            | E::TtlTooLong { .. }
            | E::InvalidTableName { .. }
            | E::InvalidBatch { .. }
            | E::InvalidSchedule { .. }
            | E::InvalidIdentity { .. }
            | E::UpgradeRefused { .. }
            | E::ReservedMarker { .. }
            | E::MixedHolds { .. } => Self::Usage(e.to_string()),
            // The semaphore's: a permit's key, N out of range, N unlike the others'.
            E::ReservedKey { .. }
            | E::InvalidPermits { .. }
            | E::InvalidPermitCount { .. }
            | E::PermitsMismatch { .. } => Self::Usage(e.to_string()),
            E::SchedulerUnavailable { .. } => Self::Unavailable(e.to_string()),
            E::MissingSweepProcedure { ref name, .. } => Self::Unavailable(format!(
                "the sweep procedure {name:?} does not exist: run `sqlock migrate` (or \
                 `sqlock schema` for another --table) to create it"
            )),
            // The library's message names its own API; the tool's user wants the tool.
            E::MissingTable { ref table, .. } => Self::Unavailable(missing_table(table)),
            // The library prints durations as Rust's Debug does (501.024989ms); the tool
            // prints them as it reads them (501ms).
            E::Timeout {
                ref key, waited, ..
            } => Self::NotAcquired(format!(
                "timed out after {} waiting for lock {key:?}",
                duration::human(waited)
            )),
            // The key was free, but the grant came back after its TTL: try again
            // later, or with a longer --ttl.
            E::GrantExpired {
                ref key, ttl, took, ..
            } => Self::NotAcquired(format!(
                "lock {key:?} was granted, but the answer took {}, longer than its ttl of \
                 {}: the grant was given back; use a --ttl well above the database's round \
                 trip",
                duration::human(took),
                duration::human(ttl)
            )),
            // Met elsewhere than `release --force` (which answers it with a code of its
            // own, see `ops::release`): a row locked for longer than the tool waits.
            E::RowLocked { .. } => Self::NotAcquired(e.to_string()),
            E::LockLost { .. } | E::LeadershipLost { .. } => Self::Lost(e.to_string()),
            // The tool turns presence on only where the check allowed it; should the
            // marker still fail (its file, its connection), say how to go without.
            E::PresenceUnavailable { .. } => Self::Unavailable(format!(
                "{e}; pass --no-presence (or set SQLOCK_NO_PRESENCE=1) to hold the lock \
                 without it"
            )),
            E::PoolExhausted
            | E::NotMariaDb { .. }
            | E::GaleraCluster { .. }
            | E::QuorumUnreachable { .. } => Self::Unavailable(e.to_string()),
            // The tool refuses the first itself before connecting; the second is the
            // operator's --transaction-pooling on a server that is not PostgreSQL.
            E::StrategyUnsupported { .. } | E::FenceNotApplicable { .. } => {
                Self::Usage(e.to_string())
            }
            E::SettingUnsupported { .. } => Self::Usage(format!(
                "--transaction-pooling (SQLOCK_TRANSACTION_POOLING) is for PostgreSQL \
                 behind a transaction-pooling proxy: {e}"
            )),
            E::Database(ref db) if is_pooler_error(db) => Self::Unavailable(format!(
                "the server answered as it does behind a transaction-pooling proxy such as \
                 PgBouncer, where a prepared statement stays on a server connection other \
                 clients get ({db}): pass --transaction-pooling, or set \
                 SQLOCK_TRANSACTION_POOLING=1"
            )),
            E::Database(ref db) if is_connection_error(db) => Self::Unavailable(chain(&e)),
            // `sqlock::Error` is non-exhaustive: a variant added later is unexpected here.
            _ => Self::Other(chain(&e)),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Self::Other(e.to_string())
    }
}

/// Errors that say the database cannot be reached, rather than that a statement
/// failed.
fn is_connection_error(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
    )
}

/// PostgreSQL's answers to a named prepared statement that a transaction-pooling proxy
/// left on another server connection: duplicate_prepared_statement (42P05), and
/// invalid_sql_statement_name (26000, "prepared statement does not exist").
fn is_pooler_error(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "42P05" || code == "26000")
}

fn missing_table(table: &str) -> String {
    let how = if table == sqlock::DEFAULT_TABLE {
        "run `sqlock migrate` once against this database, or apply sqlock's migrations \
         with sqlx-cli"
            .to_owned()
    } else {
        format!(
            "run `sqlock --table {table} migrate` once against this database, or apply \
             the DDL of `sqlock --table {table} schema`"
        )
    };
    format!("lock table {table:?} does not exist\nhint: {how}")
}

/// An error and its sources, on one line: `database error: <the cause>`.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = own_text(e);
    let mut source = e.source();
    while let Some(s) = source {
        // Many errors print their source's message in their own: say each cause once.
        let next = own_text(s);
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// An error and its causes, each said once, in the tool's words (see [`chain`]).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    chain(e)
}

/// What one error says of itself: a server's message without sqlx's framing, without
/// PostgreSQL's source line in its own code ("... at line 948") and without MariaDB's
/// error number ("1054 (42S22): ..."), which tell the user nothing new.
fn own_text(e: &(dyn std::error::Error + 'static)) -> String {
    let text = match e.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Database(db)) => db.message().to_owned(),
        _ => e.to_string(),
    };
    tidy(&text).to_owned()
}

/// `text` without a PostgreSQL source line at its end and a MariaDB error number at
/// its start.
fn tidy(text: &str) -> &str {
    let mut text = text;
    if let Some((head, line)) = text.rsplit_once(" at line ") {
        if !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) {
            text = head;
        }
    }
    // "1054 (42S22): message"
    if let Some((number, rest)) = text.split_once(" (") {
        if let Some((state, message)) = rest.split_once("): ") {
            let digits = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
            if digits && state.len() == 5 && state.bytes().all(|b| b.is_ascii_alphanumeric()) {
                text = message;
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn server_messages_lose_their_source_lines_and_numbers() {
        assert_eq!(
            tidy("database \"x\" does not exist at line 948"),
            "database \"x\" does not exist"
        );
        assert_eq!(
            tidy("1054 (42S22): Unknown column 'lock_key' in 'SELECT'"),
            "Unknown column 'lock_key' in 'SELECT'"
        );
        assert_eq!(tidy("the line at line one"), "the line at line one");
        assert_eq!(tidy("a (b): c"), "a (b): c");
    }
}
