//! What the operator's project has room for before Neutron refuses: its quota usage and the
//! routes on the gateway router, read at each fabric check (docs/operations.md, "Neutron's
//! quotas"). Pure: the operator turns the rows into gauges, a Warning Event at [`NEAR`] per
//! cent of a limit and a `/readyz` line at a full one; `kubectl clusterlink doctor` prints
//! them with the forecast.

use bnerd_cloud::QuotaUsage;

/// Per cent of a limit at which a row is worth a Warning.
pub const NEAR: u64 = 80;

/// The quota resources the operator creates in its project (what it does not create is not
/// its business to watch).
pub const WATCHED: [&str; 5] = ["network", "subnet", "port", "router", "rbac_policy"];

/// The row of the gateway router's routes.
pub const GATEWAY_ROUTES: &str = "routes on the gateway router";

/// Neutron's default `max_routes`: the limit assumed where the cloud does not say (up to
/// 2026.1 it is a server setting, not in the quota answer).
pub const DEFAULT_MAX_ROUTES: u64 = 30;

/// One limited thing: what is used of it and its limit (None: unlimited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub resource: String,
    pub used: u64,
    pub limit: Option<u64>,
    /// The limit is Neutron's default, assumed because the cloud does not tell it.
    pub assumed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Room,
    Near,
    Full,
}

impl Row {
    pub fn level(&self) -> Level {
        match self.limit {
            None => Level::Room,
            Some(l) if self.used >= l => Level::Full,
            Some(l) if self.used * 100 >= l * NEAR => Level::Near,
            Some(_) => Level::Room,
        }
    }

    /// How many more fit; None when unlimited.
    pub fn free(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.used))
    }

    /// `rbac_policy: 8 of 10 (80 %)`, or `port: 3 (unlimited)`.
    pub fn describe(&self) -> String {
        match self.limit {
            None => format!("{}: {} (unlimited)", self.resource, self.used),
            Some(l) => format!(
                "{}: {} of {}{} ({} %)",
                self.resource,
                self.used,
                l,
                if self.assumed {
                    ", Neutron's default max_routes"
                } else {
                    ""
                },
                (self.used * 100).checked_div(l).unwrap_or(100)
            ),
        }
    }

    /// What an admin runs to raise it.
    pub fn raise(&self, project: &str) -> String {
        match super::quota_flag(&self.resource) {
            Some(flag) => format!("openstack quota set {flag} <n> {project}"),
            None => "raise max_routes in neutron.conf (up to 2026.1) or the router_route quota \
                     ([QUOTAS] quota_router_route, or openstack quota set per project)"
                .to_string(),
        }
    }
}

/// The rows to watch: the watched quota resources as Neutron reported them, and the gateway
/// router's routes against the `router_route` quota where Neutron has one, else against
/// Neutron's default `max_routes`.
pub fn rows(quota: &[QuotaUsage], gateway_routes: usize) -> Vec<Row> {
    let mut out: Vec<Row> = WATCHED
        .iter()
        .filter_map(|r| quota.iter().find(|q| q.resource == *r))
        .map(|q| Row {
            resource: q.resource.clone(),
            used: q.used,
            limit: q.limit,
            assumed: false,
        })
        .collect();
    let route_quota = quota.iter().find(|q| q.resource == "router_route");
    out.push(Row {
        resource: GATEWAY_ROUTES.to_string(),
        used: gateway_routes as u64,
        limit: match route_quota {
            Some(q) => q.limit,
            None => Some(DEFAULT_MAX_ROUTES),
        },
        assumed: route_quota.is_none(),
    });
    out
}

/// What one more of each kind of link costs, by row (docs/operations.md, "Neutron's quotas").
const SAME_TENANT_LINK: [(&str, u64); 2] = [("port", 1), (GATEWAY_ROUTES, 1)];
/// The first link of a `Shared` customer project (its leg is the customer's port).
const SHARED_PROJECT: [(&str, u64); 2] = [("rbac_policy", 1), (GATEWAY_ROUTES, 1)];
/// The first link of a `PerCustomer` customer project: the customer transit, its subnet,
/// its share, the edge router and its two interfaces; the ports Neutron makes itself with a
/// new network come on top ([`own_ports_per_network`]).
const PER_CUSTOMER_PROJECT: [(&str, u64); 6] = [
    ("network", 1),
    ("subnet", 1),
    ("rbac_policy", 1),
    ("router", 1),
    ("port", 2),
    (GATEWAY_ROUTES, 1),
];

/// The ports Neutron makes by itself with each new network, judged by what it made on the
/// transit network: ML2/OVN with its metadata service on makes one (`network:distributed`),
/// in the network's project, so it counts against the operator's port quota; other backends
/// make none on a subnet without DHCP, which is how a customer transit is cut. The transit's
/// DHCP port is not one of them: only a subnet with DHCP brings it.
pub fn own_ports_per_network(transit_ports: &[bnerd_cloud::Port]) -> u64 {
    u64::from(
        transit_ports
            .iter()
            .any(|p| p.device_owner == bnerd_cloud::OWNER_METADATA),
    )
}

/// How many more of each kind fit: None where nothing limits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forecast {
    pub same_tenant_links: Option<u64>,
    pub shared_projects: Option<u64>,
    pub per_customer_projects: Option<u64>,
}

fn room_for(rows: &[Row], cost: &[(&str, u64)]) -> Option<u64> {
    cost.iter()
        .filter_map(|(r, n)| {
            let row = rows.iter().find(|row| row.resource == *r)?;
            row.free().map(|f| f / n)
        })
        .min()
}

/// How many more links of each kind fit, where each new network also brings
/// `own_ports_per_network` ports Neutron makes itself ([`own_ports_per_network`]).
pub fn forecast(rows: &[Row], own_ports_per_network: u64) -> Forecast {
    let per_customer = PER_CUSTOMER_PROJECT.map(|(r, n)| match r {
        "port" => (r, n + own_ports_per_network),
        _ => (r, n),
    });
    Forecast {
        same_tenant_links: room_for(rows, &SAME_TENANT_LINK),
        shared_projects: room_for(rows, &SHARED_PROJECT),
        per_customer_projects: room_for(rows, &per_customer),
    }
}

impl Forecast {
    /// `room for 12 more same-tenant links, 2 more Shared customer projects, 2 more
    /// PerCustomer customer projects`.
    pub fn describe(&self) -> String {
        let n = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
        format!(
            "room for {} more same-tenant links, {} more Shared customer projects, {} more PerCustomer customer projects",
            n(self.same_tenant_links),
            n(self.shared_projects),
            n(self.per_customer_projects)
        )
    }
}

/// What a planned link would take past a limit: for each `(row, n)` it needs, the rows with
/// less than `n` left, each with the command that raises it. Rows the cloud did not report
/// need nothing.
pub fn exceeded(rows: &[Row], needs: &[(&str, u64)], project: &str) -> Vec<String> {
    needs
        .iter()
        .filter(|(_, n)| *n > 0)
        .filter_map(|(resource, n)| {
            let row = rows.iter().find(|r| r.resource == *resource)?;
            let free = row.free()?;
            (free < *n).then(|| {
                format!(
                    "this link needs {n} more of {}, which has {free} left ({}); to raise it: {}",
                    row.resource,
                    row.describe(),
                    row.raise(project)
                )
            })
        })
        .collect()
}

/// The rows at [`NEAR`] per cent or more, worst first: what the Warning Event says.
pub fn warnings(rows: &[Row], project: &str) -> Vec<String> {
    let mut hot: Vec<&Row> = rows.iter().filter(|r| r.level() >= Level::Near).collect();
    hot.sort_by_key(|r| std::cmp::Reverse(r.level()));
    hot.iter()
        .map(|r| format!("{}; to raise it: {}", r.describe(), r.raise(project)))
        .collect()
}

/// The `/readyz` line when a limit is reached: the replica stays ready (it can still
/// reconcile what exists), but the next link of that kind will be refused.
pub fn readiness_line(rows: &[Row], project: &str) -> Option<String> {
    let full: Vec<String> = rows
        .iter()
        .filter(|r| r.level() == Level::Full)
        .map(|r| format!("{}; to raise it: {}", r.describe(), r.raise(project)))
        .collect();
    (!full.is_empty()).then(|| {
        format!(
            "warning: a limit of the operator's project is reached, the next link that needs it will be refused: {}",
            full.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(resource: &str, used: u64, limit: Option<u64>) -> QuotaUsage {
        QuotaUsage {
            resource: resource.into(),
            used,
            limit,
        }
    }

    #[test]
    fn level_per_rule() {
        let cases = [
            (0, None, Level::Room),
            (1000, None, Level::Room),
            (7, Some(10), Level::Room),
            (8, Some(10), Level::Near),
            (9, Some(10), Level::Near),
            (10, Some(10), Level::Full),
            (11, Some(10), Level::Full),
            (0, Some(0), Level::Full),
            (23, Some(30), Level::Room),
            (24, Some(30), Level::Near),
        ];
        for (used, limit, want) in cases {
            let r = Row {
                resource: "x".into(),
                used,
                limit,
                assumed: false,
            };
            assert_eq!(r.level(), want, "{used} of {limit:?}");
        }
    }

    #[test]
    fn rows_take_the_watched_resources_and_the_gateway_routes() {
        let quota = [
            q("floatingip", 3, Some(50)),
            q("network", 2, Some(100)),
            q("rbac_policy", 8, Some(10)),
            q("router_route", 5, Some(30)),
        ];
        let got = rows(&quota, 24);
        let names: Vec<&str> = got.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(names, ["network", "rbac_policy", GATEWAY_ROUTES]);
        assert_eq!(got[2].used, 24);
        assert_eq!(got[2].limit, Some(30));
        assert!(!got[2].assumed);
        // Up to 2026.1 there is no router_route quota: the default max_routes is assumed.
        let old = rows(&quota[..3], 3);
        assert_eq!(old[2].limit, Some(DEFAULT_MAX_ROUTES));
        assert!(old[2].assumed);
        assert_eq!(
            old[2].describe(),
            "routes on the gateway router: 3 of 30, Neutron's default max_routes (10 %)"
        );
    }

    #[test]
    fn forecast_takes_the_scarcest_row_of_each_kind() {
        // Neutron's defaults, a project with the gateway router, 4 same-tenant links, one
        // PerCustomer customer project with 2 links, one Shared customer project with 1.
        let quota = [
            q("network", 2, Some(100)),
            q("subnet", 2, Some(100)),
            q("port", 4 + 2 + 2, Some(500)),
            q("router", 2, Some(10)),
            q("rbac_policy", 2, Some(10)),
        ];
        let f = forecast(&rows(&quota, 7), 1);
        assert_eq!(
            f,
            Forecast {
                same_tenant_links: Some(23),
                shared_projects: Some(8),
                per_customer_projects: Some(8),
            }
        );
        // Routers run out first for PerCustomer projects once RBAC is raised.
        let quota = [
            q("network", 2, None),
            q("subnet", 2, None),
            q("port", 8, None),
            q("router", 9, Some(10)),
            q("rbac_policy", 2, None),
            q("router_route", 0, None),
        ];
        let f = forecast(&rows(&quota, 7), 1);
        assert_eq!(f.same_tenant_links, None);
        assert_eq!(f.shared_projects, None);
        assert_eq!(f.per_customer_projects, Some(1));
        assert_eq!(
            f.describe(),
            "room for unlimited more same-tenant links, unlimited more Shared customer projects, 1 more PerCustomer customer projects"
        );
    }

    #[test]
    fn a_network_neutron_gives_a_port_costs_a_per_customer_project_one_more() {
        let port = |owner: &str| bnerd_cloud::Port {
            device_owner: owner.into(),
            ..Default::default()
        };
        // ML2/OVN: the transit's metadata port; every new network gets one.
        let ovn = [
            port("network:router_interface"),
            port(bnerd_cloud::OWNER_METADATA),
        ];
        assert_eq!(own_ports_per_network(&ovn), 1);
        // A DHCP port comes with a DHCP subnet, and a customer transit has none.
        let plain = [port("network:router_interface"), port("network:dhcp")];
        assert_eq!(own_ports_per_network(&plain), 0);
        assert_eq!(own_ports_per_network(&[]), 0);
        // 6 ports left, nothing else scarce: 2 projects of 3 ports, or 3 of 2.
        let quota = [q("port", 8, Some(14)), q("router", 2, None)];
        assert_eq!(forecast(&rows(&quota, 7), 1).per_customer_projects, Some(2));
        assert_eq!(forecast(&rows(&quota, 7), 0).per_customer_projects, Some(3));
        // Other kinds of link make no network.
        assert_eq!(
            forecast(&rows(&quota, 7), 1).same_tenant_links,
            forecast(&rows(&quota, 7), 0).same_tenant_links
        );
    }

    #[test]
    fn a_planned_link_past_a_limit_is_named() {
        let r = rows(
            &[
                q("router", 10, Some(10)),
                q("port", 1, None),
                q("network", 3, Some(100)),
            ],
            30,
        );
        let needs = [
            ("router", 1),
            ("port", 2),
            ("network", 1),
            (GATEWAY_ROUTES, 1),
            ("subnet", 1),
        ];
        assert_eq!(
            exceeded(&r, &needs, "p1"),
            [
                "this link needs 1 more of router, which has 0 left (router: 10 of 10 (100 %)); to raise it: openstack quota set --routers <n> p1",
                "this link needs 1 more of routes on the gateway router, which has 0 left (routes on the gateway router: 30 of 30, Neutron's default max_routes (100 %)); to raise it: raise max_routes in neutron.conf (up to 2026.1) or the router_route quota ([QUOTAS] quota_router_route, or openstack quota set per project)",
            ]
        );
        assert!(exceeded(&r, &[("network", 1)], "p1").is_empty());
    }

    #[test]
    fn warnings_and_the_readiness_line_name_the_limit_and_the_command() {
        let quota = [
            q("port", 10, Some(500)),
            q("router", 8, Some(10)),
            q("rbac_policy", 10, Some(10)),
        ];
        let r = rows(&quota, 3);
        assert_eq!(
            warnings(&r, "p1"),
            [
                "rbac_policy: 10 of 10 (100 %); to raise it: openstack quota set --rbac-policies <n> p1",
                "router: 8 of 10 (80 %); to raise it: openstack quota set --routers <n> p1",
            ]
        );
        assert_eq!(
            readiness_line(&r, "p1").as_deref(),
            Some(
                "warning: a limit of the operator's project is reached, the next link that needs it will be refused: rbac_policy: 10 of 10 (100 %); to raise it: openstack quota set --rbac-policies <n> p1"
            )
        );
        let roomy = rows(&[q("router", 1, Some(10))], 0);
        assert!(warnings(&roomy, "p1").is_empty());
        assert_eq!(readiness_line(&roomy, "p1"), None);
        let routes = rows(&[], 30);
        assert!(warnings(&routes, "p1")[0].starts_with(
            "routes on the gateway router: 30 of 30, Neutron's default max_routes (100 %); to raise it: raise max_routes"
        ));
    }
}
