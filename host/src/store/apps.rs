//! The application roles that may call `jobhost.enqueue` (Postgres, migration 0037): the
//! grants are Postgres' own privileges on schema `jobhost` and the function, written and
//! read here, so no table of roles can disagree with what Postgres enforces. SQLite has
//! no roles: each call answers [`AppGrant::NoRoles`] and the caller says what to do.

use super::error::Result;
use super::handle::Store;
use super::pool::Pool;
use sqlx::AssertSqlSafe;

/// What a grant or a revoke did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppGrant {
    Done,
    /// No role of that name exists on the server.
    UnknownRole,
    /// The database is SQLite.
    NoRoles,
}

/// The statements of a grant (`$1` the role, read from `pg_roles`, so quoted as Postgres
/// quotes it): usage of the schema and execution of the function, nothing else.
const GRANT: &str = "SELECT format('GRANT USAGE ON SCHEMA jobhost TO %1$I; \
    GRANT EXECUTE ON FUNCTION jobhost.enqueue(text, jsonb, jsonb) TO %1$I', rolname) \
    FROM pg_catalog.pg_roles WHERE rolname = $1";
const REVOKE: &str = "SELECT format('REVOKE EXECUTE ON FUNCTION jobhost.enqueue(text, jsonb, jsonb) \
    FROM %1$I; REVOKE USAGE ON SCHEMA jobhost FROM %1$I', rolname) \
    FROM pg_catalog.pg_roles WHERE rolname = $1";
/// The roles granted execution of `jobhost.enqueue`, besides its owner (the host's role).
const GRANTED: &str = "SELECT r.rolname FROM pg_catalog.pg_proc p \
    CROSS JOIN LATERAL aclexplode(p.proacl) a \
    JOIN pg_catalog.pg_roles r ON r.oid = a.grantee \
    WHERE p.oid = CAST('jobhost.enqueue(text, jsonb, jsonb)' AS regprocedure) \
    AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner ORDER BY r.rolname";

impl Store {
    /// Lets `role` call `jobhost.enqueue` (`grant`), or no longer (`!grant`).
    pub async fn set_app_grant(&self, role: &str, grant: bool) -> Result<AppGrant> {
        let Pool::Postgres(p) = &self.pool else {
            return Ok(AppGrant::NoRoles);
        };
        let statements: Option<String> = sqlx::query_scalar(if grant { GRANT } else { REVOKE })
            .bind(role)
            .fetch_optional(p)
            .await?;
        let Some(statements) = statements else {
            return Ok(AppGrant::UnknownRole);
        };
        sqlx::raw_sql(AssertSqlSafe(statements)).execute(p).await?;
        Ok(AppGrant::Done)
    }

    /// The roles that may call `jobhost.enqueue`; `None` on SQLite.
    pub async fn app_roles(&self) -> Result<Option<Vec<String>>> {
        let Pool::Postgres(p) = &self.pool else {
            return Ok(None);
        };
        Ok(Some(sqlx::query_scalar(GRANTED).fetch_all(p).await?))
    }
}
