//! The harness every pod-running test shares: one berthd (cgroupfs driver)
//! on cgroup roots of the test's own and a bridge network of its own, and a
//! guard that removes whatever the test left: pods, shims, cgroups, mounts
//! and the bridge.
//!
//! Names come from the test binary's pid and a counter, so concurrent tests
//! (and concurrent test binaries) never share a bridge, subnet or cgroup.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};

use crate::host::{clear_cgroup_tree, delete_link, log_tail, sigkill, unmount_all_under};
use crate::pods::pids_mentioning;
use crate::Berthd;

pub struct Node {
    /// This node's number in the test binary.
    pub n: u32,
    pub berthd: Berthd,
    /// The CNI bridge (at most 15 characters).
    pub bridge: String,
    /// The CNI network's name (host-local keeps its IPs under it).
    pub net_name: String,
    /// The first three octets of the node's /24, e.g. `10.231.5`.
    pub prefix: String,
    /// The cgroup root berth creates pods under; the guard empties it.
    pub cgroup_root: String,
}

impl Node {
    /// Starts berthd and writes a bridge network (host-local IPAM on the
    /// node's /24) followed by `extra` plugins.
    pub fn start(extra: &[Value]) -> Self {
        Self::start_with("", extra)
    }

    /// As [`Node::start`], with `config` added to berthd's config file
    /// (top-level keys first, then tables).
    pub fn start_with(config: &str, extra: &[Value]) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let cgroup_root = format!("/berth-it-{pid}-{n}");
        let config = format!(
            "cgroup_driver = \"cgroupfs\"\ndefault_cgroup_parent = \"{cgroup_root}/default\"\n{config}\n"
        );
        let node = Self {
            n,
            berthd: Berthd::start(&config),
            bridge: format!("bt{}x{n}", pid % 1000),
            net_name: format!("berth-it-{n}"),
            prefix: format!("10.{}.{n}", 200 + pid % 50),
            cgroup_root,
        };
        assert!(node.bridge.len() <= 15, "{}", node.bridge);
        node.write_network(node.default_range(), extra);
        node
    }

    /// A cgroup root the test creates itself before berth sees it.
    pub fn preexisting_root(&self) -> String {
        format!("{}-pre", self.cgroup_root)
    }

    pub fn ipam_dir(&self) -> std::path::PathBuf {
        self.berthd.sandbox.dir.path().join("ipam")
    }

    pub fn default_range(&self) -> Value {
        json!({"subnet": format!("{}.0/24", self.prefix)})
    }

    /// Writes the node's only CNI config, replacing it atomically: the
    /// bridge with host-local IPAM on `range`, then `extra`.
    pub fn write_network(&self, range: Value, extra: &[Value]) {
        let mut plugins = vec![json!({
            "type": "bridge",
            "bridge": self.bridge,
            "isGateway": true,
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "ranges": [[range]],
                "dataDir": self.ipam_dir(),
            },
        })];
        plugins.extend(extra.iter().cloned());
        let conflist = json!({
            "cniVersion": "1.0.0",
            "name": self.net_name,
            "plugins": plugins,
        });
        let dir = self.berthd.sandbox.cni_conf_dir();
        std::fs::create_dir_all(&dir).expect("CNI conf dir");
        let file = dir.join("10-berth-it.conflist");
        let tmp = dir.join(".10-berth-it.conflist.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&conflist).expect("json"))
            .expect("conflist");
        std::fs::rename(&tmp, &file).expect("conflist rename");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let dir = self.berthd.sandbox.dir.path().to_path_buf();
        if std::thread::panicking() {
            eprintln!("berthd log (last lines):\n{}", log_tail(&self.berthd));
            self.berthd.remove_all_pods_blocking();
        }
        // Shims berthd started for this test (they outlive berthd): a test
        // that left a pod running must not leave them to the machine.
        for pid in pids_mentioning(&dir.display().to_string()) {
            sigkill(pid);
        }
        // Whatever is left in this test's own cgroups was started for it.
        clear_cgroup_tree(&self.cgroup_root);
        clear_cgroup_tree(&self.preexisting_root());
        // Mounts (pins, shm, rootfs) under the temp dir.
        unmount_all_under(&dir);
        delete_link(&self.bridge);
    }
}
