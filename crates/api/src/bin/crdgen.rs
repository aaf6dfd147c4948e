//! Prints the CRDs this operator owns as YAML (`crdgen > charts/bnerd-vpn-operator/crds/clusterlinks.yaml`).

use bnerd_api::ClusterLink;
use kube::CustomResourceExt;

fn main() -> Result<(), serde_yaml::Error> {
    print!("{}", serde_yaml::to_string(&ClusterLink::crd())?);
    Ok(())
}
