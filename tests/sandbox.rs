//! Pod sandboxes against a real berthd: pinned namespaces, the infra
//! process, the pod cgroup under its parent, CNI networking (bridge,
//! host-local, portmap), the DNS files, and that every stop, removal and
//! failure leaves nothing behind.
//!
//! Each test runs on a node of its own (`support/node.rs`, the harness the
//! container tests share): berthd, a bridge + host-local + portmap network,
//! cgroup parents under the node's root, and a guard that removes what a
//! failed test left.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use berth_tests::host::{
    cgroup_hierarchies, cgroup_subtree, log_tail, mount_points, mounts_under, read_procs,
};
use berth_tests::node::Node;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use cri_api::v1::{
    DnsConfig, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListPodSandboxRequest,
    NamespaceMode, NamespaceOption, PodSandbox, PodSandboxConfig, PodSandboxFilter,
    PodSandboxMetadata, PodSandboxState, PodSandboxStateValue, PodSandboxStatus,
    PodSandboxStatusRequest, PortMapping, Protocol, RemovePodSandboxRequest, RunPodSandboxRequest,
    StopPodSandboxRequest, StreamPodSandboxesRequest,
};
use serde_json::{json, Value};
use tonic::transport::Channel;

/// How long anything that settles asynchronously may take.
const SETTLE: Duration = Duration::from_secs(15);

/// The uid the infra process runs as.
const INFRA_UID: &str = "65535";

fn pid() -> u32 {
    std::process::id()
}

// ---------------------------------------------------------------------------
// Host inspection helpers
// ---------------------------------------------------------------------------

/// Runs a command and returns its stdout; panics with its stderr on failure.
fn run_cmd(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {program}: {err}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The directory of cgroup `path` in hierarchy `hierarchy`.
fn cgroup_dir(hierarchy: &Path, path: &str) -> PathBuf {
    hierarchy.join(path.trim_start_matches('/'))
}

/// The hierarchies in which cgroup `path` exists.
fn cgroup_present_in(path: &str) -> Vec<PathBuf> {
    cgroup_hierarchies()
        .iter()
        .map(|hierarchy| cgroup_dir(hierarchy, path))
        .filter(|dir| dir.is_dir())
        .collect()
}

/// Names of the entries of `dir` (none if it does not exist).
fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A field of /proc/<pid>/status, e.g. `Uid` or `CapEff`.
fn proc_status_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|err| panic!("/proc/{pid}/status: {err}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .trim()
        .to_string()
}

/// Whether `pid` exists and is not a zombie.
fn is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("Z");
    state != "Z" && state != "X"
}

/// Device and inode of a namespace file (the nsfs inode behind it).
fn ns_identity(path: impl AsRef<Path>) -> (u64, u64) {
    let path = path.as_ref();
    let meta = std::fs::metadata(path)
        .unwrap_or_else(|err| panic!("namespace file {}: {err}", path.display()));
    (meta.dev(), meta.ino())
}

fn proc_ns(pid: impl std::fmt::Display, kind: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/ns/{kind}"))
}

/// The `nat` table rules.
fn nat_rules() -> String {
    run_cmd("iptables", &["-w", "-t", "nat", "-S"])
}

/// The nat rules matching a host port.
fn nat_rules_for_port(port: i32) -> Vec<String> {
    let needles = [format!("--dport {port} "), format!("--dports {port} ")];
    nat_rules()
        .lines()
        .filter(|line| {
            let line = format!("{line} ");
            needles.iter().any(|needle| line.contains(needle.as_str()))
        })
        .map(str::to_string)
        .collect()
}

/// Polls `check` until it returns Ok, or panics with its last error.
async fn eventually<F>(what: &str, mut check: F)
where
    F: FnMut() -> Result<(), String>,
{
    let deadline = Instant::now() + SETTLE;
    loop {
        match check() {
            Ok(()) => return,
            Err(message) if Instant::now() > deadline => {
                panic!("{what} did not happen within {SETTLE:?}: {message}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

// ---------------------------------------------------------------------------
// Pod configs
// ---------------------------------------------------------------------------

fn metadata(name: &str) -> PodSandboxMetadata {
    PodSandboxMetadata {
        name: name.to_string(),
        uid: format!("uid-{name}"),
        namespace: "berth-it".to_string(),
        attempt: 0,
    }
}

/// A pod config with the given name and cgroup parent, default namespaces.
fn pod_config(name: &str, parent: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(metadata(name)),
        hostname: name.to_string(),
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: parent.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with_namespaces(
    mut config: PodSandboxConfig,
    network: NamespaceMode,
    pid: NamespaceMode,
    ipc: NamespaceMode,
) -> PodSandboxConfig {
    let linux = config.linux.get_or_insert_with(Default::default);
    linux.security_context = Some(LinuxSandboxSecurityContext {
        namespace_options: Some(NamespaceOption {
            network: network as i32,
            pid: pid as i32,
            ipc: ipc as i32,
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

fn run_request(config: PodSandboxConfig) -> RunPodSandboxRequest {
    RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: String::new(),
    }
}

// ---------------------------------------------------------------------------
// The harness: one berthd, one CNI network, cgroup roots, all cleaned up
// ---------------------------------------------------------------------------

struct Harness {
    node: Node,
}

impl std::ops::Deref for Harness {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.node
    }
}

impl Harness {
    /// Starts berthd on a node of its own with the bridge + portmap network.
    fn start() -> Self {
        Self {
            node: Node::start(&[portmap_plugin()]),
        }
    }

    /// The cgroup root berth creates for this test.
    fn cgroup_root(&self) -> &str {
        &self.node.cgroup_root
    }

    fn parent(&self, name: &str) -> String {
        format!("{}/{name}", self.cgroup_root())
    }

    fn state(&self) -> PathBuf {
        self.berthd.sandbox.state()
    }

    fn host_port(&self, k: u32) -> i32 {
        (20000 + (pid() % 1000) * 16 + self.n * 4 + k) as i32
    }

    /// Replaces the test's network: the bridge on `range`, then `second`.
    fn write_network(&self, range: Value, second: Value) {
        self.node.write_network(range, &[second]);
    }

    /// The IPs host-local holds for this test's network.
    fn allocated_ips(&self) -> Vec<String> {
        dir_entries(&self.ipam_dir().join(&self.net_name))
            .into_iter()
            .filter(|name| name.parse::<IpAddr>().is_ok())
            .collect()
    }

    /// Interfaces attached to the test's bridge.
    fn bridge_ports(&self) -> Vec<String> {
        let output = Command::new("ip")
            .args(["-o", "link", "show", "master", &self.bridge])
            .output()
            .expect("ip link");
        if !output.status.success() {
            // No bridge (yet, or any more): nothing is attached.
            return Vec::new();
        }
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(str::to_string)
            .collect()
    }

    async fn client(&self) -> RuntimeServiceClient<Channel> {
        self.berthd.runtime_client().await
    }

    async fn run(&self, config: PodSandboxConfig) -> Result<String, tonic::Status> {
        self.client()
            .await
            .run_pod_sandbox(run_request(config))
            .await
            .map(|response| response.into_inner().pod_sandbox_id)
    }

    async fn run_ok(&self, config: PodSandboxConfig) -> String {
        match self.run(config).await {
            Ok(id) => id,
            Err(status) => panic!(
                "RunPodSandbox failed: {status:?}\nberthd log:\n{}",
                log_tail(&self.berthd)
            ),
        }
    }

    async fn stop(&self, id: &str) {
        self.client()
            .await
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("StopPodSandbox {id}: {status:?}"));
    }

    async fn remove(&self, id: &str) {
        self.client()
            .await
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            })
            .await
            .unwrap_or_else(|status| panic!("RemovePodSandbox {id}: {status:?}"));
    }

    /// PodSandboxStatus with verbose info, parsed.
    async fn status(&self, id: &str) -> (PodSandboxStatus, Value) {
        let response = self
            .client()
            .await
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: true,
            })
            .await
            .unwrap_or_else(|status| panic!("PodSandboxStatus {id}: {status:?}"))
            .into_inner();
        let info = response
            .info
            .get("info")
            .unwrap_or_else(|| panic!("no \"info\" in verbose status: {:?}", response.info));
        let info: Value = serde_json::from_str(info).expect("verbose info is JSON");
        (response.status.expect("status"), info)
    }

    async fn list(&self, filter: Option<PodSandboxFilter>) -> Vec<PodSandbox> {
        self.client()
            .await
            .list_pod_sandbox(ListPodSandboxRequest { filter })
            .await
            .expect("ListPodSandbox")
            .into_inner()
            .items
    }

    async fn list_ids(&self, filter: PodSandboxFilter) -> BTreeSet<String> {
        self.list(Some(filter))
            .await
            .into_iter()
            .map(|pod| pod.id)
            .collect()
    }

    /// The pin berthd made for namespace `kind` of sandbox `id`.
    fn pin(&self, id: &str, kind: &str) -> PathBuf {
        self.state().join("ns").join(id).join(kind)
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.state().join("sandboxes").join(id)
    }

    /// Where the pod's hostname, hosts and resolv.conf are: on disk, under
    /// the root dir.
    fn files_dir(&self, id: &str) -> PathBuf {
        self.berthd.sandbox.root().join("pods").join(id)
    }

    /// Checks that no pod is left and nothing of one either: state files,
    /// pins, mounts, cgroups under the berth-created root, IPs, veths and
    /// portmap rules.
    async fn assert_clean(&self) {
        let listed = self.list(None).await;
        assert!(listed.is_empty(), "sandboxes still listed: {listed:?}");
        let state = self.state();
        let sandboxes = dir_entries(&state.join("sandboxes"));
        assert!(
            sandboxes.is_empty(),
            "left under {}/sandboxes: {sandboxes:?}",
            state.display()
        );
        let ns = dir_entries(&state.join("ns"));
        assert!(ns.is_empty(), "left under {}/ns: {ns:?}", state.display());
        let pods = self.berthd.sandbox.root().join("pods");
        let files = dir_entries(&pods);
        assert!(files.is_empty(), "left under {}: {files:?}", pods.display());
        let mounts = mounts_under(self.berthd.sandbox.dir.path());
        assert!(mounts.is_empty(), "mounts left: {mounts:?}");
        let cgroups = cgroup_present_in(self.cgroup_root());
        assert!(
            cgroups.is_empty(),
            "cgroup {} (created by berth) left in {cgroups:?}",
            self.cgroup_root()
        );
        let ips = self.allocated_ips();
        assert!(ips.is_empty(), "host-local still holds {ips:?}");
        for k in 0..4 {
            let port = self.host_port(k);
            let rules = nat_rules_for_port(port);
            assert!(rules.is_empty(), "portmap rules for {port} left: {rules:?}");
        }
        eventually("veths leaving the bridge", || {
            let ports = self.bridge_ports();
            if ports.is_empty() {
                Ok(())
            } else {
                Err(format!("still attached to {}: {ports:?}", self.bridge))
            }
        })
        .await;
    }
}

fn portmap_plugin() -> Value {
    json!({"type": "portmap", "capabilities": {"portMappings": true}})
}

/// Creates cgroup `path` in every hierarchy, as kubelet would have, with
/// the cpuset values copied down so it can hold processes.
fn create_cgroup_everywhere(path: &str) {
    for hierarchy in cgroup_hierarchies() {
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut dir = hierarchy.clone();
        for component in components {
            let parent = dir.clone();
            dir.push(component);
            if dir.is_dir() {
                continue;
            }
            std::fs::create_dir(&dir)
                .unwrap_or_else(|err| panic!("mkdir {}: {err}", dir.display()));
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if let Ok(value) = std::fs::read_to_string(parent.join(file)) {
                    std::fs::write(dir.join(file), value.trim())
                        .unwrap_or_else(|err| panic!("{}/{file}: {err}", dir.display()));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn run_builds_namespaces_infra_cgroup_network_and_dns() {
    let harness = Harness::start();
    let parent = harness.parent("pod1");
    let host_port = harness.host_port(0);
    let mut config = pod_config("web-1", &parent);
    config.hostname = "web-host-1".into();
    config.labels = HashMap::from([
        ("app".to_string(), "web".to_string()),
        ("tier".to_string(), "front".to_string()),
    ]);
    config.annotations = HashMap::from([("note".to_string(), "kept as is".to_string())]);
    config.dns_config = Some(DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["berth-it.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    config.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 80,
        host_port,
        host_ip: String::new(),
    }];
    config.linux.as_mut().unwrap().sysctls = HashMap::from([
        ("net.core.somaxconn".to_string(), "1234".to_string()),
        ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
    ]);
    let id = harness.run_ok(config.clone()).await;
    assert_eq!(id.len(), 64, "{id}");

    // Status: state, metadata, labels, annotations, network, namespaces.
    let (status, info) = harness.status(&id).await;
    assert_eq!(status.id, id);
    assert_eq!(status.state(), PodSandboxState::SandboxReady);
    assert_eq!(status.metadata, config.metadata);
    assert_eq!(status.labels, config.labels);
    assert_eq!(status.annotations, config.annotations);
    assert!(status.created_at > 0);
    assert_eq!(status.runtime_handler, "");
    let ip = status.network.clone().expect("network status").ip;
    let ip: Ipv4Addr = ip.parse().unwrap_or_else(|_| panic!("pod IP {ip:?}"));
    assert!(
        ip.to_string().starts_with(&format!("{}.", harness.prefix)),
        "{ip} is not in {}.0/24",
        harness.prefix
    );
    let options = status
        .linux
        .and_then(|linux| linux.namespaces)
        .and_then(|namespaces| namespaces.options)
        .expect("namespace options");
    assert_eq!(options.network(), NamespaceMode::Pod);
    assert_eq!(options.pid(), NamespaceMode::Pod);
    assert_eq!(options.ipc(), NamespaceMode::Pod);

    // Verbose info: pid, netns, cgroup path.
    let infra = info["pid"].as_i64().expect("pid in info") as i32;
    assert!(infra > 0, "{info}");
    assert_eq!(
        info["netns"].as_str(),
        Some(harness.pin(&id, "net").to_str().unwrap()),
        "{info}"
    );
    assert_eq!(info["cgroupPath"], format!("{parent}/{id}"), "{info}");

    // The pins exist, are the infra process's namespaces, and not the host's.
    for kind in ["net", "ipc", "uts", "pid"] {
        let pin = harness.pin(&id, kind);
        assert!(pin.exists(), "no pin {}", pin.display());
        assert!(
            mount_points().contains(&pin),
            "{} is not a mount",
            pin.display()
        );
        assert_eq!(
            ns_identity(&pin),
            ns_identity(proc_ns(infra, kind)),
            "{kind}: the pin is not the infra process's namespace"
        );
        assert_ne!(
            ns_identity(&pin),
            ns_identity(proc_ns("self", kind)),
            "{kind}: the pod shares the host's namespace"
        );
    }
    assert_eq!(
        proc_status_field(infra, "NSpid").split_whitespace().last(),
        Some("1"),
        "the infra process is PID 1 of the pod's PID namespace"
    );

    // The infra process: uid 65535, no capabilities, its own root.
    let uids = proc_status_field(infra, "Uid");
    assert!(
        uids.split_whitespace().all(|uid| uid == INFRA_UID),
        "Uid: {uids}"
    );
    for caps in ["CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"] {
        assert_eq!(
            proc_status_field(infra, caps),
            "0000000000000000",
            "{caps} of the infra process"
        );
    }
    let root = std::fs::read_link(format!("/proc/{infra}/root")).expect("infra root");
    assert_ne!(
        root,
        Path::new("/"),
        "the infra process has the host's root"
    );
    assert_eq!(root, harness.sandbox_dir(&id).join("root"));
    // Inside the pod it shows as /pause, with no host paths.
    assert_eq!(
        std::fs::read(format!("/proc/{infra}/cmdline")).expect("infra cmdline"),
        b"/pause\0",
        "the infra process's command line"
    );
    assert_eq!(proc_status_field(infra, "Name"), "pause");
    let own = std::fs::read_to_string("/proc/self/oom_score_adj").unwrap();
    let own: i32 = own.trim().parse().unwrap();
    let oom: i32 = std::fs::read_to_string(format!("/proc/{infra}/oom_score_adj"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        oom,
        (-998).max(own),
        "oom_score_adj clamped to berthd's own"
    );

    // The cgroup: <parent>/<id> in every hierarchy, holding the infra process.
    let cgroup = format!("{parent}/{id}");
    for hierarchy in cgroup_hierarchies() {
        let dir = cgroup_dir(&hierarchy, &cgroup);
        assert!(dir.is_dir(), "no sandbox cgroup {}", dir.display());
        assert!(
            read_procs(&dir).contains(&infra),
            "infra {infra} not in {}/cgroup.procs",
            dir.display()
        );
    }
    let proc_cgroup = std::fs::read_to_string(format!("/proc/{infra}/cgroup")).unwrap();
    assert!(
        proc_cgroup
            .lines()
            .any(|line| line.ends_with(&format!(":memory:{cgroup}"))),
        "{proc_cgroup}"
    );

    // Hostname, sysctls and the DNS files.
    let pinned_hostname = run_cmd(
        "nsenter",
        &[
            &format!("--uts={}", harness.pin(&id, "uts").display()),
            "hostname",
        ],
    );
    assert_eq!(pinned_hostname.trim(), "web-host-1");
    let somaxconn = run_cmd(
        "nsenter",
        &[
            &format!("--net={}", harness.pin(&id, "net").display()),
            "cat",
            "/proc/sys/net/core/somaxconn",
        ],
    );
    assert_eq!(somaxconn.trim(), "1234");
    let host_somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap();
    assert_ne!(host_somaxconn.trim(), "1234", "the host's sysctl changed");
    let rmid = run_cmd(
        "nsenter",
        &[
            &format!("--ipc={}", harness.pin(&id, "ipc").display()),
            "cat",
            "/proc/sys/kernel/shm_rmid_forced",
        ],
    );
    assert_eq!(rmid.trim(), "1");
    let pod_ifaddr = run_cmd(
        "nsenter",
        &[
            &format!("--net={}", harness.pin(&id, "net").display()),
            "ip",
            "-o",
            "addr",
            "show",
        ],
    );
    assert!(
        pod_ifaddr.contains(&format!("inet {ip}/24")),
        "{pod_ifaddr}"
    );
    assert!(
        pod_ifaddr
            .lines()
            .any(|line| line.contains(" lo ") && line.contains("127.0.0.1")),
        "loopback is up: {pod_ifaddr}"
    );

    let files = harness.files_dir(&id);
    let hostname = std::fs::read_to_string(files.join("hostname")).expect("hostname file");
    assert_eq!(hostname.trim(), "web-host-1");
    let hosts = std::fs::read_to_string(files.join("hosts")).expect("hosts file");
    assert!(
        hosts.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.first() == Some(&ip.to_string().as_str()) && fields.contains(&"web-host-1")
        }),
        "hosts has no line for {ip} web-host-1:\n{hosts}"
    );
    assert!(hosts.contains("localhost"), "{hosts}");
    let resolv = std::fs::read_to_string(files.join("resolv.conf")).expect("resolv.conf");
    let resolv_lines: Vec<&str> = resolv.lines().map(str::trim).collect();
    for expected in [
        "nameserver 10.96.0.10",
        "search berth-it.svc.cluster.local",
        "options ndots:5",
    ] {
        assert!(
            resolv_lines.contains(&expected),
            "{expected:?} in:\n{resolv}"
        );
    }
    assert!(
        mount_points().contains(&harness.sandbox_dir(&id).join("shm")),
        "the pod's /dev/shm is not mounted"
    );

    // CNI: the IP is held, the veth is on the bridge, the host port mapped.
    assert_eq!(harness.allocated_ips(), vec![ip.to_string()]);
    assert_eq!(
        harness.bridge_ports().len(),
        1,
        "{:?}",
        harness.bridge_ports()
    );
    let rules = nat_rules_for_port(host_port);
    assert!(
        rules.iter().any(|rule| rule.contains(&format!("{ip}:80"))),
        "no DNAT to {ip}:80 for host port {host_port}: {rules:?}"
    );

    harness.remove(&id).await;
    assert!(!is_running(infra), "infra process {infra} survived removal");
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn namespace_modes_are_honoured() {
    let harness = Harness::start();
    let parent = harness.parent("modes");

    // network NODE: no net (nor uts) pin, no IP, the infra in the host netns.
    let host_net = harness
        .run_ok(with_namespaces(
            pod_config("host-net", &parent),
            NamespaceMode::Node,
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        ))
        .await;
    let (status, info) = harness.status(&host_net).await;
    assert_eq!(status.state(), PodSandboxState::SandboxReady);
    assert_eq!(status.network.clone().unwrap_or_default().ip, "");
    let options = status
        .linux
        .and_then(|linux| linux.namespaces)
        .and_then(|namespaces| namespaces.options)
        .expect("namespace options");
    assert_eq!(options.network(), NamespaceMode::Node);
    assert!(info["netns"].is_null(), "{info}");
    assert!(!harness.pin(&host_net, "net").exists());
    assert!(!harness.pin(&host_net, "uts").exists());
    assert!(harness.pin(&host_net, "ipc").exists());
    assert!(harness.pin(&host_net, "pid").exists());
    let infra = info["pid"].as_i64().unwrap_or_default() as i32;
    assert!(infra > 0, "{info}");
    for kind in ["net", "uts"] {
        assert_eq!(
            ns_identity(proc_ns(infra, kind)),
            ns_identity(proc_ns("self", kind)),
            "{kind}: a NODE network pod uses the host's"
        );
    }
    for kind in ["ipc", "pid"] {
        assert_ne!(
            ns_identity(proc_ns(infra, kind)),
            ns_identity(proc_ns("self", kind)),
            "{kind}: the pod has its own"
        );
    }
    assert!(harness.allocated_ips().is_empty());

    // pid CONTAINER: no infra process, no pid pin; the rest per pod.
    let no_pid = harness
        .run_ok(with_namespaces(
            pod_config("no-pid", &parent),
            NamespaceMode::Pod,
            NamespaceMode::Container,
            NamespaceMode::Pod,
        ))
        .await;
    let (status, info) = harness.status(&no_pid).await;
    assert_eq!(info["pid"], 0, "{info}");
    assert!(!harness.pin(&no_pid, "pid").exists());
    for kind in ["net", "ipc", "uts"] {
        let pin = harness.pin(&no_pid, kind);
        assert!(pin.exists(), "no pin {}", pin.display());
        assert_ne!(ns_identity(&pin), ns_identity(proc_ns("self", kind)));
    }
    let ip = status.network.unwrap_or_default().ip;
    assert!(ip.starts_with(&format!("{}.", harness.prefix)), "{ip:?}");
    let cgroup = format!("{parent}/{no_pid}");
    let memory = cgroup_dir(Path::new("/sys/fs/cgroup/memory"), &cgroup);
    assert!(memory.is_dir(), "{}", memory.display());
    assert!(read_procs(&memory).is_empty());

    // ipc NODE: no ipc pin and no pod /dev/shm; the infra shares host IPC.
    let host_ipc = harness
        .run_ok(with_namespaces(
            pod_config("host-ipc", &parent),
            NamespaceMode::Pod,
            NamespaceMode::Pod,
            NamespaceMode::Node,
        ))
        .await;
    let (status, info) = harness.status(&host_ipc).await;
    assert!(!harness.pin(&host_ipc, "ipc").exists());
    for kind in ["net", "uts", "pid"] {
        assert!(harness.pin(&host_ipc, kind).exists(), "no {kind} pin");
    }
    let infra = info["pid"].as_i64().unwrap_or_default() as i32;
    assert!(infra > 0, "{info}");
    assert_eq!(
        ns_identity(proc_ns(infra, "ipc")),
        ns_identity(proc_ns("self", "ipc"))
    );
    assert!(!mount_points().contains(&harness.sandbox_dir(&host_ipc).join("shm")));
    assert!(!status.network.unwrap_or_default().ip.is_empty());

    // Sysctls of namespaces the pod shares with the host are refused.
    let err = harness
        .run(with_namespaces(
            {
                let mut config = pod_config("host-net-sysctl", &parent);
                config.linux.as_mut().unwrap().sysctls =
                    HashMap::from([("net.core.somaxconn".to_string(), "1".to_string())]);
                config
            },
            NamespaceMode::Node,
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        ))
        .await
        .expect_err("net sysctl with the host network");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("net.core.somaxconn"), "{err:?}");

    for id in [&host_net, &no_pid, &host_ipc] {
        harness.remove(id).await;
    }
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_with_only_host_namespaces_leaves_nothing() {
    // No pod namespace at all: nothing pinned, no infra, no network.
    let harness = Harness::start();
    let id = harness
        .run_ok(with_namespaces(
            pod_config("all-host", &harness.parent("all-host")),
            NamespaceMode::Node,
            NamespaceMode::Container,
            NamespaceMode::Node,
        ))
        .await;
    let (status, info) = harness.status(&id).await;
    assert_eq!(status.state(), PodSandboxState::SandboxReady);
    assert_eq!(info["pid"], 0, "{info}");
    assert!(info["netns"].is_null(), "{info}");
    for kind in ["net", "ipc", "uts", "pid"] {
        assert!(!harness.pin(&id, kind).exists(), "{kind} pinned");
    }
    assert!(mounts_under(&harness.state()).is_empty());
    harness.stop(&id).await;
    harness.remove(&id).await;
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_kills_infra_releases_ip_and_port_mappings() {
    let harness = Harness::start();
    let host_port = harness.host_port(1);
    let mut config = pod_config("stopped", &harness.parent("stop"));
    config.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 8080,
        host_port,
        host_ip: String::new(),
    }];
    let id = harness.run_ok(config).await;
    let (status, info) = harness.status(&id).await;
    let ip = status.network.unwrap_or_default().ip;
    let infra = info["pid"].as_i64().unwrap_or_default() as i32;
    assert!(infra > 0 && is_running(infra), "{info}");
    let ip_file = harness.ipam_dir().join(&harness.net_name).join(&ip);
    assert!(ip_file.exists(), "{} missing", ip_file.display());
    let rules = nat_rules_for_port(host_port);
    assert!(
        rules
            .iter()
            .any(|rule| rule.contains(&format!("{ip}:8080"))),
        "no DNAT for host port {host_port}: {rules:?}"
    );
    assert_eq!(harness.bridge_ports().len(), 1);

    harness.stop(&id).await;
    assert!(
        !is_running(infra),
        "infra process {infra} still runs after StopPodSandbox"
    );
    let (status, _) = harness.status(&id).await;
    assert_eq!(status.state(), PodSandboxState::SandboxNotready);
    assert!(!ip_file.exists(), "IP {ip} still allocated after stop");
    let rules = nat_rules_for_port(host_port);
    assert!(rules.is_empty(), "portmap rules left after stop: {rules:?}");
    let mentioning_id: Vec<String> = nat_rules()
        .lines()
        .filter(|line| line.contains(&id))
        .map(str::to_string)
        .collect();
    assert!(mentioning_id.is_empty(), "{mentioning_id:?}");
    assert!(
        harness.bridge_ports().is_empty(),
        "{:?}",
        harness.bridge_ports()
    );
    // The namespaces outlive the stop (containers may still be inspected).
    assert!(harness.pin(&id, "net").exists());

    // Stop again, and stop an id berthd never saw: both succeed.
    harness.stop(&id).await;
    let (status, _) = harness.status(&id).await;
    assert_eq!(status.state(), PodSandboxState::SandboxNotready);
    harness.stop(&"0f".repeat(32)).await;

    harness.remove(&id).await;
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_deletes_cgroups_and_only_the_parents_berth_created() {
    let harness = Harness::start();
    // A parent berth creates (nothing of it exists) and one that exists.
    let created_parent = harness.parent("pod-created");
    let existing_parent = format!("{}/pod-existing", harness.preexisting_root());
    assert!(cgroup_present_in(harness.cgroup_root()).is_empty());
    create_cgroup_everywhere(&existing_parent);

    let in_created = harness
        .run_ok(pod_config("in-created", &created_parent))
        .await;
    let in_existing = harness
        .run_ok(pod_config("in-existing", &existing_parent))
        .await;
    let hierarchies = cgroup_hierarchies();
    for (parent, id) in [
        (&created_parent, &in_created),
        (&existing_parent, &in_existing),
    ] {
        let cgroup = format!("{parent}/{id}");
        for dir in ["memory", "pids", "unified"] {
            let dir = cgroup_dir(&Path::new("/sys/fs/cgroup").join(dir), &cgroup);
            assert!(dir.is_dir(), "{} missing", dir.display());
        }
    }

    // Removed while still ready: stopped first, then everything goes.
    let (_, info) = harness.status(&in_created).await;
    let infra = info["pid"].as_i64().unwrap_or_default() as i32;
    harness.remove(&in_created).await;
    assert!(!is_running(infra));
    let gone = format!("{created_parent}/{in_created}");
    assert!(
        cgroup_present_in(&gone).is_empty(),
        "{gone} left in {:?}",
        cgroup_present_in(&gone)
    );
    assert!(
        cgroup_present_in(&created_parent).is_empty(),
        "parent {created_parent} (created by berth) left in {:?}",
        cgroup_present_in(&created_parent)
    );
    assert!(
        cgroup_present_in(harness.cgroup_root()).is_empty(),
        "{} (created by berth) left in {:?}",
        harness.cgroup_root(),
        cgroup_present_in(harness.cgroup_root())
    );
    assert!(!harness.sandbox_dir(&in_created).exists());
    assert!(!harness.state().join("ns").join(&in_created).exists());
    let err = harness
        .client()
        .await
        .pod_sandbox_status(PodSandboxStatusRequest {
            pod_sandbox_id: in_created.clone(),
            verbose: false,
        })
        .await
        .expect_err("status of a removed sandbox");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");

    harness.remove(&in_existing).await;
    let gone = format!("{existing_parent}/{in_existing}");
    assert!(cgroup_present_in(&gone).is_empty(), "{gone} left");
    for hierarchy in &hierarchies {
        let dir = cgroup_dir(hierarchy, &existing_parent);
        assert!(
            dir.is_dir(),
            "{} existed before berth and was removed",
            dir.display()
        );
    }

    // An empty parent means the configured default parent, which berth
    // creates and removes as well.
    let default_parent = format!("{}/default", harness.cgroup_root());
    let in_default = harness.run_ok(pod_config("in-default", "")).await;
    let (_, info) = harness.status(&in_default).await;
    assert_eq!(info["cgroupPath"], format!("{default_parent}/{in_default}"));
    assert!(!cgroup_present_in(&format!("{default_parent}/{in_default}")).is_empty());
    harness.remove(&in_default).await;
    assert!(
        cgroup_present_in(harness.cgroup_root()).is_empty(),
        "{default_parent} (created by berth) left in {:?}",
        cgroup_present_in(harness.cgroup_root())
    );

    // Remove again, and remove an id berthd never saw: both succeed.
    harness.remove(&in_created).await;
    harness.remove(&in_existing).await;
    harness.remove(&"ab".repeat(32)).await;
    let parents: Value = serde_json::from_slice(
        &std::fs::read(harness.state().join("cgroup-parents.json")).expect("parent records"),
    )
    .expect("parent records are JSON");
    assert_eq!(parents["created"], json!([]), "{parents}");
    harness.assert_clean().await;

    // The pre-existing parent is the test's own to remove.
    for hierarchy in &hierarchies {
        for dir in cgroup_subtree(&cgroup_dir(hierarchy, &harness.preexisting_root())) {
            std::fs::remove_dir(&dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_name_is_reserved_for_one_sandbox() {
    let harness = Harness::start();
    let config = pod_config("twin", &harness.parent("twin"));
    let (mut first, mut second) = (harness.client().await, harness.client().await);
    let (a, b) = tokio::join!(
        first.run_pod_sandbox(run_request(config.clone())),
        second.run_pod_sandbox(run_request(config.clone())),
    );
    let (winner, loser) = match (a, b) {
        (Ok(won), Err(lost)) | (Err(lost), Ok(won)) => (won.into_inner().pod_sandbox_id, lost),
        (a, b) => panic!("exactly one run must succeed: {a:?} / {b:?}"),
    };
    assert_eq!(loser.code(), tonic::Code::AlreadyExists, "{loser:?}");
    assert!(
        loser.message().contains(&winner),
        "the error names the winner {winner}: {}",
        loser.message()
    );
    let listed: Vec<String> = harness.list(None).await.into_iter().map(|p| p.id).collect();
    assert_eq!(listed, vec![winner.clone()]);
    assert_eq!(
        dir_entries(&harness.state().join("ns")),
        vec![winner.clone()]
    );
    assert_eq!(harness.allocated_ips().len(), 1);

    // Still reserved while it exists, even once stopped.
    harness.stop(&winner).await;
    let err = harness
        .run(config.clone())
        .await
        .expect_err("name still live");
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    assert!(err.message().contains(&winner), "{err:?}");

    // Free again once removed.
    harness.remove(&winner).await;
    let again = harness.run_ok(config.clone()).await;
    assert_ne!(again, winner);
    // Another attempt number is another name.
    let mut next_attempt = config;
    next_attempt.metadata.as_mut().unwrap().attempt = 1;
    let attempt1 = harness.run_ok(next_attempt).await;
    harness.remove(&again).await;
    harness.remove(&attempt1).await;
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_requests_are_refused_and_leave_nothing() {
    let harness = Harness::start();
    let parent = harness.parent("bad");

    let slice = format!("berth-it-{}.slice", pid());
    let err = harness
        .run(pod_config("slice", &slice))
        .await
        .expect_err("slice parent under cgroupfs");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains(&slice), "{err:?}");
    assert!(err.message().contains("cgroupfs"), "{err:?}");

    let err = harness
        .client()
        .await
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(pod_config("handler", &parent)),
            runtime_handler: "berth-no-such-handler".into(),
        })
        .await
        .expect_err("unknown handler");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("berth-no-such-handler"), "{err:?}");

    let mut no_metadata = pod_config("nometa", &parent);
    no_metadata.metadata = None;
    let err = harness.run(no_metadata).await.expect_err("no metadata");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("metadata"), "{err:?}");

    let mut no_name = pod_config("", &parent);
    no_name.metadata.as_mut().unwrap().uid = "uid-x".into();
    let err = harness.run(no_name).await.expect_err("no name");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

    let err = harness
        .client()
        .await
        .run_pod_sandbox(RunPodSandboxRequest::default())
        .await
        .expect_err("no config");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

    let mut swappiness = pod_config("swappiness", &parent);
    swappiness.linux.as_mut().unwrap().sysctls =
        HashMap::from([("vm.swappiness".to_string(), "10".to_string())]);
    let err = harness.run(swappiness).await.expect_err("node-wide sysctl");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("vm.swappiness"), "{err:?}");

    let target = with_namespaces(
        pod_config("target", &parent),
        NamespaceMode::Pod,
        NamespaceMode::Target,
        NamespaceMode::Pod,
    );
    let err = harness.run(target).await.expect_err("pid TARGET");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

    // Failures inside berth-pinns, after the cgroup and dirs were made.
    let mut long_hostname = pod_config("long-hostname", &parent);
    long_hostname.hostname = "h".repeat(100);
    let err = harness
        .run(long_hostname)
        .await
        .expect_err("a hostname longer than the kernel allows");
    assert_ne!(err.code(), tonic::Code::Ok);
    let mut unknown_sysctl = pod_config("unknown-sysctl", &parent);
    unknown_sysctl.linux.as_mut().unwrap().sysctls =
        HashMap::from([("net.ipv4.berth_no_such_sysctl".to_string(), "1".to_string())]);
    let err = harness
        .run(unknown_sysctl)
        .await
        .expect_err("a sysctl the kernel does not have");
    assert!(
        err.message().contains("berth_no_such_sysctl"),
        "the error names the sysctl: {err:?}"
    );

    harness.assert_clean().await;
    // None of those names stays reserved.
    let id = harness.run_ok(pod_config("swappiness", &parent)).await;
    harness.remove(&id).await;
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_cni_add_leaves_nothing_behind() {
    let harness = Harness::start();
    let parent = harness.parent("cni-fail");
    // bridge + host-local succeed, then a plugin that does not exist fails.
    harness.write_network(
        harness.default_range(),
        json!({"type": "berth-it-no-such-plugin"}),
    );
    let err = harness
        .run(pod_config("cni-fail", &parent))
        .await
        .expect_err("CNI ADD must fail");
    assert!(
        err.message().contains("berth-it-no-such-plugin"),
        "the error names the plugin: {err:?}"
    );
    harness.assert_clean().await;

    // The name was released: with a working network the same pod runs.
    harness.write_network(harness.default_range(), portmap_plugin());
    let id = harness.run_ok(pod_config("cni-fail", &parent)).await;
    harness.remove(&id).await;
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_ip_range_leaves_nothing_behind() {
    let harness = Harness::start();
    let parent = harness.parent("exhausted");
    // A range of one address: the second pod cannot get one.
    let only = format!("{}.10", harness.prefix);
    harness.write_network(
        json!({
            "subnet": format!("{}.0/24", harness.prefix),
            "rangeStart": only,
            "rangeEnd": only,
        }),
        portmap_plugin(),
    );
    let first = harness.run_ok(pod_config("first", &parent)).await;
    let (status, _) = harness.status(&first).await;
    assert_eq!(status.network.unwrap_or_default().ip, only);

    let err = harness
        .run(pod_config("second", &parent))
        .await
        .expect_err("no address left");
    assert_ne!(err.code(), tonic::Code::Ok);
    let listed: Vec<String> = harness.list(None).await.into_iter().map(|p| p.id).collect();
    assert_eq!(listed, vec![first.clone()]);
    assert_eq!(
        dir_entries(&harness.state().join("sandboxes")),
        vec![first.clone()]
    );
    assert_eq!(
        dir_entries(&harness.state().join("ns")),
        vec![first.clone()]
    );
    assert_eq!(harness.allocated_ips(), vec![only.clone()]);
    let parent_dir = cgroup_dir(Path::new("/sys/fs/cgroup/memory"), &parent);
    assert_eq!(dir_entries_dirs(&parent_dir), vec![first.clone()]);
    let state = harness.state();
    let foreign: Vec<PathBuf> = mounts_under(&state)
        .into_iter()
        .filter(|mount| !mount.to_string_lossy().contains(&first))
        .collect();
    assert!(foreign.is_empty(), "mounts of the failed pod: {foreign:?}");
    eventually("the failed pod's veth to go", || {
        let ports = harness.bridge_ports();
        if ports.len() == 1 {
            Ok(())
        } else {
            Err(format!("{ports:?}"))
        }
    })
    .await;

    harness.remove(&first).await;
    // With the address free again, the second pod runs.
    let second = harness.run_ok(pod_config("second", &parent)).await;
    harness.remove(&second).await;
    harness.assert_clean().await;
}

/// The sub-directories of `dir` (child cgroups).
fn dir_entries_dirs(dir: &Path) -> Vec<String> {
    dir_entries(dir)
        .into_iter()
        .filter(|name| dir.join(name).is_dir())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_pods_concurrently_leave_nothing_behind() {
    const PODS: usize = 20;
    let harness = Harness::start();
    let parent = harness.parent("many");
    let client = harness.client().await;

    let mut runs = Vec::new();
    for i in 0..PODS {
        let mut client = client.clone();
        let config = pod_config(&format!("many-{i}"), &parent);
        runs.push(tokio::spawn(async move {
            client
                .run_pod_sandbox(run_request(config))
                .await
                .map(|response| response.into_inner().pod_sandbox_id)
        }));
    }
    let mut ids = Vec::new();
    let mut failures = Vec::new();
    for run in runs {
        match run.await.expect("task") {
            Ok(id) => ids.push(id),
            Err(status) => failures.push(status),
        }
    }
    // Whatever happens next, remove what was made (the guard does too).
    let check = async {
        assert!(failures.is_empty(), "runs failed: {failures:?}");
        let mut ips = BTreeSet::new();
        for id in &ids {
            let (status, info) = harness.status(id).await;
            assert_eq!(status.state(), PodSandboxState::SandboxReady);
            let ip = status.network.unwrap_or_default().ip;
            assert!(ip.starts_with(&format!("{}.", harness.prefix)), "{ip:?}");
            ips.insert(ip);
            assert!(info["pid"].as_i64().unwrap_or_default() > 0);
        }
        assert_eq!(ips.len(), PODS, "IPs must be distinct: {ips:?}");
        assert_eq!(harness.allocated_ips().len(), PODS);
        assert_eq!(harness.bridge_ports().len(), PODS);
        assert_eq!(
            mounts_under(&harness.state()).len(),
            PODS * 5,
            "4 pins + shm each"
        );
    };
    check.await;

    let mut teardowns = Vec::new();
    for id in ids.clone() {
        let mut client = client.clone();
        teardowns.push(tokio::spawn(async move {
            client
                .stop_pod_sandbox(StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await?;
            client
                .remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
                .await
        }));
    }
    for teardown in teardowns {
        teardown
            .await
            .expect("task")
            .unwrap_or_else(|status| panic!("stop/remove failed: {status:?}"));
    }
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn list_filters_by_id_prefix_state_and_labels() {
    let harness = Harness::start();
    let parent = harness.parent("list");
    let labelled = |name: &str, labels: &[(&str, &str)]| {
        let mut config = pod_config(name, &parent);
        config.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        config
    };
    let a = harness
        .run_ok(labelled("list-a", &[("app", "a"), ("group", "g")]))
        .await;
    let b = harness
        .run_ok(labelled("list-b", &[("app", "b"), ("group", "g")]))
        .await;
    let c = harness.run_ok(labelled("list-c", &[("app", "c")])).await;
    let all: BTreeSet<String> = [a.clone(), b.clone(), c.clone()].into();
    let set = |ids: &[&String]| ids.iter().map(|id| id.to_string()).collect::<BTreeSet<_>>();

    let listed = harness.list(None).await;
    assert_eq!(
        listed.iter().map(|p| p.id.clone()).collect::<BTreeSet<_>>(),
        all
    );
    let item_a = listed.iter().find(|p| p.id == a).unwrap();
    assert_eq!(item_a.metadata, Some(metadata("list-a")));
    assert_eq!(item_a.labels.get("app").map(String::as_str), Some("a"));
    assert_eq!(item_a.state(), PodSandboxState::SandboxReady);
    assert!(item_a.created_at > 0);

    // By full id, and by the shortest prefix no other id shares.
    let by_id = |id: &str| PodSandboxFilter {
        id: id.to_string(),
        ..Default::default()
    };
    assert_eq!(harness.list_ids(by_id(&a)).await, set(&[&a]));
    let unique_len = (1..=a.len())
        .find(|&len| ![&b, &c].iter().any(|other| other.starts_with(&a[..len])))
        .unwrap();
    let prefix = &a[..unique_len.max(4)];
    assert_eq!(
        harness.list_ids(by_id(prefix)).await,
        set(&[&a]),
        "prefix {prefix}"
    );
    assert!(harness.list_ids(by_id(&"f0".repeat(32))).await.is_empty());

    // By state, before and after stopping b.
    let by_state = |state: PodSandboxState| PodSandboxFilter {
        state: Some(PodSandboxStateValue {
            state: state as i32,
        }),
        ..Default::default()
    };
    assert_eq!(
        harness
            .list_ids(by_state(PodSandboxState::SandboxReady))
            .await,
        all
    );
    assert!(harness
        .list_ids(by_state(PodSandboxState::SandboxNotready))
        .await
        .is_empty());
    harness.stop(&b).await;
    assert_eq!(
        harness
            .list_ids(by_state(PodSandboxState::SandboxReady))
            .await,
        set(&[&a, &c])
    );
    assert_eq!(
        harness
            .list_ids(by_state(PodSandboxState::SandboxNotready))
            .await,
        set(&[&b])
    );

    // By label selector: every pair must match.
    let by_labels = |labels: &[(&str, &str)]| PodSandboxFilter {
        label_selector: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    assert_eq!(
        harness.list_ids(by_labels(&[("group", "g")])).await,
        set(&[&a, &b])
    );
    assert_eq!(
        harness
            .list_ids(by_labels(&[("group", "g"), ("app", "b")]))
            .await,
        set(&[&b])
    );
    assert!(harness
        .list_ids(by_labels(&[("app", "zzz")]))
        .await
        .is_empty());
    // Filters combine.
    let mut ready_in_g = by_labels(&[("group", "g")]);
    ready_in_g.state = by_state(PodSandboxState::SandboxReady).state;
    assert_eq!(harness.list_ids(ready_in_g).await, set(&[&a]));

    // StreamPodSandboxes filters the same way.
    let mut stream = harness
        .client()
        .await
        .stream_pod_sandboxes(StreamPodSandboxesRequest {
            filter: Some(by_labels(&[("group", "g")])),
        })
        .await
        .expect("StreamPodSandboxes")
        .into_inner();
    let mut streamed = BTreeSet::new();
    while let Some(message) = stream.message().await.expect("stream") {
        streamed.extend(message.pod_sandboxes.into_iter().map(|p| p.id));
    }
    assert_eq!(streamed, set(&[&a, &b]));

    for id in [&a, &b, &c] {
        harness.remove(id).await;
    }
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pods_survive_a_berthd_restart() {
    let mut harness = Harness::start();
    let host_port = harness.host_port(2);
    let mut config = pod_config("survivor", &harness.parent("restart"));
    config.port_mappings = vec![PortMapping {
        protocol: Protocol::Tcp as i32,
        container_port: 80,
        host_port,
        host_ip: String::new(),
    }];
    let id = harness.run_ok(config.clone()).await;
    let (before, info) = harness.status(&id).await;
    let ip = before.network.clone().unwrap_or_default().ip;
    let infra = info["pid"].as_i64().unwrap_or_default() as i32;
    assert!(infra > 0 && is_running(infra));

    let status = harness
        .berthd
        .restart_on_same_dirs(nix::sys::signal::Signal::SIGTERM, Duration::ZERO);
    assert!(status.success(), "berthd exited with {status} on SIGTERM");
    assert!(is_running(infra), "infra {infra} died with berthd");

    let listed = harness.list(None).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].state(), PodSandboxState::SandboxReady);
    let (after, info) = harness.status(&id).await;
    assert_eq!(after.state(), PodSandboxState::SandboxReady);
    assert_eq!(after.network.unwrap_or_default().ip, ip);
    assert_eq!(after.created_at, before.created_at);
    assert_eq!(after.metadata, before.metadata);
    assert_eq!(info["pid"], infra, "{info}");
    assert!(harness.pin(&id, "net").exists());
    // The name is still taken.
    let err = harness.run(config).await.expect_err("name still live");
    assert_eq!(err.code(), tonic::Code::AlreadyExists, "{err:?}");

    // The restarted berthd tears it all down: infra, IP, port mapping,
    // mounts, and the cgroup parents the first berthd created.
    harness.remove(&id).await;
    assert!(!is_running(infra), "infra {infra} survived removal");
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_and_removals_racing_in_one_parent_leave_nothing() {
    // Two workers each run a pod in the same (berth-created) parent and
    // remove it again, over and over: a removal must never delete the
    // parent under a run that has just made sure it exists.
    const ROUNDS: usize = 15;
    let harness = Harness::start();
    let parent = harness.parent("churn");
    let client = harness.client().await;
    let mut workers = Vec::new();
    for worker in 0..2 {
        let mut client = client.clone();
        let parent = parent.clone();
        workers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let config = pod_config(&format!("churn-{worker}-{round}"), &parent);
                let id = client
                    .run_pod_sandbox(run_request(config))
                    .await
                    .map_err(|status| format!("run {worker}/{round}: {status:?}"))?
                    .into_inner()
                    .pod_sandbox_id;
                client
                    .remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: id })
                    .await
                    .map_err(|status| format!("remove {worker}/{round}: {status:?}"))?;
            }
            Ok::<(), String>(())
        }));
    }
    for worker in workers {
        worker
            .await
            .expect("task")
            .unwrap_or_else(|err| panic!("{err}"));
    }
    harness.assert_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_stop_and_remove_of_one_sandbox_all_succeed() {
    // kubelet may stop and remove a pod from several loops at once: every
    // call must succeed, as each would alone (Stop and Remove are
    // idempotent and succeed for a sandbox that is gone).
    const ROUNDS: usize = 4;
    let harness = Harness::start();
    let parent = harness.parent("concurrent");
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let id = harness
            .run_ok(pod_config(&format!("remove-twice-{round}"), &parent))
            .await;
        let (mut first, mut second) = (harness.client().await, harness.client().await);
        let remove = |id: &str| RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let (a, b) = tokio::join!(
            first.remove_pod_sandbox(remove(&id)),
            second.remove_pod_sandbox(remove(&id)),
        );
        for (call, result) in [("remove #1", a), ("remove #2", b)] {
            if let Err(status) = result {
                failures.push(format!("round {round} {call}: {status:?}"));
            }
        }

        let id = harness
            .run_ok(pod_config(&format!("stop-and-remove-{round}"), &parent))
            .await;
        let (stop, remove) = tokio::join!(
            first.stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            }),
            second.remove_pod_sandbox(remove(&id)),
        );
        if let Err(status) = stop {
            failures.push(format!("round {round} stop during remove: {status:?}"));
        }
        if let Err(status) = remove {
            failures.push(format!("round {round} remove during stop: {status:?}"));
        }
    }
    // Whatever failed, the pods must be gone, and completely.
    let listed = harness.list(None).await;
    for pod in &listed {
        harness.remove(&pod.id).await;
    }
    assert!(listed.is_empty(), "left listed: {listed:?}");
    harness.assert_clean().await;
    assert!(
        failures.is_empty(),
        "concurrent Stop/Remove of one sandbox failed:\n{}",
        failures.join("\n")
    );
}

/// A cgroup file of the pod's parent: the v1 hierarchy's when it has the
/// controller, else the unified one's.
fn parent_file(parent: &str, v1: (&str, &str), v2: &str) -> String {
    let (controller, file) = v1;
    let v1_path = cgroup_dir(&Path::new("/sys/fs/cgroup").join(controller), parent).join(file);
    let path = if v1_path.exists() {
        v1_path
    } else {
        cgroup_dir(Path::new("/sys/fs/cgroup"), parent).join(v2)
    };
    std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn update_pod_sandbox_resources_resizes_the_pod_cgroup() {
    use cri_api::v1::{LinuxContainerResources, UpdatePodSandboxResourcesRequest};
    let harness = Harness::start();
    let parent = harness.parent("pod-resize");
    let id = harness.run_ok(pod_config("resize", &parent)).await;
    let request = |id: &str| UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: id.to_string(),
        overhead: Some(LinuxContainerResources {
            memory_limit_in_bytes: 64 << 20,
            ..Default::default()
        }),
        resources: Some(LinuxContainerResources {
            memory_limit_in_bytes: 256 << 20,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            ..Default::default()
        }),
    };
    harness
        .client()
        .await
        .update_pod_sandbox_resources(request(&id))
        .await
        .expect("UpdatePodSandboxResources");
    // The containers' total plus the overhead.
    assert_eq!(
        parent_file(&parent, ("memory", "memory.limit_in_bytes"), "memory.max"),
        (320u64 << 20).to_string()
    );
    let quota = parent_file(&parent, ("cpu", "cpu.cfs_quota_us"), "cpu.max");
    assert!(
        quota == "50000" || quota == "50000 100000",
        "the pod's cpu quota: {quota}"
    );
    let err = harness
        .client()
        .await
        .update_pod_sandbox_resources(request("no-such-pod"))
        .await
        .expect_err("an unknown pod");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    harness.remove(&id).await;
    harness.assert_clean().await;
}
