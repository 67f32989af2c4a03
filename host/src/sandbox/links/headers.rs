//! Which request headers a guest may send through a mount: an allow-list per mount, so a
//! header that a service or the proxy in front of it honours (as another method, path,
//! host or client) is never a hole by default, whatever its spelling.
//!
//! - A mount accepts the headers its manifest lists (`headers = [...]`), or
//!   [`DEFAULT_HEADERS`] when it lists none. Anything else is `header-not-allowed`.
//! - A list may not name a header the host sets or owns (the credential header, `Host`,
//!   the connection's, `Idempotency-Key`, `traceparent`), cookies, or a header that
//!   proxies honour as another method, path or client: the manifest is refused.
//! - A value is visible ASCII and spaces only (`bad-header`): no control character, no
//!   byte a server or proxy might decode as something else.

use super::LinkError;
use reqwest::header::{HeaderName, HeaderValue};
use std::collections::BTreeSet;

/// Most headers a guest may send, and most bytes of each.
const MAX_HEADERS: usize = 64;
const MAX_HEADER_BYTES: usize = 8 << 10;

/// What a mount accepts when its manifest lists nothing: content negotiation and
/// conditional requests, which change only what the service answers, not who asks or
/// what is asked of it.
pub const DEFAULT_HEADERS: [&str; 8] = [
    "accept",
    "accept-language",
    "content-type",
    "content-language",
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
];

/// Headers no mount may accept: the host's, the connection's, cookies, and those that
/// services and the proxies in front of them honour as a different method, path or
/// client than the request's own.
const NEVER: [&str; 27] = [
    "host",
    "cookie",
    "cookie2",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "idempotency-key",
    "traceparent",
    "tracestate",
    "forwarded",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-rewrite-url",
    "x-real-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "true-client-ip",
    "client-ip",
    "via",
];

/// Prefixes of names no mount may accept, for the same reasons: the proxy's, the host's
/// own, the forwarded family (`X-Forwarded-For`, `X-Forwarded-Host`...) and the
/// original-request family (`X-Original-URL`, `-Host`...).
const NEVER_PREFIXES: [&str; 4] = ["proxy-", "x-jobhost-", "x-forwarded-", "x-original-"];

/// The default list, as a mount holds it.
pub fn default_headers() -> BTreeSet<String> {
    DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect()
}

/// A mount's list from the manifest, lower-cased: every name a valid header name that no
/// mount may accept and not the mount's own `credential` header.
pub fn mount_headers(
    listed: &BTreeSet<String>,
    credential: Option<&str>,
) -> Result<BTreeSet<String>, String> {
    listed
        .iter()
        .map(|name| {
            let lower = name.to_ascii_lowercase();
            if HeaderName::from_bytes(lower.as_bytes()).is_err() {
                return Err(format!("{name:?} is not a header name"));
            }
            let never = NEVER.contains(&lower.as_str())
                || NEVER_PREFIXES.iter().any(|p| lower.starts_with(p))
                || credential.is_some_and(|c| c.eq_ignore_ascii_case(&lower));
            if never {
                return Err(format!(
                    "a mount may not accept the header {name:?}: the host sets it, or services and proxies take it for another method, path or client"
                ));
            }
            Ok(lower)
        })
        .collect()
}

/// The guest's headers, checked: bounded, well-formed with visible ASCII values
/// (`bad-header`), then on the mount's list `allowed` (lower-case) and not its
/// `credential` header, which the host adds (`header-not-allowed`).
pub fn check(
    headers: &[(String, String)],
    allowed: &BTreeSet<String>,
    credential: Option<&str>,
) -> Result<Vec<(HeaderName, HeaderValue)>, LinkError> {
    if headers.len() > MAX_HEADERS {
        return Err(LinkError::BadHeader);
    }
    headers
        .iter()
        .map(|(name, value)| {
            if name.len() + value.len() > MAX_HEADER_BYTES {
                return Err(LinkError::BadHeader);
            }
            let lower = name.to_ascii_lowercase();
            let name =
                HeaderName::from_bytes(lower.as_bytes()).map_err(|_| LinkError::BadHeader)?;
            if !value.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
                return Err(LinkError::BadHeader);
            }
            let value = HeaderValue::from_str(value).map_err(|_| LinkError::BadHeader)?;
            if !allowed.contains(name.as_str())
                || credential.is_some_and(|c| c.eq_ignore_ascii_case(name.as_str()))
            {
                return Err(LinkError::HeaderNotAllowed);
            }
            Ok((name, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_one(name: &str, value: &str) -> Result<(), LinkError> {
        check(
            &[(name.to_string(), value.to_string())],
            &default_headers(),
            Some("Authorization"),
        )
        .map(drop)
    }

    #[test]
    fn only_listed_headers_pass_by_default() {
        assert!(check_one("content-type", "application/json; charset=utf-8").is_ok());
        assert!(check_one("Accept", "*/*").is_ok());
        assert!(check_one("If-None-Match", "\"v1\"").is_ok());
        for refused in [
            "x-request-id",
            "Authorization",
            "host",
            "X-Host",
            "X-Forwarded",
            "X-Forwarded-For",
            "Forwarded",
            "X-HTTP-Method-Override",
            "X-Original-URL",
            "Cookie",
            "Idempotency-Key",
            "traceparent",
            "Via",
        ] {
            assert!(
                matches!(check_one(refused, "x"), Err(LinkError::HeaderNotAllowed)),
                "{refused}"
            );
        }
    }

    #[test]
    fn values_are_visible_ascii() {
        for bad in [
            "a\r\nHost: evil",
            "a\0",
            "tab\there",
            "caf\u{e9}",
            "\u{202e}",
            "\u{7f}",
        ] {
            assert!(
                matches!(check_one("accept", bad), Err(LinkError::BadHeader)),
                "{bad:?}"
            );
        }
        assert!(matches!(
            check_one("bad name", "x"),
            Err(LinkError::BadHeader)
        ));
        assert!(matches!(
            check(
                &std::iter::repeat_n(("accept".to_string(), "x".to_string()), MAX_HEADERS + 1)
                    .collect::<Vec<_>>(),
                &default_headers(),
                None
            ),
            Err(LinkError::BadHeader)
        ));
    }

    #[test]
    fn a_mount_may_list_its_own_but_never_the_hosts_or_the_proxies() {
        let listed: BTreeSet<String> = ["X-Request-Id".to_string(), "accept".to_string()].into();
        let list = mount_headers(&listed, Some("Authorization")).unwrap();
        assert_eq!(
            list,
            ["x-request-id".to_string(), "accept".to_string()].into()
        );
        assert!(check(&[("X-Request-ID".into(), "r1".into())], &list, None).is_ok());
        assert!(matches!(
            check(&[("content-type".into(), "text/plain".into())], &list, None),
            Err(LinkError::HeaderNotAllowed)
        ));
        for never in [
            "Authorization",
            "host",
            "Transfer-Encoding",
            "X-Forwarded-Host",
            "x-jobhost-run",
            "Proxy-Authorization",
            "traceparent",
            "via",
            "bad name",
        ] {
            let listed: BTreeSet<String> = [never.to_string()].into();
            assert!(
                mount_headers(&listed, Some("authorization")).is_err(),
                "{never}"
            );
        }
    }

    proptest! {
        /// Whatever a guest sends, what passes is on the mount's list and visible ASCII.
        #[test]
        fn what_passes_is_listed_and_visible(
            name in prop_oneof![
                proptest::sample::select(DEFAULT_HEADERS.to_vec()).prop_map(String::from),
                "[\\s\\S]{0,20}",
            ],
            value in "[\\s\\S]{0,40}",
        ) {
            if let Ok(passed) = check(&[(name, value)], &default_headers(), None) {
                prop_assert!(DEFAULT_HEADERS.contains(&passed[0].0.as_str()));
                prop_assert!(passed[0].1.as_bytes().iter().all(|b| *b == b' ' || b.is_ascii_graphic()));
            }
        }
    }
}
