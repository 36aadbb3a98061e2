//! Where berth keeps things on disk, in one place.

use std::path::{Path, PathBuf};

/// Directories under the persistent root (`root_dir`, default `/var/lib/berth`).
#[derive(Debug, Clone)]
pub struct RootLayout {
    root: PathBuf,
}

impl RootLayout {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    /// The image store: blobs, unpacked layers and the image index. Its usage
    /// is the image filesystem reported by `ImageFsInfo`.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// Writable container layers, reported as the container filesystem.
    pub fn containers(&self) -> PathBuf {
        self.root.join("containers")
    }

    /// One directory per pod: its hostname, hosts and resolv.conf. On
    /// disk, not in the state dir's tmpfs: containers in a user namespace
    /// bind them idmapped, and kernels before 6.3 cannot idmap tmpfs.
    pub fn pods(&self) -> PathBuf {
        self.root.join("pods")
    }

    /// Every directory the daemon creates at start-up.
    pub fn all(&self) -> [PathBuf; 4] {
        [
            self.root.clone(),
            self.images(),
            self.containers(),
            self.pods(),
        ]
    }
}

/// Files and directories under the runtime state dir (`state_dir`, default
/// `/run/berth`): gone at reboot, as the processes they describe are.
#[derive(Debug, Clone)]
pub struct StateLayout {
    dir: PathBuf,
}

impl StateLayout {
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// One record per container.
    pub fn containers(&self) -> PathBuf {
        self.dir.join("containers")
    }

    /// One record per pod sandbox.
    pub fn sandboxes(&self) -> PathBuf {
        self.dir.join("sandboxes")
    }

    /// libcontainer's state root, shared by every shim.
    pub fn runtime_root(&self) -> PathBuf {
        self.dir.join("runtime")
    }

    /// The state root (`--root`) of the OCI runtime of handler `name`,
    /// unless its config names another.
    pub fn handler_root(&self, name: &str) -> PathBuf {
        self.dir.join("runtimes").join(name)
    }

    /// One directory per shim: its socket, pid, exit and log files.
    pub fn shims(&self) -> PathBuf {
        self.dir.join("shims")
    }

    /// The pinned namespaces of pods.
    pub fn namespaces(&self) -> PathBuf {
        self.dir.join("ns")
    }

    /// Every directory the daemon creates at start-up.
    pub fn all(&self) -> [PathBuf; 6] {
        [
            self.dir.clone(),
            self.containers(),
            self.sandboxes(),
            self.runtime_root(),
            self.shims(),
            self.namespaces(),
        ]
    }

    /// The cgroup parents berth created, so it removes only those.
    pub fn cgroup_parents(&self) -> PathBuf {
        self.dir.join("cgroup-parents.json")
    }
}
