//! Why a run failed, and the exit status each kind of failure gives.
//!
//! The statuses are the `sqlock` tool's, for the same causes: bad usage 64, a database
//! that cannot be used 69, anything else 70.

/// Bad usage or input: an unknown option, a bad duration, worker count, strategy or
/// table name, a table that holds other locks (`EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// The database or Redis is unreachable (`EX_UNAVAILABLE`).
pub const EXIT_UNAVAILABLE: i32 = 69;
/// Anything unexpected: a failed statement, a lock lost during the run (`EX_SOFTWARE`).
pub const EXIT_SOFTWARE: i32 = 70;

/// Why a run failed, as far as the exit status is concerned. Each carries the message
/// printed on stderr (lowercase, after `sqlock-bench: `).
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad usage or input.
    Usage(String),
    /// The database or Redis cannot be used.
    Unavailable(String),
    /// Anything else.
    Other(String),
}

impl Failure {
    /// The exit status of this kind of failure.
    pub(crate) fn exit_status(&self) -> i32 {
        match self {
            Self::Usage(_) => EXIT_USAGE,
            Self::Unavailable(_) => EXIT_UNAVAILABLE,
            Self::Other(_) => EXIT_SOFTWARE,
        }
    }

    /// The message printed on stderr.
    pub(crate) fn message(&self) -> &str {
        match self {
            Self::Usage(m) | Self::Unavailable(m) | Self::Other(m) => m,
        }
    }
}

impl From<sqlock::Error> for Failure {
    fn from(e: sqlock::Error) -> Self {
        use sqlock::Error as E;
        match e {
            // A table name from --table, or the scale part's `<table>_big` made too long
            // by it; the rest the benchmark's own settings rule out.
            E::InvalidTableName { .. }
            | E::EmptyKey
            | E::KeyTooLong { .. }
            | E::KeyContainsNul
            | E::TtlTooShort { .. }
            | E::TtlTooLong { .. }
            | E::StrategyUnsupported { .. }
            | E::SettingUnsupported { .. } => Self::Usage(e.to_string()),
            E::PoolExhausted | E::NotMariaDb { .. } | E::GaleraCluster { .. } => {
                Self::Unavailable(e.to_string())
            }
            E::Database(ref db) if is_connection_error(db) => Self::Unavailable(chain(&e)),
            // `sqlock::Error` is non-exhaustive, and the rest is unexpected in a run.
            _ => Self::Other(chain(&e)),
        }
    }
}

/// A failed statement of the benchmark's own.
pub(crate) fn db_failure(e: sqlx::Error) -> Failure {
    Failure::Other(format!("database error: {e}"))
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

/// An error and its sources, on one line: `database error: <the cause>`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
