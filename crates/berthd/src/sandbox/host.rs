//! What a pod sandbox's lifecycle does to the host, behind two seams: its
//! namespaces (pinned by berth-pinns, with the infra process when the pod
//! shares a PID namespace, and its /dev/shm), and its network (CNI). The
//! manager's rules (undo order, name reservations, idempotent stop and
//! remove) are unit-tested through fakes of these, without root; cgroups
//! have their own seam, `berth_cgroups::CgroupManager`.

use std::path::Path;

use async_trait::async_trait;
use berth_network::cni::{AddResult, CniConfig, CniError, NetworkConfigList, PodNetwork};

use super::namespaces::{self, PinRequest, Pinned};
use super::process;
use super::store::InfraProcess;
use super::SandboxError;

/// A pod's namespaces, its infra process and its /dev/shm.
#[async_trait]
pub trait PodNamespaces: Send + Sync {
    /// Makes and pins the namespaces `request` asks for (and the infra
    /// process); on failure nothing stays pinned.
    async fn pin(&self, request: &PinRequest) -> Result<Pinned, SandboxError>;
    /// The infra process `pid`, identified so a reused pid is never killed;
    /// `None` if it is gone.
    fn identify(&self, pid: i32) -> Option<InfraProcess>;
    /// Lowers the infra process's `oom_score_adj` as far as the host allows.
    fn clamp_oom_score_adj(&self, pid: i32, wanted: i32);
    /// Kills the infra process and waits for it to be gone.
    async fn kill_and_wait(&self, infra: &InfraProcess);
    /// Kills what a run that was never recorded may have left running: a
    /// berth-pinns still at work on `ns_dir`, and an infra process
    /// chrooted into `infra_root`.
    async fn kill_unrecorded(&self, ns_dir: &Path, infra_root: &Path);
    /// Mounts the pod's /dev/shm at `path` with tmpfs `options`.
    fn mount_shm(&self, path: &Path, options: &str) -> Result<(), SandboxError>;
    /// Unmounts a pin or mount and removes its mount point; gone is fine.
    fn unmount(&self, path: &Path) -> Result<(), SandboxError>;
}

/// A pod's network: CNI plugins run against its network namespace.
#[async_trait]
pub trait PodNetworks: Send + Sync {
    /// Where the network configs are.
    fn conf_dir(&self) -> &Path;
    async fn add(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
    ) -> Result<AddResult, CniError>;
    /// Idempotent, also after a crash (CNI DEL).
    async fn del(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
        prev_result: Option<&serde_json::Value>,
    ) -> Result<(), CniError>;
}

/// berth-pinns, exec'd (berthd never forks), and real mounts.
pub struct Pinns {
    /// berth-pinns, run through a view containers cannot write: it stays
    /// as the infra process of a pod sharing its PID namespace.
    pub binary: crate::helper_binary::HelperBinary,
}

#[async_trait]
impl PodNamespaces for Pinns {
    async fn pin(&self, request: &PinRequest) -> Result<Pinned, SandboxError> {
        namespaces::pin(&self.binary, request).await
    }

    fn identify(&self, pid: i32) -> Option<InfraProcess> {
        process::identify(pid)
    }

    fn clamp_oom_score_adj(&self, pid: i32, wanted: i32) {
        process::clamp_oom_score_adj(pid, wanted)
    }

    async fn kill_and_wait(&self, infra: &InfraProcess) {
        process::kill_and_wait(infra).await
    }

    async fn kill_unrecorded(&self, ns_dir: &Path, infra_root: &Path) {
        // berth-pinns first: it may still fork the infra process.
        let pinns = crate::procs::with_argument("berth-pinns", "--dir", ns_dir);
        crate::procs::kill_and_wait(&pinns).await;
        crate::procs::kill_and_wait(&crate::procs::rooted_at(infra_root)).await;
    }

    fn mount_shm(&self, path: &Path, options: &str) -> Result<(), SandboxError> {
        namespaces::mount_shm(path, options)
    }

    fn unmount(&self, path: &Path) -> Result<(), SandboxError> {
        namespaces::unmount(path)
    }
}

#[async_trait]
impl PodNetworks for CniConfig {
    fn conf_dir(&self) -> &Path {
        &self.conf_dir
    }

    async fn add(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
    ) -> Result<AddResult, CniError> {
        CniConfig::add(self, network, pod).await
    }

    async fn del(
        &self,
        network: &NetworkConfigList,
        pod: &PodNetwork,
        prev_result: Option<&serde_json::Value>,
    ) -> Result<(), CniError> {
        CniConfig::del(self, network, pod, prev_result).await
    }
}
