//! The one place domain errors become gRPC statuses, as containerd's
//! `errgrpc.ToGRPC` at its instrumented service. The managers say what went
//! wrong; only this file decides which code the client sees. The message is
//! always the error's own text.

use tonic::{Code, Status};

use crate::container::ContainerError;
use crate::pod::PodError;
use crate::pod_checkpoint::PodCheckpointError;
use crate::sandbox::SandboxError;

impl From<ContainerError> for Status {
    fn from(err: ContainerError) -> Self {
        container_code(&err).with(&err)
    }
}

/// The code of a container error (also where a pod call fails on one).
fn container_code(err: &ContainerError) -> Code {
    use ContainerError::*;
    match err {
        Sandbox(inner) => sandbox_code(inner),
        Cdi(inner) => cdi_code(inner),
        // Not one berth can read is the request's fault; one it cannot
        // read or unpack here is the node's state.
        CheckpointArchive(inner) => match inner {
            crate::container::checkpoint_archive::ArchiveError::NotACheckpoint { .. } => {
                Code::InvalidArgument
            }
            crate::container::checkpoint_archive::ArchiveError::Io { .. } => {
                Code::FailedPrecondition
            }
        },
        LogDir { source, .. } => log_dir_code(source),
        // The node's filesystem cannot serve the volume as the pod
        // needs it; the request itself is fine.
        IdmappedMount { source, .. } if source.is_refusal() => Code::FailedPrecondition,
        IdmappedMount { .. } => Code::Internal,
        NotFound { .. }
        | ImageNotFound { .. }
        | ImageVolumeNotFound { .. }
        | TargetNotFound { .. } => Code::NotFound,
        Spec(inner) => spec_code(inner),
        AmbiguousId(_) | CgroupName(_) | ImageSubPath { .. } | DeviceRules { .. } => {
            Code::InvalidArgument
        }
        NameReserved { .. } => Code::AlreadyExists,
        CreateTimedOut { .. } | CheckpointTimedOut { .. } => Code::DeadlineExceeded,
        // The container cannot be made, started or changed as asked in
        // its present state on this node: kubelet shows the message.
        TargetInOtherSandbox { .. }
        | TargetNotRunning { .. }
        | ImageFileTooLarge { .. }
        | CreateFailed { .. }
        | StartFailed { .. }
        | ExecRefused { .. }
        | NotRunning { .. }
        | CheckpointUnavailable { .. }
        | CheckpointImageRefused { .. }
        | CheckpointLocation { .. }
        | UpdateRefused { .. }
        | UnknownRuntimeHandler { .. }
        | RestoreUnsupported { .. } => Code::FailedPrecondition,
        DidNotStop { .. }
        | CheckpointFailed { .. }
        | ShimUnreachable { .. }
        | ShimAnswer { .. }
        | ShimSpawn { .. }
        | ImageConfig { .. }
        | ImageStore(_)
        | Rootfs(_)
        | Cgroup(_)
        | DeviceFilter { .. }
        | WriteSpec(_)
        | Io { .. }
        | State(_)
        | Intent(_)
        | Journal(_)
        | Task { .. } => Code::Internal,
    }
}

/// A log directory the request names that cannot be a directory (a file
/// on its path, a name too long) is the request's fault; running out of
/// space or a read-only disk is the host's.
fn log_dir_code(err: &std::io::Error) -> Code {
    use std::io::ErrorKind::*;
    match err.kind() {
        NotADirectory | AlreadyExists | InvalidInput | InvalidFilename | IsADirectory => {
            Code::InvalidArgument
        }
        PermissionDenied => Code::FailedPrecondition,
        _ => Code::Internal,
    }
}

impl From<SandboxError> for Status {
    fn from(err: SandboxError) -> Self {
        sandbox_code(&err).with(&err)
    }
}

impl From<PodError> for Status {
    fn from(err: PodError) -> Self {
        match err {
            PodError::Container(err) => err.into(),
            PodError::Sandbox(err) => err.into(),
        }
    }
}

impl From<PodCheckpointError> for Status {
    fn from(err: PodCheckpointError) -> Self {
        use PodCheckpointError::*;
        let code = match &err {
            Invalid { .. } | NotInPod { .. } | NotACheckpoint(_) => Code::InvalidArgument,
            PodNotFound { .. } => Code::NotFound,
            PodNotReady { .. } | ContainerNotRunning { .. } | CriuUnavailable { .. } => {
                Code::FailedPrecondition
            }
            // The container's own error decides, as for its own RPC.
            Container { source, .. } => container_code(source),
            Sandbox(inner) => sandbox_code(inner),
            Io { .. } => Code::Internal,
        };
        code.with(&err)
    }
}

fn sandbox_code(err: &SandboxError) -> Code {
    use SandboxError::*;
    match err {
        NotFound { .. } => Code::NotFound,
        SecurityModule(inner) => spec_code(inner),
        AmbiguousId(_)
        | UnknownRuntimeHandler { .. }
        | CgroupParentName(_)
        | SysctlNotNamespaced { .. }
        | SysctlOfHostNamespace { .. }
        | SysctlRefused { .. }
        | UserNamespace(_) => Code::InvalidArgument,
        NameReserved { .. } => Code::AlreadyExists,
        NetworkNotReady(_) | ResourcesRefused { .. } | UserNamespacesUnsupported => {
            Code::FailedPrecondition
        }
        CgroupParent { .. }
        | Cgroup { .. }
        | PinnsSpawn { .. }
        | PinFailed { .. }
        | NetnsNotPinned
        | ShmMount { .. }
        | InfraVanished { .. }
        | InfraCgroup { .. }
        | CniAdd { .. }
        | CniDel { .. }
        | SavedCniConfig { .. }
        | Io { .. }
        | State(_)
        | Intent(_)
        | Journal(_)
        | ForeignJournal { .. }
        | Unmount { .. } => Code::Internal,
    }
}

/// A spec the request cannot have is its fault, but for the security
/// modules: a profile this node has not loaded, or a kernel without
/// AppArmor, is the node's state (containerd's "apparmor is not
/// supported" is Unknown; kubelet shows the message either way).
fn spec_code(err: &berth_spec::SpecError) -> Code {
    use berth_spec::SpecError;
    match err {
        SpecError::AppArmorNotEnabled(_)
        | SpecError::AppArmorProfileNotLoaded(_)
        | SpecError::AppArmorDefaultProfile { .. } => Code::FailedPrecondition,
        SpecError::AppArmorProfiles { .. } => Code::Internal,
        _ => Code::InvalidArgument,
    }
}

trait WithMessage {
    fn with(self, err: &dyn std::fmt::Display) -> Status;
}

impl WithMessage for Code {
    fn with(self, err: &dyn std::fmt::Display) -> Status {
        Status::new(self, err.to_string())
    }
}

/// A malformed CDI name is the request's fault; an unknown device is not
/// on this node; edits a spec file gets wrong cannot be applied here.
fn cdi_code(err: &berth_spec::cdi::CdiError) -> Code {
    use berth_spec::cdi::CdiError;
    match err {
        CdiError::BadName { .. } => Code::InvalidArgument,
        CdiError::UnknownDevice { .. } => Code::NotFound,
        CdiError::BadEdit { .. } => Code::FailedPrecondition,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_target_errors_are_distinct_and_name_the_id() {
        let not_found = Status::from(ContainerError::TargetNotFound {
            target_id: "abc".into(),
        });
        let elsewhere = Status::from(ContainerError::TargetInOtherSandbox {
            target_id: "abc".into(),
        });
        let stopped = Status::from(ContainerError::TargetNotRunning {
            target_id: "abc".into(),
        });
        assert_eq!(not_found.code(), Code::NotFound);
        assert_eq!(elsewhere.code(), Code::FailedPrecondition);
        assert_eq!(stopped.code(), Code::FailedPrecondition);
        for status in [&not_found, &elsewhere, &stopped] {
            assert!(status.message().contains("abc"), "{status:?}");
        }
        assert!(elsewhere.message().contains("another pod sandbox"));
        assert!(stopped.message().contains("not running"));
    }

    #[test]
    fn a_log_directory_under_a_file_is_an_invalid_argument() {
        let status = Status::from(ContainerError::LogDir {
            path: "/var/log/pods/file/sub".into(),
            source: std::io::Error::from_raw_os_error(nix::libc::ENOTDIR),
        });
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("/var/log/pods/file/sub"));
        let status = Status::from(ContainerError::LogDir {
            path: "/var/log/pods/x".into(),
            source: std::io::Error::from_raw_os_error(nix::libc::ENOSPC),
        });
        assert_eq!(status.code(), Code::Internal);
    }

    #[test]
    fn refused_sysctls_are_invalid_arguments() {
        let status = Status::from(SandboxError::SysctlNotNamespaced {
            key: "vm.swappiness".into(),
        });
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("vm.swappiness"));
    }

    #[test]
    fn a_sandbox_error_keeps_its_code_inside_a_container_error() {
        let status = Status::from(ContainerError::from(SandboxError::NotFound {
            id: "p1".into(),
        }));
        assert_eq!(status.code(), Code::NotFound);
        assert_eq!(status.message(), "pod sandbox \"p1\" not found");
    }
}
