//! Who an API request speaks for, and the bearer tokens that say so.
//!
//! A token is `jh_<id>_<secret>`: the id finds its row, the secret proves it. Only the
//! SHA-256 of the secret is stored, so a copy of the database holds no usable token, and
//! the comparison is constant-time. Secrets are 256 random bits, so a fast hash is enough:
//! there is nothing to guess that a slow one would protect.

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The tenant of jobs that name none: the operator's own. It is never registered, so a
/// per-tenant fan-out never includes it, and it cannot be disabled.
pub const OPERATOR_TENANT: &str = "default";

/// Whose request this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// Sees and does everything.
    Operator,
    /// Sees and acts on this tenant's jobs and runs only.
    Tenant(String),
}

impl Principal {
    /// Whether this principal may see what belongs to `tenant`.
    pub fn sees(&self, tenant: &str) -> bool {
        match self {
            Principal::Operator => true,
            Principal::Tenant(own) => own == tenant,
        }
    }

    /// The tenant a request is limited to, if any.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Principal::Operator => None,
            Principal::Tenant(own) => Some(own),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    #[error(
        "invalid tenant name {0:?}: use 1-64 lowercase letters, digits and . _ -, starting with a letter or digit"
    )]
    Name(String),
    #[error("{OPERATOR_TENANT:?} is the operator's own tenant: it is not registered")]
    Reserved,
    #[error("a label is at most {MAX_LABEL} bytes without control characters")]
    Label,
    #[error(
        "invalid expiry {0:?}: a duration from 1m to 3650d with a unit: m (minutes), h (hours) or d (days), e.g. 12h, 30d"
    )]
    Expiry(String),
    #[error("a read-only token is an operator's: it cannot be limited to a tenant")]
    ReadOnlyTenant,
}

/// Longest label a token may carry.
pub const MAX_LABEL: usize = 200;

/// Longest a token may be made to live.
const MAX_EXPIRY_MS: i64 = 3650 * 86_400_000;

/// What a new token is, as asked for: checked by [`NewToken::check`] before anything is
/// written.
pub struct NewToken<'a> {
    pub tenant: Option<&'a str>,
    pub label: &'a str,
    pub read_only: bool,
    /// How long it lives, as typed (`30d`).
    pub expires: Option<&'a str>,
}

impl NewToken<'_> {
    /// The token's lifetime in ms, if it expires; a refusal naming the field otherwise.
    pub fn check(&self) -> Result<Option<i64>, TenantError> {
        if self.label.len() > MAX_LABEL || self.label.chars().any(char::is_control) {
            return Err(TenantError::Label);
        }
        if let Some(name) = self.tenant {
            validate_tenant(name)?;
            if self.read_only {
                return Err(TenantError::ReadOnlyTenant);
            }
        }
        self.expires.map(parse_expiry).transpose()
    }
}

/// A token's lifetime (`30d`, `12h`, `90m`) in ms: whole minutes at least, ten years at
/// most.
pub fn parse_expiry(text: &str) -> Result<i64, TenantError> {
    let refused = || TenantError::Expiry(crate::rules::audit::object(text));
    let trimmed = text.trim();
    if !["m", "h", "d"].iter().any(|unit| trimmed.ends_with(unit)) || trimmed.ends_with("ms") {
        return Err(refused());
    }
    let ms = crate::rules::units::parse_duration(trimmed).map_err(|_| refused())?;
    let ms = i64::try_from(ms.as_millis()).map_err(|_| refused())?;
    if !(60_000..=MAX_EXPIRY_MS).contains(&ms) {
        return Err(refused());
    }
    Ok(ms)
}

/// The rule for tenant names, the same as for job names: they appear in object keys,
/// labels and URLs.
pub fn validate_tenant(name: &str) -> Result<(), TenantError> {
    crate::rules::job::validate_name(name).map_err(|_| TenantError::Name(name.to_string()))
}

/// The rule for a tenant to register: a valid name that is not the operator's own.
pub fn validate_new_tenant(name: &str) -> Result<(), TenantError> {
    validate_tenant(name)?;
    if name == OPERATOR_TENANT {
        return Err(TenantError::Reserved);
    }
    Ok(())
}

/// A token as it is handed out once, and what is kept of it.
pub struct IssuedToken {
    pub id: String,
    /// The whole bearer token; shown once, never stored.
    pub token: String,
    pub secret_hash: String,
}

/// A fresh token: a 48-bit id and a 256-bit secret.
pub fn issue() -> IssuedToken {
    let mut rng = rand::rng();
    let mut id = [0u8; 6];
    let mut secret = [0u8; 32];
    rng.fill_bytes(&mut id);
    rng.fill_bytes(&mut secret);
    let id = hex::encode(id);
    let secret = hex::encode(secret);
    IssuedToken {
        token: format!("jh_{id}_{secret}"),
        secret_hash: hash(&secret),
        id,
    }
}

/// The id and secret of a presented token, if it has the token's shape.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix("jh_")?.split_once('_')?;
    (is_token_id(id) && hex_of(secret, 64)).then_some((id, secret))
}

/// Whether `id` has a token id's shape (12 hex digits).
pub fn is_token_id(id: &str) -> bool {
    hex_of(id, 12)
}

fn hex_of(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Whether `secret` is the one whose hash was stored, in time that does not depend on
/// where they differ.
pub fn secret_matches(secret: &str, stored_hash: &str) -> bool {
    hash(secret).as_bytes().ct_eq(stored_hash.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issued_token_parses_and_matches_only_its_own_hash() {
        let issued = issue();
        let (id, secret) = parse(&issued.token).expect("parses");
        assert_eq!(id, issued.id);
        assert!(secret_matches(secret, &issued.secret_hash));
        assert!(!issued.token.contains(&issued.secret_hash));
        let other = issue();
        assert!(!secret_matches(secret, &other.secret_hash));
        assert_ne!(issued.id, other.id);
    }

    #[test]
    fn malformed_tokens_do_not_parse() {
        let issued = issue();
        let (id, secret) = parse(&issued.token).unwrap();
        for bad in [
            String::new(),
            "jh_".into(),
            format!("jh_{id}"),
            format!("jh_{id}_"),
            format!("xx_{id}_{secret}"),
            format!("jh_{id}_{secret}0"),
            format!("jh_{id}_{}", &secret[1..]),
            format!("jh_{}g_{secret}", &id[1..]),
            format!("jh_{id}_{}\0", &secret[1..]),
            format!("jh_{id}_{}é", &secret[2..]),
        ] {
            assert_eq!(parse(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_principal_sees_only_its_own_tenant() {
        assert!(Principal::Operator.sees("acme"));
        let acme = Principal::Tenant("acme".into());
        assert!(acme.sees("acme"));
        assert!(!acme.sees("globex"));
        assert_eq!(acme.tenant(), Some("acme"));
        assert_eq!(Principal::Operator.tenant(), None);
    }

    #[test]
    fn an_expiry_is_minutes_to_ten_years_with_a_unit() {
        assert_eq!(parse_expiry("30d"), Ok(30 * 86_400_000));
        assert_eq!(parse_expiry("12h"), Ok(12 * 3_600_000));
        assert_eq!(parse_expiry(" 90m "), Ok(90 * 60_000));
        for bad in [
            "",
            "30",
            "30s",
            "500ms",
            "0d",
            "0m",
            "3651d",
            "-1d",
            "1.5d",
            "30 days",
            "1w",
            "99999999999999999999d",
        ] {
            let refused = parse_expiry(bad).expect_err(bad);
            assert!(
                refused
                    .to_string()
                    .contains("m (minutes), h (hours) or d (days)"),
                "{bad:?}"
            );
        }
        assert!(
            !parse_expiry("1\u{1b}[2Jd")
                .unwrap_err()
                .to_string()
                .contains('\u{1b}')
        );
    }

    #[test]
    fn a_new_token_is_checked_whole() {
        fn token<'a>(
            tenant: Option<&'a str>,
            label: &'a str,
            read_only: bool,
            expires: Option<&'a str>,
        ) -> NewToken<'a> {
            NewToken {
                tenant,
                label,
                read_only,
                expires,
            }
        }
        assert_eq!(
            token(None, "on-call", true, Some("30d")).check(),
            Ok(Some(30 * 86_400_000))
        );
        assert_eq!(token(Some("acme"), "", false, None).check(), Ok(None));
        assert_eq!(
            token(Some("acme"), "", true, None).check(),
            Err(TenantError::ReadOnlyTenant)
        );
        assert_eq!(
            token(None, "a\nb", false, None).check(),
            Err(TenantError::Label)
        );
        let long = "x".repeat(MAX_LABEL + 1);
        assert_eq!(
            token(None, &long, false, None).check(),
            Err(TenantError::Label)
        );
        assert!(matches!(
            token(Some("Acme"), "", false, None).check(),
            Err(TenantError::Name(_))
        ));
        assert!(matches!(
            token(None, "", false, Some("forever")).check(),
            Err(TenantError::Expiry(_))
        ));
    }

    #[test]
    fn tenant_names_follow_the_job_name_rule() {
        assert!(validate_tenant("acme-2.eu_west").is_ok());
        assert!(validate_tenant(OPERATOR_TENANT).is_ok());
        assert_eq!(
            validate_new_tenant(OPERATOR_TENANT),
            Err(TenantError::Reserved)
        );
        for bad in ["", "Acme", "-acme", "a/b", "a b", "a\0", &"a".repeat(65)] {
            assert!(validate_tenant(bad).is_err(), "{bad:?}");
        }
    }
}
