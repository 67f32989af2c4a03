//! A fresh Postgres database for one test or benchmark, on the server `JOBHOST_TEST_POSTGRES`
//! names, dropped afterwards with the job roles it made. The benches include this file
//! (`#[path]`): tests and benches are separate crates, and this way it is written once.

use sqlx::Connection;

/// The Postgres server, as a URL of the database connections to it start from.
pub fn admin_url() -> String {
    std::env::var("JOBHOST_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

/// A database of its own on the server, dropped by `drop_now` or else when dropped (after a
/// panic too), so that none is left behind.
pub struct PgDatabase {
    pub name: String,
    pub url: String,
    dropped: bool,
}

impl PgDatabase {
    /// Creates the database `{prefix}{a v7 uuid}`.
    pub async fn create(prefix: &str) -> PgDatabase {
        let admin = admin_url();
        let name = format!("{prefix}{}", uuid::Uuid::now_v7().simple());
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .expect("connect to Postgres (set JOBHOST_TEST_POSTGRES)");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create a database");
        let _ = conn.close().await;
        let (base, _) = admin.rsplit_once('/').expect("a database URL");
        PgDatabase {
            url: format!("{base}/{name}"),
            name,
            dropped: false,
        }
    }

    /// Drops the database now, on the caller's runtime.
    pub async fn drop_now(mut self) {
        drop_database(&self.name, &self.url).await;
        self.dropped = true;
    }
}

impl Drop for PgDatabase {
    /// Drops the database on a thread and runtime of its own: a test's or a benchmark's
    /// runtime may be the one dropping this, and cannot be blocked on.
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let (name, url) = (self.name.clone(), self.url.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(drop_database(&name, &url));
            Some(())
        })
        .join();
    }
}

/// Drops database `name` (at `url`), its connections cut, and the job roles it made: roles
/// are cluster-wide and would outlive it. Says on stderr what it could not do.
async fn drop_database(name: &str, url: &str) {
    let roles: Vec<String> = match sqlx::PgConnection::connect(url).await {
        Ok(mut conn) => {
            let roles = sqlx::query_scalar("SELECT role FROM jobhost_guest_roles")
                .fetch_all(&mut conn)
                .await
                .unwrap_or_default();
            let _ = conn.close().await;
            roles
        }
        Err(_) => Vec::new(),
    };
    let Ok(mut conn) = sqlx::PgConnection::connect(&admin_url()).await else {
        eprintln!("cannot connect to Postgres to drop database {name}");
        return;
    };
    let mut cleanup = vec![format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")];
    cleanup.extend(roles.iter().map(|r| format!("DROP ROLE IF EXISTS \"{r}\"")));
    for statement in cleanup {
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut conn)
            .await
        {
            eprintln!("cannot drop database {name} and its roles: {statement}: {e}");
            break;
        }
    }
    let _ = conn.close().await;
}
