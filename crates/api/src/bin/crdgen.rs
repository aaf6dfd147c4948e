//! Prints the CRDs this operator owns as YAML
//! (`crdgen > charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml`; the chart's
//! CRD template renders that file).

use bnerd_api::ClusterLink;
use kube::CustomResourceExt;

fn main() -> Result<(), serde_yaml::Error> {
    print!("{}", serde_yaml::to_string(&ClusterLink::crd())?);
    Ok(())
}
