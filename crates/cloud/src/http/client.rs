//! The one HTTP client every credential of the process shares: timeouts, the idle-connection
//! limit, no redirects, the TLS settings (a private CA, or verification off), and what a
//! transport error means for the human who reads it (a refused certificate says which setting
//! fixes it).

use std::time::Duration;

use crate::auth::TlsConfig;
use crate::error::{CloudError, Result, error_chain};

/// Servers close idle keep-alive connections (gunicorn after 2 s, Apache after 5 s). A request
/// written into a connection the server is closing at that moment fails with "connection
/// closed before message completed" or a reset, and for a write nobody can tell whether it
/// ran. Never reusing a connection idle longer than this keeps us clear of that race; calls
/// of one reconcile follow each other closely and still share a connection.
pub const POOL_IDLE: Duration = Duration::from_secs(1);

pub(super) fn client(tls: &TlsConfig) -> Result<reqwest::Client> {
    // reqwest is built without a TLS provider of its own so it shares kube's ring provider;
    // installing it twice is harmless, installing a second kind would make kube panic.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder_error = |message: String| CloudError::Transport {
        method: "building".into(),
        path: "the HTTP client".into(),
        message,
    };
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .pool_idle_timeout(POOL_IDLE)
        // A redirect would carry X-Auth-Token (or the credential in a token request) to
        // wherever the server points; OpenStack APIs do not redirect, so a 3xx is an error.
        .redirect(reqwest::redirect::Policy::none());
    if let Some(setting) = &tls.insecure {
        // Once per client, i.e. once per process: siblings share this client.
        tracing::warn!(
            setting = %setting,
            "TLS certificates of Keystone and Neutron are NOT verified: whoever can answer in \
             their place receives the credential and every token"
        );
        if let Some(ca) = &tls.ca {
            tracing::warn!(setting = %ca.setting, "the CA bundle is not used while verification is off");
        }
        builder = builder.tls_danger_accept_invalid_certs(true);
    } else if let Some(ca) = &tls.ca {
        // Merged with the system's roots (rustls-platform-verifier): a private CA for the
        // cloud does not take away the public ones.
        let certs = ca
            .certs
            .iter()
            .map(|c| reqwest::Certificate::from_der(c.as_ref()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| builder_error(format!("{}: {}", ca.setting, error_chain(&e))))?;
        tracing::info!(setting = %ca.setting, path = %ca.path.display(), certificates = certs.len(), "trusting the CA bundle besides the system's roots");
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(|e| {
        let mut message = error_chain(&e);
        // rustls-platform-verifier reads the system's roots when the client is built, and
        // refuses to go on with none (an image without a CA bundle), even for http:// URLs.
        if no_system_roots(&e) && tls.ca.is_none() {
            message.push_str(
                " (no CA bundle where the system keeps it, nor in SSL_CERT_FILE/SSL_CERT_DIR; \
                 install one, or set OS_CACERT or clouds.yaml cacert)",
            );
        }
        builder_error(message)
    })
}

fn no_system_roots(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(rustls::Error::General(m)) = err.downcast_ref::<rustls::Error>()
            && m.contains("No CA certificates")
        {
            return true;
        }
        cur = err.source();
    }
    false
}

pub(super) fn transport(method: &str, path: &str, e: reqwest::Error) -> CloudError {
    if e.is_timeout() {
        CloudError::Timeout {
            method: method.into(),
            path: path.into(),
        }
    } else {
        let mut message = error_chain(&e);
        match refused_certificate(&e) {
            None => {}
            Some(rustls::CertificateError::UnknownIssuer) => message.push_str(
                " (no trusted CA signed the server's certificate; if a private CA did, set \
                 OS_CACERT or clouds.yaml cacert to that CA's PEM bundle)",
            ),
            Some(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            ) => message.push_str(
                " (the server's certificate is for another name: the URL, from OS_AUTH_URL or \
                 the catalog, must name the host as the certificate does)",
            ),
            Some(_) => message.push_str(" (the server's TLS certificate was refused)"),
        }
        CloudError::Transport {
            method: method.into(),
            path: path.into(),
            message,
        }
    }
}

/// Why rustls refused the server's certificate, if that is somewhere down the error's causes.
/// The rustls error sits inside `io::Error`s (two, nested, with reqwest 0.13), whose `source()`
/// skips what they wrap, so each is looked into.
fn refused_certificate<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::CertificateError> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        let mut inner: Option<&'a (dyn std::error::Error + 'static)> = Some(err);
        while let Some(i) = inner {
            if let Some(rustls::Error::InvalidCertificate(why)) = i.downcast_ref::<rustls::Error>()
            {
                return Some(why);
            }
            inner = i
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|w| w as &(dyn std::error::Error + 'static));
        }
        cur = err.source();
    }
    None
}
