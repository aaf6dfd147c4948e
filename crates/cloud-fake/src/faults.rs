//! Call names, counters and fault injection.

use std::time::Duration;

/// Every call of the Neutron/Identity port, named for counters and fault plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Extensions,
    GetNetwork,
    GetSubnet,
    ListNetworks,
    ListSubnets,
    ListPorts,
    GetPort,
    CreatePort,
    AddPortTag,
    SetPortTags,
    DeletePort,
    GetRouter,
    ListRouters,
    AddRouterInterface,
    RemoveRouterInterface,
    AddRouterSubnet,
    AddExtraroutes,
    RemoveExtraroutes,
    SetRoutes,
    CreateNetwork,
    DeleteNetwork,
    CreateSubnet,
    CreateRouter,
    DeleteRouter,
    CreateRbacPolicy,
    ListRbacPolicies,
    DeleteRbacPolicy,
    ProbeAdminRead,
    QuotaDetails,
    TokenInfo,
}

impl Op {
    /// Reads change nothing; everything else is a write.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Op::Extensions
                | Op::GetNetwork
                | Op::GetSubnet
                | Op::ListNetworks
                | Op::ListSubnets
                | Op::ListPorts
                | Op::GetPort
                | Op::GetRouter
                | Op::ListRouters
                | Op::ListRbacPolicies
                | Op::ProbeAdminRead
                | Op::QuotaDetails
                | Op::TokenInfo
        )
    }
}

/// What to do to a matching call.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this API error instead of doing the call.
    Error {
        status: u16,
        kind: String,
        message: String,
    },
    /// Wait, then do the call.
    Latency(Duration),
    /// Do the call (the change is committed), then report a timeout to the caller.
    CommitThenTimeout,
}

#[derive(Debug, Clone)]
pub(crate) struct PlannedFault {
    pub op: Op,
    pub fault: Fault,
    pub remaining: usize,
}
