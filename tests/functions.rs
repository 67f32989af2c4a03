//! Postgres's functions as repeatable migrations (`migrations/postgres/functions`): every
//! function in force has its file; a database migrated from scratch and one upgraded from
//! an earlier version end with the same functions; a file whose text changed applies again,
//! once across a fleet starting together, and an unchanged one does not.

use crate::common;

use common::{Backend, Home};
use sha2::{Digest, Sha256};
use sqlx::Connection;
use std::collections::BTreeSet;

/// Every function and trigger of the host's schema and of `jobhost` (an application's
/// `jobhost.enqueue`) as the database prints it, with its rights.
async fn definitions(home: &Home) -> Vec<String> {
    let mut conn = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    let functions: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text || E'\\n' || pg_get_functiondef(p.oid) \
         || E'\\n' || COALESCE(p.proacl::text, '') \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname IN (current_schema(), 'jobhost') ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT t.tgisinternal ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    functions.into_iter().chain(triggers).collect()
}

/// Runs `sql` on a connection of its own: `Home::exec` opens a store, which migrates.
async fn sql(home: &Home, sql: &str) {
    let mut conn = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
}

fn functions_dir() -> std::path::PathBuf {
    common::workspace().join("migrations/postgres/functions")
}

/// The function files' names and texts, in name order.
fn function_files() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(functions_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .map(|p| {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (
                format!("functions/{stem}"),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

fn checksum(sql: &str) -> String {
    hex::encode(Sha256::digest(sql.as_bytes()))
}

/// A database as a host of an earlier version left it: the versioned migrations up to
/// `version` applied and recorded, no function file.
async fn migrated_up_to(version: i64) -> Home {
    let home = Home::new(Backend::Postgres).await;
    let mut conn = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE jobhost_migrations (scope TEXT NOT NULL, version BIGINT NOT NULL, \
         name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at BIGINT NOT NULL, \
         PRIMARY KEY (scope, version))",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let dir = common::workspace().join("migrations/postgres");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    for path in files {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let (number, name) = stem.split_once('_').unwrap();
        let number: i64 = number.parse().unwrap();
        if number > version {
            break;
        }
        let sql = std::fs::read_to_string(&path).unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO jobhost_migrations (scope, version, name, checksum, applied_at) \
             VALUES ('host', $1, $2, $3, 0)",
        )
        .bind(number)
        .bind(name)
        .bind(checksum(&sql))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    conn.close().await.unwrap();
    home
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_function_in_force_has_its_file() {
    let home = Home::new(Backend::Postgres).await;
    home.store().await.close().await;
    let mut conn = sqlx::PgConnection::connect(&home.db_url).await.unwrap();
    let in_force: BTreeSet<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p \
         JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE n.nspname IN (current_schema(), 'jobhost')",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .into_iter()
    .collect();
    conn.close().await.unwrap();
    let mut in_files = BTreeSet::new();
    for (name, sql) in function_files() {
        for created in sql.split("CREATE OR REPLACE FUNCTION ").skip(1) {
            let function = created.split('(').next().unwrap();
            assert!(
                in_force
                    .iter()
                    .any(|f| f.starts_with(&format!("{function}("))),
                "{name} defines {function}, which is not in force"
            );
            in_files.insert(function.to_string());
        }
    }
    for function in &in_force {
        let bare = function.split('(').next().unwrap();
        assert!(in_files.contains(bare), "{function} has no file");
    }
    let overloads = function_files()
        .iter()
        .map(|(_, sql)| sql.matches("CREATE OR REPLACE FUNCTION ").count())
        .sum::<usize>();
    assert_eq!(
        overloads,
        in_force.len(),
        "one definition per function in force"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_and_upgraded_databases_end_with_the_same_functions() {
    let fresh = Home::new(Backend::Postgres).await;
    fresh.store().await.close().await;
    let expected = definitions(&fresh).await;
    assert!(
        expected
            .iter()
            .any(|d| d.starts_with("jobhost_claim_runs("))
    );
    // From before the first claim function, from a claim function since replaced, and from
    // the last version without function files.
    for version in [3, 13, 26] {
        let upgraded = migrated_up_to(version).await;
        let store = upgraded.store().await;
        store.close().await;
        assert_eq!(
            definitions(&upgraded).await,
            expected,
            "upgraded from version {version}"
        );
        let files = function_files();
        assert_eq!(
            upgraded
                .scalar("SELECT COUNT(*) FROM jobhost_repeatable_migrations WHERE scope = 'host'")
                .await,
            files.len() as i64
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_function_file_applies_again_once_and_an_unchanged_one_does_not() {
    let home = Home::new(Backend::Postgres).await;
    home.store().await.close().await;
    let expected = definitions(&home).await;
    let files = function_files();
    let claim = files
        .iter()
        .find(|(name, _)| name == "functions/claim_runs")
        .expect("a claim_runs file");

    // As the database looks once a new host brings a changed claim_runs.sql: the text
    // recorded is not the file's, and the function in force is another.
    sql(
        &home,
        "UPDATE jobhost_repeatable_migrations SET checksum = 'earlier' \
         WHERE name = 'functions/claim_runs'",
    )
    .await;
    sql(
        &home,
        "ALTER FUNCTION jobhost_claim_runs(TEXT, INTEGER, JSONB, TEXT, TEXT[], TEXT[]) RESET ALL",
    )
    .await;
    assert_ne!(definitions(&home).await, expected);
    // Every application of a file, counted from here on.
    sql(&home, "CREATE TABLE applied_files (name TEXT NOT NULL)").await;
    sql(
        &home,
        "CREATE FUNCTION count_applied_file() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN INSERT INTO applied_files VALUES (NEW.name); RETURN NULL; END $$",
    )
    .await;
    sql(
        &home,
        "CREATE TRIGGER count_applied_file AFTER INSERT OR UPDATE ON jobhost_repeatable_migrations \
         FOR EACH ROW EXECUTE FUNCTION count_applied_file()",
    )
    .await;

    // A fleet of hosts starting at once.
    let stores = futures_util::future::join_all((0..4).map(|_| home.store())).await;
    for store in &stores {
        store.close().await;
    }
    let applied = |home: &Home| {
        let url = home.db_url.clone();
        async move {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            let names: Vec<String> = sqlx::query_scalar("SELECT name FROM applied_files")
                .fetch_all(&mut conn)
                .await
                .unwrap();
            conn.close().await.unwrap();
            names
        }
    };
    assert_eq!(applied(&home).await, ["functions/claim_runs"]);
    assert_eq!(
        home.scalar(&format!(
            "SELECT COUNT(*) FROM jobhost_repeatable_migrations \
             WHERE name = 'functions/claim_runs' AND checksum = '{}'",
            checksum(&claim.1)
        ))
        .await,
        1
    );
    // The two test objects aside, the functions are the files' again.
    sql(
        &home,
        "DROP TRIGGER count_applied_file ON jobhost_repeatable_migrations",
    )
    .await;
    let restored: Vec<String> = definitions(&home)
        .await
        .into_iter()
        .filter(|d| !d.starts_with("count_applied_file("))
        .collect();
    assert_eq!(restored, expected);

    // Nothing changed since: a start applies nothing.
    sql(
        &home,
        "CREATE TRIGGER count_applied_file AFTER INSERT OR UPDATE ON jobhost_repeatable_migrations \
         FOR EACH ROW EXECUTE FUNCTION count_applied_file()",
    )
    .await;
    home.store().await.close().await;
    assert_eq!(applied(&home).await, ["functions/claim_runs"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_the_same_bookkeeping_with_no_function_files() {
    let home = Home::new(Backend::Sqlite).await;
    home.store().await.close().await;
    assert_eq!(
        home.scalar("SELECT COUNT(*) FROM jobhost_repeatable_migrations")
            .await,
        0
    );
}
