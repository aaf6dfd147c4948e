//! What the client tells an observer about each HTTP request it sends: which service, which
//! operation and the answer's status. The operator turns this into metrics; the client itself
//! keeps no more than its read/write counters.
//!
//! Operations are paths with every identifier replaced by `{id}` and the query dropped, so a
//! metric label built from them stays bounded however many ports and routers a cloud has.

/// The OpenStack service a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    Keystone,
    Neutron,
}

impl Service {
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Keystone => "keystone",
            Service::Neutron => "neutron",
        }
    }
}

/// One request sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'a> {
    pub service: Service,
    /// e.g. `GET /v2.0/ports`, `PUT /v2.0/routers/{id}/add_extraroutes`.
    pub operation: &'a str,
    /// The HTTP status, or None when no answer came (connection error, timeout).
    pub status: Option<u16>,
}

pub trait CallObserver: Send + Sync {
    fn observe(&self, call: &Call<'_>);
}

/// `METHOD /path` with identifiers replaced by `{id}` and no query. A segment is an identifier
/// when it holds a digit (UUIDs, Keystone's hex IDs; not the `v2.0`/`v3` version segments),
/// when it follows `tags` (a tag value), or when it is longer than any resource name.
pub fn operation(method: &str, path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let mut out = String::with_capacity(path.len() + method.len() + 1);
    out.push_str(method);
    out.push(' ');
    let mut previous = "";
    let mut first = true;
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        let version = first
            && segment.starts_with('v')
            && segment[1..].chars().all(|c| c.is_ascii_digit() || c == '.');
        let id = !version
            && (segment.chars().any(|c| c.is_ascii_digit())
                || previous == "tags"
                || segment.len() > 32
                || !segment
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '-' || c == '.'));
        // The privilege probe reads the quota of a project nobody has: named apart from the
        // capacity read of the operator's own project, which has the same shape.
        out.push_str(match (id, segment) {
            (true, crate::ADMIN_READ_PROBE_PROJECT) => "{probe}",
            (true, _) => "{id}",
            (false, _) => segment,
        });
        previous = segment;
        first = false;
    }
    if out.ends_with(' ') {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_queries_never_reach_the_operation() {
        for (method, path, want) in [
            (
                "GET",
                "/v2.0/ports?network_id=5d3c1a2e-1111-2222-3333-444455556666&tags=x",
                "GET /v2.0/ports",
            ),
            (
                "PUT",
                "/v2.0/routers/5d3c1a2e-1111-2222-3333-444455556666/add_extraroutes",
                "PUT /v2.0/routers/{id}/add_extraroutes",
            ),
            (
                "PUT",
                "/v2.0/ports/5d3c1a2e-1111-2222-3333-444455556666/tags/bnerd-clusterlink",
                "PUT /v2.0/ports/{id}/tags/{id}",
            ),
            (
                "GET",
                "/v2.0/quotas/00000000-0000-0000-0000-000000000000/details",
                "GET /v2.0/quotas/{id}/details",
            ),
            (
                "GET",
                "/v2.0/quotas/00000000000000000000000000000000/details",
                "GET /v2.0/quotas/{probe}/details",
            ),
            ("POST", "/v3/auth/tokens", "POST /v3/auth/tokens"),
            ("GET", "/v2.0/rbac-policies", "GET /v2.0/rbac-policies"),
            (
                "GET",
                "/v2.0/networks/Transit%20Net",
                "GET /v2.0/networks/{id}",
            ),
            ("GET", "/", "GET /"),
        ] {
            assert_eq!(operation(method, path), want, "{path}");
        }
    }
}
