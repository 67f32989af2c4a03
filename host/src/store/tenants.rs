//! The rows of tenants and API tokens. What a token may see is `tenant`'s and the API's.

use super::error::Result;
use super::handle::Store;
use super::records::{NewTokenRow, TenantRecord, TokenCheck, TokenRecord};

impl Store {
    /// Registers a tenant as active; false if it was registered already (left as it is).
    pub async fn add_tenant(&self, name: &str) -> Result<bool> {
        let q = &self.q.add_tenant;
        let added = with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(name).execute(p).await?.rows_affected());
        Ok(added == 1)
    }

    pub async fn list_tenants(&self) -> Result<Vec<TenantRecord>> {
        let q = &self.q.list_tenants;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    pub async fn get_tenant(&self, name: &str) -> Result<Option<TenantRecord>> {
        let q = &self.q.get_tenant;
        if let Some(found) = self.point_read(q, name, super::probe::tenant) {
            return Ok(found);
        }
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(name).fetch_optional(p).await?),
        )
    }

    /// Enables or disables a tenant; false if it is not registered.
    pub async fn set_tenant_active(&self, name: &str, active: bool) -> Result<bool> {
        let q = &self.q.set_tenant_active;
        let changed = with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(name)
            .bind(i64::from(active))
            .execute(p)
            .await?
            .rows_affected());
        Ok(changed == 1)
    }

    /// The names of the disabled tenants.
    pub async fn disabled_tenants(&self) -> Result<Vec<String>> {
        let q = &self.q.disabled_tenants;
        Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str()).fetch_all(p).await?))
    }

    /// The names of the active tenants, in order: whom a per-tenant fan-out reaches.
    pub async fn active_tenants(&self) -> Result<Vec<String>> {
        let q = &self.q.active_tenants;
        Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str()).fetch_all(p).await?))
    }

    /// Stores a token; `expires_in_ms` from now in database time, if it expires.
    pub async fn insert_token(&self, token: &NewTokenRow<'_>) -> Result<()> {
        let q = &self.q.insert_token;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(token.id)
            .bind(token.secret_hash)
            .bind(token.tenant)
            .bind(token.label)
            .bind(i64::from(token.read_only))
            .bind(token.expires_in_ms)
            .execute(p)
            .await
            .map(|_| ()))?;
        Ok(())
    }

    pub async fn list_tokens(&self) -> Result<Vec<TokenRecord>> {
        let q = &self.q.list_tokens;
        Ok(with_pool!(self.reader, p => sqlx::query_as(q.as_str()).fetch_all(p).await?))
    }

    /// Revokes a live token; false if there is none with that id.
    pub async fn revoke_token(&self, id: &str) -> Result<bool> {
        let q = &self.q.revoke_token;
        let revoked = with_pool!(self.pool, p => sqlx::query(q.as_str()).bind(id).execute(p).await?.rows_affected());
        Ok(revoked == 1)
    }

    /// The live token with this id, if any, with what checking it needs.
    pub async fn check_token(&self, id: &str) -> Result<Option<TokenCheck>> {
        let q = &self.q.check_token;
        if let Some(found) = self.point_read(q, id, super::probe::token_check) {
            return Ok(found);
        }
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(q.as_str()).bind(id).fetch_optional(p).await?),
        )
    }

    /// How many tokens are not revoked.
    pub async fn live_tokens(&self) -> Result<i64> {
        let q = &self.q.live_tokens;
        Ok(with_pool!(self.reader, p => sqlx::query_scalar(q.as_str()).fetch_one(p).await?))
    }
}
