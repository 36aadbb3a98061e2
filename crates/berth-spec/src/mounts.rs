//! Bind mounts from the CRI config (and the sandbox's files), merged with
//! the default system mounts.
//!
//! As in containerd's `WithMounts`:
//! - a CRI mount replaces a default mount at the same destination and
//!   every default mount below it (`/dev/pts` with `/dev`, the cgroup v1
//!   hierarchies with `/sys/fs/cgroup`): they would be hidden, or mounted
//!   over it;
//! - bind mounts are sorted by depth (stably), so `/a` is mounted before
//!   `/a/b` and never hides it;
//! - propagation PRIVATE, HOST_TO_CONTAINER and BIDIRECTIONAL become
//!   `rprivate`, `rslave` and `rshared`; the last two need the host mount
//!   to be shared (or a slave), else nothing would ever propagate, and they
//!   make the root's propagation `slave`/`shared` too (the runtime spec's
//!   `rootfsPropagation` values, applied recursively; berth's default
//!   runtime refuses runc's `rslave`/`rshared` spellings there);
//! - `recursive_read_only` becomes `rro`, and needs `readonly` and private
//!   propagation (critest checks both refusals);
//! - `mount_options` (KEP-5855) `noexec`, `nodev` and `nosuid` are added to
//!   the bind's options (the kernel applies them to the new mount only);
//!   any other option is refused rather than silently dropped.
//!
//! Host paths must exist: berth creates nothing on the host (kubelet has
//! already created `DirectoryOrCreate` volumes), and a missing path is an
//! error naming it. Symlinks are resolved, so the source is the real path.

use std::path::{Component, Path};

use cri_api::v1::{Mount as CriMount, MountPropagation};
use oci_spec::runtime::Mount;

use crate::error::SpecError;
use crate::host::{HostLookup, HostPropagation};
use crate::userns::{IdRange, PodUserNamespace};

/// Mounts of the spec, and the root propagation they need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountPlan {
    pub mounts: Vec<Mount>,
    /// `shared` or `slave` when a mount propagates; else the default.
    pub rootfs_propagation: Option<String>,
}

/// The files below /proc a bind mount may replace: those lxcfs emulates,
/// as runc's proc-safety check allows (`checkProcMount`).
const PROC_FILES_ALLOWED: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/diskstats",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/swaps",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/slabinfo",
    "/proc/net/dev",
    "/proc/sys/kernel/ns_last_pid",
];
const PROC_FILES_ALLOWED_TEXT: &str = "cpuinfo, diskstats, meminfo, stat, swaps, uptime, \
loadavg, slabinfo, net/dev, sys/kernel/ns_last_pid";

/// Refuses a bind mount at /proc or inside it, except the lxcfs files. The
/// destination is cleaned lexically first (`//proc/./sys/`, `/x/../proc`);
/// symlinks inside the image are resolved in the rootfs later, where the
/// same destinations stay refused.
pub fn check_proc_safety(destination: &str) -> Result<(), SpecError> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in Path::new(destination).components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::ParentDir => {
                parts.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    if parts.first().is_none_or(|first| *first != "proc") {
        return Ok(());
    }
    let clean: std::path::PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
        .chain(parts.iter().copied())
        .collect();
    if PROC_FILES_ALLOWED
        .iter()
        .any(|allowed| clean == Path::new(allowed))
    {
        return Ok(());
    }
    Err(SpecError::MountInsideProc(
        destination.to_string(),
        PROC_FILES_ALLOWED_TEXT,
    ))
}

/// The `mount_options` berth applies to a bind mount: exactly the set
/// kubelet's API validation admits (`BindMountOption`).
pub const BIND_MOUNT_OPTIONS: &[&str] = &["noexec", "nodev", "nosuid"];

/// `mount.mount_options` checked against [`BIND_MOUNT_OPTIONS`], each once.
fn extra_bind_options(mount: &CriMount) -> Result<Vec<String>, SpecError> {
    let mut options: Vec<String> = Vec::new();
    for option in &mount.mount_options {
        if !BIND_MOUNT_OPTIONS.contains(&option.as_str()) {
            return Err(SpecError::UnsupportedMountOption {
                option: option.clone(),
                destination: mount.container_path.clone(),
                supported: "noexec, nodev, nosuid",
            });
        }
        if !options.contains(option) {
            options.push(option.clone());
        }
    }
    Ok(options)
}

/// Converts one CRI mount to an OCI bind mount, with the root propagation
/// it asks for (`None`: private).
pub fn bind_mount(
    mount: &CriMount,
    host: &dyn HostLookup,
) -> Result<(Mount, Option<&'static str>), SpecError> {
    let destination = &mount.container_path;
    if !destination.starts_with('/') {
        return Err(SpecError::RelativeMountDestination(destination.clone()));
    }
    check_proc_safety(destination)?;
    let extra_options = extra_bind_options(mount)?;
    if mount.host_path.is_empty() && mount.image.is_some() {
        return Err(SpecError::ImageVolumeUnresolved(destination.clone()));
    }
    let propagation = MountPropagation::try_from(mount.propagation)
        .map_err(|_| SpecError::UnknownPropagation(mount.propagation, mount.host_path.clone()))?;
    if mount.recursive_read_only {
        if !mount.readonly {
            return Err(SpecError::RecursiveReadOnlyNeedsReadOnly(
                mount.host_path.clone(),
            ));
        }
        if propagation != MountPropagation::PropagationPrivate {
            return Err(SpecError::RecursiveReadOnlyNeedsPrivate {
                host_path: mount.host_path.clone(),
                propagation: propagation.as_str_name(),
            });
        }
    }

    let source = host
        .resolve(Path::new(&mount.host_path))
        .map_err(|source| SpecError::MountSource {
            path: mount.host_path.clone().into(),
            source,
        })?;
    let (option, root) = match propagation {
        MountPropagation::PropagationPrivate => ("rprivate", None),
        MountPropagation::PropagationHostToContainer => ("rslave", Some("slave")),
        MountPropagation::PropagationBidirectional => ("rshared", Some("shared")),
    };
    if let Some(root) = root {
        let host_propagation = host
            .propagation(&source)
            .map_err(|err| SpecError::MountSource {
                path: source.clone(),
                source: err,
            })?;
        let possible = match host_propagation {
            HostPropagation::Shared => true,
            HostPropagation::Slave => root == "slave",
            HostPropagation::Private => false,
        };
        if !possible {
            return Err(SpecError::PropagationNotPossible {
                path: source,
                wanted: if root == "shared" {
                    "shared"
                } else {
                    "shared or slave"
                },
                propagation: propagation.as_str_name(),
            });
        }
    }
    let access = match (mount.readonly, mount.recursive_read_only) {
        (true, true) => "rro",
        (true, false) => "ro",
        (false, _) => "rw",
    };
    let mut options = vec!["rbind".to_string(), option.into(), access.into()];
    options.extend(extra_options);
    let mut oci = Mount::default();
    oci.set_destination(destination.into())
        .set_typ(Some("bind".into()))
        .set_source(Some(source))
        .set_options(Some(options));
    Ok((oci, root))
}

/// Checks the mounts' own ID mappings. kubelet gives every mount of a
/// `hostUsers: false` pod the pod's mappings; berthd idmaps each bind of
/// such a pod through the pod's user namespace, so exactly those are
/// honoured. Mappings on a pod without one, or other mappings, are not.
pub fn check_mount_idmaps(
    mounts: &[CriMount],
    userns: Option<&PodUserNamespace>,
) -> Result<(), SpecError> {
    for mount in mounts {
        if mount.uid_mappings.is_empty() && mount.gid_mappings.is_empty() {
            continue;
        }
        let refused = |reason| SpecError::IdMappedMount {
            destination: mount.container_path.clone(),
            reason,
        };
        let Some(userns) = userns else {
            return Err(refused(
                "need a pod with its own user namespace (userns_options mode POD)",
            ));
        };
        let is_pods = |mappings: &[cri_api::v1::IdMapping], range: IdRange| {
            matches!(mappings, [only] if only.container_id == range.container_id
                && only.host_id == range.host_id
                && only.length == range.length)
        };
        if !is_pods(&mount.uid_mappings, userns.uids) || !is_pods(&mount.gid_mappings, userns.gids)
        {
            return Err(refused(
                "must be the pod's user namespace mappings: berth idmaps volumes through it alone",
            ));
        }
    }
    Ok(())
}

/// All mounts of the container: `defaults` (system mounts) minus those the
/// CRI or extra mounts replace, then the bind mounts sorted by depth.
/// `extra` are runtime mounts (the sandbox's files); a CRI mount at the
/// same destination wins over them.
pub fn container_mounts(
    defaults: Vec<Mount>,
    cri: &[CriMount],
    extra: &[CriMount],
    host: &dyn HostLookup,
) -> Result<MountPlan, SpecError> {
    let cri_destinations: Vec<String> = cri.iter().map(|m| clean_path(&m.container_path)).collect();
    let mut binds: Vec<&CriMount> = cri.iter().collect();
    binds.extend(
        extra
            .iter()
            .filter(|m| !cri_destinations.contains(&clean_path(&m.container_path))),
    );
    // Stable: equal depths keep their CRI order.
    binds.sort_by_key(|m| depth(&m.container_path));

    let bind_destinations: Vec<String> = binds
        .iter()
        .map(|m| clean_path(&m.container_path))
        .collect();
    let default_destinations: Vec<String> = defaults
        .iter()
        .map(|m| clean_path(&m.destination().to_string_lossy()))
        .collect();
    let replaced_roots: Vec<String> = default_destinations
        .iter()
        .filter(|d| bind_destinations.contains(d))
        .map(|d| format!("{d}/"))
        .collect();
    let mut plan = MountPlan::default();
    for (mount, destination) in defaults.into_iter().zip(default_destinations) {
        let replaced = bind_destinations.contains(&destination)
            || replaced_roots
                .iter()
                .any(|root| destination.starts_with(root));
        if !replaced {
            plan.mounts.push(mount);
        }
    }
    for mount in binds {
        let (oci, root) = bind_mount(mount, host)?;
        plan.mounts.push(oci);
        plan.rootfs_propagation = match (plan.rootfs_propagation.as_deref(), root) {
            (Some("shared"), _) | (_, None) => plan.rootfs_propagation,
            (_, Some(root)) => Some(root.to_string()),
        };
    }
    Ok(plan)
}

/// Lexically cleaned absolute path (`/a//b/../c/` → `/a/c`), for comparing
/// destinations as the kernel would see them.
pub fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str().unwrap_or_default()),
            Component::ParentDir => {
                parts.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    format!("/{}", parts.join("/"))
}

/// Number of components of a destination: `/` is 0, `/a/b` is 2.
fn depth(path: &str) -> usize {
    clean_path(path)
        .split('/')
        .filter(|part| !part.is_empty())
        .count()
}

#[cfg(test)]
#[path = "mounts_tests.rs"]
mod tests;
