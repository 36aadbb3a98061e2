//! The container's namespaces, and the pod sysctls that live in them.
//!
//! - Network, IPC and UTS always follow the sandbox: a container cannot
//!   have another network than its pod. The sandbox pinned them under
//!   `/run/berth/ns/`; a sandbox on the host's network (or IPC) has no pin
//!   there, and the container then stays in the host's. (containerd does
//!   the same by joining the sandbox process's namespaces.)
//! - PID is the container's own choice: POD joins the pod's pinned PID
//!   namespace, CONTAINER gets a new one, NODE stays in the host's, and
//!   TARGET joins the namespace of another running container through its
//!   init process, `/proc/<pid>/ns/pid` (ephemeral debug containers).
//! - Mount is always new. Cgroup is new on cgroup v2 for unprivileged
//!   containers, so they see their own cgroup as the root; on v1 (and for
//!   privileged containers) it stays the host's, as in containerd.
//! - User follows the sandbox too: a pod with userns mode POD pinned its
//!   user namespace, which owns the pod's other namespaces, so every
//!   container joins it (see [`crate::userns`]). A container may repeat its
//!   pod's mode, never ask for another.

use std::collections::HashMap;
use std::path::PathBuf;

use cri_api::v1::{NamespaceMode, NamespaceOption, PodSandboxConfig};
use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

use crate::error::SpecError;

/// The sandbox's namespaces, as the runtime pinned them. `None` means the
/// sandbox uses the host's namespace of that kind (or, for `pid`, that the
/// pod shares no PID namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxNamespaces {
    pub network: Option<PathBuf>,
    pub ipc: Option<PathBuf>,
    pub uts: Option<PathBuf>,
    pub pid: Option<PathBuf>,
    /// The pod's user namespace, for a pod with userns mode POD.
    pub user: Option<PathBuf>,
    /// Init pid of the container named by `target_id`, for PID TARGET.
    pub target_pid: Option<u32>,
}

/// The namespaces of a container's spec.
///
/// `sandbox_pid_mode` is the pod's own PID mode: a container asking for
/// POD in a pod that shares none (kubelet never sends that, crictl users
/// may) gets a new PID namespace, or the host's when the pod uses NODE.
pub fn container_namespaces(
    options: Option<&NamespaceOption>,
    sandbox_pid_mode: NamespaceMode,
    sandbox: &SandboxNamespaces,
    new_cgroup_namespace: bool,
) -> Result<Vec<LinuxNamespace>, SpecError> {
    let default_options = NamespaceOption::default();
    let options = options.unwrap_or(&default_options);
    check_user_namespace(options, sandbox.user.is_some())?;
    let pid_mode = NamespaceMode::try_from(options.pid).map_err(|_| SpecError::NamespaceMode {
        kind: "pid",
        mode: options.pid,
    })?;

    let mut namespaces = Vec::new();
    if let Some(path) = &sandbox.user {
        namespaces.push(namespace(LinuxNamespaceType::User, Some(path.clone())));
    }
    let pid = match pid_mode {
        NamespaceMode::Pod => match (&sandbox.pid, sandbox_pid_mode) {
            (Some(path), _) => Some(Some(path.clone())),
            (None, NamespaceMode::Node) => None,
            (None, _) => Some(None),
        },
        NamespaceMode::Container => Some(None),
        NamespaceMode::Node => None,
        NamespaceMode::Target => {
            let pid = sandbox
                .target_pid
                .ok_or_else(|| SpecError::MissingTargetPid(options.target_id.clone()))?;
            Some(Some(PathBuf::from(format!("/proc/{pid}/ns/pid"))))
        }
    };
    if let Some(path) = pid {
        namespaces.push(namespace(LinuxNamespaceType::Pid, path));
    }
    for (typ, path) in [
        (LinuxNamespaceType::Network, &sandbox.network),
        (LinuxNamespaceType::Ipc, &sandbox.ipc),
        (LinuxNamespaceType::Uts, &sandbox.uts),
    ] {
        if let Some(path) = path {
            namespaces.push(namespace(typ, Some(path.clone())));
        }
    }
    namespaces.push(namespace(LinuxNamespaceType::Mount, None));
    if new_cgroup_namespace {
        namespaces.push(namespace(LinuxNamespaceType::Cgroup, None));
    }
    Ok(namespaces)
}

/// A container shares its pod's user namespace: unset follows the pod,
/// NODE and POD must be the pod's own mode, CONTAINER and TARGET are
/// invalid for user namespaces (critest checks the refusal).
fn check_user_namespace(options: &NamespaceOption, pod_has_userns: bool) -> Result<(), SpecError> {
    let Some(userns) = &options.userns_options else {
        return Ok(());
    };
    let pod_mode = if pod_has_userns {
        NamespaceMode::Pod
    } else {
        NamespaceMode::Node
    };
    match NamespaceMode::try_from(userns.mode) {
        Ok(mode @ (NamespaceMode::Node | NamespaceMode::Pod)) if mode == pod_mode => Ok(()),
        Ok(mode @ (NamespaceMode::Node | NamespaceMode::Pod)) => {
            Err(SpecError::UserNamespaceOfPod {
                container: mode.as_str_name(),
                pod: pod_mode.as_str_name(),
            })
        }
        Ok(mode) => Err(SpecError::UserNamespace(mode.as_str_name())),
        Err(_) => Err(SpecError::NamespaceMode {
            kind: "user",
            mode: userns.mode,
        }),
    }
}

fn namespace(typ: LinuxNamespaceType, path: Option<PathBuf>) -> LinuxNamespace {
    let mut namespace = LinuxNamespace::default();
    namespace.set_typ(typ).set_path(path);
    namespace
}

/// The pod's sysctls that belong in the container's spec: those of a
/// namespace the container shares with the pod. The sandbox already set
/// them when it pinned the namespaces, so this repeats the same values;
/// what matters is what is left out: a `net.*` sysctl when the container
/// is on the host's network (or an IPC one with the host's IPC) would
/// change the host, and a sysctl of no namespace at all is the host's.
pub fn container_sysctls(
    sandbox_config: &PodSandboxConfig,
    namespaces: &SandboxNamespaces,
) -> HashMap<String, String> {
    let Some(linux) = &sandbox_config.linux else {
        return HashMap::new();
    };
    linux
        .sysctls
        .iter()
        .filter(|(key, _)| {
            if key.starts_with("net.") {
                namespaces.network.is_some()
            } else if is_ipc_sysctl(key) {
                namespaces.ipc.is_some()
            } else {
                false
            }
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// The IPC-namespaced sysctls (those kubelet and runc accept for IPC).
fn is_ipc_sysctl(key: &str) -> bool {
    matches!(
        key,
        "kernel.msgmax"
            | "kernel.msgmnb"
            | "kernel.msgmni"
            | "kernel.sem"
            | "kernel.shmall"
            | "kernel.shmmax"
            | "kernel.shmmni"
            | "kernel.shm_rmid_forced"
    ) || key.starts_with("fs.mqueue.")
}

#[cfg(test)]
#[path = "namespaces_tests.rs"]
mod tests;
