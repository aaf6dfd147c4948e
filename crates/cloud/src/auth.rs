//! How the operator authenticates: from `OS_CLOUD` + clouds.yaml or from `OS_*` variables,
//! password or application credential. Errors name the setting that is wrong or missing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::secret::SecretString;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMethod {
    Password {
        username: String,
        password: SecretString,
        user_domain_name: String,
        project_id: Option<String>,
        project_name: Option<String>,
        project_domain_name: String,
    },
    ApplicationCredential {
        id: String,
        secret: SecretString,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// Keystone v3 URL, e.g. http://127.0.0.1:5000/v3
    pub auth_url: String,
    pub region: Option<String>,
    /// Catalog interface to use (public by default).
    pub interface: String,
    pub method: AuthMethod,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{0} is not set")]
    Missing(String),
    #[error("{setting}: {message}")]
    Invalid { setting: String, message: String },
}

#[derive(Deserialize)]
struct CloudsFile {
    clouds: BTreeMap<String, CloudEntry>,
}

#[derive(Deserialize, Default)]
struct CloudEntry {
    #[serde(default)]
    auth: BTreeMap<String, String>,
    auth_type: Option<String>,
    region_name: Option<String>,
    interface: Option<String>,
}

impl AuthConfig {
    /// Reads `OS_CLOUD` (+ clouds.yaml) if set, else `OS_*` variables.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |k: &str| get(k).filter(|v| !v.is_empty());
        if let Some(cloud) = get("OS_CLOUD") {
            return Self::from_clouds_yaml(&cloud, &clouds_yaml_candidates(&get), &get);
        }
        let mut values = BTreeMap::new();
        for (key, env) in [
            ("auth_url", "OS_AUTH_URL"),
            ("username", "OS_USERNAME"),
            ("password", "OS_PASSWORD"),
            ("project_id", "OS_PROJECT_ID"),
            ("project_name", "OS_PROJECT_NAME"),
            ("user_domain_name", "OS_USER_DOMAIN_NAME"),
            ("project_domain_name", "OS_PROJECT_DOMAIN_NAME"),
            ("application_credential_id", "OS_APPLICATION_CREDENTIAL_ID"),
            (
                "application_credential_secret",
                "OS_APPLICATION_CREDENTIAL_SECRET",
            ),
        ] {
            if let Some(v) = get(env) {
                values.insert(key.to_string(), v);
            }
        }
        let entry = CloudEntry {
            auth: values,
            auth_type: get("OS_AUTH_TYPE"),
            region_name: get("OS_REGION_NAME"),
            interface: get("OS_INTERFACE"),
        };
        Self::from_entry(entry, |k| format!("OS_{}", k.to_uppercase()))
    }

    fn from_clouds_yaml(
        cloud: &str,
        candidates: &[PathBuf],
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let path = candidates
            .iter()
            .find(|p| p.is_file())
            .ok_or_else(|| ConfigError::Invalid {
                setting: "OS_CLOUD".into(),
                message: format!(
                    "cloud {cloud:?} requested but no clouds.yaml found (looked in {})",
                    candidates
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        let mut entry = load_entry(path, cloud)?;
        // OS_REGION_NAME in the environment wins over the file, as with the openstack CLI.
        if let Some(r) = get("OS_REGION_NAME") {
            entry.region_name = Some(r);
        }
        let where_ = path.display().to_string();
        Self::from_entry(entry, |k| format!("{where_}: clouds.{cloud}.auth.{k}"))
    }

    fn from_entry(entry: CloudEntry, name: impl Fn(&str) -> String) -> Result<Self, ConfigError> {
        let a = &entry.auth;
        let req = |k: &str| {
            a.get(k)
                .cloned()
                .ok_or_else(|| ConfigError::Missing(name(k)))
        };
        let auth_url = req("auth_url")?;
        if !(auth_url.starts_with("http://") || auth_url.starts_with("https://")) {
            return Err(ConfigError::Invalid {
                setting: name("auth_url"),
                message: "must be an http(s) URL".into(),
            });
        }
        let app_cred = entry
            .auth_type
            .as_deref()
            .is_some_and(|t| t.contains("applicationcredential"))
            || a.contains_key("application_credential_id");
        let method = if app_cred {
            AuthMethod::ApplicationCredential {
                id: req("application_credential_id")?,
                secret: SecretString::new(req("application_credential_secret")?),
            }
        } else {
            let project_id = a.get("project_id").cloned();
            let project_name = a.get("project_name").cloned();
            if project_id.is_none() && project_name.is_none() {
                return Err(ConfigError::Missing(format!(
                    "{} (or {})",
                    name("project_name"),
                    name("project_id")
                )));
            }
            AuthMethod::Password {
                username: req("username")?,
                password: SecretString::new(req("password")?),
                user_domain_name: a
                    .get("user_domain_name")
                    .cloned()
                    .unwrap_or_else(|| "Default".into()),
                project_id,
                project_name,
                project_domain_name: a
                    .get("project_domain_name")
                    .cloned()
                    .unwrap_or_else(|| "Default".into()),
            }
        };
        Ok(AuthConfig {
            auth_url: normalize_auth_url(&auth_url),
            region: entry.region_name,
            interface: entry.interface.unwrap_or_else(|| "public".into()),
            method,
        })
    }
}

/// Keystone URLs are compared and joined without a trailing slash, and always name v3.
pub fn normalize_auth_url(url: &str) -> String {
    let u = url.trim_end_matches('/');
    if u.ends_with("/v3") {
        u.to_string()
    } else {
        format!("{u}/v3")
    }
}

fn clouds_yaml_candidates(get: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Some(f) = get("OS_CLIENT_CONFIG_FILE") {
        out.push(PathBuf::from(f));
    }
    out.push(PathBuf::from("clouds.yaml"));
    if let Some(home) = get("HOME") {
        out.push(Path::new(&home).join(".config/openstack/clouds.yaml"));
    }
    out.push(PathBuf::from("/etc/openstack/clouds.yaml"));
    out
}

fn load_entry(path: &Path, cloud: &str) -> Result<CloudEntry, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read: {e}")))?;
    let mut file: CloudsFile =
        serde_yaml::from_str(&text).map_err(|e| invalid(format!("not a clouds.yaml: {e}")))?;
    file.clouds
        .remove(cloud)
        .ok_or_else(|| invalid(format!("has no cloud named {cloud:?} (OS_CLOUD)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn password_from_env() {
        let c = AuthConfig::from_env(&env(&[
            ("OS_AUTH_URL", "http://k:5000/"),
            ("OS_USERNAME", "op"),
            ("OS_PASSWORD", "pw"),
            ("OS_PROJECT_NAME", "operator"),
            ("OS_REGION_NAME", "RegionOne"),
        ]))
        .unwrap();
        assert_eq!(c.auth_url, "http://k:5000/v3");
        assert_eq!(c.region.as_deref(), Some("RegionOne"));
        assert!(matches!(c.method, AuthMethod::Password { ref username, .. } if username == "op"));
        assert!(
            !format!("{c:?}").contains("pw\""),
            "password must not print"
        );
    }

    #[test]
    fn missing_settings_are_named() {
        let e = AuthConfig::from_env(&env(&[])).unwrap_err();
        assert_eq!(e.to_string(), "OS_AUTH_URL is not set");
        let e = AuthConfig::from_env(&env(&[
            ("OS_AUTH_URL", "http://k/v3"),
            ("OS_USERNAME", "u"),
            ("OS_PASSWORD", "p"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("OS_PROJECT_NAME"), "{e}");
        let e = AuthConfig::from_env(&env(&[
            ("OS_AUTH_URL", "http://k/v3"),
            ("OS_APPLICATION_CREDENTIAL_ID", "x"),
        ]))
        .unwrap_err();
        assert_eq!(e.to_string(), "OS_APPLICATION_CREDENTIAL_SECRET is not set");
        let e = AuthConfig::from_env(&env(&[("OS_AUTH_URL", "k:5000")])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OS_AUTH_URL: must be an http(s) URL"),
            "{e}"
        );
    }

    #[test]
    fn clouds_yaml_app_credential() {
        let dir = std::env::temp_dir().join(format!("bnerd-clouds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("clouds.yaml");
        std::fs::write(
            &f,
            "clouds:\n  lab:\n    auth_type: v3applicationcredential\n    region_name: RegionOne\n    auth:\n      auth_url: http://127.0.0.1:5000/v3\n      application_credential_id: acid\n      application_credential_secret: s3cr3t\n",
        )
        .unwrap();
        let p = f.display().to_string();
        let c = AuthConfig::from_env(&env(&[("OS_CLOUD", "lab"), ("OS_CLIENT_CONFIG_FILE", &p)]))
            .unwrap();
        assert!(
            matches!(c.method, AuthMethod::ApplicationCredential { ref id, .. } if id == "acid")
        );
        let e = AuthConfig::from_env(&env(&[("OS_CLOUD", "nope"), ("OS_CLIENT_CONFIG_FILE", &p)]))
            .unwrap_err();
        assert!(e.to_string().contains("no cloud named \"nope\""), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
