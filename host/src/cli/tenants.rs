//! `host tenants` and `host tokens`: the tenant registry and the HTTP API's bearer tokens.

use super::failure::Failure;
use super::global::Global;
use crate::rules::guest_text::for_terminal;
use crate::rules::tenant::{self, NewToken};
use crate::service::views::{self, time};
use crate::store::{NewTokenRow, Store};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum TenantsCommand {
    /// Register a tenant (active).
    Add { name: String },
    /// The registered tenants.
    List {
        /// Print JSON instead of text.
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
    /// an operator's token, which sees and does everything (with --read-only: sees
    /// everything, changes nothing).
    Create {
        /// The tenant whose jobs and runs the token is limited to.
        #[arg(long, conflicts_with = "read_only")]
        tenant: Option<String>,
        /// An operator's token that sees what an operator sees and changes nothing: every
        /// change it asks for is refused (403 `read_only`).
        #[arg(long)]
        read_only: bool,
        /// Refuse the token after this long: minutes, hours or days, e.g. 90m, 12h, 30d.
        #[arg(long, value_name = "DURATION")]
        expires: Option<String>,
        /// A note to tell tokens apart in `host tokens list` and the audit log.
        #[arg(long, default_value = "")]
        label: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The tokens (never their secrets).
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token by its id; requests with it are refused at once.
    Revoke { id: String },
}

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

pub async fn tokens(
    global: &Global,
    cmd: TokensCommand,
    created: &mut Option<String>,
) -> Result<u8, Failure> {
    // A new token is checked whole before the database is opened.
    let expires_in_ms = match &cmd {
        TokensCommand::Create {
            tenant,
            read_only,
            expires,
            label,
            ..
        } => NewToken {
            tenant: tenant.as_deref(),
            label,
            read_only: *read_only,
            expires: expires.as_deref(),
        }
        .check()
        .map_err(Failure::usage)?,
        _ => None,
    };
    let store = Store::open(&global.db_url(None)).await?;
    match cmd {
        TokensCommand::Create {
            tenant,
            read_only,
            expires,
            label,
            json,
        } => {
            if let Some(name) = &tenant
                && store.get_tenant(name).await?.is_none()
            {
                return Err(Failure::usage(format!(
                    "unknown tenant {name:?}: register it first with `host tenants add {name}`"
                )));
            }
            let issued = tenant::issue();
            store
                .insert_token(&NewTokenRow {
                    id: &issued.id,
                    secret_hash: &issued.secret_hash,
                    tenant: tenant.as_deref(),
                    label: &label,
                    read_only,
                    expires_in_ms,
                })
                .await?;
            *created = Some(format!("token {}", issued.id));
            let kind = views::token_kind(tenant.as_deref(), read_only);
            if json {
                let view = serde_json::json!({
                    "id": issued.id,
                    "tenant": tenant,
                    "kind": kind,
                    "expires": expires,
                    "token": issued.token,
                });
                println!("{view}");
            } else {
                let whose = match (&tenant, read_only) {
                    (Some(t), _) => format!("a token of tenant {t}"),
                    (None, true) => "a read-only operator token".to_string(),
                    (None, false) => "an operator token".to_string(),
                };
                let until = expires.map_or(String::new(), |e| format!(", expiring in {e}"));
                eprintln!(
                    "created {whose}, id {}{until}; it is shown only now:",
                    issued.id
                );
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
                println!(
                    "{:<12} {:<9} {:<24} {:<32} {:<24} STATE",
                    "ID", "KIND", "TENANT", "LABEL", "CREATED"
                );
                for t in &all {
                    let state = match (t.revoked_at, t.expires_at) {
                        (Some(at), _) => format!("revoked {}", time(at)),
                        (None, Some(at)) if t.expired != 0 => format!("expired {}", time(at)),
                        (None, Some(at)) => format!("live, expires {}", time(at)),
                        (None, None) => "live".to_string(),
                    };
                    println!(
                        "{:<12} {:<9} {:<24} {:<32} {:<24} {state}",
                        t.id,
                        views::token_kind(t.tenant.as_deref(), t.read_only != 0),
                        t.tenant.as_deref().unwrap_or("-"),
                        for_terminal(&t.label),
                        time(t.created_at)
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
