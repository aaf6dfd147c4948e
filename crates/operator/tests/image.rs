//! The container image's own operator binary against the real kube-apiserver and the real
//! Keystone + Neutron lab. `image/build.sh` builds the image and exports its root filesystem
//! (`BNERD_IMAGE_ROOTFS`); `image/run-rootfs.sh` runs the binary from it as the chart's pod
//! would (chroot, UID/GID 65532, no capabilities, read-only root, the kubeconfig, clouds.yaml
//! and CA bundle mounted read-only), since no container runtime works in this sandbox. The
//! cloud is reached through the lab's HTTPS endpoint with the chart's `caBundle` settings:
//! the client loads the image's own CA bundle as the system roots (it refuses to start
//! without one) and adds the mounted lab CA.
//!
//! With `BNERD_REQUIRE_IMAGE=1` (test.sh) a missing rootfs fails the test instead of skipping.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use bnerd_api::ClusterLink;
use bnerd_cloud::Route;
use bnerd_testkit::kube_lab::{install_crd, kube_client};
use bnerd_testkit::operator_proc::{
    OperatorCommand, create_ready, delete_and_wait_gone, http_get, kube_lab_exclusive,
    sweep_leftovers, wait_for,
};
use bnerd_testkit::{LabTls, lab_env_for, lab_tls_or_skip, operator_os_env, unique};
use kube::api::Api;
use serde_json::json;

const RUNNER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../image/run-rootfs.sh");
const OPERATOR: &str = "/usr/local/bin/bnerd-vpn-operator";
const CLI: &str = "/usr/local/bin/kubectl-clusterlink";
/// Where the inputs appear inside the root: clouds.yaml and the CA bundle where the chart
/// mounts its Secret and ConfigMap, the kubeconfig as a Secret would be.
const KUBECONFIG_IN_POD: &str = "/etc/bnerd/kubeconfig";
const CLOUDS_IN_POD: &str = "/etc/openstack/clouds.yaml";
const CA_IN_POD: &str = "/etc/openstack/ca/ca.crt";

/// The exported image root, or None (skip) when there is none and none is required.
fn image_rootfs(test: &str) -> Option<PathBuf> {
    let required = std::env::var("BNERD_REQUIRE_IMAGE").is_ok_and(|v| v == "1");
    let Some(dir) = std::env::var("BNERD_IMAGE_ROOTFS")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        assert!(
            !required,
            "{test}: BNERD_REQUIRE_IMAGE=1 but BNERD_IMAGE_ROOTFS is not set; run image/build.sh"
        );
        bnerd_testkit::report::skipped(
            test,
            "no image root filesystem (BNERD_IMAGE_ROOTFS, image/build.sh)",
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    assert!(
        dir.join(OPERATOR.trim_start_matches('/')).is_file(),
        "{test}: BNERD_IMAGE_ROOTFS={} holds no {OPERATOR}",
        dir.display()
    );
    // The runner needs a mount namespace and chroot; /proc/self belongs to our effective UID.
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        assert!(
            !required,
            "{test}: BNERD_REQUIRE_IMAGE=1 but image/run-rootfs.sh needs root"
        );
        bnerd_testkit::report::skipped(test, "image/run-rootfs.sh needs root");
        return None;
    }
    Some(dir)
}

/// The kubeconfig as a file mounted into the pod has to stand alone: references to files
/// (CA, client certificate and key, token file) name host paths the root does not have, so
/// their contents go inline.
fn self_contained_kubeconfig(path: &str) -> String {
    let text = std::fs::read_to_string(path).expect("read kubeconfig");
    let mut kc: serde_yaml::Value = serde_yaml::from_str(&text).expect("kubeconfig is YAML");
    let dir = Path::new(path).parent().unwrap_or(Path::new("/"));
    let read = |p: &str| std::fs::read(dir.join(p)).unwrap_or_else(|e| panic!("read {p}: {e}"));
    let b64 = |b: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(b);
    let inline = |list: &str, item: &str, kc: &mut serde_yaml::Value| {
        let Some(entries) = kc.get_mut(list).and_then(|v| v.as_sequence_mut()) else {
            return;
        };
        for e in entries {
            let Some(m) = e.get_mut(item).and_then(|v| v.as_mapping_mut()) else {
                continue;
            };
            for (file_key, data_key) in [
                ("certificate-authority", "certificate-authority-data"),
                ("client-certificate", "client-certificate-data"),
                ("client-key", "client-key-data"),
                ("tokenFile", "token"),
            ] {
                let Some(p) = m.remove(file_key) else {
                    continue;
                };
                let bytes = read(p.as_str().expect("a file path"));
                let data = if data_key == "token" {
                    String::from_utf8_lossy(&bytes).trim().to_string()
                } else {
                    b64(bytes)
                };
                m.insert(data_key.into(), data.into());
            }
        }
    };
    inline("clusters", "cluster", &mut kc);
    inline("users", "user", &mut kc);
    serde_yaml::to_string(&kc).expect("kubeconfig YAML")
}

/// The operator's lab credential as the clouds.yaml the chart mounts from its Secret, on the
/// lab's HTTPS endpoint.
fn clouds_yaml(lab: &BTreeMap<String, String>, tls: &LabTls) -> String {
    let os: BTreeMap<_, _> = operator_os_env(lab).into_iter().collect();
    let g = |k: &str| os.get(k).cloned().unwrap_or_default();
    serde_yaml::to_string(&json!({"clouds": {"lab-operator": {
        "auth": {
            "auth_url": tls.auth_url,
            "username": g("OS_USERNAME"),
            "password": g("OS_PASSWORD"),
            "project_name": g("OS_PROJECT_NAME"),
            "user_domain_name": g("OS_USER_DOMAIN_NAME"),
            "project_domain_name": g("OS_PROJECT_DOMAIN_NAME"),
        },
        "region_name": tls.region,
    }}}))
    .expect("clouds.yaml")
}

/// A directory of files as a Secret volume presents them: root-owned, mode 0644; removed at
/// the end of the test.
struct Inputs(PathBuf);

impl Inputs {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(unique("bnerd-image-inputs"));
        std::fs::create_dir_all(&dir).expect("inputs dir");
        Self(dir)
    }

    fn file(&self, name: &str, content: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, content).expect("write input");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        p.display().to_string()
    }
}

impl Drop for Inputs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `/proc/<pid>/status` as a map of its fields.
fn proc_status(pid: u32) -> BTreeMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The same file (device and inode): what a process runs or has as its root is compared by
/// identity, since the path it shows is relative to its own mount namespace.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[tokio::test]
async fn image_operator_brings_a_link_ready_and_unwinds_it() {
    const TEST: &str = "image_operator_brings_a_link_ready_and_unwinds_it";
    let Some(rootfs) = image_rootfs(TEST) else {
        return;
    };
    let Some((client, kubeconfig)) = kube_client(TEST).await else {
        return;
    };
    let Some((lab, tls)) = lab_tls_or_skip(TEST) else {
        return;
    };
    install_crd(&client).await;
    // The test's own view of the cloud goes the plain way; only the image's binaries use TLS.
    let env = lab_env_for("image").await.expect("lab");
    let svc = env.router("shoot--services--image").await;

    let inputs = Inputs::new();
    let kc = inputs.file("kubeconfig", &self_contained_kubeconfig(&kubeconfig));
    let clouds = inputs.file("clouds.yaml", &clouds_yaml(&lab, &tls));
    let ca = inputs.file(
        "ca.crt",
        &std::fs::read_to_string(&tls.cacert).expect("the lab CA"),
    );
    let rootfs_arg = rootfs.display().to_string();
    let kc_mount = format!("{kc}:{KUBECONFIG_IN_POD}");
    let clouds_mount = format!("{clouds}:{CLOUDS_IN_POD}");
    let ca_mount = format!("{ca}:{CA_IN_POD}");
    let wrapper = [
        RUNNER,
        "--mount",
        &kc_mount,
        "--mount",
        &clouds_mount,
        "--mount",
        &ca_mount,
        &rootfs_arg,
        "--",
    ];
    // The harness's lab settings, but the credential the way the chart passes it (OS_CLOUD, the
    // mounted clouds.yaml, OS_CACERT), paths inside the root, and HOME as the runtime derives
    // it from the image's /etc/passwd.
    let mut cmd = OperatorCommand::new(OPERATOR).lab(
        KUBECONFIG_IN_POD,
        &lab,
        &env.fabric.gateway_router_id,
        &env.fabric.transit_network_id,
        "3s",
    );
    for (k, _) in operator_os_env(&lab) {
        cmd = cmd.without_env(k);
    }
    let cmd = cmd
        .env("OS_CLOUD", "lab-operator")
        .env("OS_CLIENT_CONFIG_FILE", CLOUDS_IN_POD)
        .env("OS_CACERT", CA_IN_POD)
        .env("HOME", "/nonexistent")
        .wrapped(&wrapper);

    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let op = cmd.spawn();
    let pid = op.pid().expect("operator pid");

    // The runner exec()s through to the binary: the process we started becomes the image's
    // operator, as 65532 without privileges, in the image's root, which it cannot write.
    let image_bin = rootfs.join(OPERATOR.trim_start_matches('/'));
    wait_for("the runner to exec the image's operator", 30, async || {
        same_file(Path::new(&format!("/proc/{pid}/exe")), &image_bin).then_some(())
    })
    .await;
    let status = proc_status(pid);
    for (field, want) in [
        ("Uid", "65532\t65532\t65532\t65532"),
        ("Gid", "65532\t65532\t65532\t65532"),
        ("Groups", ""),
        ("CapEff", "0000000000000000"),
        ("CapPrm", "0000000000000000"),
        ("NoNewPrivs", "1"),
    ] {
        assert_eq!(status.get(field).map(String::as_str), Some(want), "{field}");
    }
    let proc_root = PathBuf::from(format!("/proc/{pid}/root"));
    assert!(same_file(&proc_root, &rootfs), "its root is the image's");
    // We are root on the host, so file modes do not stop this write; only a read-only mount does.
    let write = std::fs::File::create(proc_root.join("written-by-the-test"));
    assert_eq!(
        write.as_ref().map_err(std::io::Error::kind).err(),
        Some(std::io::ErrorKind::ReadOnlyFilesystem),
        "writing to the operator's / must fail with EROFS: {write:?}"
    );
    let write = std::fs::File::create(proc_root.join("etc/openstack/clouds.yaml"));
    assert_eq!(
        write.as_ref().map_err(std::io::Error::kind).err(),
        Some(std::io::ErrorKind::ReadOnlyFilesystem),
        "the mounted clouds.yaml must be read-only: {write:?}"
    );

    let api: Api<ClusterLink> = Api::all(client.clone());
    let name = unique("image-link");
    let l = create_ready(
        &api,
        &name,
        json!({"serviceClusterRouter": svc.name, "serviceClusterCIDR": "10.251.0.0/16"}),
        90,
    )
    .await;
    let st = l.status.clone().expect("status");
    assert_eq!(st.transit_ip.as_deref(), Some("10.254.0.3"));
    let port = env
        .net
        .get_port(st.leg_port_id.as_deref().expect("port id"))
        .await
        .expect("leg port exists");
    assert!(port.is_interface_of(&svc.id));
    let want = Route::new("10.251.0.0/16", "10.254.0.3");
    assert!(env.gateway_routes().await.contains(&want));
    let addr = op.served_address().await;
    assert_eq!(http_get(&addr, "/readyz").await.0, 200);

    // The image's kubectl-clusterlink, in the same root with the same settings.
    let doctor = tokio::process::Command::new(RUNNER)
        .args(["--mount", &kc_mount, "--mount", &clouds_mount])
        .args(["--mount", &ca_mount, &rootfs_arg])
        .args(["--", CLI, "doctor"])
        .env_clear()
        .envs([
            ("KUBECONFIG", KUBECONFIG_IN_POD),
            ("OS_CLOUD", "lab-operator"),
            ("OS_CLIENT_CONFIG_FILE", CLOUDS_IN_POD),
            ("OS_CACERT", CA_IN_POD),
            ("IPSEC_GATEWAY_ROUTER_ID", &env.fabric.gateway_router_id),
            ("IPSEC_TRANSIT_NETWORK_ID", &env.fabric.transit_network_id),
        ])
        .output()
        .await
        .expect("doctor runs");
    let out = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        out.lines()
            .any(|l| l.starts_with("ok") && l.contains("fabric: transit network")),
        "doctor from the image: {doctor:?}"
    );

    delete_and_wait_gone(&api, &name, 60).await;
    assert!(env.gateway_routes().await.is_empty());
    let left = env.leg_ports().await;
    assert!(left.is_empty(), "leaked ports: {left:?}");

    // SIGTERM, as the kubelet sends it, reaches the binary through the runner.
    let (exit, log) = op.terminate(30).await;
    assert_eq!(
        exit.and_then(|s| s.code()),
        Some(0),
        "after SIGTERM:\n{log}"
    );
    assert!(log.contains("fabric checked"), "{log}");
    assert!(
        log.contains("trusting the CA bundle besides the system's roots"),
        "{log}"
    );
    assert!(log.contains("released the leader Lease"), "{log}");
    let password = lab
        .get("LAB_OPERATOR_PASSWORD")
        .cloned()
        .unwrap_or_default();
    assert!(!log.contains(&password), "the operator logged its password");
    env.teardown(&[]).await;
}
