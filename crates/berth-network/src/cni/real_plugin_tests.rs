//! The CNI client against Debian's real plugins (`bridge`, `host-local`,
//! `portmap`, `loopback` in /usr/lib/cni), in a network namespace made for
//! the test. Needs root; skipped otherwise.

use std::fs::{self, File};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::fcntl::{Flock, FlockArg};
use serde_json::{json, Value};
use tempfile::TempDir;

use super::*;

const PLUGIN_DIR: &str = "/usr/lib/cni";
const SUBNET_PREFIX: &str = "10.213.0.";
/// Serializes runs of this test across processes: they share the subnet.
const LOCK_FILE: &str = "/run/lock/berth-network-real-plugin-tests.lock";

/// Runs a command, returning whether it succeeded and its stdout + stderr.
fn run(program: &str, args: &[&str]) -> (bool, String) {
    match Command::new(program).args(args).output() {
        Ok(out) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(err) => (false, err.to_string()),
    }
}

fn skip_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root".into());
    }
    for plugin in ["bridge", "host-local", "portmap", "loopback"] {
        if !Path::new(PLUGIN_DIR).join(plugin).exists() {
            return Some(format!("{PLUGIN_DIR}/{plugin} missing"));
        }
    }
    for tool in ["ip", "iptables"] {
        if !run(tool, &["-V"]).0 {
            return Some(format!(
                "{tool} missing (apt-get install -y iproute2 iptables)"
            ));
        }
    }
    None
}

/// A network namespace, bridge and IPAM directory that are removed on drop,
/// even when the test panics. Drop also runs DEL on the plugins directly so
/// a failing test leaves no IP allocation or iptables rule behind.
struct Sandbox {
    netns_name: String,
    netns: PathBuf,
    bridge: String,
    container_id: String,
    dir: TempDir,
    net: Value,
    _lock: Flock<File>,
}

impl Sandbox {
    fn new() -> Self {
        let lock_file = File::create(LOCK_FILE).unwrap();
        let lock = Flock::lock(lock_file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| errno)
            .unwrap();
        let pid = std::process::id();
        let netns_name = format!("berthnet-test-{pid}");
        let bridge = format!("bnt{}", pid % 10000);
        let dir = tempfile::tempdir().unwrap();
        let net = json!({
            "cniVersion": "1.0.0",
            "name": format!("berthnet-test-{pid}"),
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": bridge,
                    "isGateway": true,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": "10.213.0.0/24"}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": dir.path().join("ipam"),
                    }
                },
                {"type": "portmap", "capabilities": {"portMappings": true}}
            ]
        });
        let sandbox = Sandbox {
            netns: Path::new("/run/netns").join(&netns_name),
            netns_name,
            bridge,
            container_id: format!("berthnettest{pid}"),
            dir,
            net,
            _lock: lock,
        };
        // Leftovers of a run killed before its drop.
        sandbox.remove_links();
        let (ok, out) = run("ip", &["netns", "add", &sandbox.netns_name]);
        assert!(ok, "ip netns add {}: {out}", sandbox.netns_name);
        sandbox
    }

    fn conf_dir(&self) -> PathBuf {
        let conf_dir = self.dir.path().join("net.d");
        fs::create_dir_all(&conf_dir).unwrap();
        fs::write(
            conf_dir.join("10-test.conflist"),
            serde_json::to_vec_pretty(&self.net).unwrap(),
        )
        .unwrap();
        conf_dir
    }

    fn pod(&self, host_port: i32) -> PodNetwork {
        PodNetwork {
            sandbox_id: self.container_id.clone(),
            netns: self.netns.clone(),
            ifname: "eth0".into(),
            pod_namespace: "default".into(),
            pod_name: "berthnet-test".into(),
            pod_uid: "00000000-0000-0000-0000-000000000001".into(),
            port_mappings: vec![
                PortMapping {
                    host_port,
                    container_port: 80,
                    protocol: "tcp".into(),
                    host_ip: String::new(),
                },
                // A container port without host port, as kubelet sends them.
                PortMapping {
                    host_port: 0,
                    container_port: 8080,
                    protocol: "tcp".into(),
                    host_ip: String::new(),
                },
            ],
            pod_cidr: None,
        }
    }

    fn allocation(&self, ip: &IpAddr) -> PathBuf {
        self.dir
            .path()
            .join("ipam")
            .join(self.net["name"].as_str().unwrap_or_default())
            .join(ip.to_string())
    }

    /// The NAT rules that mention this container, or one of `chains`.
    fn nat_rules(&self, chains: &[String]) -> Vec<String> {
        let (ok, out) = run("iptables", &["-t", "nat", "-S"]);
        assert!(ok, "iptables -t nat -S: {out}");
        out.lines()
            .filter(|l| l.contains(&self.container_id) || chains.iter().any(|c| l.contains(c)))
            .map(str::to_string)
            .collect()
    }

    fn remove_links(&self) {
        run("ip", &["netns", "del", &self.netns_name]);
        run("ip", &["link", "del", &self.bridge]);
    }

    /// DEL on every plugin, synchronously, with no namespace.
    fn plugins_del(&self) {
        let Some(plugins) = self.net["plugins"].as_array() else {
            return;
        };
        for plugin in plugins.iter().rev() {
            let mut config = plugin.clone();
            config["name"] = self.net["name"].clone();
            config["cniVersion"] = self.net["cniVersion"].clone();
            config["runtimeConfig"] = json!({"portMappings": [
                {"hostPort": 1, "containerPort": 1, "protocol": "tcp"}]});
            let Some(kind) = plugin["type"].as_str() else {
                continue;
            };
            let child = Command::new(Path::new(PLUGIN_DIR).join(kind))
                .env("CNI_COMMAND", "DEL")
                .env("CNI_CONTAINERID", &self.container_id)
                .env("CNI_NETNS", "")
                .env("CNI_IFNAME", "eth0")
                .env("CNI_PATH", PLUGIN_DIR)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            if let Ok(mut child) = child {
                if let Some(mut stdin) = child.stdin.take() {
                    let _ = stdin.write_all(config.to_string().as_bytes());
                }
                let _ = child.wait();
            }
        }
    }
}

/// The `CNI-DN-*` chains that rules jump to.
fn dnat_chains(rules: &[String]) -> Vec<String> {
    rules
        .iter()
        .filter_map(|r| r.split_once("-j CNI-DN-"))
        .map(|(_, chain)| {
            format!(
                "CNI-DN-{}",
                chain.split_whitespace().next().unwrap_or_default()
            )
        })
        .collect()
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.plugins_del();
        self.remove_links();
    }
}

#[tokio::test]
async fn real_plugins_bridge_host_local_portmap() {
    if let Some(reason) = skip_reason() {
        eprintln!("skipping real CNI plugin test: {reason}");
        return;
    }
    let sandbox = Sandbox::new();
    let cni = CniConfig::new(sandbox.conf_dir(), vec![PathBuf::from(PLUGIN_DIR)]);
    let net = cni.load_network().unwrap().unwrap();
    let pod = sandbox.pod(40000 + (std::process::id() % 20000) as i32);

    cni.loopback_up(&sandbox.netns).await.unwrap();
    let (_, lo) = run("ip", &["-n", &sandbox.netns_name, "link", "show", "lo"]);
    assert!(lo.contains(",UP"), "lo is not up: {lo}");

    // ADD: an address in the subnet, on eth0 in the namespace.
    let added = cni.add(&net, &pod).await.unwrap();
    assert_eq!(added.ips.len(), 1, "{:?}", added.raw);
    let ip = added.ips[0];
    assert!(ip.to_string().starts_with(SUBNET_PREFIX), "{ip}");
    let (ok, addr) = run(
        "ip",
        &["-n", &sandbox.netns_name, "addr", "show", "dev", "eth0"],
    );
    assert!(ok && addr.contains(&format!("{ip}/24")), "{addr}");
    let allocation = sandbox.allocation(&ip);
    assert!(allocation.exists(), "{} missing", allocation.display());
    let rules = sandbox.nat_rules(&[]);
    assert!(
        rules
            .iter()
            .any(|r| r.contains(&pod.port_mappings[0].host_port.to_string())),
        "portmap added no DNAT rule: {rules:#?}"
    );
    // portmap's per-container chain (`CNI-DN-<hash>`), reached from the
    // shared CNI-HOSTPORT-DNAT chain by a rule naming the container.
    let chains = dnat_chains(&rules);
    assert!(!chains.is_empty(), "{rules:#?}");

    // DEL: the allocation, the interface and the rules are gone.
    cni.del(&net, &pod, Some(&added.raw)).await.unwrap();
    assert!(
        !allocation.exists(),
        "{} still allocated",
        allocation.display()
    );
    let (eth0_left, _) = run("ip", &["-n", &sandbox.netns_name, "link", "show", "eth0"]);
    assert!(!eth0_left, "eth0 survived DEL");
    assert_eq!(sandbox.nat_rules(&chains), Vec::<String>::new());

    // DEL is idempotent.
    cni.del(&net, &pod, Some(&added.raw)).await.unwrap();
    cni.del(&net, &pod, None).await.unwrap();

    // After a crash: ADD again, lose the namespace, DEL still releases what
    // lives outside it.
    let again = cni.add(&net, &pod).await.unwrap();
    let allocation = sandbox.allocation(&again.ips[0]);
    assert!(allocation.exists());
    let chains = dnat_chains(&sandbox.nat_rules(&[]));
    assert!(!chains.is_empty());
    let (ok, out) = run("ip", &["netns", "del", &sandbox.netns_name]);
    assert!(ok, "ip netns del: {out}");
    assert!(!sandbox.netns.exists());
    cni.del(&net, &pod, Some(&again.raw)).await.unwrap();
    assert!(
        !allocation.exists(),
        "{} still allocated",
        allocation.display()
    );
    assert_eq!(sandbox.nat_rules(&chains), Vec::<String>::new());
    cni.del(&net, &pod, None).await.unwrap();
}

#[tokio::test]
async fn real_loopback_in_a_missing_namespace_fails_with_the_plugin_message() {
    if let Some(reason) = skip_reason() {
        eprintln!("skipping real CNI plugin test: {reason}");
        return;
    }
    let cni = CniConfig::new("/nonexistent", vec![PathBuf::from(PLUGIN_DIR)]);
    let err = cni
        .loopback_up(Path::new("/run/netns/berthnet-test-does-not-exist"))
        .await
        .unwrap_err();
    let CniError::PluginFailed { ref failure, .. } = err else {
        panic!("unexpected error {err:?}");
    };
    assert!(failure.code.is_some(), "{failure:?}");
    assert!(
        err.to_string().contains("berthnet-test-does-not-exist"),
        "{err}"
    );
}
