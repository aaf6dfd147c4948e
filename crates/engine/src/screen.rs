//! The estate's gateways screened for one link, as its fabric sees them: the reverse step
//! installs what passes, and an unwind or a moved leg may remove only routes that passed.

use bnerd_api::ReverseRoute;

use crate::context::Engine;
use crate::model::Input;
use crate::plan::reverse_routes::{GatewayProblem, ScreenView, screen};

/// The estate's gateways through the screen, for this link: the routes they may have on its
/// service router, each via its gateway port, and the refusals. `own` are this link's leg
/// addresses (never a gateway's); `transit_ports` every port on the main transit network.
/// What the reverse step installs and what an unwind may remove beyond status both come from
/// here, so a route a refused gateway's status merely names is never taken as ours.
pub(crate) fn screened(
    e: &Engine<'_>,
    input: &Input<'_>,
    targets: &[bnerd_api::gateway::ReverseTarget],
    transit_ports: &[bnerd_cloud::Port],
    own: &[std::net::Ipv4Addr],
) -> (Vec<ReverseRoute>, Vec<GatewayProblem>) {
    let mut link_cidrs = vec![];
    if let Ok(c) = input.spec.service_cluster_cidr.parse() {
        link_cidrs.push(c);
    }
    link_cidrs.extend(input.peers.iter().filter_map(|p| p.cidr));
    let mut claimed = own.to_vec();
    claimed.extend(
        input
            .peers
            .iter()
            .flat_map(|p| p.transit_ips.iter().copied()),
    );
    screen(
        targets,
        &ScreenView {
            transit: e.fabric.transit_subnet,
            link_cidrs: &link_cidrs,
            ports: transit_ports,
            operator_project: &e.fabric.operator_project_id,
            claimed: &claimed,
            policy: &e.fabric.admission.gateway_cidrs,
            pool: e.fabric.customer_transit.map(|p| p.pool),
        },
    )
}
