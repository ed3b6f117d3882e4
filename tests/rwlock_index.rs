//! PostgreSQL: read-write locks find a name's waiting writers (a read) and its reads
//! (an operator's release of the name) through the partial index `<table>_rw_idx`
//! (migration 20261127000001), in byte order whatever the database's collation, not by
//! a scan of the whole lock table; and the prefix test holds under a collation in which
//! punctuation sorts apart from its byte order.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]

mod common;

use common::eventually;

use std::io::Write;
use std::time::Duration;

use sqlock::{DbPool, Dialect, Error, Locker};
use sqlx::postgres::{PgArguments, PgConnection, PgPool, PgPoolOptions};
use sqlx::query::QueryScalar;
use sqlx::{AssertSqlSafe, Connection, Postgres};

/// A bound on waits that are expected to end much sooner.
const DEADLINE: Duration = Duration::from_secs(30);

/// The non-C collations the collation test may use, in order of preference.
const COLLATIONS: [&str; 3] = ["en_US.utf8", "en_US", "und-x-icu"];

/// The statement `file` of `sql/postgres/` as a handle of `table` sends it, rendered by
/// the library itself: the text and the names to bind, in order.
fn render(file: &str, table: &str) -> anyhow::Result<(String, Vec<String>)> {
    let table = sqlock::TableName::new(table)?;
    let s = sqlock::__private::prepared(Dialect::Postgres, &table, file)
        .ok_or_else(|| anyhow::anyhow!("no statement {file}"))?;
    Ok((s.text, s.params.iter().map(|p| (*p).to_owned()).collect()))
}

/// The values a statement is sent with, by name.
struct Values<'a> {
    key: &'a str,
    owner: &'a str,
}

impl Values<'_> {
    /// `query` with the values of `params` bound, in order, as the library binds
    /// them: text, or an integer (int8).
    fn bind<'q, O>(
        &self,
        mut query: QueryScalar<'q, Postgres, O, PgArguments>,
        params: &[String],
    ) -> QueryScalar<'q, Postgres, O, PgArguments> {
        for p in params {
            query = match p.as_str() {
                "key" => query.bind(self.key.to_owned()),
                "owner" => query.bind(self.owner.to_owned()),
                "strategy" => query.bind("lease"),
                "ttl_us" => query.bind(30_000_000_i64),
                // A handle without presence binds no marker.
                "presence" | "gone" => query.bind(""),
                other => panic!("a value the test does not know: :{other}"),
            };
        }
        query
    }
}

/// The plan of `text` with `values` bound, as the library sends it.
async fn explain(
    conn: &mut PgConnection,
    text: &str,
    params: &[String],
    values: &Values<'_>,
) -> anyhow::Result<String> {
    let query = sqlx::query_scalar::<_, String>(AssertSqlSafe(format!("EXPLAIN {text}")));
    Ok(values
        .bind(query, params)
        .fetch_all(&mut *conn)
        .await?
        .join("\n"))
}

/// The generic plan of `text` (the plan a prepared statement is given once its values
/// no longer count; the library's statements are prepared), through PREPARE and
/// EXPLAIN EXECUTE. The values written into EXECUTE are placeholders of the test's own:
/// a generic plan does not depend on them.
async fn explain_generic(
    conn: &mut PgConnection,
    name: &str,
    text: &str,
    params: &[String],
) -> anyhow::Result<String> {
    let types: Vec<&str> = params
        .iter()
        .map(|p| if p == "ttl_us" { "bigint" } else { "text" })
        .collect();
    let args: Vec<&str> = params
        .iter()
        .map(|p| if p == "ttl_us" { "1" } else { "'doc'" })
        .collect();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SET plan_cache_mode = force_generic_plan; PREPARE {name}({}) AS {text}",
        types.join(", ")
    )))
    .execute(&mut *conn)
    .await?;
    let plan = sqlx::query_scalar::<_, String>(AssertSqlSafe(format!(
        "EXPLAIN EXECUTE {name}({})",
        args.join(", ")
    )))
    .fetch_all(&mut *conn)
    .await?
    .join("\n");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DEALLOCATE {name}; RESET plan_cache_mode"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(plan)
}

/// The plan reads the lock table through its rw index, and never scans it whole.
fn assert_served(plan: &str, table: &str, what: &str) {
    let index = format!("{table}_rw_idx");
    assert!(
        plan.lines().any(|l| {
            l.contains(&format!("Index Scan using {index} on {table}"))
                || l.contains(&format!("Index Only Scan using {index} on {table}"))
                || l.contains(&format!("Bitmap Index Scan on {index}"))
        }),
        "{what}: the plan does not use {index}:\n{plan}"
    );
    assert!(
        !plan.contains("Seq Scan"),
        "{what}: the plan scans a table:\n{plan}"
    );
}

/// The PostgreSQL pool of a handle.
fn pg(pool: &DbPool) -> PgPool {
    match pool {
        DbPool::Postgres(p) => p.clone(),
        _ => panic!("a PostgreSQL pool"),
    }
}

/// Fills the table with `plain` plain locks (half of them with an '@' in the key, none
/// a read-write row), and `rw` read holds and waiting writers' intents of other names;
/// returns the number of read-write rows.
async fn fill(pool: &PgPool, table: &str, plain: i64, rw: i64) -> anyhow::Result<i64> {
    let insert = format!(
        "INSERT INTO \"{table}\" (lock_key, lock_owner, locked, acquired_at, lock_time, \
         lock_duration, expires_at, hold_count, fencing_token) \
         SELECT k, 'filler', TRUE, statement_timestamp(), statement_timestamp(), \
                3600000000, statement_timestamp() + INTERVAL '1 hour', 1, \
                nextval('\"{table}_fence_seq\"') \
         FROM (SELECT CASE WHEN g % 2 = 0 THEN 'plain-' || g \
                           ELSE 'user' || g || '@example.com' END AS k \
               FROM generate_series(1, $1) AS g \
               UNION ALL \
               SELECT 'name-' || (g % 50) \
                      || CASE WHEN g % 3 = 0 THEN '@write:' ELSE '@read:' END \
                      || gen_random_uuid() \
               FROM generate_series(1, $2) AS g) AS keys"
    );
    sqlx::query(AssertSqlSafe(insert))
        .bind(plain)
        .bind(rw)
        .execute(pool)
        .await?;
    sqlx::raw_sql(AssertSqlSafe(format!("ANALYZE \"{table}\"")))
        .execute(pool)
        .await?;
    Ok(rw)
}

/// How many entries the rw index holds: its tuple count as a rebuild records it.
async fn index_entries(pool: &PgPool, table: &str) -> anyhow::Result<i64> {
    let index = format!("{table}_rw_idx");
    sqlx::raw_sql(AssertSqlSafe(format!("REINDEX INDEX \"{index}\"")))
        .execute(pool)
        .await?;
    let n: f32 = sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = $1")
        .bind(&index)
        .fetch_one(pool)
        .await?;
    Ok(n as i64)
}

/// Both statements, as the library sends them, are served by the rw index on `b`'s
/// table (which holds some rows of `name`): the text the test renders is the text a
/// handle prepared on its connection, and its plans, with values bound and generic,
/// use the index and scan no table, although sequential scans are only discouraged.
async fn assert_plans(b: &common::Backend, name: &str) -> anyhow::Result<()> {
    let t = &b.table;
    // A handle on a pool of one connection, so that its prepared statements can be
    // read on that connection.
    let one = PgPoolOptions::new()
        .max_connections(1)
        .connect(b.url())
        .await?;
    let locker = Locker::builder(DbPool::from(one.clone()))
        .table(t)
        .build()?;
    let other = b.locker().await?;
    // rw_read: a read, granted.
    let read = locker.read_lock(name).try_acquire().await?.expect("a read");
    assert!(read.release().await?);
    // A writer waits while another owner's read holds the name.
    let theirs = other.read_lock(name).try_acquire().await?.expect("a read");
    let waited = locker
        .write_lock(name)
        .acquire_timeout(Duration::from_millis(300))
        .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    // shared_holds: an operator's release of the name finds its reads.
    assert!(locker.force_release_now(name).await?);
    assert!(!theirs.release().await?);
    let prepared: Vec<String> = sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
        .fetch_all(&one)
        .await?;
    // The timed-out writer gives its holds back in the background: let it finish
    // before its pool closes.
    let released = eventually(|| {
        let one = &one;
        async move { Ok(live(one, t, name).await? == 0) }
    })
    .await?;
    assert!(released, "the writer's holds of {name} stayed");
    one.close().await;

    let owner = locker.owner().to_string();
    let values = Values {
        key: name,
        owner: &owner,
    };
    let mut conn = PgConnection::connect(b.url()).await?;
    sqlx::raw_sql("SET enable_seqscan = off")
        .execute(&mut conn)
        .await?;
    for file in ["rw_read", "shared_holds"] {
        let (text, params) = render(file, t)?;
        assert!(
            prepared.contains(&text),
            "{file}: the handle did not send the statement the test renders:\n{text}\n\
             it prepared:\n{prepared:#?}"
        );
        let plan = explain(&mut conn, &text, &params, &values).await?;
        assert_served(&plan, t, file);
        println!(
            "{t} {file} (values bound): {}",
            plan.lines()
                .filter(|l| l.contains("_rw_idx"))
                .collect::<Vec<_>>()
                .join(" | ")
                .trim()
        );
        let generic = explain_generic(&mut conn, "sqlock_rw_plan", &text, &params).await?;
        assert!(
            generic.contains("$1"),
            "{file}: not a generic plan:\n{generic}"
        );
        assert_served(&generic, t, &format!("{file} (generic)"));
        println!(
            "{t} {file} (generic): {}",
            generic
                .lines()
                .filter(|l| l.contains("_rw_idx"))
                .collect::<Vec<_>>()
                .join(" | ")
                .trim()
        );
    }
    conn.close().await?;
    Ok(())
}

/// On a table of thousands of plain rows and some read-write rows, both statements
/// reach the name's rows through the rw index, which holds the read-write rows alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rw_index_serves_reads_and_the_release_of_a_name() -> anyhow::Result<()> {
    for b in common::backends_of("rw_index_plan", &[Dialect::Postgres]).await {
        let locker = b.fresh_table().await?;
        let pool = pg(locker.pool());
        let rw = fill(&pool, &b.table, 5000, 300).await?;
        // Plain locks, with an '@' in the key or not, are not in the index.
        assert_eq!(index_entries(&pool, &b.table).await?, rw);
        assert_plans(&b, "doc").await?;
    }
    Ok(())
}

/// How many live rows of the table have a key that starts with `prefix`, byte for
/// byte.
async fn live(pool: &PgPool, table: &str, prefix: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{table}\" WHERE strpos(lock_key, $1) = 1 \
         AND locked AND expires_at > statement_timestamp()"
    )))
    .bind(prefix)
    .fetch_one(pool)
    .await?)
}

/// shared_holds as the library sends it, with values bound: the live reads of `name`
/// (and its own row, held by them in shared mode), which an operator's release of the
/// name releases with it.
async fn holds(pool: &PgPool, table: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let (text, params) = render("shared_holds", table)?;
    let values = Values {
        key: name,
        owner: "",
    };
    let mut query = sqlx::query_scalar::<_, String>(AssertSqlSafe(text));
    for p in &params {
        query = match p.as_str() {
            "key" => query.bind(values.key.to_owned()),
            other => panic!("a value the test does not know: :{other}"),
        };
    }
    let mut keys = query.fetch_all(pool).await?;
    keys.sort();
    Ok(keys)
}

/// How many reads hold `name` (its own row's count, in shared mode).
async fn readers(locker: &Locker, name: &str) -> anyhow::Result<u32> {
    Ok(locker
        .lock_info(name)
        .await?
        .filter(|l| l.strategy == "read" && l.owner.is_empty())
        .map_or(0, |l| l.hold_count))
}

/// With the key column in a collation whose order of punctuation is not its byte
/// order, the read-write lock behaves: readers share, a waiting writer makes a later
/// reader wait, a writer waits for every reader of the name, and for no reader of a
/// name that merely looks alike, and an operator's release of the name finds its reads
/// and no others. Skipped, saying so, when the server has none of the collations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_behave_under_a_non_c_collation() -> anyhow::Result<()> {
    for b in common::backends_of("rw_index_collation", &[Dialect::Postgres]).await {
        let first = b.fresh_table().await?;
        let pool = pg(first.pool());
        let found: Vec<String> =
            sqlx::query_scalar("SELECT collname::text FROM pg_collation WHERE collname = ANY($1)")
                .bind(COLLATIONS.as_slice())
                .fetch_all(&pool)
                .await?;
        let Some(collation) = COLLATIONS.iter().find(|c| found.iter().any(|f| f == *c)) else {
            // Straight to stderr, past the harness's capture: a skip is never silent.
            writeln!(
                std::io::stderr(),
                "SKIPPED: the PostgreSQL server has none of the collations {COLLATIONS:?}; \
                 the read-write lock was not tried under a non-C collation"
            )?;
            continue;
        };
        let t = &b.table;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "ALTER TABLE \"{t}\" ALTER COLUMN lock_key TYPE VARCHAR(255) COLLATE \"{collation}\""
        )))
        .execute(&pool)
        .await?;
        let column: String = sqlx::query_scalar(
            "SELECT c.collname::text FROM pg_attribute a JOIN pg_collation c \
             ON c.oid = a.attcollation WHERE a.attrelid = $1::regclass AND a.attname = 'lock_key'",
        )
        .bind(format!("\"{t}\""))
        .fetch_one(&pool)
        .await?;
        assert_eq!(column, *collation);
        println!("{t}: lock_key in collation {collation}");

        let (second, writer, late, lookalike) = (
            first.new_handle(),
            first.new_handle(),
            first.new_handle(),
            first.new_handle(),
        );
        // Readers share; the reads of names that start alike, or differ by
        // punctuation, are held throughout.
        let ra = first.read_lock("doc").acquire_timeout(DEADLINE).await?;
        let rb = second.read_lock("doc").acquire_timeout(DEADLINE).await?;
        let mut others = Vec::new();
        for name in ["doc-x", "doc:", "do", "docs", "doc.x"] {
            others.push(lookalike.read_lock(name).acquire_timeout(DEADLINE).await?);
        }
        // The collation orders these keys otherwise than their bytes: the test is not
        // run under a byte order in disguise.
        let reordered: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT count(*) FROM (SELECT row_number() OVER (ORDER BY lock_key, lock_owner) AS a, \
             row_number() OVER (ORDER BY lock_key COLLATE \"C\", lock_owner) AS c \
             FROM \"{t}\") AS o WHERE a <> c"
        )))
        .fetch_one(&pool)
        .await?;
        assert!(reordered > 0, "{collation} orders the keys as bytes do");
        let plain_range: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT count(*) FROM \"{t}\" WHERE lock_key >= $1 || '@read:' \
             AND lock_key < $1 || '@read;'"
        )))
        .bind("doc")
        .fetch_one(&pool)
        .await?;
        println!(
            "{t}: {reordered} keys out of byte order under {collation}; a plain range of \
             the column finds {plain_range} of the 2 reads of doc"
        );
        assert_eq!(readers(&first, "doc").await?, 2);
        assert_eq!(readers(&first, "doc-x").await?, 1);
        // The range finds the reads of the name, and of no name alike.
        let mut expected = vec![
            "doc".to_owned(),
            format!("doc@read:{}", ra.owner()),
            format!("doc@read:{}", rb.owner()),
        ];
        expected.sort();
        assert_eq!(holds(&pool, t, "doc").await?, expected);
        assert_eq!(holds(&pool, t, "doc-x").await?.len(), 2);

        // A writer waits for both readers, its intent recorded.
        let w = tokio::spawn({
            let writer = writer.clone();
            async move { writer.write_lock("doc").acquire_timeout(DEADLINE).await }
        });
        let waiting = eventually(|| {
            let pool = &pool;
            async move { Ok(live(pool, t, "doc@write:").await? == 1) }
        })
        .await?;
        assert!(waiting, "the writer never recorded its intent");
        // A later reader waits behind the waiting writer, though only readers hold.
        assert!(late.read_lock("doc").try_acquire().await?.is_none());
        // Readers of the names alike are not held up by it.
        let alike = late.read_lock("doc-x").try_acquire().await?;
        assert!(alike.expect("doc-x is another lock").release().await?);
        // The writer waits while either reader holds the name.
        assert!(ra.release().await?);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!w.is_finished(), "the writer got in with a reader holding");
        assert_eq!(readers(&first, "doc").await?, 1);
        let r = tokio::spawn({
            let late = late.clone();
            async move { late.read_lock("doc").acquire_timeout(DEADLINE).await }
        });
        assert!(rb.release().await?);
        // Only the alike names' reads are left: the writer gets in.
        let write = w.await??;
        assert_eq!(write.key(), "doc");
        assert!(!r.is_finished(), "a reader got in with the writer");
        assert!(write.release().await?);
        let read = r.await??;
        assert!(read.release().await?);
        for o in others {
            assert!(o.release().await?);
        }
        // The writer's intent goes in the background.
        let released = eventually(|| {
            let (b, first) = (&b, &first);
            async move { Ok(b.held_rows(first.pool()).await? == 0) }
        })
        .await?;
        assert!(released, "holds stayed: {:?}", first.list().await?);

        // And the statements are served by the index under this collation too.
        assert_plans(&b, "doc").await?;
    }
    Ok(())
}
