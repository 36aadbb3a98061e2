//! A pod's user namespace (KEP-127, `hostUsers: false`): which requests
//! berth honours, and the mappings it gives the namespace.
//!
//! - No `userns_options`, or mode NODE without mappings: the host's user
//!   namespace, as before.
//! - Mode POD: a user namespace for the whole pod, made with the sandbox's
//!   other namespaces (which it then owns), with exactly one uid and one gid
//!   mapping that starts at container id 0, as kubelet sends them. Several
//!   ranges would be legal for the kernel, but kubelet never sends them and
//!   the idmapped rootfs and volumes use the same single range (containerd
//!   refuses them too; critest checks the refusal).
//! - Mode CONTAINER and TARGET have no meaning for user namespaces.
//! - A user namespace needs the pod's own IPC and PID namespaces: mqueue
//!   and proc can only be mounted inside it when it owns them (kubelet
//!   refuses `hostIPC` and `hostPID` with `hostUsers: false` too).
//! - The host's network is allowed (KEP-5607, `hostNetwork: true` with
//!   `hostUsers: false`; berth reports `user_namespaces_host_network`): the
//!   pod's user namespace then owns no network namespace, so no sysfs can
//!   be mounted for it and containers bind the host's `/sys` read-only
//!   instead (see [`crate::system_mounts::Sysfs`]). Their capabilities are
//!   the user namespace's alone, so the host's network stays out of reach
//!   of its configuration.
//!
//! Only syntax and consistency are checked here; whether the host can do
//! it at all is the runtime handler's feature flag.

use cri_api::v1::{IdMapping, NamespaceMode, NamespaceOption};
use oci_spec::runtime::{LinuxIdMapping, LinuxIdMappingBuilder};

/// One contiguous range of ids: `length` ids from `container_id` inside
/// map to `length` ids from `host_id` outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRange {
    pub container_id: u32,
    pub host_id: u32,
    pub length: u32,
}

impl IdRange {
    /// The OCI spec's form of the range.
    pub fn to_oci(self) -> LinuxIdMapping {
        // The type has no setters; its builder cannot fail (every field
        // has a default).
        LinuxIdMappingBuilder::default()
            .container_id(self.container_id)
            .host_id(self.host_id)
            .size(self.length)
            .build()
            .unwrap_or_default()
    }

    /// The line of a `/proc/<pid>/uid_map` (or `gid_map`) file.
    pub fn map_line(self) -> String {
        format!("{} {} {}", self.container_id, self.host_id, self.length)
    }

    /// Whether container id `id` is inside the range.
    pub fn contains(self, id: u32) -> bool {
        id >= self.container_id && id - self.container_id < self.length
    }
}

/// The user namespace of a pod with userns mode POD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodUserNamespace {
    pub uids: IdRange,
    pub gids: IdRange,
}

/// The id the infra process of a userns pod would like to run as: 65535,
/// as in a pod without one.
const INFRA_ID: u32 = 65535;

impl PodUserNamespace {
    /// The host uid and gid that container root maps to: the owner the
    /// pod's own files (its /dev/shm) get, so root inside owns them.
    pub fn host_root(&self) -> (u32, u32) {
        (self.uids.host_id, self.gids.host_id)
    }

    /// The id the pod's infra process runs as inside the namespace: 65535
    /// when mapped (kubelet maps 65536 ids), else the highest id both ranges
    /// map. It must be mapped, or the infra process could not change to it.
    pub fn infra_id(&self) -> u32 {
        if self.uids.contains(INFRA_ID) && self.gids.contains(INFRA_ID) {
            return INFRA_ID;
        }
        // Both ranges start at 0 (checked at validation) and are not empty.
        self.uids.length.min(self.gids.length).saturating_sub(1)
    }
}

/// Why a pod's `userns_options` cannot be honoured. Each names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsernsError {
    #[error("namespace_options.userns_options.mode {0} is not supported for user namespaces: only NODE and POD are")]
    Mode(&'static str),
    #[error("namespace_options.userns_options.mode {0} is not a namespace mode")]
    UnknownMode(i32),
    #[error("namespace_options.userns_options: uids and gids are only for mode POD (mode NODE uses the host's user namespace)")]
    MappingsWithNode,
    #[error(
        "namespace_options.userns_options.{field}: mode POD needs exactly one mapping, got {count}"
    )]
    MappingCount { field: &'static str, count: usize },
    #[error("namespace_options.userns_options.{field}: the mapping must start at container id 0, not {container_id}")]
    RootNotMapped {
        field: &'static str,
        container_id: u32,
    },
    #[error("namespace_options.userns_options.{field}: the mapping's length is 0")]
    EmptyMapping { field: &'static str },
    #[error("namespace_options.userns_options.{field}: host id {host_id} plus length {length} passes the highest id")]
    MappingOverflow {
        field: &'static str,
        host_id: u32,
        length: u32,
    },
    #[error("namespace_options.userns_options.{field}: maps container root to host id 0, which is no user namespace isolation at all")]
    HostRoot { field: &'static str },
    #[error("namespace_options.{kind} is NODE: a pod user namespace needs the pod's own {kind} namespace")]
    HostNamespace { kind: &'static str },
    #[error(
        "namespace_options.userns_options mode POD: user namespaces are not supported on this host"
    )]
    Unsupported,
}

/// The user namespace a pod asks for: `None` for the host's.
pub fn pod_user_namespace(
    options: Option<&NamespaceOption>,
) -> Result<Option<PodUserNamespace>, UsernsError> {
    let Some(options) = options else {
        return Ok(None);
    };
    let Some(userns) = &options.userns_options else {
        return Ok(None);
    };
    match NamespaceMode::try_from(userns.mode) {
        Ok(NamespaceMode::Node) => {
            if userns.uids.is_empty() && userns.gids.is_empty() {
                Ok(None)
            } else {
                Err(UsernsError::MappingsWithNode)
            }
        }
        Ok(NamespaceMode::Pod) => {
            for (kind, mode) in [("ipc", options.ipc), ("pid", options.pid)] {
                if mode == NamespaceMode::Node as i32 {
                    return Err(UsernsError::HostNamespace { kind });
                }
            }
            Ok(Some(PodUserNamespace {
                uids: single_range("uids", &userns.uids)?,
                gids: single_range("gids", &userns.gids)?,
            }))
        }
        Ok(mode) => Err(UsernsError::Mode(mode.as_str_name())),
        Err(_) => Err(UsernsError::UnknownMode(userns.mode)),
    }
}

/// The one mapping of `field`, checked.
fn single_range(field: &'static str, mappings: &[IdMapping]) -> Result<IdRange, UsernsError> {
    let [mapping] = mappings else {
        return Err(UsernsError::MappingCount {
            field,
            count: mappings.len(),
        });
    };
    let range = IdRange {
        container_id: mapping.container_id,
        host_id: mapping.host_id,
        length: mapping.length,
    };
    if range.container_id != 0 {
        return Err(UsernsError::RootNotMapped {
            field,
            container_id: range.container_id,
        });
    }
    if range.length == 0 {
        return Err(UsernsError::EmptyMapping { field });
    }
    // The kernel keeps u32::MAX for "no id", so the last host id is below it.
    if u64::from(range.host_id) + u64::from(range.length) > u64::from(u32::MAX) {
        return Err(UsernsError::MappingOverflow {
            field,
            host_id: range.host_id,
            length: range.length,
        });
    }
    if range.host_id == 0 {
        return Err(UsernsError::HostRoot { field });
    }
    Ok(range)
}

/// Whether this kernel can run pods with a user namespace: it has user
/// namespaces (`max_user_namespaces` above 0) and overlayfs accepts
/// idmapped mounts, which it does from Linux 5.19 on.
///
/// This reads facts instead of probing (creating a user namespace and
/// idmapping an overlay) because berthd never forks and would have to exec
/// a helper at every start for an answer the kernel version already gives:
/// `FS_ALLOW_IDMAP` on overlayfs landed in 5.19 and cannot be compiled out.
/// `release` is `uname -r`; `max_user_namespaces` is the content of
/// `/proc/sys/user/max_user_namespaces`, `None` when the file is missing
/// (a kernel without `CONFIG_USER_NS`).
pub fn kernel_supports_userns(release: &str, max_user_namespaces: Option<&str>) -> bool {
    let namespaces = max_user_namespaces
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    namespaces > 0 && kernel_at_least(release, (5, 19))
}

/// Whether `release` (`6.18.44-foo`) is at least `major.minor`.
fn kernel_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release.split(['.', '-', '+']);
    let number = |part: Option<&str>| -> Option<u32> {
        let digits: String = part?.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    match (number(parts.next()), number(parts.next())) {
        (Some(have_major), Some(have_minor)) => (have_major, have_minor) >= (major, minor),
        _ => false,
    }
}

#[cfg(test)]
#[path = "userns_tests.rs"]
mod tests;
