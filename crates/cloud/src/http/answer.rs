//! What an answer of Neutron or Keystone holds, read as untrusted input: the body up to a cap,
//! JSON decoded into a type naming the field that is wrong, the error body's type and message
//! (shortened: they end up in conditions and Events), and a list page's items and the `next`
//! link, followed only under our own endpoint.

use reqwest::Url;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;

use crate::error::{CloudError, Result};

/// No answer (Neutron's or Keystone's) is read past this: the largest list the operator reads
/// is a few thousand ports, well under it, and a server sending without end (broken, or
/// hostile) must not take the operator's memory with it.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Error)]
pub(super) enum BodyError {
    #[error("response body exceeds {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
}

/// The whole body, refused as soon as it is known to pass `MAX_BODY_BYTES`: from
/// Content-Length before reading, or while reading (chunked or close-delimited bodies).
pub(super) async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    let announced = resp.content_length().unwrap_or(0);
    if announced > MAX_BODY_BYTES as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut out = Vec::with_capacity(announced as usize);
    while let Some(chunk) = resp.chunk().await? {
        if out.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BodyError::TooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A link, as the server wrote it, shortened for a message.
pub(super) fn shown(href: &str) -> String {
    shortened(href, 200)
}

/// What a message keeps of text the server wrote (a NeutronError message, a decoding error,
/// which quotes the offending value): an answer can be megabytes up to [`MAX_BODY_BYTES`],
/// and the error ends up in a condition, an Event and the log.
pub(crate) const MAX_SERVER_TEXT_CHARS: usize = 512;

/// `text`, at most `max` characters of it, marked when cut.
pub(crate) fn shortened(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let mut s: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        s.push_str(&format!("... ({} bytes)", text.len()));
    }
    s
}

/// A typed value from JSON, or what is wrong with it naming the field (`ports[3].fixed_ips:
/// invalid type ...`): serde alone names only the type it wanted. `at` is where `value` sits
/// in the answer (its key; empty for the whole body).
pub(crate) fn typed<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = match (at.is_empty(), path.as_str()) {
            (true, p) => p.to_string(),
            (false, ".") => at.to_string(),
            (false, p) if p.starts_with('[') => format!("{at}{p}"),
            (false, p) => format!("{at}.{p}"),
        };
        shortened(
            &format!("{field}: {}", e.into_inner()),
            MAX_SERVER_TEXT_CHARS,
        )
    })
}

/// A JSON body, or why it is none (serde_json's syntax errors name a position, not the input).
pub(crate) fn json_body(bytes: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| shortened(&e.to_string(), MAX_SERVER_TEXT_CHARS))
}

/// The URL to send a page's `next` link to and its path relative to `endpoint`, or why it is
/// refused. Only the link's path and query are taken, and sent to our own endpoint: Neutron
/// builds the link from the request's Host header and its own scheme, so behind a proxy that
/// terminates TLS it says `http://` (or the proxy's inner host) for an `https://` endpoint,
/// and scheme, host and port are whatever the server (or the proxy) wrote. The token thus
/// never goes anywhere but the endpoint. The path must lie under the endpoint's path, so a
/// link cannot steer the token to another API behind the same host either.
pub(super) fn next_under(href: &str, endpoint: &str) -> Result<(String, String), String> {
    let refused = || {
        format!(
            "the next link {} is not under the Neutron endpoint's path ({endpoint}); not following it",
            shown(href)
        )
    };
    let base = Url::parse(endpoint)
        .map_err(|e| format!("the Neutron endpoint {endpoint} is not a URL: {e}"))?;
    // Parsing also resolves `..` and `%2e%2e` segments, so the prefix test sees the real path.
    let url = base.join(href).map_err(|_| refused())?;
    let prefix = base.path().trim_end_matches('/');
    let mut path = url
        .path()
        .strip_prefix(prefix)
        .filter(|r| r.is_empty() || r.starts_with('/'))
        .map(str::to_string)
        .ok_or_else(refused)?;
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    // `endpoint` is Neutron's base without a trailing slash (session::neutron_base) and
    // `path` is empty or starts with '/', as for every other call.
    Ok((format!("{}{path}", endpoint.trim_end_matches('/')), path))
}

#[derive(Deserialize)]
struct Link {
    rel: String,
    href: String,
}

/// A list page: its items under `key`, and the `next` link of `<key>_links` if any.
pub(super) fn decode_page<T: DeserializeOwned>(
    bytes: &[u8],
    key: &str,
    path: &str,
) -> Result<(Vec<T>, Option<String>)> {
    let err = |message: String| CloudError::Decode {
        method: "GET".into(),
        path: path.into(),
        message,
    };
    let mut v = json_body(bytes).map_err(err)?;
    let links_key = format!("{key}_links");
    let links: Vec<Link> = match v.get_mut(&links_key).map(Value::take) {
        None | Some(Value::Null) => vec![],
        Some(l) => typed(l, &links_key).map_err(err)?,
    };
    let items = take(&mut v, key).map_err(err)?;
    let next = links.into_iter().find(|l| l.rel == "next").map(|l| l.href);
    Ok((items, next))
}

/// Neutron: `{"NeutronError": {"type", "message"}}`; Keystone: `{"error": {"message", "title"}}`.
pub(super) fn error_body(bytes: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    // A text field of the error object, shortened; absent or not a string: empty.
    let field = |e: &Value, k: &str| {
        shortened(
            e.get(k).and_then(Value::as_str).unwrap_or_default(),
            MAX_SERVER_TEXT_CHARS,
        )
    };
    if let Some(e) = v.get("NeutronError") {
        return (field(e, "type"), field(e, "message"));
    }
    if let Some(e) = v.get("error") {
        return (field(e, "title"), field(e, "message"));
    }
    (
        String::new(),
        String::from_utf8_lossy(bytes).chars().take(200).collect(),
    )
}

pub(super) fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    key: &str,
    method: &str,
    path: &str,
) -> Result<T> {
    let err = |message: String| CloudError::Decode {
        method: method.into(),
        path: path.into(),
        message,
    };
    let mut v = json_body(bytes).map_err(err)?;
    take(&mut v, key).map_err(err)
}

/// The value under `key` (the whole body when `key` is empty), typed.
fn take<T: DeserializeOwned>(v: &mut Value, key: &str) -> Result<T, String> {
    let inner = if key.is_empty() {
        v.take()
    } else {
        v.get_mut(key)
            .map(Value::take)
            .ok_or_else(|| format!("no {key:?} in body"))?
    };
    typed(inner, key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_field_is_named_and_a_quoted_value_cut() {
        let body = br#"{"ports": [{"id": "a", "network_id": "n"}, {"id": "b", "network_id": "n", "fixed_ips": [{"ip_address": 5}]}]}"#;
        let e = decode::<Vec<crate::Port>>(body, "ports", "GET", "/ports").unwrap_err();
        assert!(
            e.to_string()
                .contains("ports[1].fixed_ips[0].ip_address: invalid type: integer `5`"),
            "{e}"
        );
        let e = decode::<crate::Network>(br#"{"network": {"name": "x"}}"#, "network", "GET", "/n")
            .unwrap_err();
        assert!(e.to_string().contains("network: missing field `id`"), "{e}");
        // serde quotes a wrong-typed string whole: a megabyte of it stays out of the message.
        let big = format!(
            r#"{{"network": {{"id": "n", "shared": "{}"}}}}"#,
            "y".repeat(1 << 20)
        );
        let e = decode::<crate::Network>(big.as_bytes(), "network", "GET", "/n").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("network.shared: invalid type: string"),
            "{text}"
        );
        assert!(
            text.len() < 2 * MAX_SERVER_TEXT_CHARS,
            "{} bytes",
            text.len()
        );
        let (_, m) = error_body(
            format!(
                r#"{{"NeutronError": {{"type": "X", "message": "{}"}}}}"#,
                "m".repeat(1 << 20)
            )
            .as_bytes(),
        );
        assert!(m.ends_with("... (1048576 bytes)") && m.len() < 2 * MAX_SERVER_TEXT_CHARS);
    }

    #[test]
    fn error_bodies() {
        let (k, m) = error_body(
            br#"{"NeutronError": {"type": "PortInUse", "message": "busy", "detail": ""}}"#,
        );
        assert_eq!((k.as_str(), m.as_str()), ("PortInUse", "busy"));
        let (k, m) =
            error_body(br#"{"error": {"code": 401, "title": "Unauthorized", "message": "nope"}}"#);
        assert_eq!((k.as_str(), m.as_str()), ("Unauthorized", "nope"));
    }

    const EP: &str = "http://127.0.0.1:9696/v2.0";

    #[test]
    fn next_links_on_the_endpoint_are_followed() {
        let (url, path) =
            next_under("http://127.0.0.1:9696/v2.0/ports?limit=2&marker=abc", EP).unwrap();
        assert_eq!(url, "http://127.0.0.1:9696/v2.0/ports?limit=2&marker=abc");
        assert_eq!(path, "/ports?limit=2&marker=abc");
        // The default port written out, and a relative link, are the same place.
        let (url, path) = next_under(
            "https://n.example:443/net/v2.0/routers#x",
            "https://n.example/net/v2.0",
        )
        .unwrap();
        assert_eq!(url, "https://n.example/net/v2.0/routers");
        assert_eq!(path, "/routers");
        let (_, path) = next_under("/v2.0/ports?marker=m", EP).unwrap();
        assert_eq!(path, "/ports?marker=m");
    }

    #[test]
    fn next_links_go_to_our_endpoint_whatever_their_origin() {
        // Behind a proxy that terminates TLS, Neutron writes its own scheme and the Host it
        // was sent; another host, port or user info changes nothing either: only the path
        // and query are kept, and they go to the endpoint.
        const TLS: &str = "https://neutron.example:13696/v2.0";
        for href in [
            "http://neutron.example:13696/v2.0/ports?marker=a",
            "http://127.0.0.1:9696/v2.0/ports?marker=a",
            "https://evil.example/v2.0/ports?marker=a",
            "http://user:pw@neutron.example/v2.0/ports?marker=a",
            "//evil.example/v2.0/ports?marker=a#frag",
        ] {
            let (url, path) = next_under(href, TLS).expect(href);
            assert_eq!(
                url, "https://neutron.example:13696/v2.0/ports?marker=a",
                "{href}"
            );
            assert_eq!(path, "/ports?marker=a", "{href}");
        }
    }

    #[test]
    fn next_links_outside_the_endpoint_path_are_refused() {
        for href in [
            "http://127.0.0.1:9696/v2.1/ports",
            "http://127.0.0.1:9696/v2.0evil/ports",
            "http://127.0.0.1:9696/v2.0/../identity/v3",
            "http://127.0.0.1:9696/v2.0/%2e%2e/x",
            "http://evil.example/identity/v3/auth/tokens",
            "ports?marker=a",
        ] {
            let err = next_under(href, EP).expect_err(href);
            assert!(
                err.contains("not under the Neutron endpoint's path"),
                "{href}: {err}"
            );
        }
    }

    #[test]
    fn a_page_yields_its_items_and_next_link() {
        let body = br#"{"ports": [{"id": "a", "network_id": "n"}], "ports_links": [
            {"rel": "previous", "href": "http://h/v2.0/ports?marker=z&page_reverse=True"},
            {"rel": "next", "href": "http://h/v2.0/ports?marker=a"}]}"#;
        let (items, next) = decode_page::<crate::Port>(body, "ports", "/ports").unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(next.as_deref(), Some("http://h/v2.0/ports?marker=a"));
        let last = br#"{"ports": [], "ports_links": [{"rel": "previous", "href": "x"}]}"#;
        let (items, next) = decode_page::<crate::Port>(last, "ports", "/ports").unwrap();
        assert!(items.is_empty() && next.is_none());
        let bad = br#"{"ports": [], "ports_links": {"next": "x"}}"#;
        let err = decode_page::<crate::Port>(bad, "ports", "/ports").unwrap_err();
        assert!(err.to_string().contains("ports_links"), "{err}");
    }
}
