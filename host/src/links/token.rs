//! Per-attempt tokens: a JWT (EdDSA, Ed25519) the host signs for each call of a mount that
//! asks for one, saying which job acts, for which tenant, run and attempt, with which
//! declared actions (and the action named by the call), until the attempt's deadline. The
//! service on the other side checks it against the keys the host publishes
//! (`GET /.well-known/jwks.json`).
//!
//! Keys live in the database (`jobhost_signing_keys`), so every host of a fleet signs and
//! publishes the same set. A new key is made when the newest is older than the rotation
//! period; older keys stay published for another period (a token lives no longer than an
//! attempt), then are forgotten.

use super::{Caller, LinkError};
use crate::store::{SigningKeyRecord, Store, StoreError};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signer as _, SigningKey};
use std::sync::RwLock;
use std::time::Duration;

/// How long a key signs before a new one is made.
pub const ROTATE_AFTER: Duration = Duration::from_secs(24 * 3600);
/// The issuer named in every token.
pub const ISSUER: &str = "jobhost";

struct Key {
    kid: String,
    key: SigningKey,
    created_at: i64,
}

pub struct Signer {
    store: Store,
    keys: RwLock<Vec<Key>>,
    rotate_after: Duration,
}

impl Signer {
    /// Loads the keys, making one if none signs now.
    pub async fn open(store: Store, rotate_after: Duration) -> Result<Signer, StoreError> {
        let signer = Signer {
            store,
            keys: RwLock::default(),
            rotate_after,
        };
        signer.refresh().await?;
        Ok(signer)
    }

    /// Reloads the keys; makes a new one when the newest is older than the rotation
    /// period, and forgets those no token can still carry.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let period = self.rotate_after.as_millis() as i64;
        let now = self.store.now().await?;
        let mut records = self.store.signing_keys().await?;
        if records.first().is_none_or(|k| now - k.created_at >= period) {
            let seed: [u8; 32] = rand::random();
            let key = SigningKey::from_bytes(&seed);
            let kid = hex::encode(rand::random::<[u8; 8]>());
            self.store
                .insert_signing_key(
                    &kid,
                    &hex::encode(seed),
                    &URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes()),
                )
                .await?;
            self.store.forget_signing_keys(2 * period).await?;
            records = self.store.signing_keys().await?;
        }
        let keys = records
            .into_iter()
            .filter(|r| now - r.created_at < 2 * period)
            .filter_map(|r: SigningKeyRecord| {
                let seed: [u8; 32] = hex::decode(&r.seed).ok()?.try_into().ok()?;
                Some(Key {
                    kid: r.kid,
                    key: SigningKey::from_bytes(&seed),
                    created_at: r.created_at,
                })
            })
            .collect();
        *self.keys.write().expect("signing keys") = keys;
        Ok(())
    }

    /// The token for one call of `caller`, audience `audience`, naming `action`.
    pub async fn token(
        &self,
        caller: &Caller,
        audience: &str,
        action: Option<&str>,
    ) -> Result<String, LinkError> {
        let now = self.store.now().await? / 1000;
        let mut claims = serde_json::json!({
            "iss": ISSUER,
            "sub": caller.job,
            "aud": audience,
            "iat": now,
            "nbf": now,
            "exp": (caller.lease_deadline_ms + 999) / 1000,
            "jti": format!("{}:{}", caller.run_id, caller.fence.generation),
            "job": caller.job,
            "tenant": caller.tenant,
            "run": caller.run_id,
            "attempt": caller.fence.generation,
            "actions": caller.actions.iter().collect::<Vec<_>>(),
        });
        if let Some(action) = action {
            claims["action"] = action.into();
        }
        self.sign(&claims).ok_or(LinkError::Unavailable)
    }

    /// A JWT of `claims`, signed with the newest key.
    pub fn sign(&self, claims: &serde_json::Value) -> Option<String> {
        let keys = self.keys.read().expect("signing keys");
        let key = keys.iter().max_by_key(|k| k.created_at)?;
        let header = serde_json::json!({"alg": "EdDSA", "typ": "JWT", "kid": key.kid});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = key.key.sign(signing_input.as_bytes());
        Some(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature.to_bytes())
        ))
    }

    /// The public keys, as a JWK set.
    pub fn jwks(&self) -> serde_json::Value {
        let keys = self.keys.read().expect("signing keys");
        serde_json::json!({
            "keys": keys
                .iter()
                .map(|k| serde_json::json!({
                    "kty": "OKP",
                    "crv": "Ed25519",
                    "alg": "EdDSA",
                    "use": "sig",
                    "kid": k.kid,
                    "x": URL_SAFE_NO_PAD.encode(k.key.verifying_key().as_bytes()),
                }))
                .collect::<Vec<_>>(),
        })
    }
}
