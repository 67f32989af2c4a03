//! `host apps`: which Postgres roles of the application may call `jobhost.enqueue`, to
//! queue runs in their own transactions (`store::apps`, the guide's "From the
//! application's transaction").

use super::failure::Failure;
use super::global::Global;
use crate::store::{AppGrant, Store};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum AppsCommand {
    /// Let a Postgres role call `jobhost.enqueue` (it needs no table of the host's).
    Grant { role: String },
    /// Take that back: the role's calls are refused from its next statement.
    Revoke { role: String },
    /// The roles that may call `jobhost.enqueue`.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// The refusal on SQLite, where there are no roles to grant.
const NO_ROLES: &str = "SQLite has no roles: enqueue through the API or `host start`";

pub async fn apps(global: &Global, cmd: AppsCommand) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    match cmd {
        AppsCommand::Grant { role } => set(&store, &role, true).await?,
        AppsCommand::Revoke { role } => set(&store, &role, false).await?,
        AppsCommand::List { json } => {
            let roles = store
                .app_roles()
                .await?
                .ok_or_else(|| Failure::usage(NO_ROLES))?;
            if json {
                println!("{}", serde_json::json!(roles));
            } else if roles.is_empty() {
                println!(
                    "no role may call jobhost.enqueue (grant one with `host apps grant ROLE`)"
                );
            } else {
                for role in &roles {
                    println!("{role}");
                }
            }
        }
    }
    store.close().await;
    Ok(0)
}

async fn set(store: &Store, role: &str, grant: bool) -> Result<(), Failure> {
    match store.set_app_grant(role, grant).await? {
        AppGrant::Done if grant => println!("role {role} may call jobhost.enqueue"),
        AppGrant::Done => println!("role {role} may no longer call jobhost.enqueue"),
        AppGrant::UnknownRole => {
            return Err(Failure::usage(format!(
                "no Postgres role {role:?}: create it first (CREATE ROLE ... LOGIN)"
            )));
        }
        AppGrant::NoRoles => return Err(Failure::usage(NO_ROLES)),
    }
    Ok(())
}
