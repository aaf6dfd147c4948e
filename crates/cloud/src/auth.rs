//! How the operator authenticates: from `OS_CLOUD` + clouds.yaml or from `OS_*` variables,
//! password or application credential, and which server certificates it trusts. Errors name
//! the setting that is wrong or missing.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
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
    /// How Keystone's and Neutron's certificates are checked. Read by `OpenStack::new` only:
    /// `OpenStack::sibling` shares its parent's connection pool and with it the parent's TLS.
    pub tls: TlsConfig,
}

/// Which server certificates the client accepts. The default verifies against the system's
/// roots (rustls-platform-verifier: the distribution's bundle, or `SSL_CERT_FILE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// `OS_CACERT` / clouds.yaml `cacert`: trusted in addition to the system's roots.
    pub ca: Option<CaBundle>,
    /// Some(setting): certificates are not checked at all, because `setting` (clouds.yaml
    /// `verify: false`, `insecure: true`, or `OS_INSECURE=true`) says so.
    pub insecure: Option<String>,
}

/// The certificates of a PEM bundle, read and checked when the settings are read, so a wrong
/// path or file is a startup error naming the setting rather than a failure at the first call.
#[derive(Clone, PartialEq, Eq)]
pub struct CaBundle {
    /// The setting it came from, e.g. `OS_CACERT` or `<file>: clouds.<cloud>.cacert`.
    pub setting: String,
    pub path: PathBuf,
    pub certs: Vec<CertificateDer<'static>>,
}

impl fmt::Debug for CaBundle {
    // The DER bytes say nothing to a reader of a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaBundle")
            .field("setting", &self.setting)
            .field("path", &self.path)
            .field("certs", &self.certs.len())
            .finish()
    }
}

/// A CA bundle is a few hundred KB at most (a distribution's whole bundle is ~220 KB); a path
/// to something endless (a device, a pipe) must not hang startup.
const MAX_CA_BYTES: u64 = 16 * 1024 * 1024;

impl TlsConfig {
    /// Trust the PEM certificates in `path` besides the system's roots; `setting` names where
    /// the path came from in errors and logs.
    pub fn with_ca_file(setting: &str, path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Ok(Self {
            ca: Some(CaBundle::read(setting, path.as_ref())?),
            insecure: None,
        })
    }

    /// Accept any certificate (`setting` is what asked for it, for the warning).
    pub fn insecure(setting: &str) -> Self {
        Self {
            ca: None,
            insecure: Some(setting.to_string()),
        }
    }
}

impl CaBundle {
    pub fn read(setting: &str, path: &Path) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            setting: setting.to_string(),
            message,
        };
        let shown = path.display();
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CA_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| invalid(format!("cannot read {shown}: {e}")))?;
        if bytes.len() as u64 > MAX_CA_BYTES {
            return Err(invalid(format!(
                "{shown} is larger than {MAX_CA_BYTES} bytes; not a CA bundle"
            )));
        }
        let certs = CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("{shown} is not a PEM bundle: {e}")))?;
        if certs.is_empty() {
            return Err(invalid(format!(
                "{shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            )));
        }
        // The same parse the verifier does later: a block that is not an X.509 certificate is
        // refused here, with the setting named, instead of failing the client build.
        let mut store = rustls::RootCertStore::empty();
        for (i, c) in certs.iter().enumerate() {
            store.add(c.clone()).map_err(|e| {
                invalid(format!(
                    "certificate {} of {shown} is not a usable CA certificate: {e}",
                    i + 1
                ))
            })?;
        }
        Ok(Self {
            setting: setting.to_string(),
            path: path.to_path_buf(),
            certs,
        })
    }
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
    cacert: Option<String>,
    verify: Option<bool>,
    /// openstacksdk's older spelling of `verify: false`; as there, it wins over `verify`.
    insecure: Option<bool>,
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
            ("system_scope", "OS_SYSTEM_SCOPE"),
            ("domain_id", "OS_DOMAIN_ID"),
            ("domain_name", "OS_DOMAIN_NAME"),
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
            ..Default::default()
        };
        let mut config = Self::from_entry(entry, |k| format!("OS_{}", k.to_uppercase()))?;
        // OS_INSECURE as openstacksdk reads it for a cloud made of OS_* variables alone;
        // anything but true/false is refused rather than read as false.
        let insecure = match get("OS_INSECURE") {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                return Err(ConfigError::Invalid {
                    setting: "OS_INSECURE".into(),
                    message: format!("must be true or false, not {v:?}"),
                });
            }
        };
        config.tls = tls_config(
            get("OS_CACERT").map(|p| ("OS_CACERT".to_string(), p)),
            insecure.then(|| "OS_INSECURE=true".to_string()),
            &get,
        )?;
        Ok(config)
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
        // The openstack CLI reads OS_INSECURE only for a cloud made of OS_* variables; with
        // OS_CLOUD it would verify. Doing otherwise here would turn verification off where the
        // CLI keeps it on, and ignoring a variable someone set is no better: say so.
        if get("OS_INSECURE").is_some() {
            return Err(ConfigError::Invalid {
                setting: "OS_INSECURE".into(),
                message: format!(
                    "not read with OS_CLOUD (nor by the openstack CLI); set verify: false under clouds.{cloud} in {where_} instead"
                ),
            });
        }
        // OS_CACERT wins over the file's cacert, as the CLI's --os-cacert (which defaults to
        // OS_CACERT) does.
        let cacert = get("OS_CACERT")
            .map(|p| ("OS_CACERT".to_string(), p))
            .or_else(|| {
                entry
                    .cacert
                    .clone()
                    .map(|p| (format!("{where_}: clouds.{cloud}.cacert"), p))
            });
        // openstacksdk: "insecure is the most aggressive setting, so it wins".
        let insecure = if entry.insecure == Some(true) {
            Some(format!("{where_}: clouds.{cloud}.insecure: true"))
        } else if entry.verify == Some(false) {
            Some(format!("{where_}: clouds.{cloud}.verify: false"))
        } else {
            None
        };
        let tls = tls_config(cacert, insecure, get)?;
        let mut config = Self::from_entry(entry, |k| format!("{where_}: clouds.{cloud}.auth.{k}"))?;
        config.tls = tls;
        Ok(config)
    }

    fn from_entry(entry: CloudEntry, name: impl Fn(&str) -> String) -> Result<Self, ConfigError> {
        let a = &entry.auth;
        let req = |k: &str| {
            a.get(k)
                .cloned()
                .ok_or_else(|| ConfigError::Missing(name(k)))
        };
        let auth_url = req("auth_url")?;
        refuse_unscoped(a, &name)?;
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
            tls: TlsConfig::default(),
        })
    }
}

/// The TLS settings: `cacert` as (setting, path), read now; `insecure` as the setting that
/// turned verification off.
fn tls_config(
    cacert: Option<(String, String)>,
    insecure: Option<String>,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<TlsConfig, ConfigError> {
    let ca = match cacert {
        // Read even when verification is off: a broken setting is an error either way.
        Some((setting, path)) => Some(CaBundle::read(&setting, &expand_home(&path, get))?),
        None => None,
    };
    Ok(TlsConfig { ca, insecure })
}

/// `~/` as openstacksdk expands it (os.path.expanduser); any other path is taken as written,
/// a relative one from the working directory.
fn expand_home(path: &str, get: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    match (path.strip_prefix("~/"), get("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(path),
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

/// A clouds.yaml is a few KiB; one far larger is not one, and is not read whole.
const MAX_CLOUDS_YAML_BYTES: u64 = 256 * 1024;
/// libyaml's time grows with the square of the nesting depth (measured: 16k levels 1.4 s,
/// 100k levels about a minute, release build); a clouds.yaml nests four or five levels.
const MAX_CLOUDS_YAML_DEPTH: usize = 64;

/// How deep `[`/`{` nest outside quoted text: flow collections are where a small file
/// nests deep (block nesting costs indentation, bounded by the size cap).
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut max, mut quote) = (0usize, 0usize, None);
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => {
                depth += 1;
                max = max.max(depth);
            }
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        if c == '\n' {
            // A quote left open at the end of a line is an apostrophe in a plain scalar.
            quote = None;
        }
    }
    max
}

fn load_entry(path: &Path, cloud: &str) -> Result<CloudEntry, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        setting: path.display().to_string(),
        message,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CLOUDS_YAML_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| invalid(format!("cannot read: {e}")))?;
    if text.len() as u64 > MAX_CLOUDS_YAML_BYTES {
        return Err(invalid(format!(
            "is larger than {MAX_CLOUDS_YAML_BYTES} bytes; not a clouds.yaml"
        )));
    }
    if flow_depth(&text) > MAX_CLOUDS_YAML_DEPTH {
        return Err(invalid(format!(
            "nests deeper than {MAX_CLOUDS_YAML_DEPTH} levels; not a clouds.yaml"
        )));
    }
    let mut file: CloudsFile =
        serde_yaml::from_str(&text).map_err(|e| invalid(format!("not a clouds.yaml: {e}")))?;
    file.clouds
        .remove(cloud)
        .ok_or_else(|| invalid(format!("has no cloud named {cloud:?} (OS_CLOUD)")))
}

/// What the operator needs instead of a token that is not scoped to its project.
pub const PROJECT_SCOPE_HINT: &str = "the operator needs a project-scoped credential: an application credential made in the operator's project, or a user with project_name (or project_id) of that project";

/// The operator's ports, routers and RBAC policies belong to one project, and Neutron (always
/// from 2026.2, where policies enforce scope) answers a system- or domain-scoped token with
/// 403 for them or acts on no project at all. Such a setting is refused when it is read,
/// naming itself, rather than sent to Keystone.
fn refuse_unscoped(
    a: &BTreeMap<String, String>,
    name: &impl Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if a.contains_key("system_scope") {
        return Err(ConfigError::Invalid {
            setting: name("system_scope"),
            message: format!("asks for a system-scoped token; {PROJECT_SCOPE_HINT}"),
        });
    }
    let project = a.contains_key("project_id") || a.contains_key("project_name");
    let app_cred = a.contains_key("application_credential_id");
    // domain_name beside a project is openstacksdk's shorthand for the user's and the
    // project's domain; alone it asks for a domain-scoped token.
    if let Some(k) = ["domain_id", "domain_name"]
        .into_iter()
        .find(|k| a.contains_key(*k))
        .filter(|_| !project && !app_cred)
    {
        return Err(ConfigError::Invalid {
            setting: name(k),
            message: format!(
                "without a project asks for a domain-scoped token; {PROJECT_SCOPE_HINT}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_or_domain_scope_is_refused_naming_the_setting() {
        let base = [
            ("OS_AUTH_URL", "http://k:5000/v3"),
            ("OS_USERNAME", "op"),
            ("OS_PASSWORD", "pw"),
        ];
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: &[Case] = &[
            (
                &[("OS_SYSTEM_SCOPE", "all")],
                Some("OS_SYSTEM_SCOPE: asks for a system-scoped token"),
            ),
            (
                &[("OS_SYSTEM_SCOPE", "all"), ("OS_PROJECT_NAME", "operator")],
                Some("OS_SYSTEM_SCOPE: asks for a system-scoped token"),
            ),
            (
                &[("OS_DOMAIN_NAME", "Default")],
                Some("OS_DOMAIN_NAME: without a project asks for a domain-scoped token"),
            ),
            (
                &[("OS_DOMAIN_ID", "default")],
                Some("OS_DOMAIN_ID: without a project asks for a domain-scoped token"),
            ),
            (
                &[
                    ("OS_DOMAIN_NAME", "Default"),
                    ("OS_PROJECT_NAME", "operator"),
                ],
                None,
            ),
            (&[("OS_PROJECT_ID", "p1")], None),
        ];
        for (extra, want) in cases {
            let pairs: Vec<(&str, &str)> = base.iter().chain(extra.iter()).copied().collect();
            let got = AuthConfig::from_env(&env(&pairs));
            match want {
                Some(w) => {
                    let e = got.unwrap_err().to_string();
                    assert!(e.starts_with(w), "{extra:?}: {e}");
                    assert!(e.contains("project-scoped credential"), "{extra:?}: {e}");
                    assert!(!e.contains("pw"), "{extra:?}: a value leaked: {e}");
                }
                None => assert!(got.is_ok(), "{extra:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn clouds_yaml_system_scope_is_refused() {
        let dir = std::env::temp_dir().join(format!("bnerd-clouds-scope-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("clouds.yaml");
        std::fs::write(
            &f,
            "clouds:\n  lab:\n    auth:\n      auth_url: http://127.0.0.1:5000/v3\n      username: admin\n      password: s3cr3t\n      system_scope: all\n",
        )
        .unwrap();
        let p = f.display().to_string();
        let e = AuthConfig::from_env(&env(&[("OS_CLOUD", "lab"), ("OS_CLIENT_CONFIG_FILE", &p)]))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with(&format!(
                "clouds.lab.auth.system_scope: asks for a system-scoped token; {PROJECT_SCOPE_HINT}"
            )),
            "{e}"
        );
        assert!(!e.contains("s3cr3t"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
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
    #[test]
    fn hostile_clouds_yaml_is_refused_quickly_without_echoing_a_value() {
        // The operator's own clouds.yaml comes from a Secret too: a billion-laughs bomb, a
        // deep nest and wrong types must be refused at once, naming the file, never a value.
        let dir = scratch("hostile-yaml");
        let f = dir.join("clouds.yaml");
        let p = f.display().to_string();
        let mut bomb = String::from("a: &a [\"s3cr3t-bomb\", \"s3cr3t-bomb\"]\n");
        for i in 1..30 {
            let prev = format!("*x{}", i - 1).replace("*x0", "*a");
            bomb.push_str(&format!("x{i}: &x{i} [{prev}, {prev}, {prev}, {prev}]\n"));
        }
        bomb.push_str("clouds:\n  lab:\n    auth: *x29\n");
        let nested = format!("clouds: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let wrong = "clouds:\n  lab:\n    auth:\n      auth_url: http://k/v3\n      password: [s3cr3t-pw]\n      username: {s3cr3t-user: 1}\n".to_string();
        let huge = format!(
            "clouds:\n  lab:\n    region_name: {}\n",
            "s3cr3t".repeat(100_000)
        );
        let cases = [
            ("bomb", bomb),
            ("nested", nested),
            ("wrong types", wrong),
            ("huge", huge),
        ];
        for (what, text) in cases {
            std::fs::write(&f, &text).unwrap();
            let t = std::time::Instant::now();
            let e =
                AuthConfig::from_env(&env(&[("OS_CLOUD", "lab"), ("OS_CLIENT_CONFIG_FILE", &p)]))
                    .expect_err(what);
            let msg = e.to_string();
            assert!(
                t.elapsed() < std::time::Duration::from_secs(5),
                "{what}: {:?}",
                t.elapsed()
            );
            assert!(msg.contains(&p) && !msg.contains("s3cr3t"), "{what}: {msg}");
            assert!(msg.len() < 1024, "{what}: {} bytes", msg.len());
        }
        std::fs::remove_dir_all(dir).unwrap();
        // Brackets inside quotes, or an apostrophe in a plain scalar, do not count.
        assert_eq!(flow_depth("clouds: {a: [1, \"[[[\", '{{']}\n"), 2);
        assert_eq!(flow_depth("password: it's\nb: [x]\n"), 1);
    }

    /// A fresh directory for one test (tests of this module run in parallel).
    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bnerd-auth-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    const PASSWORD_ENV: [(&str, &str); 4] = [
        ("OS_AUTH_URL", "https://k:5000/v3"),
        ("OS_USERNAME", "op"),
        ("OS_PASSWORD", "pw"),
        ("OS_PROJECT_NAME", "operator"),
    ];

    fn with(extra: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let mut all: Vec<(&str, &str)> = PASSWORD_ENV.to_vec();
        all.extend_from_slice(extra);
        env(&all)
    }

    #[test]
    fn tls_verifies_by_default() {
        let c = AuthConfig::from_env(&with(&[])).unwrap();
        assert_eq!(c.tls, TlsConfig::default());
        assert!(c.tls.ca.is_none() && c.tls.insecure.is_none());
    }

    #[test]
    fn os_cacert_is_read_at_once_and_named_when_wrong() {
        let dir = scratch("cacert");
        let bundle = dir.join("ca.pem");
        // Two CAs and a key in one file, as bundles come: the certificates are taken.
        std::fs::write(
            &bundle,
            format!(
                "{}\n{}-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                ca_pem(),
                ca_pem()
            ),
        )
        .unwrap();
        let p = bundle.display().to_string();
        let c = AuthConfig::from_env(&with(&[("OS_CACERT", &p)])).unwrap();
        let ca = c.tls.ca.as_ref().expect("a CA bundle");
        assert_eq!((ca.setting.as_str(), ca.certs.len()), ("OS_CACERT", 2));
        assert!(c.tls.insecure.is_none());
        assert!(
            format!("{c:?}").contains("certs: 2"),
            "no DER bytes in Debug: {c:?}"
        );

        let missing = dir.join("nope.pem").display().to_string();
        let e = AuthConfig::from_env(&with(&[("OS_CACERT", &missing)])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("OS_CACERT: cannot read {missing}: ")),
            "{e}"
        );

        let text = dir.join("notes.txt");
        std::fs::write(&text, "not a certificate\n").unwrap();
        let t = text.display().to_string();
        let e = AuthConfig::from_env(&with(&[("OS_CACERT", &t)])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("OS_CACERT: {t} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        );

        let bad_base64 = dir.join("bad64.pem");
        std::fs::write(
            &bad_base64,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let b = bad_base64.display().to_string();
        let e = AuthConfig::from_env(&with(&[("OS_CACERT", &b)])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("OS_CACERT: {b} is not a PEM bundle: ")),
            "{e}"
        );

        // Valid PEM around bytes that are no certificate.
        let not_x509 = dir.join("junk.pem");
        std::fs::write(
            &not_x509,
            "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let j = not_x509.display().to_string();
        let e = AuthConfig::from_env(&with(&[("OS_CACERT", &j)])).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "OS_CACERT: certificate 1 of {j} is not a usable CA certificate: "
            )),
            "{e}"
        );

        // ~/ is the home directory, as openstacksdk expands it.
        let c = AuthConfig::from_env(&with(&[
            ("OS_CACERT", "~/ca.pem"),
            ("HOME", &dir.display().to_string()),
        ]))
        .unwrap();
        assert_eq!(c.tls.ca.unwrap().path, bundle);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn os_insecure_without_os_cloud() {
        let c = AuthConfig::from_env(&with(&[("OS_INSECURE", "True")])).unwrap();
        assert_eq!(c.tls.insecure.as_deref(), Some("OS_INSECURE=true"));
        let c = AuthConfig::from_env(&with(&[("OS_INSECURE", "false")])).unwrap();
        assert_eq!(c.tls.insecure, None);
        let e = AuthConfig::from_env(&with(&[("OS_INSECURE", "1")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "OS_INSECURE: must be true or false, not \"1\""
        );
    }

    #[test]
    fn clouds_yaml_cacert_and_verify() {
        let dir = scratch("clouds-tls");
        let bundle = dir.join("ca.pem");
        std::fs::write(&bundle, ca_pem()).unwrap();
        let f = dir.join("clouds.yaml");
        let write = |extra: &str| {
            std::fs::write(
                &f,
                format!(
                    "clouds:\n  lab:\n    region_name: RegionTLS\n{extra}    auth:\n      auth_url: https://127.0.0.1:5443/v3\n      application_credential_id: acid\n      application_credential_secret: s3cr3t\n"
                ),
            )
            .unwrap()
        };
        let p = f.display().to_string();
        let cloud = |extra: &[(&str, &str)]| {
            let mut all = vec![("OS_CLOUD", "lab"), ("OS_CLIENT_CONFIG_FILE", p.as_str())];
            all.extend_from_slice(extra);
            AuthConfig::from_env(&env(&all))
        };

        write(&format!("    cacert: {}\n", bundle.display()));
        let c = cloud(&[]).unwrap();
        let ca = c.tls.ca.unwrap();
        assert_eq!(ca.setting, format!("{p}: clouds.lab.cacert"));
        assert_eq!(ca.certs.len(), 1);
        assert_eq!(c.tls.insecure, None);

        // OS_CACERT wins over the file, as the openstack CLI's --os-cacert does.
        let other = dir.join("other.pem");
        std::fs::write(&other, ca_pem()).unwrap();
        let c = cloud(&[("OS_CACERT", &other.display().to_string())]).unwrap();
        assert_eq!(c.tls.ca.as_ref().unwrap().setting, "OS_CACERT");
        assert_eq!(c.tls.ca.unwrap().path, other);

        write("    cacert: /nonexistent/ca.pem\n");
        let e = cloud(&[]).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "{p}: clouds.lab.cacert: cannot read /nonexistent/ca.pem: "
            )),
            "{e}"
        );

        write("    verify: false\n");
        let c = cloud(&[]).unwrap();
        assert_eq!(
            c.tls.insecure,
            Some(format!("{p}: clouds.lab.verify: false"))
        );
        write("    verify: true\n");
        assert_eq!(cloud(&[]).unwrap().tls, TlsConfig::default());
        // openstacksdk's older key; it wins over verify.
        write("    verify: true\n    insecure: true\n");
        assert_eq!(
            cloud(&[]).unwrap().tls.insecure,
            Some(format!("{p}: clouds.lab.insecure: true"))
        );
        // A string is not a boolean: refused, not read as true or false.
        write("    verify: \"no\"\n");
        let e = cloud(&[]).unwrap_err();
        assert!(e.to_string().contains("verify"), "{e}");

        // The CLI does not read OS_INSECURE with OS_CLOUD; neither do we, loudly.
        write("");
        let e = cloud(&[("OS_INSECURE", "true")]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OS_INSECURE: not read with OS_CLOUD"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
