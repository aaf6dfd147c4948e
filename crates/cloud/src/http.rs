//! The real cloud: Keystone v3 token auth and Neutron v2.0 over HTTP.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::auth::{AuthConfig, AuthMethod};
use crate::error::{CloudError, Result};
use crate::secret::SecretString;
use crate::types::*;
use crate::{Identity, Neutron, NeutronAdmin};

/// Renew a token this long before Keystone says it expires.
const TOKEN_SLACK: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// Servers close idle keep-alive connections (gunicorn after 2 s, Apache after 5 s). A request
/// written into a connection the server is closing at that moment fails with "connection
/// closed before message completed" or a reset, and for a write nobody can tell whether it
/// ran. Never reusing a connection idle longer than this keeps us clear of that race; calls
/// of one reconcile follow each other closely and still share a connection.
pub const POOL_IDLE: Duration = Duration::from_secs(1);

/// One OpenStack credential: a Keystone session and the Neutron endpoint from its catalog.
pub struct OpenStack {
    http: reqwest::Client,
    auth: AuthConfig,
    neutron_override: Option<String>,
    session: Mutex<Option<Session>>,
    /// Neutron requests sent: GETs, and everything else.
    reads: AtomicU64,
    writes: AtomicU64,
}

#[derive(Clone)]
struct Session {
    token: SecretString,
    expires_at: Option<DateTime<Utc>>,
    info: TokenInfo,
    neutron_url: String,
}

impl OpenStack {
    /// Build a client; nothing is sent until the first call.
    pub fn new(auth: AuthConfig) -> Result<Self> {
        // reqwest is built without a TLS provider of its own so it shares kube's ring provider;
        // installing it twice is harmless, installing a second kind would make kube panic.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .pool_idle_timeout(POOL_IDLE)
            .build()
            .map_err(|e| CloudError::Transport {
                method: "-".into(),
                path: "-".into(),
                message: e.to_string(),
            })?;
        Ok(Self {
            http,
            auth,
            neutron_override: None,
            session: Mutex::new(None),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        })
    }

    /// Neutron requests sent so far as (reads, writes); a retry after a 401 counts twice,
    /// as it costs the cloud twice. Keystone's token requests are not included.
    pub fn call_counts(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.writes.load(Ordering::Relaxed),
        )
    }

    /// Use this Neutron URL instead of the catalog's.
    pub fn with_neutron_url(mut self, url: impl Into<String>) -> Self {
        self.neutron_override = Some(url.into());
        self
    }

    pub fn auth_config(&self) -> &AuthConfig {
        &self.auth
    }

    async fn session(&self, force: bool) -> Result<Session> {
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
        let neutron_url = neutron_url.trim_end_matches('/').to_string();
        let neutron_url = if neutron_url.ends_with("/v2.0") {
            neutron_url
        } else {
            format!("{neutron_url}/v2.0")
        };
        Ok(Session {
            token,
            expires_at: t.expires_at,
            info: TokenInfo {
                project_id: t.project.as_ref().map(|p| p.id.clone()).unwrap_or_default(),
                project_name: t
                    .project
                    .as_ref()
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
                user_id: t.user.map(|u| u.id).unwrap_or_default(),
                roles: t.roles.into_iter().map(|r| r.name).collect(),
                application_credential_restricted: t
                    .application_credential
                    .as_ref()
                    .and_then(|a| a.restricted),
                application_credential_id: t.application_credential.map(|a| a.id),
            },
            neutron_url,
        })
    }

    /// One Neutron call. A 401 (token revoked or expired early) re-authenticates once.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<String>,
    ) -> Result<Vec<u8>> {
        let mut forced = false;
        let mut retried_transport = false;
        loop {
            let s = self.session(forced).await?;
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", s.neutron_url))
                .header("X-Auth-Token", s.token.expose())
                .header("Accept", "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            if let Some(m) = &if_match {
                req = req.header("If-Match", m);
            }
            let m = method.as_str();
            let counter = if method == Method::GET {
                &self.reads
            } else {
                &self.writes
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let resp = match req.send().await {
                Ok(resp) => resp,
                // A read changes nothing, so a broken connection is worth one more try on a
                // fresh one; a write's outcome is unknown and is left to the reconcile,
                // which looks before it writes again.
                Err(e) if method == Method::GET && !e.is_timeout() && !retried_transport => {
                    tracing::debug!(path, error = %crate::error::error_chain(&e), "GET failed on the connection; retrying once");
                    retried_transport = true;
                    continue;
                }
                Err(e) => return Err(transport(m, path, e)),
            };
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(|e| transport(m, path, e))?;
            if status == StatusCode::UNAUTHORIZED && !forced {
                forced = true;
                continue;
            }
            if !status.is_success() {
                let (kind, message) = error_body(&bytes);
                return Err(CloudError::Api {
                    method: m.into(),
                    path: path.into(),
                    status: status.as_u16(),
                    kind,
                    message,
                });
            }
            return Ok(bytes.to_vec());
        }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str, key: &str) -> Result<T> {
        let bytes = self.call(Method::GET, path, None, None).await?;
        decode(&bytes, key, "GET", path)
    }

    /// `PUT /routers/{id}/{action}` of extraroute-atomic.
    async fn extraroutes(&self, router_id: &str, action: &str, routes: &[Route]) -> Result<Router> {
        let path = format!("/routers/{}/{action}", enc(router_id));
        let body = json!({"router": {"routes": routes}});
        self.send(Method::PUT, &path, &body, "router").await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        key: &str,
    ) -> Result<T> {
        let m = method.as_str().to_string();
        let bytes = self.call(method, path, Some(body), None).await?;
        decode(&bytes, key, &m, path)
    }
}

fn transport(method: &str, path: &str, e: reqwest::Error) -> CloudError {
    if e.is_timeout() {
        CloudError::Timeout {
            method: method.into(),
            path: path.into(),
        }
    } else {
        CloudError::Transport {
            method: method.into(),
            path: path.into(),
            message: crate::error::error_chain(&e),
        }
    }
}

/// Neutron: `{"NeutronError": {"type", "message"}}`; Keystone: `{"error": {"message", "title"}}`.
fn error_body(bytes: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    if let Some(e) = v.get("NeutronError") {
        let s = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        return (s("type"), s("message"));
    }
    if let Some(e) = v.get("error") {
        let s = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        return (s("title"), s("message"));
    }
    (
        String::new(),
        String::from_utf8_lossy(bytes).chars().take(200).collect(),
    )
}

fn decode<T: DeserializeOwned>(bytes: &[u8], key: &str, method: &str, path: &str) -> Result<T> {
    let err = |message: String| CloudError::Decode {
        method: method.into(),
        path: path.into(),
        message,
    };
    let mut v: Value = serde_json::from_slice(bytes).map_err(|e| err(e.to_string()))?;
    let inner = if key.is_empty() {
        v
    } else {
        v.get_mut(key)
            .map(Value::take)
            .ok_or_else(|| err(format!("no {key:?} in body")))?
    };
    serde_json::from_value(inner).map_err(|e| err(e.to_string()))
}

/// Percent-encode a query value (tags carry '=' and names may carry anything).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn query(pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let q: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect();
    format!("?{}", q.join("&"))
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

#[derive(Deserialize)]
struct Alias {
    alias: String,
}

#[async_trait]
impl Identity for OpenStack {
    async fn token_info(&self) -> Result<TokenInfo> {
        Ok(self.session(false).await?.info)
    }
}

#[async_trait]
impl Neutron for OpenStack {
    async fn extensions(&self) -> Result<Vec<String>> {
        let v: Vec<Alias> = self.get("/extensions", "extensions").await?;
        Ok(v.into_iter().map(|a| a.alias).collect())
    }

    async fn get_network(&self, id: &str) -> Result<Network> {
        self.get(&format!("/networks/{}", enc(id)), "network").await
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.get(&format!("/subnets/{}", enc(id)), "subnet").await
    }

    async fn list_ports(&self, q: &PortQuery) -> Result<Vec<Port>> {
        let mut p = vec![];
        if let Some(n) = &q.network_id {
            p.push(("network_id", n.clone()));
        }
        if let Some(d) = &q.device_id {
            p.push(("device_id", d.clone()));
        }
        if let Some(ip) = &q.ip_address {
            p.push(("fixed_ips", format!("ip_address={ip}")));
        }
        for (key, tags) in [
            ("tags", &q.tags),
            ("tags-any", &q.tags_any),
            ("not-tags", &q.not_tags),
        ] {
            if !tags.is_empty() {
                p.push((key, tags.join(",")));
            }
        }
        self.get(&format!("/ports{}", query(&p)), "ports").await
    }

    async fn get_port(&self, id: &str) -> Result<Port> {
        self.get(&format!("/ports/{}", enc(id)), "port").await
    }

    async fn create_port(&self, req: &CreatePort) -> Result<Port> {
        let mut port =
            json!({"network_id": req.network_id, "name": req.name, "description": req.description});
        if req.ip_address.is_some() || req.subnet_id.is_some() {
            let mut fip = json!({});
            if let Some(s) = &req.subnet_id {
                fip["subnet_id"] = json!(s);
            }
            if let Some(ip) = &req.ip_address {
                fip["ip_address"] = json!(ip);
            }
            port["fixed_ips"] = json!([fip]);
        }
        if !req.tags.is_empty() {
            port["tags"] = json!(req.tags);
        }
        self.send(Method::POST, "/ports", &json!({"port": port}), "port")
            .await
    }

    async fn add_port_tag(&self, port_id: &str, tag: &str) -> Result<()> {
        self.call(
            Method::PUT,
            &format!("/ports/{}/tags/{}", enc(port_id), enc(tag)),
            None,
            None,
        )
        .await?;
        Ok(())
    }

    async fn set_port_tags(&self, port_id: &str, tags: &[String]) -> Result<()> {
        let path = format!("/ports/{}/tags", enc(port_id));
        self.call(Method::PUT, &path, Some(&json!({"tags": tags})), None)
            .await?;
        Ok(())
    }

    async fn delete_port(&self, id: &str) -> Result<()> {
        self.call(Method::DELETE, &format!("/ports/{}", enc(id)), None, None)
            .await?;
        Ok(())
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        self.get(&format!("/routers/{}", enc(id)), "router").await
    }

    async fn list_routers(&self, q: &RouterQuery) -> Result<Vec<Router>> {
        let mut p = vec![];
        if let Some(n) = &q.name {
            p.push(("name", n.clone()));
        }
        p.extend(q.ids.iter().map(|i| ("id", i.clone())));
        self.get(&format!("/routers{}", query(&p)), "routers").await
    }

    async fn add_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        let path = format!("/routers/{}/add_router_interface", enc(router_id));
        self.call(Method::PUT, &path, Some(&json!({"port_id": port_id})), None)
            .await?;
        Ok(())
    }

    async fn remove_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        let path = format!("/routers/{}/remove_router_interface", enc(router_id));
        self.call(Method::PUT, &path, Some(&json!({"port_id": port_id})), None)
            .await?;
        Ok(())
    }

    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        self.extraroutes(router_id, "add_extraroutes", routes).await
    }

    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        self.extraroutes(router_id, "remove_extraroutes", routes)
            .await
    }

    async fn set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        if_revision: Option<u64>,
    ) -> Result<Router> {
        let path = format!("/routers/{}", enc(router_id));
        let body = json!({"router": {"routes": routes}});
        let bytes = self
            .call(
                Method::PUT,
                &path,
                Some(&body),
                if_revision.map(|r| format!("revision_number={r}")),
            )
            .await?;
        decode(&bytes, "router", "PUT", &path)
    }

    async fn create_rbac_policy(&self, req: &ShareNetwork) -> Result<RbacPolicy> {
        let body = json!({"rbac_policy": {
            "object_type": "network",
            "object_id": req.network_id,
            "action": req.action,
            "target_tenant": req.target_tenant,
        }});
        self.send(Method::POST, "/rbac-policies", &body, "rbac_policy")
            .await
    }

    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>> {
        let p = [("object_id", object_id.to_string())];
        self.get(&format!("/rbac-policies{}", query(&p)), "rbac_policies")
            .await
    }

    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        let path = format!("/rbac-policies/{}", enc(id));
        self.call(Method::DELETE, &path, None, None).await?;
        Ok(())
    }
}

#[async_trait]
impl NeutronAdmin for OpenStack {
    async fn add_router_subnet(&self, router_id: &str, subnet_id: &str) -> Result<String> {
        let path = format!("/routers/{}/add_router_interface", enc(router_id));
        self.send(
            Method::PUT,
            &path,
            &json!({"subnet_id": subnet_id}),
            "port_id",
        )
        .await
    }

    async fn create_network(&self, name: &str) -> Result<Network> {
        self.send(
            Method::POST,
            "/networks",
            &json!({"network": {"name": name}}),
            "network",
        )
        .await
    }

    async fn delete_network(&self, id: &str) -> Result<()> {
        self.call(
            Method::DELETE,
            &format!("/networks/{}", enc(id)),
            None,
            None,
        )
        .await?;
        Ok(())
    }

    async fn create_subnet(
        &self,
        network_id: &str,
        cidr: &str,
        gateway_ip: &str,
    ) -> Result<Subnet> {
        let body = json!({"subnet": {"network_id": network_id, "cidr": cidr, "gateway_ip": gateway_ip, "ip_version": 4}});
        self.send(Method::POST, "/subnets", &body, "subnet").await
    }

    async fn create_router_with(&self, req: &CreateRouter) -> Result<Router> {
        let mut router = json!({"name": req.name});
        if let Some(p) = &req.project_id {
            router["project_id"] = json!(p);
        }
        if let Some(ha) = req.ha {
            router["ha"] = json!(ha);
        }
        if let Some(d) = req.distributed {
            router["distributed"] = json!(d);
        }
        self.send(
            Method::POST,
            "/routers",
            &json!({ "router": router }),
            "router",
        )
        .await
    }

    async fn delete_router(&self, id: &str) -> Result<()> {
        self.call(Method::DELETE, &format!("/routers/{}", enc(id)), None, None)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn query_encoding() {
        assert_eq!(
            query(&[("tags", "clusterlink-uid=ab,x".into())]),
            "?tags=clusterlink-uid%3Dab%2Cx"
        );
        assert_eq!(query(&[]), "");
    }
}
