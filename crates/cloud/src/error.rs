//! Errors from the cloud, with Neutron's own error type kept so callers can match on it.

use thiserror::Error;

pub type Result<T, E = CloudError> = std::result::Result<T, E>;

/// The Neutron error types (`NeutronError.type`) the operator acts on; anything else is
/// reported as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeutronErrorKind {
    /// A port already has a device (e.g. re-attaching a leg after a lost answer).
    PortInUse,
    /// A fixed IP is taken.
    IpAddressAlreadyAllocated,
    /// A router interface cannot go while a route's nexthop needs it.
    RouterInterfaceInUseByRoute,
    /// An identical RBAC policy exists (maybe an admin's, invisible to us).
    DuplicateRbacPolicy,
    /// A quota (e.g. routes per router) is exhausted.
    OverQuota,
    /// A router holds the most routes Neutron up to 2026.1 allows one (`[DEFAULT] max_routes`,
    /// a setting of the server, not a project quota): answered 400, where 2026.2's per-project
    /// `router_route` quota answers 409 `OverQuota`.
    RoutesExhausted,
    /// A route is invalid for the router (nexthop not connected, or the router's own).
    InvalidRoutes,
}

impl NeutronErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PortInUse => "PortInUse",
            Self::IpAddressAlreadyAllocated => "IpAddressAlreadyAllocated",
            Self::RouterInterfaceInUseByRoute => "RouterInterfaceInUseByRoute",
            Self::DuplicateRbacPolicy => "DuplicateRbacPolicy",
            Self::OverQuota => "OverQuota",
            Self::RoutesExhausted => "RoutesExhausted",
            Self::InvalidRoutes => "InvalidRoutes",
        }
    }
}

/// The path errors of the token request carry, whatever prefix the auth_url has.
pub const KEYSTONE_TOKENS_PATH: &str = "/v3/auth/tokens";

#[derive(Debug, Clone, Error, PartialEq)]
pub enum CloudError {
    /// The API answered with an error status. `kind` is NeutronError.type when present.
    #[error("{method} {path}: HTTP {status} {kind}: {message}")]
    Api {
        method: String,
        path: String,
        status: u16,
        kind: String,
        message: String,
    },
    /// Keystone refused the credential (`status` is its answer), or the token lacks what we
    /// need (`status` None). Kept apart from `Api` so a 404 here never reads as "gone".
    #[error("authentication failed: {message}")]
    Auth {
        status: Option<u16>,
        message: String,
    },
    /// The token's catalog lacks the service (or its endpoint for our interface and region):
    /// an operator's catalog can lose Neutron for a while (an endpoint re-registered, a
    /// region moved), so it is retried with backoff, not terminal like a refused credential.
    #[error("Keystone catalog: {message}")]
    Catalog { message: String },
    /// No answer in time; the call may or may not have been committed.
    #[error("{method} {path}: timed out")]
    Timeout { method: String, path: String },
    /// Connection-level failure.
    #[error("{method} {path}: {message}")]
    Transport {
        method: String,
        path: String,
        message: String,
    },
    /// The answer was not what the API documents.
    #[error("{method} {path}: unexpected response: {message}")]
    Decode {
        method: String,
        path: String,
        message: String,
    },
}

impl CloudError {
    /// A token problem found on our side (no status from Keystone).
    pub fn auth(message: impl Into<String>) -> Self {
        CloudError::Auth {
            status: None,
            message: message.into(),
        }
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            CloudError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// NeutronError.type, e.g. `IpAddressAlreadyAllocated`.
    pub fn kind(&self) -> Option<&str> {
        match self {
            CloudError::Api { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// Keystone's status when it refused the credential.
    pub fn auth_status(&self) -> Option<u16> {
        match self {
            CloudError::Auth { status, .. } => *status,
            _ => None,
        }
    }

    /// Keystone failed us (refused, unreachable, no catalog entry), not the Neutron object a
    /// call was about: what to fix is the credential's auth_url or Keystone, not an ID.
    pub fn is_keystone(&self) -> bool {
        match self {
            CloudError::Auth { .. } | CloudError::Catalog { .. } => true,
            CloudError::Api { path, .. }
            | CloudError::Timeout { path, .. }
            | CloudError::Transport { path, .. }
            | CloudError::Decode { path, .. } => path == KEYSTONE_TOKENS_PATH,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// Neutron answered with this error type.
    pub fn is(&self, kind: NeutronErrorKind) -> bool {
        self.kind() == Some(kind.as_str())
    }

    /// Worth retrying with backoff: server errors, timeouts, transport failures, quota and
    /// revision races (a full router too, whichever release answers it). Everything else is
    /// terminal for the current spec.
    pub fn is_retryable(&self) -> bool {
        match self {
            CloudError::Api { status, kind, .. } => {
                *status >= 500
                    || *status == 412
                    || *status == 429
                    || (*status == 409 && kind == NeutronErrorKind::OverQuota.as_str())
                    || (*status == 400 && kind == NeutronErrorKind::RoutesExhausted.as_str())
            }
            CloudError::Timeout { .. }
            | CloudError::Transport { .. }
            | CloudError::Catalog { .. } => true,
            // Keystone itself failing is weather; refusing the credential is not.
            CloudError::Auth {
                status: Some(s), ..
            } => *s >= 500 || *s == 429,
            CloudError::Auth { .. } | CloudError::Decode { .. } => false,
        }
    }
}

/// An error with its causes: reqwest's and kube's own messages stop at "error sending request"
/// or "client error (Connect)"; what tells a refused connection from a reset or a stale
/// keep-alive is further down the source chain.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if !out.contains(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);
    #[derive(Debug, Error)]
    #[error("middle: inner")]
    struct Middle(#[source] Inner);
    #[derive(Debug, Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn error_chain_names_each_cause_once() {
        assert_eq!(error_chain(&Outer(Middle(Inner))), "outer: middle: inner");
        assert_eq!(error_chain(&Inner), "inner");
    }

    fn api(status: u16, kind: &str) -> CloudError {
        CloudError::Api {
            method: "PUT".into(),
            path: "/x".into(),
            status,
            kind: kind.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn classification() {
        assert!(api(503, "").is_retryable());
        assert!(api(412, "RevisionNumberConstraintFailed").is_retryable());
        assert!(api(409, "OverQuota").is_retryable());
        // Neutron up to 2026.1: a full router is a 400 of its own type, retried all the same.
        assert!(api(400, "RoutesExhausted").is_retryable());
        assert!(!api(400, "BadRequest").is_retryable());
        assert!(!api(409, "IpAddressAlreadyAllocated").is_retryable());
        assert!(!api(400, "InvalidRoutes").is_retryable());
        let auth = |status| CloudError::Auth {
            status,
            message: "m".into(),
        };
        assert!(auth(Some(503)).is_retryable());
        assert!(auth(Some(429)).is_retryable());
        assert!(!auth(Some(401)).is_retryable());
        assert!(!auth(Some(404)).is_retryable());
        assert!(!auth(None).is_retryable());
        assert!(
            !auth(Some(404)).is_not_found(),
            "a refused credential is not a gone resource"
        );
        assert!(!api(403, "PolicyNotAuthorized").is_retryable());
        assert!(!api(404, "RouterNotFound").is_retryable());
        assert!(api(404, "RouterNotFound").is_not_found());
        assert!(
            CloudError::Timeout {
                method: "GET".into(),
                path: "/".into()
            }
            .is_retryable()
        );
        assert_eq!(
            api(409, "PortInUse").to_string(),
            "PUT /x: HTTP 409 PortInUse: m"
        );
    }
}
