//! The scratch databases `host test` runs an author's cases on, and the statements a case
//! runs there itself: its seed, and the queries its expectations name. These are the
//! author's own statements on a database made for the case, never a host's; their errors
//! go back to the author as the driver says them.

use super::error_class::describe;
use super::handle::Store;
use serde_json::Value;
use sqlx::{Column, Row};

impl Store {
    /// Runs `script` (one or more statements) as written.
    pub async fn run_script(&self, script: &str) -> Result<(), sqlx::Error> {
        let script = sqlx::AssertSqlSafe(script.to_string());
        with_pool!(self.pool, p => sqlx::raw_sql(script).execute(p).await.map(drop))
    }

    /// A query's rows, each cell as JSON: integers, reals, text, booleans or null.
    pub async fn select_cells(&self, query: &str) -> Result<Vec<Vec<Value>>, sqlx::Error> {
        let query = sqlx::AssertSqlSafe(query.to_string());
        with_pool!(self.pool, p => {
            let rows = sqlx::query(query).fetch_all(p).await?;
            Ok(rows.iter().map(cells).collect())
        })
    }
}

fn cells<R>(row: &R) -> Vec<Value>
where
    R: Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<i32>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<f64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<bool>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    (0..row.columns().len())
        .map(|i| {
            if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
                return v.map_or(Value::Null, Value::from);
            }
            if let Ok(v) = row.try_get::<Option<i32>, _>(i) {
                return v.map_or(Value::Null, Value::from);
            }
            if let Ok(v) = row.try_get::<Option<f64>, _>(i) {
                return v.map_or(Value::Null, Value::from);
            }
            if let Ok(v) = row.try_get::<Option<bool>, _>(i) {
                return v.map_or(Value::Null, Value::from);
            }
            match row.try_get::<Option<String>, _>(i) {
                Ok(v) => v.map_or(Value::Null, Value::from),
                Err(_) => Value::from(format!("<{} value>", row.columns()[i].name())),
            }
        })
        .collect()
}

/// A Postgres database made for one case on the server an author named, and dropped after
/// it.
pub struct ScratchDatabase {
    admin: String,
    name: String,
    pub url: String,
}

impl ScratchDatabase {
    pub async fn create(admin: &str) -> Result<ScratchDatabase, String> {
        use sqlx::Connection;
        let name = format!("jobhost_case_{}", uuid::Uuid::now_v7().simple());
        let mut conn = sqlx::PgConnection::connect(admin)
            .await
            .map_err(|e| format!("cannot reach the --db server: {}", describe(&e)))?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .map_err(|e| format!("cannot create a database for the case: {}", describe(&e)))?;
        let _ = conn.close().await;
        let base = admin.rsplit_once('/').map_or(admin, |(base, _)| base);
        Ok(ScratchDatabase {
            admin: admin.to_string(),
            url: format!("{base}/{name}"),
            name,
        })
    }

    pub async fn drop(self) {
        use sqlx::Connection;
        if let Ok(mut conn) = sqlx::PgConnection::connect(&self.admin).await {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            )))
            .execute(&mut conn)
            .await;
        }
    }
}
