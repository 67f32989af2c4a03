//! A login role of its own on the test server, as an application's role is: roles are
//! cluster-wide, so each is dropped when its guard is, with what it was granted.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use std::str::FromStr;

pub struct PgRole {
    pub name: String,
    /// The database the role was made for (and granted in).
    db_url: String,
}

impl PgRole {
    /// Creates the login role `app_{a v7 uuid}` (no privileges) beside `db_url`.
    pub async fn create(db_url: &str) -> PgRole {
        let name = format!("app_{}", uuid::Uuid::now_v7().simple());
        let mut admin = PgConnection::connect(&super::postgres::admin_url())
            .await
            .expect("connect to Postgres");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE ROLE {name} LOGIN")))
            .execute(&mut admin)
            .await
            .expect("create a role");
        let _ = admin.close().await;
        PgRole {
            name,
            db_url: db_url.to_string(),
        }
    }

    /// A connection to the database as this role.
    pub async fn connect(&self) -> PgConnection {
        let options = PgConnectOptions::from_str(&self.db_url)
            .expect("a Postgres URL")
            .username(&self.name);
        PgConnection::connect_with(&options)
            .await
            .expect("connect as the role")
    }
}

impl Drop for PgRole {
    /// Revokes what the role was granted in its database (if that still exists), then
    /// drops it, on a thread and runtime of its own (the test's may be the one dropping).
    fn drop(&mut self) {
        let (name, db_url) = (self.name.clone(), self.db_url.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                if let Ok(mut conn) = PgConnection::connect(&db_url).await {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP OWNED BY {name}")))
                        .execute(&mut conn)
                        .await;
                    let _ = conn.close().await;
                }
                let mut admin = PgConnection::connect(&super::postgres::admin_url())
                    .await
                    .ok()?;
                if let Err(e) =
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP ROLE IF EXISTS {name}")))
                        .execute(&mut admin)
                        .await
                {
                    eprintln!("cannot drop role {name}: {e}");
                }
                let _ = admin.close().await;
                Some(())
            })
        })
        .join();
    }
}
