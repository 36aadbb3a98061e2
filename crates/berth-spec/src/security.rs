//! The security context's simple switches: privileged, `no_new_privs`,
//! read-only root, and the masked and read-only paths. Capabilities and
//! seccomp have their own modules.

use cri_api::v1::{LinuxContainerSecurityContext, PodSandboxConfig};

use crate::error::SpecError;

/// kubelet's default masked paths (what it sends for `procMount: Default`).
pub const DEFAULT_MASKED_PATHS: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// kubelet's default read-only paths (what it sends for `procMount: Default`).
pub const DEFAULT_READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The security switches of a container's spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecuritySettings {
    pub privileged: bool,
    /// `Some(true)` or `None`, never `Some(false)`: see [`security_settings`].
    pub no_new_privileges: Option<bool>,
    pub readonly_rootfs: bool,
    pub masked_paths: Vec<String>,
    pub readonly_paths: Vec<String>,
}

/// The security switches, checked against the sandbox.
///
/// - A privileged container needs a privileged sandbox (containerd's rule:
///   kubelet marks the sandbox privileged when any container is).
/// - Masked and read-only paths are the CRI's lists, as containerd uses
///   them: kubelet sends its defaults ([`DEFAULT_MASKED_PATHS`],
///   [`DEFAULT_READONLY_PATHS`]) for `procMount: Default` and empty lists
///   for `Unmasked`. Proto3 cannot tell an empty list from an absent one,
///   so an empty list must mean "none", or `Unmasked` would not work. A
///   privileged container gets neither.
/// - `no_new_privileges` is `Some(true)` or `None`. berth's default runtime
///   loads the seccomp filter before dropping capabilities only when the
///   field is absent; with `Some(false)` it loads it after, without the
///   privilege that needs, and the container fails to start.
pub fn security_settings(
    security: Option<&LinuxContainerSecurityContext>,
    sandbox_config: &PodSandboxConfig,
) -> Result<SecuritySettings, SpecError> {
    let Some(security) = security else {
        return Ok(SecuritySettings::default());
    };
    let sandbox_privileged = sandbox_config
        .linux
        .as_ref()
        .and_then(|linux| linux.security_context.as_ref())
        .is_some_and(|context| context.privileged);
    if security.privileged && !sandbox_privileged {
        return Err(SpecError::PrivilegedInUnprivilegedSandbox);
    }
    let (masked_paths, readonly_paths) = if security.privileged {
        (Vec::new(), Vec::new())
    } else {
        (
            security.masked_paths.clone(),
            security.readonly_paths.clone(),
        )
    };
    Ok(SecuritySettings {
        privileged: security.privileged,
        no_new_privileges: security.no_new_privs.then_some(true),
        readonly_rootfs: security.readonly_rootfs,
        masked_paths,
        readonly_paths,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::v1::{LinuxPodSandboxConfig, LinuxSandboxSecurityContext};

    fn sandbox(privileged: bool) -> PodSandboxConfig {
        PodSandboxConfig {
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    privileged,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn no_security_context_means_defaults() {
        let settings = security_settings(None, &sandbox(false)).unwrap();
        assert_eq!(settings, SecuritySettings::default());
    }

    #[test]
    fn switches_are_copied() {
        let sc = LinuxContainerSecurityContext {
            no_new_privs: true,
            readonly_rootfs: true,
            masked_paths: strings(&DEFAULT_MASKED_PATHS),
            readonly_paths: strings(&["/proc/sys"]),
            ..Default::default()
        };
        let settings = security_settings(Some(&sc), &sandbox(false)).unwrap();
        assert_eq!(settings.no_new_privileges, Some(true));
        assert!(settings.readonly_rootfs);
        assert_eq!(settings.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
        assert_eq!(settings.readonly_paths, ["/proc/sys"]);
    }

    #[test]
    fn no_new_privs_false_is_absent_not_false() {
        let sc = LinuxContainerSecurityContext::default();
        assert_eq!(
            security_settings(Some(&sc), &sandbox(false))
                .unwrap()
                .no_new_privileges,
            None
        );
    }

    #[test]
    fn empty_lists_mask_nothing() {
        let sc = LinuxContainerSecurityContext::default();
        let settings = security_settings(Some(&sc), &sandbox(false)).unwrap();
        assert!(settings.masked_paths.is_empty() && settings.readonly_paths.is_empty());
    }

    #[test]
    fn privileged_clears_masks_and_needs_a_privileged_sandbox() {
        let sc = LinuxContainerSecurityContext {
            privileged: true,
            masked_paths: strings(&["/proc/kcore"]),
            readonly_paths: strings(&["/proc/sys"]),
            ..Default::default()
        };
        let err = security_settings(Some(&sc), &sandbox(false)).unwrap_err();
        assert!(matches!(err, SpecError::PrivilegedInUnprivilegedSandbox));
        let settings = security_settings(Some(&sc), &sandbox(true)).unwrap();
        assert!(settings.privileged);
        assert!(settings.masked_paths.is_empty() && settings.readonly_paths.is_empty());
    }
}
