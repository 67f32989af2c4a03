//! `host tenants` and `host tokens`: the tenant registry and the HTTP API's bearer tokens.

use super::failure::Failure;
use super::global::Global;
use crate::rules::tenant;
use crate::service::views::{self, time};
use crate::store::Store;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum TenantsCommand {
    /// Register a tenant (active).
    Add { name: String },
    /// The registered tenants.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Stop a tenant: its jobs take no new runs and its tokens stop working.
    Disable { name: String },
    /// Let a disabled tenant run again.
    Enable { name: String },
}

#[derive(Subcommand, Debug)]
pub enum TokensCommand {
    /// Create a token and print it (once: only its hash is kept). Without --tenant it is
    /// an operator's token, which sees and does everything.
    Create {
        /// The tenant whose jobs and runs the token is limited to.
        #[arg(long)]
        tenant: Option<String>,
        /// A note to tell tokens apart in `host tokens list`.
        #[arg(long, default_value = "")]
        label: String,
        #[arg(long)]
        json: bool,
    },
    /// The tokens (never their secrets).
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its id; requests with it are refused at once.
    Revoke { id: String },
}

/// Longest label a token may carry.
const MAX_LABEL: usize = 200;

pub async fn tenants(global: &Global, cmd: TenantsCommand) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    match cmd {
        TenantsCommand::Add { name } => {
            tenant::validate_new_tenant(&name).map_err(Failure::usage)?;
            if store.add_tenant(&name).await? {
                println!("added tenant {name}");
            } else {
                println!("tenant {name} is registered already");
            }
        }
        TenantsCommand::List { json } => {
            let all = store.list_tenants().await?;
            if json {
                let views: Vec<_> = all.iter().map(views::tenant).collect();
                println!("{}", serde_json::Value::Array(views));
            } else if all.is_empty() {
                println!("no tenants");
            } else {
                for t in &all {
                    let state = if t.active != 0 { "active" } else { "disabled" };
                    println!("{:<24} {state:<9} since {}", t.name, time(t.created_at));
                }
            }
        }
        TenantsCommand::Disable { name } => set_active(&store, &name, false).await?,
        TenantsCommand::Enable { name } => set_active(&store, &name, true).await?,
    }
    store.close().await;
    Ok(0)
}

async fn set_active(store: &Store, name: &str, active: bool) -> Result<(), Failure> {
    if !store.set_tenant_active(name, active).await? {
        return Err(Failure::usage(format!(
            "unknown tenant {name:?} (see `host tenants list`)"
        )));
    }
    println!(
        "tenant {name} {}",
        if active { "enabled" } else { "disabled" }
    );
    Ok(())
}

pub async fn tokens(global: &Global, cmd: TokensCommand) -> Result<u8, Failure> {
    let store = Store::open(&global.db_url(None)).await?;
    match cmd {
        TokensCommand::Create {
            tenant,
            label,
            json,
        } => {
            if label.len() > MAX_LABEL || label.chars().any(char::is_control) {
                return Err(Failure::usage(format!(
                    "a label is at most {MAX_LABEL} bytes without control characters"
                )));
            }
            if let Some(name) = &tenant {
                tenant::validate_tenant(name).map_err(Failure::usage)?;
                if store.get_tenant(name).await?.is_none() {
                    return Err(Failure::usage(format!(
                        "unknown tenant {name:?}: register it first with `host tenants add {name}`"
                    )));
                }
            }
            let issued = tenant::issue();
            store
                .insert_token(&issued.id, &issued.secret_hash, tenant.as_deref(), &label)
                .await?;
            if json {
                let view = serde_json::json!({
                    "id": issued.id,
                    "tenant": tenant,
                    "token": issued.token,
                });
                println!("{view}");
            } else {
                let whose = tenant.map_or("an operator token".to_string(), |t| {
                    format!("a token of tenant {t}")
                });
                eprintln!("created {whose}, id {}; it is shown only now:", issued.id);
                println!("{}", issued.token);
            }
        }
        TokensCommand::List { json } => {
            let all = store.list_tokens().await?;
            if json {
                let views: Vec<_> = all.iter().map(views::token).collect();
                println!("{}", serde_json::Value::Array(views));
            } else if all.is_empty() {
                println!("no tokens");
            } else {
                for t in &all {
                    let state = t
                        .revoked_at
                        .map_or("live".to_string(), |at| format!("revoked {}", time(at)));
                    println!(
                        "{} {:<24} {:<32} {state}",
                        t.id,
                        t.tenant.as_deref().unwrap_or("(operator)"),
                        t.label
                    );
                }
            }
        }
        TokensCommand::Revoke { id } => {
            if !store.revoke_token(&id).await? {
                return Err(Failure::usage(format!(
                    "no live token with id {id:?} (see `host tokens list`)"
                )));
            }
            println!("revoked token {id}");
        }
    }
    store.close().await;
    Ok(0)
}
