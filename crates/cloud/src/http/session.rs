//! Keystone v3: the token request, what the token says (project, roles, application
//! credential, catalog), and the cached session renewed before it expires.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

use super::OpenStack;
use super::transport::{error_body, transport};
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
        let resp = self
            .http
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| transport("POST", "/v3/auth/tokens", e))?;
        let status = resp.status();
        let token = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(SecretString::new);
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| transport("POST", "/v3/auth/tokens", e))?;
        if !status.is_success() {
            let (_, message) = error_body(&bytes);
            return Err(CloudError::Auth {
                status: Some(status.as_u16()),
                message: format!(
                    "Keystone answered HTTP {} to the token request: {message}",
                    status.as_u16()
                ),
            });
        }
        let token =
            token.ok_or_else(|| CloudError::auth("Keystone returned no X-Subject-Token"))?;
        let parsed: TokenEnvelope = serde_json::from_slice(&bytes)
            .map_err(|e| CloudError::auth(format!("unreadable token body: {e}")))?;
        let t = parsed.token;
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
            .ok_or_else(|| {
                CloudError::auth("the token's catalog has no network (Neutron) service")
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
            .ok_or_else(|| {
                CloudError::auth(format!(
                    "the catalog has no {} network endpoint in region {}",
                    auth.interface,
                    auth.region.as_deref().unwrap_or("(any)")
                ))
            })
    }
}

#[async_trait]
impl Identity for OpenStack {
    async fn token_info(&self) -> Result<TokenInfo> {
        Ok(self.session(false).await?.info)
    }
}
