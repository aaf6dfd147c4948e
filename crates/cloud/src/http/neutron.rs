//! Neutron's endpoints as the port's methods: paths, query strings and request bodies.

use async_trait::async_trait;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::OpenStack;
use super::answer::decode;
use crate::Neutron;
use crate::error::Result;
use crate::types::*;

impl OpenStack {
    /// `PUT /routers/{id}/{action}` of extraroute-atomic.
    async fn extraroutes(&self, router_id: &str, action: &str, routes: &[Route]) -> Result<Router> {
        let path = format!("/routers/{}/{action}", enc(router_id));
        let body = json!({"router": {"routes": routes}});
        self.send(Method::PUT, &path, &body, "router").await
    }
}

#[derive(Deserialize)]
struct Alias {
    alias: String,
}

/// One resource of a quota-details answer; `reserved` is left out.
#[derive(Deserialize)]
struct QuotaDetail {
    used: i64,
    limit: i64,
}

#[async_trait]
impl Neutron for OpenStack {
    async fn extensions(&self) -> Result<Vec<String>> {
        let v: Vec<Alias> = self.list("/extensions", "extensions").await?;
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
        p.extend(q.network_ids.iter().map(|n| ("network_id", n.clone())));
        p.extend(q.device_ids.iter().map(|d| ("device_id", d.clone())));
        p.extend(q.device_owners.iter().map(|d| ("device_owner", d.clone())));
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
        p.extend(q.fields.iter().map(|f| ("fields", f.clone())));
        self.list(&format!("/ports{}", query(&p)), "ports").await
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
        if let Some(project) = &q.project_id {
            p.push(("project_id", project.clone()));
        }
        p.extend(q.fields.iter().map(|f| ("fields", f.clone())));
        self.list(&format!("/routers{}", query(&p)), "routers")
            .await
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
        self.list(&format!("/rbac-policies{}", query(&p)), "rbac_policies")
            .await
    }

    async fn list_rbac_policies_of(&self, object_ids: &[String]) -> Result<Vec<RbacPolicy>> {
        // No filter would list every policy the caller sees.
        if object_ids.is_empty() {
            return Ok(vec![]);
        }
        let p: Vec<_> = object_ids
            .iter()
            .map(|o| ("object_id", o.clone()))
            .collect();
        self.list(&format!("/rbac-policies{}", query(&p)), "rbac_policies")
            .await
    }

    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        let path = format!("/rbac-policies/{}", enc(id));
        self.call(Method::DELETE, &path, None, None).await?;
        Ok(())
    }

    async fn probe_admin_read(&self) -> Result<()> {
        // Only the status matters: the body (limits and usage of a project nobody has) is
        // read for the byte cap and dropped.
        self.call(Method::GET, &admin_read_probe_path(), None, None)
            .await?;
        Ok(())
    }

    async fn quota_details(&self, project_id: &str) -> Result<Vec<QuotaUsage>> {
        let path = format!("/quotas/{}/details", enc(project_id));
        let details: std::collections::BTreeMap<String, QuotaDetail> =
            self.get(&path, "quota").await?;
        Ok(details
            .into_iter()
            .map(|(resource, d)| QuotaUsage {
                resource,
                used: u64::try_from(d.used).unwrap_or(0),
                limit: u64::try_from(d.limit).ok(),
            })
            .collect())
    }

    async fn list_networks(&self, q: &NetworkQuery) -> Result<Vec<Network>> {
        let mut p = vec![];
        if let Some(n) = &q.name {
            p.push(("name", n.clone()));
        }
        if let Some(n) = &q.project_id {
            p.push(("project_id", n.clone()));
        }
        self.list(&format!("/networks{}", query(&p)), "networks")
            .await
    }

    async fn list_subnets(&self, q: &SubnetQuery) -> Result<Vec<Subnet>> {
        let mut p = vec![];
        if let Some(n) = &q.network_id {
            p.push(("network_id", n.clone()));
        }
        p.extend(q.network_ids.iter().map(|n| ("network_id", n.clone())));
        if let Some(n) = &q.project_id {
            p.push(("project_id", n.clone()));
        }
        p.extend(q.ids.iter().map(|i| ("id", i.clone())));
        self.list(&format!("/subnets{}", query(&p)), "subnets")
            .await
    }
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

    async fn create_subnet_with(&self, req: &CreateSubnet) -> Result<Subnet> {
        let body = json!({"subnet": {
            "network_id": req.network_id,
            "cidr": req.cidr,
            "gateway_ip": req.gateway_ip,
            "ip_version": 4,
            "enable_dhcp": req.dhcp,
        }});
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

/// [`crate::ADMIN_READ_PROBE`] relative to the Neutron endpoint.
fn admin_read_probe_path() -> String {
    format!("/quotas/{}/details", enc(crate::ADMIN_READ_PROBE_PROJECT))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_path_is_the_documented_call() {
        assert_eq!(
            format!("GET /v2.0{}", admin_read_probe_path()),
            crate::ADMIN_READ_PROBE
        );
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
