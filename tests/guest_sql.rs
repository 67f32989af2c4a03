//! Guest SQL against grants, on both backends, checked against each database's own view
//! of what a statement reads and writes: SQLite's compiled program (`EXPLAIN`: the tables
//! and indexes it opens) and Postgres' plan (`EXPLAIN (FORMAT JSON)`: the relations it
//! scans or modifies). Proptest generates statements over granted and non-granted tables
//! — columns used or not, joins, subqueries, CTEs, `EXISTS`, `RETURNING` — and asserts
//! that every statement touching a table outside the grant is refused, and every one
//! naming only granted tables runs. `JOBHOST_FUZZ_CASES` sets the number of cases.

use crate::common;

use common::{Backend, Home};
use jobhost::rules::grants::DbGrant;
use jobhost::store::guest::{Access, Fence, GuestDb, GuestDbError, Refusal, SqlValue};
use jobhost::store::{Pool, Store};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone)]
struct Generated {
    sql: String,
    write: bool,
    /// Every table or view the text names.
    named: BTreeSet<&'static str>,
}

const TABLES: [&str; 4] = ["ledger", "secrets", "jobhost_runs", "secret_view"];

fn table() -> impl Strategy<Value = &'static str> {
    prop::sample::select(TABLES.to_vec())
}

fn expression() -> impl Strategy<Value = (String, Option<&'static str>)> {
    let inner = [
        "(SELECT count(*) FROM {t})",
        "EXISTS (SELECT 1 FROM {t})",
        "(SELECT 1 FROM {t} LIMIT 1)",
        "(SELECT count(*) FROM (SELECT 1 FROM {t}) AS q)",
        "(WITH q AS (SELECT 1 FROM {t}) SELECT count(*) FROM q)",
    ];
    prop_oneof![
        prop::sample::select(vec!["count(*)", "1", "NULL", "'x'"])
            .prop_map(|e| (e.to_string(), None)),
        (prop::sample::select(inner.to_vec()), table())
            .prop_map(|(e, t)| (e.replace("{t}", t), Some(t))),
    ]
}

/// (WITH clause, FROM clause, tables named)
fn from() -> impl Strategy<Value = (String, String, Vec<&'static str>)> {
    prop_oneof![
        table().prop_map(|t| (String::new(), t.to_string(), vec![t])),
        (table(), table()).prop_map(|(a, b)| (String::new(), format!("{a}, {b}"), vec![a, b])),
        (table(), table()).prop_map(|(a, b)| (
            String::new(),
            format!("{a} JOIN {b} ON true"),
            vec![a, b]
        )),
        (table(), table()).prop_map(|(a, b)| (
            String::new(),
            format!("{a} LEFT JOIN {b} ON false"),
            vec![a, b]
        )),
        table().prop_map(|t| (
            String::new(),
            format!("(SELECT 1 AS a FROM {t}) AS s"),
            vec![t]
        )),
        table().prop_map(|t| (
            format!("WITH x AS (SELECT 1 AS a FROM {t}) "),
            "x".into(),
            vec![t]
        )),
        table().prop_map(|t| (
            format!("WITH x AS (SELECT * FROM {t}) "),
            "x".into(),
            vec![t]
        )),
    ]
}

fn statement() -> impl Strategy<Value = Generated> {
    let select = (expression(), from(), prop::option::of(expression())).prop_map(
        |((e, et), (with, from, ft), filter)| {
            let mut named: BTreeSet<&str> = ft.into_iter().chain(et).collect();
            let clause = match filter {
                Some((f, t)) => {
                    named.extend(t);
                    format!(" WHERE {f} IS NOT NULL")
                }
                None => String::new(),
            };
            Generated {
                sql: format!("{with}SELECT {e} FROM {from}{clause}"),
                write: false,
                named,
            }
        },
    );
    let write = (expression(), 0..4u8).prop_map(|((e, t), form)| {
        let sql = match form {
            0 => format!("INSERT INTO ledger (n) VALUES (1) RETURNING {e}"),
            1 => format!("UPDATE ledger SET n = (SELECT 1 WHERE {e} IS NOT NULL)"),
            2 => format!("DELETE FROM ledger WHERE {e} IS NULL"),
            _ => format!("INSERT INTO ledger (n) SELECT 1 WHERE {e} IS NOT NULL"),
        };
        Generated {
            sql,
            write: true,
            named: t.into_iter().chain(["ledger"]).collect(),
        }
    });
    prop_oneof![3 => select, 1 => write]
}

/// What the database's own view of `sql` touches: table names, or `None` if it does not
/// compile there.
async fn touched(store: &Store, sql: &str) -> Option<BTreeSet<String>> {
    match store.pool() {
        Pool::Sqlite(p) => {
            let pages: BTreeMap<i64, String> =
                sqlx::query_as::<_, (i64, String)>("SELECT rootpage, tbl_name FROM sqlite_schema")
                    .fetch_all(p)
                    .await
                    .unwrap()
                    .into_iter()
                    .collect();
            let program: Vec<(String, i64)> =
                sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
                    .fetch_all(p)
                    .await
                    .ok()?
                    .into_iter()
                    .map(|row: (i64, String, i64, i64)| (row.1, row.3))
                    .collect();
            Some(
                program
                    .into_iter()
                    .filter(|(op, _)| ["OpenRead", "OpenWrite", "ReopenIdx"].contains(&op.as_str()))
                    .map(|(_, page)| {
                        pages
                            .get(&page)
                            .cloned()
                            .unwrap_or_else(|| format!("#{page}"))
                    })
                    .collect(),
            )
        }
        Pool::Postgres(p) => {
            let plan: serde_json::Value =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("EXPLAIN (FORMAT JSON) {sql}")))
                    .fetch_one(p)
                    .await
                    .ok()?;
            let mut names = BTreeSet::new();
            collect_relations(&plan, &mut names);
            Some(names)
        }
    }
}

fn collect_relations(value: &serde_json::Value, names: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(fields) => {
            for (key, inner) in fields {
                if key == "Relation Name"
                    && let Some(name) = inner.as_str()
                {
                    names.insert(name.to_string());
                }
                collect_relations(inner, names);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| collect_relations(i, names)),
        _ => {}
    }
}

async fn run(guest: &GuestDb, access: &Access, g: &Generated) -> Result<(), GuestDbError> {
    if !g.write {
        return guest.query(access, &g.sql, &[]).await.map(drop);
    }
    let mut tx = guest.begin(access, access.deadline).await?;
    let result = tx.execute(&g.sql, &[]).await.map(drop);
    tx.rollback().await;
    result
}

fn check(backend: Backend) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let home = runtime.block_on(Home::new(backend));
    runtime.block_on(home.exec(
        "CREATE TABLE ledger (run_id TEXT, attempt BIGINT, n BIGINT);
         CREATE INDEX ledger_n ON ledger (n);
         CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT);
         INSERT INTO secrets VALUES ('api-key', 'do-not-leak');
         CREATE VIEW secret_view AS SELECT * FROM secrets;",
    ));
    let store = runtime.block_on(home.store());
    let guest = runtime.block_on(GuestDb::open(&store)).unwrap();
    let cases = std::env::var("JOBHOST_FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(300);
    let config = Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    proptest!(config, |(statements in prop::collection::vec(statement(), 1..6), read_secrets in any::<bool>())| {
        runtime.block_on(async {
            let mut grant = DbGrant::default();
            grant.write.insert("ledger".into());
            if read_secrets {
                grant.read.insert("secrets".into());
            }
            // A grant of its own per case: on Postgres, a role per grant (job).
            let access = Access {
                grant: Arc::new(grant),
                fence: Fence {
                    job: format!("sql-{read_secrets}"),
                    instance: "i".into(),
                    generation: 1,
                    holder: "r".into(),
                },
                tenant: "default".into(),
                deadline: tokio::time::Instant::now() + Duration::from_secs(20),
            };
            let granted = |t: &str| t == "ledger" || (read_secrets && t == "secrets");
            for g in statements {
                let got = run(&guest, &access, &g).await;
                let Some(opened) = touched(&store, &g.sql).await else {
                    prop_assert!(got.is_err(), "{} does not compile but ran", g.sql);
                    continue;
                };
                if opened.iter().any(|t| !granted(t)) {
                    prop_assert!(
                        matches!(got, Err(GuestDbError::Refused(Refusal::NotGranted | Refusal::Forbidden))),
                        "{} touches {opened:?} but was {got:?}", g.sql
                    );
                }
                if g.named.iter().all(|t| granted(t)) {
                    prop_assert_eq!(got, Ok(()), "{} names only granted tables", g.sql);
                }
            }
            Ok(())
        })?;
    });
    runtime.block_on(store.close());
}

#[test]
fn guest_sql_never_touches_a_table_outside_its_grant_on_sqlite() {
    check(Backend::Sqlite);
}

#[test]
fn guest_sql_never_touches_a_table_outside_its_grant_on_postgres() {
    check(Backend::Postgres);
}

/// Values at the ends of Postgres' date and time types reach the guest as the server
/// spells them, and a cast to an array of a catalog lookup type is refused like the type,
/// as is a cast to a table's row type.
#[test]
fn postgres_edge_values_decode_and_catalog_array_casts_are_refused() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let home = Home::new(Backend::Postgres).await;
        let store = home.store().await;
        let guest = GuestDb::open(&store).await.unwrap();
        let access = Access {
            grant: Arc::new(DbGrant::default()),
            fence: Fence {
                job: "edges".into(),
                instance: "i".into(),
                generation: 1,
                holder: "r".into(),
            },
            tenant: "default".into(),
            deadline: tokio::time::Instant::now() + Duration::from_secs(20),
        };
        let rows = guest
            .query(
                &access,
                "SELECT 'infinity'::timestamptz, '-infinity'::timestamp, 'infinity'::date, \
                 '-infinity'::date, '2024-02-29T12:00:00Z'::timestamptz",
                &[],
            )
            .await
            .expect("edge values decode");
        let text = |s: &str| SqlValue::Text(s.into());
        assert_eq!(
            rows.rows,
            vec![vec![
                text("infinity"),
                text("-infinity"),
                text("infinity"),
                text("-infinity"),
                text("2024-02-29T12:00:00+00:00"),
            ]]
        );
        for sql in [
            "SELECT ARRAY[1::oid]::_regclass::text",
            "SELECT 'r=r/postgres'::aclitem",
            // A table's row type needs no privilege on the table: the cast would say the
            // host's table exists and name its columns.
            "SELECT (NULL::jobhost_guest_roles).*",
        ] {
            assert_eq!(
                guest.query(&access, sql, &[]).await.map(drop),
                Err(GuestDbError::Refused(Refusal::Forbidden)),
                "{sql}"
            );
        }
        store.close().await;
    });
}

/// A statement that makes SQLite roll the transaction back by itself (a conflict clause,
/// a trigger's `RAISE(ROLLBACK)`) ends the guest's transaction for good: nothing after it
/// runs, since it would run in autocommit, outside the fence. And the JSON aggregates,
/// which no length limit bounds as they grow, are refused.
#[test]
fn a_transaction_sqlite_rolls_back_by_itself_takes_no_more_statements() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let home = Home::new(Backend::Sqlite).await;
        home.exec(
            "CREATE TABLE t (k INTEGER PRIMARY KEY);
             CREATE TRIGGER t_positive BEFORE INSERT ON t WHEN NEW.k < 0
             BEGIN SELECT RAISE(ROLLBACK, 'negative'); END;",
        )
        .await;
        let store = home.store().await;
        let guest = GuestDb::open(&store).await.unwrap();
        let mut grant = DbGrant::default();
        grant.write.insert("t".into());
        let access = Access {
            grant: Arc::new(grant),
            fence: Fence {
                job: "rollback".into(),
                instance: "i".into(),
                generation: 1,
                holder: "r".into(),
            },
            tenant: "default".into(),
            deadline: tokio::time::Instant::now() + Duration::from_secs(20),
        };
        let rolled_back = Err::<(), _>(GuestDbError::Refused(Refusal::RolledBack));
        for breaking in [
            "INSERT OR ROLLBACK INTO t VALUES (1), (1)",
            "INSERT INTO t VALUES (-1)",
        ] {
            let mut tx = guest.begin(&access, access.deadline).await.unwrap();
            assert_eq!(tx.execute("INSERT INTO t VALUES (10)", &[]).await, Ok(1));
            assert_eq!(
                tx.execute(breaking, &[]).await.map(drop),
                rolled_back,
                "{breaking}"
            );
            assert_eq!(
                tx.execute("INSERT INTO t VALUES (11)", &[]).await.map(drop),
                rolled_back
            );
            assert_eq!(
                tx.query("SELECT k FROM t", &[]).await.map(drop),
                rolled_back
            );
            assert_eq!(tx.commit().await, rolled_back);
            assert_eq!(home.scalar("SELECT COUNT(*) FROM t").await, 0, "{breaking}");
        }
        // The JSON aggregates grow their buffer past every limit before the last row: refused.
        for sql in [
            "SELECT json_group_array(k) FROM t",
            "SELECT JSONB_GROUP_OBJECT(k, k) FROM t",
        ] {
            let refused = guest.query(&access, sql, &[]).await.map(drop);
            assert_eq!(
                refused,
                Err(GuestDbError::Refused(Refusal::Forbidden)),
                "{sql}"
            );
        }
        assert!(
            guest
                .query(&access, "SELECT json_array(k) FROM t", &[])
                .await
                .is_ok()
        );
        store.close().await;
    });
}
