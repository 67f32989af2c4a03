//! Schema migrations: the host's own (embedded in the binary, one set per backend) and the
//! operator's (read from a directory at start), tracked per scope in `jobhost_migrations`.
//!
//! Besides the versioned migrations, which apply once each and stay as history, the host
//! has *repeatable* ones: the current text of each Postgres function
//! (`migrations/postgres/functions/<name>.sql`), so the rule in force is read in one file,
//! not found in whichever migration redefined it last. A repeatable one applies after every
//! versioned one, again whenever its text changes; each is recorded by name with its
//! checksum in `jobhost_repeatable_migrations`.
//!
//! Migrations apply in one transaction under a lock, so two hosts starting together do
//! not race: Postgres takes a transaction-scoped advisory lock, SQLite its write lock.

use super::error::StoreError;
use super::pool::{Backend, Pool};
use super::queries::Dialect;
use sha2::{Digest, Sha256};
use sqlx::{AssertSqlSafe, Row};
use std::path::Path;

#[derive(Debug, Clone)]
pub struct Migration {
    pub version: i64,
    pub name: String,
    pub sql: String,
}

impl Migration {
    fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

/// The current text of database functions, applied (again) when it differs from the text
/// applied last. It must be safe to run over what is there: `CREATE OR REPLACE`. Changing
/// a function's arguments needs a versioned migration that drops the old one first.
#[derive(Debug, Clone)]
pub struct Repeatable {
    pub name: String,
    pub sql: String,
}

impl Repeatable {
    fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

/// Which set a migration belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Host,
    Operator,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Host => "host",
            Scope::Operator => "operator",
        }
    }
}

/// Embeds `migrations/<dir>/<file>.sql` files; a test checks the list against the folders.
macro_rules! embedded {
    ($dir:literal: $($version:literal => $file:literal),* $(,)?) => {
        &[$(($version, $file, include_str!(concat!("../../../migrations/", $dir, "/", $file, ".sql")))),*]
    };
}

const SQLITE: &[(i64, &str, &str)] = embedded!("sqlite":
    1 => "0001_init",
    2 => "0002_files_and_links",
    3 => "0003_file_triggers",
    4 => "0004_batched_attempts",
    5 => "0005_resumable_runs",
    6 => "0006_tenants_and_tokens",
    7 => "0007_limits",
    8 => "0008_boot_and_orphans",
    9 => "0009_trace",
    10 => "0010_fair_claims_and_tenant_limits",
    11 => "0011_parked_leases_kept",
    12 => "0012_attempt_logs_kept",
    13 => "0013_claims_in_order_and_in_turn",
    14 => "0014_set_based_claims_and_endings",
    15 => "0015_file_quotas_and_step_checks",
    16 => "0016_claims_and_endings_without_per_run_overhead",
    17 => "0017_claims_and_endings_read_and_write_each_run_once",
    18 => "0018_surveillance_and_claims_read_only_their_rows",
    19 => "0019_replaced_files_count_until_collected",
    20 => "0020_crashed_runs_hand_their_ledger_on",
    21 => "0021_backlogs_claimed_in_the_order_they_were_queued",
    22 => "0022_operator_controls",
    23 => "0023_jobs_that_start_jobs",
    24 => "0024_served_jobs_and_failed_steps",
    25 => "0025_journals",
    26 => "0026_journal_seal",
    27 => "0027_mount_limits",
    28 => "0028_claim_limits",
    29 => "0029_components_compiling",
    30 => "0030_unique_runs",
    31 => "0031_live_logs",
    32 => "0032_claimed_runs_start_with_their_guest",
    33 => "0033_signals",
    34 => "0034_deliveries",
    35 => "0035_tokens_and_audit",
    36 => "0036_max_attempts",
    37 => "0037_app_enqueue",
    38 => "0038_hosts_and_payload_search",
    39 => "0039_live_fuel",
);
const POSTGRES: &[(i64, &str, &str)] = embedded!("postgres":
    1 => "0001_init",
    2 => "0002_files_and_links",
    3 => "0003_file_triggers",
    4 => "0004_batched_attempts",
    5 => "0005_resumable_runs",
    6 => "0006_tenants_and_tokens",
    7 => "0007_limits",
    8 => "0008_boot_and_orphans",
    9 => "0009_trace",
    10 => "0010_fair_claims_and_tenant_limits",
    11 => "0011_parked_leases_kept",
    12 => "0012_attempt_logs_kept",
    13 => "0013_claims_in_order_and_in_turn",
    14 => "0014_set_based_claims_and_endings",
    15 => "0015_file_quotas_and_step_checks",
    16 => "0016_claims_and_endings_without_per_run_overhead",
    17 => "0017_claims_and_endings_read_and_write_each_run_once",
    18 => "0018_surveillance_and_claims_read_only_their_rows",
    19 => "0019_replaced_files_count_until_collected",
    20 => "0020_crashed_runs_hand_their_ledger_on",
    21 => "0021_backlogs_claimed_in_the_order_they_were_queued",
    22 => "0022_operator_controls",
    23 => "0023_jobs_that_start_jobs",
    24 => "0024_served_jobs_and_failed_steps",
    25 => "0025_journals",
    26 => "0026_journal_seal",
    27 => "0027_mount_limits",
    28 => "0028_claim_limits",
    29 => "0029_components_compiling",
    30 => "0030_unique_runs",
    31 => "0031_live_logs",
    32 => "0032_claimed_runs_start_with_their_guest",
    33 => "0033_signals",
    34 => "0034_deliveries",
    35 => "0035_tokens_and_audit",
    36 => "0036_max_attempts",
    37 => "0037_app_enqueue",
    38 => "0038_hosts_and_payload_search",
    39 => "0039_live_fuel",
);

/// The host's repeatable migrations: Postgres's functions (`claims::POSTGRES_FUNCTIONS`);
/// SQLite has none.
pub(crate) fn host_repeatables(backend: Backend) -> Vec<Repeatable> {
    let set: &[(&str, &str)] = match backend {
        Backend::Sqlite => &[],
        Backend::Postgres => super::claims::POSTGRES_FUNCTIONS,
    };
    set.iter()
        .map(|(file, sql)| Repeatable {
            name: format!("functions/{file}"),
            sql: sql.to_string(),
        })
        .collect()
}

pub(crate) fn host_migrations(backend: Backend) -> Vec<Migration> {
    let set = match backend {
        Backend::Sqlite => SQLITE,
        Backend::Postgres => POSTGRES,
    };
    set.iter()
        .map(|(version, file, sql)| Migration {
            version: *version,
            name: file
                .split_once('_')
                .map_or(*file, |(_, name)| name)
                .to_string(),
            sql: sql.to_string(),
        })
        .collect()
}

/// Reads `NNNN_name.sql` files from a directory, in version order.
pub fn read_dir(dir: &Path) -> Result<Vec<Migration>, StoreError> {
    let io_err = |source| StoreError::MigrationDir {
        path: dir.to_path_buf(),
        source,
    };
    let mut migrations = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err)? {
        let path = entry.map_err(io_err)?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("sql") {
            continue;
        }
        let file = path.file_name().unwrap_or_default().to_string_lossy();
        let parsed = file
            .strip_suffix(".sql")
            .and_then(|stem| stem.split_once('_'))
            .and_then(|(v, name)| Some((v.parse::<i64>().ok()?, name.to_string())));
        let Some((version, name)) = parsed else {
            return Err(StoreError::MigrationName(file.to_string()));
        };
        let sql = std::fs::read_to_string(&path).map_err(io_err)?;
        migrations.push(Migration { version, name, sql });
    }
    migrations.sort_by_key(|m| m.version);
    if let Some(w) = migrations.windows(2).find(|w| w[0].version == w[1].version) {
        return Err(StoreError::MigrationName(format!(
            "two migrations have version {}",
            w[0].version
        )));
    }
    Ok(migrations)
}

/// Both bookkeeping tables, on both backends (their schemas stay alike).
const BOOTSTRAP: &str = "CREATE TABLE IF NOT EXISTS jobhost_migrations (\
    scope TEXT NOT NULL, version BIGINT NOT NULL, name TEXT NOT NULL, \
    checksum TEXT NOT NULL, applied_at BIGINT NOT NULL, PRIMARY KEY (scope, version)); \
    CREATE TABLE IF NOT EXISTS jobhost_repeatable_migrations (\
    scope TEXT NOT NULL, name TEXT NOT NULL, \
    checksum TEXT NOT NULL, applied_at BIGINT NOT NULL, PRIMARY KEY (scope, name))";

const APPLIED_REPEATABLES: &str =
    "SELECT name, checksum FROM jobhost_repeatable_migrations WHERE scope = $1";

/// Applies the versioned migrations not applied yet, then the repeatable ones whose text
/// is not the one applied last; refuses if an applied versioned migration's text changed.
/// Returns the names applied now.
pub(crate) async fn apply(
    pool: &Pool,
    dialect: &Dialect,
    scope: Scope,
    migrations: &[Migration],
    repeatables: &[Repeatable],
) -> Result<Vec<String>, StoreError> {
    let record = format!(
        "INSERT INTO jobhost_migrations (scope, version, name, checksum, applied_at) \
         VALUES ($1, $2, $3, $4, {})",
        dialect.now
    );
    let record_repeatable = format!(
        "INSERT INTO jobhost_repeatable_migrations (scope, name, checksum, applied_at) \
         VALUES ($1, $2, $3, {}) ON CONFLICT (scope, name) \
         DO UPDATE SET checksum = excluded.checksum, applied_at = excluded.applied_at",
        dialect.now
    );
    let current = |applied: &[(String, String)], r: &Repeatable| {
        applied
            .iter()
            .any(|(n, c)| *n == r.name && *c == r.checksum())
    };
    with_pool!(pool, p => {
        // Applied already (every start but the first): read, not written, so a process
        // that only reads or cancels never waits for SQLite's write lock to start.
        let applied: std::result::Result<Vec<(i64, String)>, sqlx::Error> = sqlx::query_as(
            "SELECT version, checksum FROM jobhost_migrations WHERE scope = $1",
        )
        .bind(scope.as_str())
        .fetch_all(p)
        .await;
        let repeated: std::result::Result<Vec<(String, String)>, sqlx::Error> =
            sqlx::query_as(APPLIED_REPEATABLES).bind(scope.as_str()).fetch_all(p).await;
        if let (Ok(applied), Ok(repeated)) = (applied, repeated)
            && migrations
                .iter()
                .all(|m| applied.iter().any(|(v, c)| *v == m.version && *c == m.checksum()))
            && repeatables.iter().all(|r| current(&repeated, r))
        {
            return Ok(Vec::new());
        }
        let mut tx = p.begin_with(dialect.begin_write).await?;
        if let Some(lock) = dialect.migration_lock {
            sqlx::query(lock).execute(&mut *tx).await?;
        }
        sqlx::raw_sql(BOOTSTRAP).execute(&mut *tx).await?;
        let rows = sqlx::query(
            "SELECT version, checksum FROM jobhost_migrations WHERE scope = $1",
        )
        .bind(scope.as_str())
        .fetch_all(&mut *tx)
        .await?;
        let mut applied_now = Vec::new();
        for m in migrations {
            let label = format!("{:04}_{}", m.version, m.name);
            let found = rows.iter().find(|r| r.get::<i64, _>("version") == m.version);
            match found {
                Some(row) if row.get::<String, _>("checksum") == m.checksum() => continue,
                Some(_) => {
                    return Err(StoreError::MigrationChanged { scope: scope.as_str(), name: label });
                }
                None => {}
            }
            sqlx::raw_sql(AssertSqlSafe(m.sql.clone()))
                .execute(&mut *tx)
                .await
                .map_err(|source| StoreError::MigrationFailed { name: label.clone(), source })?;
            sqlx::query(AssertSqlSafe(record.clone()))
                .bind(scope.as_str())
                .bind(m.version)
                .bind(&m.name)
                .bind(m.checksum())
                .execute(&mut *tx)
                .await?;
            applied_now.push(label);
        }
        // Read under the lock: of hosts starting together, the first applies what changed
        // and the others find it applied.
        let repeated: Vec<(String, String)> = sqlx::query_as(APPLIED_REPEATABLES)
            .bind(scope.as_str())
            .fetch_all(&mut *tx)
            .await?;
        for r in repeatables.iter().filter(|r| !current(&repeated, r)) {
            sqlx::raw_sql(AssertSqlSafe(r.sql.clone()))
                .execute(&mut *tx)
                .await
                .map_err(|source| StoreError::MigrationFailed { name: r.name.clone(), source })?;
            sqlx::query(AssertSqlSafe(record_repeatable.clone()))
                .bind(scope.as_str())
                .bind(&r.name)
                .bind(r.checksum())
                .execute(&mut *tx)
                .await?;
            applied_now.push(r.name.clone());
        }
        tx.commit().await?;
        Ok(applied_now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `.sql` files in `migrations/<dir>`.
    fn files(dir: &str) -> Vec<String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../migrations")
            .join(dir);
        let mut names: Vec<String> = std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn embedded_sets_match_the_directories_and_each_other() {
        for (dir, backend) in [("sqlite", Backend::Sqlite), ("postgres", Backend::Postgres)] {
            let embedded: Vec<String> = host_migrations(backend)
                .iter()
                .map(|m| format!("{:04}_{}.sql", m.version, m.name))
                .collect();
            assert_eq!(
                embedded,
                files(dir),
                "migrations/{dir} is not embedded in step"
            );
        }
        assert_eq!(files("sqlite"), files("postgres"));
    }

    #[test]
    fn every_function_file_is_embedded_in_name_order() {
        let embedded: Vec<String> = host_repeatables(Backend::Postgres)
            .iter()
            .map(|r| format!("{}.sql", r.name))
            .collect();
        let on_disk: Vec<String> = files("postgres/functions")
            .into_iter()
            .map(|f| format!("functions/{f}"))
            .collect();
        assert_eq!(
            embedded, on_disk,
            "migrations/postgres/functions is not embedded in step"
        );
        assert!(host_repeatables(Backend::Sqlite).is_empty());
    }

    /// Each function file replaces what is there, and names no schema: the one the host
    /// migrates in, as in the versioned migrations.
    #[test]
    fn function_files_replace_and_revoke() {
        for r in host_repeatables(Backend::Postgres) {
            assert!(
                r.sql.contains("CREATE OR REPLACE FUNCTION jobhost_"),
                "{}",
                r.name
            );
            assert!(!r.sql.contains("CREATE FUNCTION"), "{}", r.name);
            assert!(!r.sql.contains("public."), "{}: schema-qualified", r.name);
        }
    }

    #[test]
    fn operator_dir_is_read_in_order_and_bad_names_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("0002_b.sql"), "select 2").unwrap();
        std::fs::write(dir.path().join("0001_a.sql"), "select 1").unwrap();
        std::fs::write(dir.path().join("README.md"), "ignored").unwrap();
        let m = read_dir(dir.path()).unwrap();
        assert_eq!(
            m.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        std::fs::write(dir.path().join("oops.sql"), "").unwrap();
        assert!(matches!(
            read_dir(dir.path()),
            Err(StoreError::MigrationName(_))
        ));
    }
}
