//! Per-attempt tokens: a JWT (EdDSA, Ed25519) the host signs for each call of a mount that
//! asks for one, saying which job acts, for which tenant, run and attempt, with which
//! declared actions (and the action named by the call), until the attempt's deadline. The
//! service on the other side checks it against the keys the host publishes
//! (`GET /.well-known/jwks.json`).
//!
//! Keys live in the database (`jobhost_signing_keys`), so every host of a fleet signs and
//! publishes the same set. A new key is made a quarter of the rotation period before the
//! newest is due to be replaced, and signs only once it has been published that long: by
//! then every host of the fleet has read it (each refreshes at least that often) and a
//! service that caches the key set for less than that has seen it, so no token is ever
//! signed with a key its verifier cannot find yet. Older keys stay published for another
//! period (a token lives no longer than an attempt), then are forgotten.

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

    /// How long a new key is published before it signs, in milliseconds.
    fn publish_ahead(&self) -> i64 {
        self.rotate_after.as_millis() as i64 / 4
    }

    /// Reloads the keys; makes the next one when the newest will be due for replacement
    /// within [`Self::publish_ahead`], and forgets those no token can still carry.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let period = self.rotate_after.as_millis() as i64;
        let now = self.store.now().await?;
        let mut records = self.store.signing_keys().await?;
        if records
            .first()
            .is_none_or(|k| now - k.created_at >= period - self.publish_ahead())
        {
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
        let now_ms = self.store.now().await?;
        let now = now_ms / 1000;
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
        self.sign(&claims, now_ms).ok_or(LinkError::Unavailable)
    }

    /// A JWT of `claims`, signed at `now` (milliseconds, database clock) with the newest
    /// key published long enough ([`Self::publish_ahead`]); with the newest key when none
    /// is (the fleet's very first key, which nobody can have cached yet).
    pub fn sign(&self, claims: &serde_json::Value, now: i64) -> Option<String> {
        let keys = self.keys.read().expect("signing keys");
        let key = keys
            .iter()
            .filter(|k| now - k.created_at >= self.publish_ahead())
            .max_by_key(|k| k.created_at)
            .or_else(|| keys.iter().max_by_key(|k| k.created_at))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kid_of(token: &str) -> String {
        let header = token.split('.').next().unwrap();
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).unwrap()).unwrap();
        header["kid"].as_str().unwrap().to_string()
    }

    #[tokio::test]
    async fn a_new_key_is_published_before_it_signs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&format!("sqlite://{}/t.db", dir.path().display()))
            .await
            .unwrap();
        // Rotation every 2 s: the next key is made at 1.5 s and signs from 2 s.
        let signer = Signer::open(store.clone(), Duration::from_secs(2))
            .await
            .unwrap();
        let claims = serde_json::json!({"sub": "j"});
        let now = store.now().await.unwrap();
        let first = kid_of(&signer.sign(&claims, now).unwrap());
        tokio::time::sleep(Duration::from_millis(1600)).await;
        signer.refresh().await.unwrap();
        let published = signer.jwks()["keys"].as_array().unwrap().len();
        assert_eq!(published, 2, "the next key is published");
        let now = store.now().await.unwrap();
        assert_eq!(
            kid_of(&signer.sign(&claims, now).unwrap()),
            first,
            "the new key does not sign before it was published a quarter period"
        );
        let later = now + 600;
        let second = kid_of(&signer.sign(&claims, later).unwrap());
        assert_ne!(
            second, first,
            "once published long enough, the new key signs"
        );
    }
}
