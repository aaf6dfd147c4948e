//! The real cloud: Keystone v3 token auth and Neutron v2.0 over HTTP.
//!
//! `client` builds the shared HTTP client, `session` gets and renews the token, `transport`
//! sends one Neutron call (re-auth, retry, `Retry-After`, pages), `answer` reads what came back
//! (body cap, decoding, error bodies, next links), `neutron` maps the port's methods onto
//! Neutron's endpoints.

mod answer;
mod client;
mod neutron;
mod session;
mod transport;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Mutex;

use crate::auth::{AuthConfig, AuthMethod};
use crate::error::Result;
use crate::observe::{Call, CallObserver, Service};
use crate::secret::SecretString;

pub use answer::MAX_BODY_BYTES;
pub use client::POOL_IDLE;
use session::Session;
pub use transport::{MAX_INLINE_RETRY_AFTER, MAX_PAGES};

/// One OpenStack credential: a Keystone session and the Neutron endpoint from its catalog.
pub struct OpenStack {
    http: reqwest::Client,
    auth: AuthConfig,
    neutron_override: Option<String>,
    session: Mutex<Option<Session>>,
    /// `limit` sent on list calls; None leaves the page size to the cloud.
    page_size: Option<u32>,
    /// Neutron requests sent: GETs, and everything else.
    reads: AtomicU64,
    writes: AtomicU64,
    /// Told of every request sent (metrics); shared by siblings.
    observer: Option<Arc<dyn CallObserver>>,
    /// No Neutron request before this: the server's last `Retry-After`.
    not_before: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl OpenStack {
    /// Build a client; nothing is sent until the first call.
    pub fn new(auth: AuthConfig) -> Result<Self> {
        Ok(Self {
            http: client::client(&auth.tls)?,
            auth,
            neutron_override: None,
            session: Mutex::new(None),
            page_size: None,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            observer: None,
            not_before: std::sync::Mutex::new(None),
        })
    }

    /// A client on another credential of the same cloud: the same HTTP connection pool (and
    /// with it this client's TLS settings; `auth.tls` is not read) and Neutron endpoint
    /// override, its own Keystone session.
    pub fn sibling(&self, auth: AuthConfig) -> Self {
        Self {
            http: self.http.clone(),
            auth,
            neutron_override: self.neutron_override.clone(),
            session: Mutex::new(None),
            page_size: self.page_size,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            observer: self.observer.clone(),
            not_before: std::sync::Mutex::new(None),
        }
    }

    /// A client at this one's endpoint (Keystone URL, region, interface) on an application
    /// credential: how a customer's credential is used, never at an endpoint a Secret names.
    pub fn on_application_credential(&self, id: String, secret: SecretString) -> Self {
        self.sibling(AuthConfig {
            method: AuthMethod::ApplicationCredential { id, secret },
            ..self.auth.clone()
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

    /// Tell `observer` of every request this client and its siblings send.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn observed(&self, service: Service, method: &str, path: &str, status: Option<u16>) {
        if let Some(o) = &self.observer {
            let operation = crate::observe::operation(method, path);
            o.observe(&Call {
                service,
                operation: &operation,
                status,
            });
        }
    }

    /// Use this Neutron URL instead of the catalog's.
    pub fn with_neutron_url(mut self, url: impl Into<String>) -> Self {
        self.neutron_override = Some(url.into());
        self
    }

    /// Ask for at most `n` items per page of a list (`limit=n`). Lists still return every
    /// item, a page at a time; this bounds each answer on a huge cloud. 0 leaves the page size
    /// to the cloud (`pagination_max_limit`).
    pub fn with_page_size(mut self, n: u32) -> Self {
        self.page_size = (n > 0).then_some(n);
        self
    }

    pub fn auth_config(&self) -> &AuthConfig {
        &self.auth
    }
}
