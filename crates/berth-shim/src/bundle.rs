//! What the shim itself needs from the bundle's `config.json` (libcontainer
//! reads the rest): the cgroup to watch for OOM kills, whether the container
//! has its own PID namespace, and the process, seccomp profile and user
//! namespace exec inherits.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use libcontainer::oci_spec::runtime::{LinuxNamespaceType, LinuxSeccomp, Process, Spec};

use crate::exec_userns::ContainerUserns;

#[derive(Debug, thiserror::Error)]
#[error("cannot load {path}: {source}")]
pub struct BundleError {
    path: PathBuf,
    source: libcontainer::oci_spec::OciSpecError,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleInfo {
    pub cgroups_path: Option<PathBuf>,
    /// The spec asks for a new PID namespace. Without one the container's
    /// processes do not die with its init, so the shim kills them (as
    /// containerd does when the init of such a container exits).
    pub own_pid_namespace: bool,
    pub terminal: bool,
    /// The container's process: exec starts from it (as containerd's exec
    /// does), replacing args and, if asked, env, cwd and user.
    pub process: Process,
    /// libcontainer's exec does not apply it by itself.
    pub seccomp: Option<LinuxSeccomp>,
    /// Env values that are not UTF-8, exact (`<bundle>/raw-env`).
    pub raw_env: Vec<(OsString, OsString)>,
    /// The user namespace the container joins (its pod's), which exec'd
    /// processes must join too.
    pub user_namespace: Option<ContainerUserns>,
    /// The host gid the container's root group maps to, in a user
    /// namespace: that group may search the container's state dir.
    pub userns_root_gid: Option<u32>,
    /// The spec has poststop hooks (CDI may add them): deleting the
    /// container then goes through libcontainer, which runs them.
    pub poststop_hooks: bool,
    /// Every host path the create reads: the rootfs (made absolute against
    /// the bundle), mount sources and namespace paths (see `mount_view`).
    pub host_paths: Vec<PathBuf>,
    /// The paths of `host_paths` whose mounts must stay in their peer
    /// groups: sources of mounts with shared or slave propagation.
    pub propagated_paths: Vec<PathBuf>,
    /// Some mount, or the rootfs, is shared: the container's mounts must
    /// reach the host (Bidirectional propagation).
    pub shares_with_host: bool,
}

/// Mount options that keep a mount in its peer group or under its master.
fn propagates(option: &str) -> bool {
    matches!(option, "shared" | "rshared" | "slave" | "rslave")
}

/// Mount options and rootfs propagation modes that send mount events back
/// to the host.
fn shares(option: &str) -> bool {
    matches!(option, "shared" | "rshared")
}

impl BundleInfo {
    pub fn load(bundle: &Path) -> Result<Self, BundleError> {
        let path = bundle.join("config.json");
        let spec = Spec::load(&path).map_err(|source| BundleError { path, source })?;
        let mut info = Self::from_spec(&spec);
        info.host_paths = info
            .host_paths
            .iter()
            .map(|path| bundle.join(path))
            .collect();
        info.propagated_paths = info
            .propagated_paths
            .iter()
            .map(|path| bundle.join(path))
            .collect();
        let raw_path = berth_shim_api::raw_env::path(bundle);
        match std::fs::read(&raw_path) {
            Ok(bytes) => info.raw_env = berth_shim_api::raw_env::decode(&bytes),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(BundleError {
                    path: raw_path,
                    source: libcontainer::oci_spec::OciSpecError::Io(err),
                })
            }
        }
        Ok(info)
    }

    pub fn from_spec(spec: &Spec) -> Self {
        let linux = spec.linux().as_ref();
        let rootfs = spec.root().as_ref().map(|root| root.path().clone());
        let mut host_paths: Vec<PathBuf> = rootfs.iter().cloned().collect();
        let mut propagated_paths = Vec::new();
        // A slave rootfs only lets the container's bind mounts stay slaves
        // of their sources; a shared one sends its mounts to the host.
        let mut shares_with_host = linux
            .and_then(|l| l.rootfs_propagation().as_deref())
            .is_some_and(shares);
        for mount in spec.mounts().iter().flatten() {
            let options = mount.options().iter().flatten();
            shares_with_host |= options.clone().any(|option| shares(option));
            let Some(source) = mount.source() else {
                continue;
            };
            host_paths.push(source.clone());
            if options.into_iter().any(|option| propagates(option)) {
                propagated_paths.push(source.clone());
            }
        }
        host_paths.extend(
            linux
                .and_then(|l| l.namespaces().as_ref())
                .into_iter()
                .flatten()
                .filter_map(|ns| ns.path().clone()),
        );
        let own_pid_namespace = linux
            .and_then(|l| l.namespaces().as_ref())
            .map(|nss| {
                nss.iter()
                    .any(|ns| ns.typ() == LinuxNamespaceType::Pid && ns.path().is_none())
            })
            .unwrap_or(false);
        let process = spec.process().clone().unwrap_or_default();
        let user_namespace = linux
            .and_then(|l| l.namespaces().as_ref())
            .and_then(|nss| {
                nss.iter()
                    .find(|ns| ns.typ() == LinuxNamespaceType::User)
                    .and_then(|ns| ns.path().clone())
            })
            .map(|path| ContainerUserns {
                path,
                uid_mappings: linux
                    .and_then(|l| l.uid_mappings().clone())
                    .unwrap_or_default(),
            });
        let userns_root_gid = user_namespace.as_ref().and_then(|_| {
            let mappings = linux
                .and_then(|l| l.gid_mappings().clone())
                .unwrap_or_default();
            crate::exec_userns::host_id(&mappings, 0)
        });
        Self {
            cgroups_path: linux.and_then(|l| l.cgroups_path().clone()),
            userns_root_gid,
            own_pid_namespace,
            terminal: process.terminal().unwrap_or(false),
            process,
            seccomp: linux.and_then(|l| l.seccomp().clone()),
            raw_env: Vec::new(),
            user_namespace,
            poststop_hooks: spec
                .hooks()
                .as_ref()
                .and_then(|h| h.poststop().as_ref())
                .is_some_and(|hooks| !hooks.is_empty()),
            host_paths,
            propagated_paths,
            shares_with_host,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Spec {
        serde_json::from_str(json).expect("spec")
    }

    #[test]
    fn reads_the_fields_the_shim_uses() {
        let s = spec(
            r#"{
              "ociVersion": "1.0.2",
              "process": {"terminal": true, "user": {"uid": 1000, "gid": 100, "additionalGids": [5]},
                          "args": ["sh"], "cwd": "/work"},
              "root": {"path": "rootfs"},
              "linux": {"cgroupsPath": "/pod/c1",
                        "namespaces": [{"type": "pid"}, {"type": "mount"}],
                        "seccomp": {"defaultAction": "SCMP_ACT_ALLOW"}}
            }"#,
        );
        let info = BundleInfo::from_spec(&s);
        assert_eq!(info.cgroups_path, Some(PathBuf::from("/pod/c1")));
        assert!(info.own_pid_namespace);
        assert!(info.terminal);
        assert_eq!(info.process.user().uid(), 1000);
        assert_eq!(info.process.cwd(), &PathBuf::from("/work"));
        // absent stays absent (oci-spec's Default would say true)
        assert_eq!(info.process.no_new_privileges(), None);
        assert!(info.seccomp.is_some());
        assert_eq!(info.user_namespace, None);
    }

    #[test]
    fn a_joined_user_namespace_is_what_exec_joins() {
        let s = spec(
            r#"{
              "ociVersion": "1.0.2",
              "process": {"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
              "root": {"path": "rootfs"},
              "linux": {"namespaces": [{"type": "user", "path": "/run/berth/ns/p1/user"},
                                       {"type": "mount"}],
                        "uidMappings": [{"containerID": 0, "hostID": 65536, "size": 65536}]}
            }"#,
        );
        let userns = BundleInfo::from_spec(&s).user_namespace.expect("joined");
        assert_eq!(userns.path, PathBuf::from("/run/berth/ns/p1/user"));
        assert_eq!(
            crate::exec_userns::host_id(&userns.uid_mappings, 0),
            Some(65536)
        );
    }

    #[test]
    fn shared_pid_namespace_is_not_own() {
        let s = spec(
            r#"{
              "ociVersion": "1.0.2",
              "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/"},
              "root": {"path": "rootfs"},
              "linux": {"namespaces": [{"type": "pid", "path": "/proc/1/ns/pid"}]}
            }"#,
        );
        let info = BundleInfo::from_spec(&s);
        assert!(!info.own_pid_namespace);
        assert!(!info.terminal);
        assert_eq!(info.cgroups_path, None);
    }

    #[test]
    fn missing_config_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = BundleInfo::load(dir.path()).expect_err("no config");
        assert!(err.to_string().contains("config.json"), "{err}");
    }
}
