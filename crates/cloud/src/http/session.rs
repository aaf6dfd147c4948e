//! Keystone v3: the token request, what the token says (project, roles, application
//! credential, catalog), and the cached session renewed before it expires.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use super::OpenStack;
use super::answer::{BodyError, MAX_BODY_BYTES, json_body, read_capped, typed};
use super::client::transport;
use crate::Identity;
use crate::auth::{AuthConfig, AuthMethod};
use crate::error::{CloudError, Result};
use crate::secret::SecretString;
use crate::types::TokenInfo;

/// Renew a token this long before Keystone says it expires.
const TOKEN_SLACK: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

#[derive(Clone)]
pub(super) struct Session {
    pub(super) token: SecretString,
    pub(super) expires_at: Option<DateTime<Utc>>,
    pub(super) info: TokenInfo,
    /// Neutron's base URL, always ending in `/v2.0`.
    pub(super) neutron_url: String,
}

impl OpenStack {
    /// The cached session, or a new one when there is none, it is about to expire, or
    /// `force` (Neutron refused the token).
    pub(super) async fn session(&self, force: bool) -> Result<Session> {
        let mut guard = self.session.lock().await;
        if let Some(s) = guard.as_ref() {
            let fresh = s.expires_at.is_none_or(|t| t - TOKEN_SLACK > Utc::now());
            if fresh && !force {
                return Ok(s.clone());
            }
        }
        let s = self.authenticate().await?;
        *guard = Some(s.clone());
        Ok(s)
    }

    async fn authenticate(&self) -> Result<Session> {
        let identity = match &self.auth.method {
            AuthMethod::Password {
                username,
                password,
                user_domain_name,
                ..
            } => json!({
                "methods": ["password"],
                "password": {"user": {"name": username, "domain": {"name": user_domain_name}, "password": password.expose()}}
            }),
            AuthMethod::ApplicationCredential { id, secret } => json!({
                "methods": ["application_credential"],
                "application_credential": {"id": id, "secret": secret.expose()}
            }),
        };
        let mut body = json!({"auth": {"identity": identity}});
        if let AuthMethod::Password {
            project_id,
            project_name,
            project_domain_name,
            ..
        } = &self.auth.method
        {
            body["auth"]["scope"] = match (project_id, project_name) {
                (Some(id), _) => json!({"project": {"id": id}}),
                (None, name) => {
                    json!({"project": {"name": name, "domain": {"name": project_domain_name}}})
                }
            };
        }
        let url = format!("{}/auth/tokens", self.auth.auth_url);
        let resp = self.http.post(&url).json(&body).send().await;
        self.observed(
            crate::observe::Service::Keystone,
            "POST",
            crate::error::KEYSTONE_TOKENS_PATH,
            resp.as_ref().ok().map(|r| r.status().as_u16()),
        );
        let resp = resp.map_err(|e| transport("POST", crate::error::KEYSTONE_TOKENS_PATH, e))?;
        let status = resp.status();
        let token = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(SecretString::new);
        let body = read_capped(resp).await;
        if !status.is_success() {
            let title = body.as_deref().ok().and_then(keystone_title);
            return Err(CloudError::Auth {
                status: Some(status.as_u16()),
                message: format!(
                    "Keystone answered HTTP {} to the token request{}",
                    status.as_u16(),
                    title.map(|t| format!(": {t}")).unwrap_or_default()
                ),
            });
        }
        let bytes = body.map_err(|e| match e {
            BodyError::Transport(e) => transport("POST", crate::error::KEYSTONE_TOKENS_PATH, e),
            BodyError::TooLarge => CloudError::auth(format!(
                "Keystone's answer to the token request exceeds {MAX_BODY_BYTES} bytes"
            )),
        })?;
        let token =
            token.ok_or_else(|| CloudError::auth("Keystone returned no X-Subject-Token"))?;
        let parsed: TokenEnvelope = json_body(&bytes)
            .and_then(|v| typed(v, ""))
            .map_err(|e| CloudError::auth(format!("unreadable token body: {e}")))?;
        let t = parsed.token;
        // The request asks for a project scope, but Keystone's answer is what counts: a token
        // without a project is of no use for the project's ports and routers.
        if t.project.is_none() {
            return Err(CloudError::auth(format!(
                "Keystone's token is not scoped to a project; {}",
                crate::auth::PROJECT_SCOPE_HINT
            )));
        }
        let neutron_url = match &self.neutron_override {
            Some(u) => u.clone(),
            None => t.neutron_endpoint(&self.auth)?,
        };
        Ok(Session {
            token,
            expires_at: t.expires_at,
            info: t.info(),
            neutron_url: neutron_base(&neutron_url),
        })
    }
}

/// Keystone's error `title`, when it is one of the HTTP reason phrases Keystone puts there
/// ("Unauthorized", "Not Found"). Its `message` is never used: it can echo what was sent
/// (an ID, a name), and anything else in the title is dropped for the same reason.
fn keystone_title(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let title = v.get("error")?.get("title")?.as_str()?;
    let phrase = !title.is_empty()
        && title.len() <= 40
        && title.chars().all(|c| c.is_ascii_alphabetic() || c == ' ');
    phrase.then(|| title.to_string())
}

/// Catalogs list Neutron both with and without its version; calls are made under `/v2.0`.
fn neutron_base(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.ends_with("/v2.0") {
        url.to_string()
    } else {
        format!("{url}/v2.0")
    }
}

#[derive(Deserialize)]
struct TokenEnvelope {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    expires_at: Option<DateTime<Utc>>,
    project: Option<Named>,
    user: Option<Named>,
    #[serde(default)]
    roles: Vec<Named>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
    application_credential: Option<AppCredRef>,
}

#[derive(Deserialize)]
struct AppCredRef {
    id: String,
    #[serde(default)]
    restricted: Option<bool>,
}

#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
struct Endpoint {
    interface: String,
    #[serde(default)]
    region_id: Option<String>,
    #[serde(default)]
    region: Option<String>,
    url: String,
}

impl TokenBody {
    fn info(&self) -> TokenInfo {
        TokenInfo {
            project_id: self
                .project
                .as_ref()
                .map(|p| p.id.clone())
                .unwrap_or_default(),
            project_name: self
                .project
                .as_ref()
                .map(|p| p.name.clone())
                .unwrap_or_default(),
            user_id: self.user.as_ref().map(|u| u.id.clone()).unwrap_or_default(),
            roles: self.roles.iter().map(|r| r.name.clone()).collect(),
            application_credential_restricted: self
                .application_credential
                .as_ref()
                .and_then(|a| a.restricted),
            application_credential_id: self.application_credential.as_ref().map(|a| a.id.clone()),
        }
    }

    fn neutron_endpoint(&self, auth: &AuthConfig) -> Result<String> {
        let entry = self
            .catalog
            .iter()
            .find(|c| c.type_ == "network")
            .ok_or_else(|| CloudError::Catalog {
                message: "the token's catalog has no network (Neutron) service".into(),
            })?;
        entry
            .endpoints
            .iter()
            .find(|e| {
                e.interface == auth.interface
                    && auth.region.as_ref().is_none_or(|r| {
                        e.region_id.as_ref() == Some(r) || e.region.as_ref() == Some(r)
                    })
            })
            .map(|e| e.url.clone())
            .ok_or_else(|| CloudError::Catalog {
                message: format!(
                    "the catalog has no {} network (Neutron) endpoint in region {}",
                    auth.interface,
                    auth.region.as_deref().unwrap_or("(any)")
                ),
            })
    }
}

#[async_trait]
impl Identity for OpenStack {
    async fn token_info(&self) -> Result<TokenInfo> {
        Ok(self.session(false).await?.info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reason_phrase_title_is_kept() {
        let body = |title: &str| {
            format!(r#"{{"error": {{"code": 401, "title": "{title}", "message": "echo"}}}}"#)
        };
        assert_eq!(
            keystone_title(body("Unauthorized").as_bytes()).as_deref(),
            Some("Unauthorized")
        );
        assert_eq!(
            keystone_title(body("Not Found").as_bytes()).as_deref(),
            Some("Not Found")
        );
        for bad in ["", "app-cred 1234", "s3cr3t-echo", &"A".repeat(41)] {
            assert_eq!(keystone_title(body(bad).as_bytes()), None, "{bad:?}");
        }
        assert_eq!(keystone_title(b"<html>Unauthorized</html>"), None);
    }

    #[test]
    fn neutron_is_called_under_v2_0() {
        assert_eq!(neutron_base("http://n:9696"), "http://n:9696/v2.0");
        assert_eq!(neutron_base("http://n:9696/"), "http://n:9696/v2.0");
        assert_eq!(neutron_base("http://n:9696/v2.0/"), "http://n:9696/v2.0");
    }

    #[test]
    fn the_catalog_endpoint_matches_interface_and_region() {
        let body: TokenEnvelope = serde_json::from_str(
            r#"{"token": {"catalog": [{"type": "network", "endpoints": [
                {"interface": "internal", "region_id": "R1", "url": "http://internal"},
                {"interface": "public", "region_id": "R2", "url": "http://r2"},
                {"interface": "public", "region_id": "R1", "url": "http://r1"}]}],
                "roles": [{"id": "x", "name": "member"}],
                "application_credential": {"id": "ac", "restricted": true}}}"#,
        )
        .unwrap();
        let mut auth = AuthConfig {
            auth_url: "http://k/v3".into(),
            region: Some("R1".into()),
            interface: "public".into(),
            method: AuthMethod::ApplicationCredential {
                id: "ac".into(),
                secret: SecretString::new("s".to_string()),
            },
            tls: Default::default(),
        };
        assert_eq!(body.token.neutron_endpoint(&auth).unwrap(), "http://r1");
        auth.region = Some("R3".into());
        let err = body.token.neutron_endpoint(&auth).unwrap_err();
        assert!(
            err.to_string()
                .contains("public network (Neutron) endpoint in region R3"),
            "{err}"
        );
        let info = body.token.info();
        assert_eq!(info.roles, vec!["member"]);
        assert_eq!(info.application_credential_id.as_deref(), Some("ac"));
        assert_eq!(info.application_credential_restricted, Some(true));
    }
}
