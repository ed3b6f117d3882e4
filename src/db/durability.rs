//! Whether a commit waits for its flush to disk: decided here, once, for every
//! statement src/db sends.
//!
//! The rule: a transaction that grants anything commits durably (as the server is
//! configured: a flush, and a synchronous standby's confirmation where one is set),
//! whatever else it does; only a release that grants nobody may skip the flush.
//!
//! Only PostgreSQL statements relax: the release statements of the lease and insert
//! strategies turn `synchronous_commit` off for their own transaction, inside the
//! statement ([`RELAXED`]), so that a release stays one round trip and an
//! acquire+release cycle waits for one flush. That setting lasts until the end of the
//! transaction, whichever statement set it: sent inside a transaction of several
//! statements (a fair handoff, whose release grants the next waiter), the release
//! would take the whole transaction's flush away with it. So a statement relaxes only
//! when it is a transaction of its own ([`Sent::Alone`]): a release sent alone grants
//! nobody. Sent inside a transaction ([`Sent::Within`]), the same statement sets the
//! setting to the value in force ([`AS_CONFIGURED`]: what the session was configured
//! with, `remote_apply` staying `remote_apply`), and the transaction commits as the
//! server is configured, whatever it runs. A primitive written later gets this for
//! free: the runner picks the text, not the primitive.
//!
//! MariaDB and SQLite have no per-transaction relaxation (`innodb_flush_log_at_trx_commit`
//! is global, `PRAGMA synchronous` a setting of the connection): every commit there
//! flushes as the server or file is configured.

/// How a relaxing statement turns the flush off for its own transaction, as
/// `sql/postgres/*release*.sql` write it; the only way a statement may.
pub(crate) const RELAXED: &str = "set_config('synchronous_commit', 'off', true)";

/// What [`RELAXED`] becomes in a statement sent within a transaction: the setting
/// left at the value in force, never a hard-coded one.
const AS_CONFIGURED: &str =
    "set_config('synchronous_commit', current_setting('synchronous_commit'), true)";

/// How a statement is sent, as far as its commit goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// A transaction of its own: autocommit, or a pinned statement's own transaction.
    Alone,
    /// Inside a transaction the caller holds (or on a connection the caller holds,
    /// which may be in one).
    Within,
}

impl Sent {
    /// Whether a statement sent so may skip the flush of its commit: only alone.
    pub(crate) fn may_relax(self) -> bool {
        self == Self::Alone
    }
}

/// The text of the rendered statement `text` as sent [`Sent::Within`] a transaction,
/// when it differs: `None` for a statement that never relaxes.
pub(crate) fn durable_text(text: &str) -> Option<String> {
    text.contains(RELAXED)
        .then(|| text.replace(RELAXED, AS_CONFIGURED))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every statement file of `sql/`, by dialect and name.
    fn templates() -> Vec<(String, String, String)> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
        let mut out = Vec::new();
        for dialect in std::fs::read_dir(&root).unwrap() {
            let dialect = dialect.unwrap().path();
            for file in std::fs::read_dir(&dialect).unwrap() {
                let file = file.unwrap().path();
                out.push((
                    dialect.file_name().unwrap().to_string_lossy().into_owned(),
                    file.file_stem().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&file).unwrap(),
                ));
            }
        }
        out
    }

    /// SQL without its comments, as the renderer sends it.
    fn code(template: &str) -> String {
        template
            .lines()
            .map(|l| l.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn only_releases_relax_and_only_one_way() {
        let mut relaxing = Vec::new();
        for (dialect, name, text) in templates() {
            let code = code(&text);
            if !code.to_lowercase().contains("synchronous_commit") {
                continue;
            }
            // One way to relax, which `durable_text` knows how to undo.
            let undone = durable_text(&code).unwrap_or_else(|| {
                panic!("{dialect}/{name}.sql touches synchronous_commit other than by RELAXED")
            });
            assert!(
                !undone.contains("'off'"),
                "{dialect}/{name}.sql: relaxes in a second way"
            );
            // A statement that relaxes its commit is a release, which grants nobody
            // when it is its own transaction.
            assert!(
                name.contains("release"),
                "{dialect}/{name}.sql relaxes its commit but is no release"
            );
            relaxing.push(format!("{dialect}/{name}"));
        }
        relaxing.sort();
        assert_eq!(
            relaxing,
            [
                // A fair holder's release while nobody is queued, sent alone: it
                // hands nothing on.
                "postgres/fair_release",
                "postgres/fair_release_notify",
                "postgres/insert_release",
                "postgres/insert_release_notify",
                "postgres/lease_release",
                "postgres/lease_release_notify",
                // The write side's release, sent alone: it grants nobody (a read its
                // owner already holds takes the name over).
                "postgres/rw_release",
                "postgres/rw_release_notify",
                // A read's or a permit's release, sent in the transaction that counts
                // its name down: there it is durable, as everything sent within.
                "postgres/shared_release",
                "postgres/shared_release_notify",
            ]
        );
    }

    #[test]
    fn within_a_transaction_the_setting_stays_as_configured() {
        let text = format!("WITH r AS MATERIALIZED (SELECT {RELAXED} AS s) UPDATE t SET x = 1");
        let durable = durable_text(&text).unwrap();
        assert!(!durable.contains("'off'"), "{durable}");
        assert!(durable.contains("current_setting('synchronous_commit')"));
        assert_eq!(durable_text("UPDATE t SET x = 1"), None);
        assert!(Sent::Alone.may_relax());
        assert!(!Sent::Within.may_relax());
    }
}
