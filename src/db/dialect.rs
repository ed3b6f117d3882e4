//! [`Dialect`]: the database server families sqlock speaks to, and what each can do.

use super::statement::Placeholders;

/// A database server family, with its SQL dialect.
///
/// Always available, whatever the crate features, so that tools can print the DDL of
/// any dialect; running statements needs the matching feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL 12 or later.
    Postgres,
    /// MariaDB 10.6 or later (the `mysql` feature). MySQL itself lacks the `RETURNING`
    /// and sequences sqlock relies on.
    MySql,
    /// SQLite 3.35 or later (the version sqlx bundles qualifies).
    Sqlite,
}

/// The error of parsing a [`Dialect`] from a name it does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dialect {0:?}: expected postgres, mysql or sqlite")]
pub struct UnknownDialect(pub String);

/// From its name ([`Dialect::name`]), or `postgresql` or `mariadb`.
///
/// ```
/// use sqlock::Dialect;
///
/// assert_eq!("mariadb".parse(), Ok(Dialect::MySql));
/// assert!("oracle".parse::<Dialect>().is_err());
/// ```
impl std::str::FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "postgres" | "postgresql" => Ok(Self::Postgres),
            "mysql" | "mariadb" => Ok(Self::MySql),
            "sqlite" => Ok(Self::Sqlite),
            other => Err(UnknownDialect(other.to_owned())),
        }
    }
}

impl Dialect {
    /// The dialect's folder name under `sql/` and `migrations/`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }

    /// Whether the server has row locks, which the for-update strategy takes (not
    /// SQLite).
    pub(crate) fn has_row_locks(self) -> bool {
        !matches!(self, Self::Sqlite)
    }

    /// Whether a row lock wait is bounded in whole seconds only (MariaDB's `FOR UPDATE
    /// WAIT n`), so that a shorter remainder of a deadline cannot be waited in the
    /// database.
    pub(crate) fn waits_in_whole_seconds(self) -> bool {
        matches!(self, Self::MySql)
    }

    /// Whether releases can wake waiters with `LISTEN`/`NOTIFY` (PostgreSQL).
    pub(crate) fn has_notifications(self) -> bool {
        matches!(self, Self::Postgres)
    }

    /// Whether a transaction-pooling proxy in front of it is supported (PostgreSQL,
    /// PgBouncer and its kind).
    pub(crate) fn supports_transaction_pooling(self) -> bool {
        matches!(self, Self::Postgres)
    }

    pub(crate) fn placeholders(self) -> Placeholders {
        match self {
            Self::Postgres => Placeholders::Numbered,
            Self::MySql | Self::Sqlite => Placeholders::Positional,
        }
    }

    /// The dialect for a database URL's scheme (`postgres://`, `postgresql://`,
    /// `mysql://`, `mariadb://`, `sqlite:`), if it is one sqlock knows.
    ///
    /// ```
    /// use sqlock::Dialect;
    ///
    /// assert_eq!(Dialect::from_url("postgres://localhost/app"), Some(Dialect::Postgres));
    /// assert_eq!(Dialect::from_url("sqlite:locks.db"), Some(Dialect::Sqlite));
    /// assert_eq!(Dialect::from_url("redis://localhost"), None);
    /// ```
    pub fn from_url(url: &str) -> Option<Self> {
        let scheme = url.split(':').next()?.to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Some(Self::Postgres),
            "mysql" | "mariadb" => Some(Self::MySql),
            "sqlite" => Some(Self::Sqlite),
            _ => None,
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
