//! The one error type of spec generation.
//!
//! Every variant names what was wrong (the path, the user, the capability)
//! so that berthd can hand the message to kubelet unchanged: it ends up in
//! `kubectl describe pod`, where "no such user" without the name is useless.

use std::io;
use std::path::PathBuf;

/// Why a CRI container config could not become an OCI spec.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Neither the config nor the image gives anything to run.
    #[error("no command specified: the container config has no command or args and the image has no entrypoint or cmd")]
    NoCommand,
    /// The working directory is not absolute (the OCI spec requires it).
    #[error("working directory {0:?} is not an absolute path")]
    RelativeWorkingDir(String),

    /// `run_as_group` without `run_as_user`/`run_as_username` (critest expects a refusal).
    #[error("run_as_group {0} is set without run_as_user or run_as_username")]
    GroupWithoutUser(i64),
    /// A uid or gid outside 0..=u32::MAX.
    #[error("{what} {value} is out of range")]
    IdOutOfRange { what: &'static str, value: i64 },
    /// A user string with more than one ':' or an empty part.
    #[error("invalid user {0:?}: expected user, uid, user:group or uid:gid")]
    InvalidUser(String),
    /// A user name that is not in the image's /etc/passwd.
    #[error("user {0:?} not found in the image's /etc/passwd")]
    UserNotFound(String),
    /// A group name that is not in the image's /etc/group.
    #[error("group {0:?} not found in the image's /etc/group")]
    GroupNotFound(String),

    /// A mount whose container path is not absolute.
    #[error("mount destination {0:?} is not an absolute path")]
    RelativeMountDestination(String),
    /// A bind mount onto procfs: it could hide what keeps the container in
    /// (`/proc/sys` read-only, masked files) or fake what the kernel says.
    #[error("mount destination {0:?} is inside /proc: only lxcfs-style files ({1}) may be mounted there")]
    MountInsideProc(String, &'static str),
    /// A mount whose host path cannot be resolved (usually: it does not exist).
    #[error("mount source {path:?}: {source}")]
    MountSource {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A `mount_options` entry berth does not apply (KEP-5855 defines
    /// `noexec`, `nodev` and `nosuid`; anything else would be ignored).
    #[error("mount_options: {option:?} on mount {destination:?} is not supported (berth applies {supported})")]
    UnsupportedMountOption {
        option: String,
        destination: String,
        supported: &'static str,
    },
    /// `recursive_read_only` on a mount that is not `readonly`.
    #[error("recursive read-only mount conflicts with a read-write mount (host path {0:?})")]
    RecursiveReadOnlyNeedsReadOnly(String),
    /// `recursive_read_only` with propagation other than PRIVATE.
    #[error("recursive read-only mount needs private propagation, got {propagation} (host path {host_path:?})")]
    RecursiveReadOnlyNeedsPrivate {
        host_path: String,
        propagation: &'static str,
    },
    /// Propagation into or out of the container needs a shared (or slave) host mount.
    #[error("mount source {path:?} must be on a {wanted} mount for {propagation} propagation")]
    PropagationNotPossible {
        path: PathBuf,
        wanted: &'static str,
        propagation: &'static str,
    },
    /// A propagation value the CRI does not define.
    #[error("unknown mount propagation {0} for host path {1:?}")]
    UnknownPropagation(i32, String),
    /// An image volume whose image the caller did not resolve to a host path.
    #[error("image volume at {0:?} has no resolved host path")]
    ImageVolumeUnresolved(String),
    /// A mount's own ID mappings berth cannot honour: it idmaps volumes
    /// through the pod's user namespace only.
    #[error("mount {destination:?}: uid_mappings and gid_mappings {reason}")]
    IdMappedMount {
        destination: String,
        reason: &'static str,
    },

    /// A device that cannot be looked up on the host.
    #[error("device {path:?}: {source}")]
    Device {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Device permissions other than a combination of r, w and m.
    #[error(
        "device {path:?}: invalid permissions {permissions:?} (expected letters from \"rwm\")"
    )]
    DevicePermissions { path: String, permissions: String },

    /// A namespace mode the CRI does not define for this kind.
    #[error("invalid {kind} namespace mode {mode}")]
    NamespaceMode { kind: &'static str, mode: i32 },
    /// PID TARGET without the target container's pid.
    #[error("PID namespace TARGET {0:?}: the target container's pid is not known")]
    MissingTargetPid(String),
    /// A user namespace mode berth cannot honour.
    #[error("user namespace mode {0} is not supported")]
    UserNamespace(&'static str),
    /// A container asking for another user namespace than its pod's.
    #[error("userns_options mode {container}: a container shares its pod's user namespace, whose mode is {pod}")]
    UserNamespaceOfPod {
        container: &'static str,
        pod: &'static str,
    },
    /// The pod's `userns_options`, invalid (checked again for each container).
    #[error(transparent)]
    PodUserNamespace(#[from] crate::userns::UsernsError),
    /// A pod with userns mode POD whose user namespace was not pinned.
    #[error("the pod asks for its own user namespace, but none was pinned for it")]
    UserNamespaceNotPinned,
    /// A privileged container in a sandbox that is not privileged.
    #[error("no privileged container allowed in a sandbox that is not privileged")]
    PrivilegedInUnprivilegedSandbox,

    /// A capability name the OCI spec does not know.
    #[error("unknown capability {0:?}")]
    UnknownCapability(String),

    /// A seccomp profile type the CRI does not define.
    #[error("unknown seccomp profile type {0}")]
    SeccompProfileType(i32),
    /// A Localhost seccomp profile path that is empty or not absolute.
    #[error("seccomp localhost profile {0:?} is not an absolute path")]
    SeccompProfilePath(String),
    /// A Localhost seccomp profile that cannot be read.
    #[error("seccomp profile {path:?}: {source}")]
    SeccompProfileRead {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A Localhost seccomp profile that is not valid JSON of the expected shape.
    #[error("seccomp profile {path:?}: {source}")]
    SeccompProfileParse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    /// An AppArmor profile type the CRI does not define.
    #[error("unknown apparmor profile type {0}")]
    AppArmorProfileType(i32),
    /// A `localhost_ref` on an AppArmor profile that is not Localhost.
    #[error("apparmor localhost_ref {localhost_ref:?} is only valid with profile type Localhost, not {profile_type}")]
    AppArmorLocalhostRef {
        localhost_ref: String,
        profile_type: &'static str,
    },
    /// An `apparmor_profile` string that is none of `runtime/default`,
    /// `unconfined`, `localhost/<name>`, or a Localhost name that is empty.
    #[error(
        "invalid apparmor profile {0:?}: expected runtime/default, unconfined or localhost/<name>"
    )]
    AppArmorProfileName(String),
    /// A profile asked for on a host whose kernel has no AppArmor.
    #[error("apparmor profile {0:?} cannot be applied: AppArmor is not enabled on this host")]
    AppArmorNotEnabled(String),
    /// A Localhost profile the kernel has not loaded.
    #[error("apparmor profile {0:?} is not loaded on this host (see /sys/kernel/security/apparmor/profiles)")]
    AppArmorProfileNotLoaded(String),
    /// berth's default profile, asked for (RuntimeDefault) but not loaded.
    #[error("apparmor profile {name:?} (runtime/default) is not available: {reason}")]
    AppArmorDefaultProfile { name: &'static str, reason: String },
    /// The kernel's list of loaded profiles cannot be read.
    #[error("apparmor profile {name:?}: reading the loaded profiles: {source}")]
    AppArmorProfiles {
        name: String,
        #[source]
        source: io::Error,
    },
    /// An SELinux label asked for: berth applies none (see `lsm`).
    #[error("{field} asks for the SELinux label {label}: {reason}")]
    SeLinuxLabel {
        field: &'static str,
        label: String,
        reason: &'static str,
    },

    /// `unified` resources on a cgroup v1 host.
    #[error("unified cgroup resources {0:?} need cgroup v2; this host runs cgroup v1")]
    UnifiedOnCgroupV1(Vec<String>),
    /// A hugepage limit that does not fit the OCI spec's signed 64 bits.
    #[error("hugepage limit {limit} for page size {page_size:?} is too large")]
    HugepageLimit { page_size: String, limit: u64 },

    /// A log path that is absolute or leaves the sandbox's log directory.
    #[error("log path {0:?} must be relative and stay inside the pod's log directory")]
    LogPath(String),
    /// A stop signal that is neither a known name nor a number in 1..=64.
    #[error("unknown stop signal {0:?}")]
    UnknownSignal(String),
}
