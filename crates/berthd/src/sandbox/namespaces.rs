//! A pod's namespaces: made and pinned by berth-pinns (exec'd, so berthd
//! never forks), released by unmounting the pins.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use berth_spec::userns::{IdRange, PodUserNamespace};
use cri_api::v1::NamespaceMode;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::SandboxError;

/// berth-pinns' exit status when a sysctl of the request is malformed or
/// refused by the kernel (its `EXIT_REFUSED`), as opposed to a host failure.
const PINNS_REFUSED: i32 = 2;

/// What berth-pinns is asked to make.
#[derive(Debug, Clone)]
pub struct PinRequest {
    pub dir: PathBuf,
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    pub pid: bool,
    pub hostname: Option<String>,
    pub sysctls: Vec<String>,
    pub infra_root: PathBuf,
    /// A user namespace with these mappings, owning the other namespaces.
    pub userns: Option<PodUserNamespace>,
}

/// What berth-pinns made.
#[derive(Debug, Clone, Default)]
pub struct Pinned {
    pub namespaces: HashMap<String, PathBuf>,
    pub infra_pid: Option<i32>,
}

/// Runs berth-pinns. On failure nothing stays pinned.
pub async fn pin(
    pinns: &crate::helper_binary::HelperBinary,
    request: &PinRequest,
) -> Result<Pinned, SandboxError> {
    let mut command = pinns.command();
    command.arg("--dir").arg(&request.dir);
    for (asked, flag) in [
        (request.net, "--net"),
        (request.ipc, "--ipc"),
        (request.uts, "--uts"),
        (request.pid, "--pid"),
    ] {
        if asked {
            command.arg(flag);
        }
    }
    if let Some(hostname) = &request.hostname {
        command.arg("--hostname").arg(hostname);
    }
    for sysctl in &request.sysctls {
        command.arg("--sysctl").arg(sysctl);
    }
    if request.pid {
        command.arg("--infra-root").arg(&request.infra_root);
    }
    if let Some(userns) = &request.userns {
        let arg =
            |range: IdRange| format!("{}:{}:{}", range.container_id, range.host_id, range.length);
        command
            .arg("--uid-map")
            .arg(arg(userns.uids))
            .arg("--gid-map")
            .arg(arg(userns.gids))
            .arg("--infra-id")
            .arg(userns.infra_id().to_string());
    }
    let output = command
        .output()
        .await
        .map_err(|source| SandboxError::PinnsSpawn {
            binary: pinns.path().to_path_buf(),
            source,
        })?;
    let mut pinned = Pinned::default();
    for (asked, name) in [
        (request.userns.is_some(), "user"),
        (request.net, "net"),
        (request.ipc, "ipc"),
        (request.uts, "uts"),
        (request.pid, "pid"),
    ] {
        let path = request.dir.join(name);
        if asked && path.exists() {
            pinned.namespaces.insert(name.to_string(), path);
        }
    }
    if !output.status.success() {
        // The journal's entry for the pins releases what stays.
        for path in pinned.namespaces.values() {
            if let Err(err) = unmount(path) {
                tracing::warn!(error = %err, "releasing a pin of a failed berth-pinns");
            }
        }
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if output.status.code() == Some(PINNS_REFUSED) {
            return Err(SandboxError::SysctlRefused { stderr });
        }
        return Err(SandboxError::PinFailed { stderr });
    }
    let infra = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse::<i32>()
        .unwrap_or(0);
    pinned.infra_pid = (infra > 0).then_some(infra);
    Ok(pinned)
}

/// Sysctls as `key=value`, each checked against the namespaces the pod
/// really has: a sysctl of a namespace shared with the host would change
/// the host, so it is refused.
pub fn check_sysctls(
    sysctls: &HashMap<String, String>,
    network: NamespaceMode,
    ipc: NamespaceMode,
) -> Result<Vec<String>, SandboxError> {
    let mut checked = Vec::new();
    let mut keys: Vec<_> = sysctls.keys().collect();
    keys.sort();
    for key in keys {
        let normalized = key.replace('/', ".");
        let namespace = sysctl_namespace(&normalized)
            .ok_or_else(|| SandboxError::SysctlNotNamespaced { key: key.clone() })?;
        let shared = match namespace {
            "net" => network == NamespaceMode::Node,
            _ => ipc == NamespaceMode::Node,
        };
        if shared {
            return Err(SandboxError::SysctlOfHostNamespace {
                key: key.clone(),
                namespace,
            });
        }
        checked.push(format!("{key}={}", sysctls[key]));
    }
    Ok(checked)
}

/// Which namespace a sysctl belongs to, per the kernel (and kubelet's list).
fn sysctl_namespace(key: &str) -> Option<&'static str> {
    if key.starts_with("net.") {
        return Some("net");
    }
    let ipc = [
        "kernel.shmmax",
        "kernel.shmall",
        "kernel.shmmni",
        "kernel.shm_rmid_forced",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
    ];
    if ipc.contains(&key) || key.starts_with("fs.mqueue.") {
        return Some("ipc");
    }
    None
}

/// Mounts the pod's /dev/shm tmpfs at `path`, with tmpfs `options` (its
/// size, and its owner in a pod with a user namespace).
pub fn mount_shm(path: &Path, options: &str) -> Result<(), SandboxError> {
    std::fs::create_dir_all(path).map_err(|err| SandboxError::io("shm dir", err))?;
    mount(
        Some("shm"),
        path,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(format!("mode=1777,{options}").as_str()),
    )
    .map_err(|source| SandboxError::ShmMount {
        path: path.to_path_buf(),
        source,
    })
}

/// Unmounts a pin or mount and removes the mount point; already gone is fine.
pub fn unmount(path: &Path) -> Result<(), SandboxError> {
    let failed = |source: std::io::Error| SandboxError::Unmount {
        path: path.to_path_buf(),
        source,
    };
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => {}
        Err(err) => return Err(failed(err.into())),
    }
    let removed = if path.is_dir() {
        std::fs::remove_dir(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(failed(err)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysctls(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn namespaced_sysctls_pass_in_order() {
        let checked = check_sysctls(
            &sysctls(&[
                ("net.ipv4.ip_forward", "1"),
                ("kernel.shm_rmid_forced", "1"),
            ]),
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        )
        .unwrap();
        assert_eq!(
            checked,
            ["kernel.shm_rmid_forced=1", "net.ipv4.ip_forward=1"]
        );
    }

    #[test]
    fn node_wide_sysctls_are_refused() {
        let err = check_sysctls(
            &sysctls(&[("vm.swappiness", "1")]),
            NamespaceMode::Pod,
            NamespaceMode::Pod,
        )
        .unwrap_err();
        assert!(matches!(err, SandboxError::SysctlNotNamespaced { .. }));
        assert!(err.to_string().contains("vm.swappiness"));
    }

    #[test]
    fn sysctls_of_host_namespaces_are_refused() {
        assert!(check_sysctls(
            &sysctls(&[("net.core.somaxconn", "1")]),
            NamespaceMode::Node,
            NamespaceMode::Pod
        )
        .is_err());
        assert!(check_sysctls(
            &sysctls(&[("kernel.msgmax", "1")]),
            NamespaceMode::Pod,
            NamespaceMode::Node
        )
        .is_err());
        assert!(check_sysctls(
            &sysctls(&[("fs.mqueue.msg_max", "1")]),
            NamespaceMode::Node,
            NamespaceMode::Pod
        )
        .is_ok());
    }
}
