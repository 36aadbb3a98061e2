//! Linux capabilities of the container's process.
//!
//! Without a `capabilities` message the container gets containerd's (and
//! Docker's) default set. `add_capabilities` and `drop_capabilities` change
//! it the way containerd's `WithCapabilities` does: "ALL" in add starts from
//! every capability and "ALL" in drop from none, and only then are the
//! named ones added and dropped, so add ALL + drop CHOWN is "all but
//! CHOWN", and drop ALL + add CHOWN is "only CHOWN". A privileged container
//! gets every capability, whatever it asked for.
//!
//! The set becomes the bounding, effective and permitted sets. Inheritable
//! and ambient stay empty (containerd dropped inheritable after
//! CVE-2022-24769), except for `add_ambient_capabilities`, which need to be
//! in all five sets to survive `execve`.

use std::str::FromStr;

use cri_api::v1::LinuxContainerSecurityContext;
use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities};

use crate::error::SpecError;

/// containerd's default capabilities for containers.
pub const DEFAULT_CAPABILITIES: [Capability; 14] = [
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::NetRaw,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

/// Every capability the OCI spec knows (0 `CHOWN` to 40 `CHECKPOINT_RESTORE`).
pub const ALL_CAPABILITIES: [Capability; 41] = [
    Capability::AuditControl,
    Capability::AuditRead,
    Capability::AuditWrite,
    Capability::BlockSuspend,
    Capability::Bpf,
    Capability::CheckpointRestore,
    Capability::Chown,
    Capability::DacOverride,
    Capability::DacReadSearch,
    Capability::Fowner,
    Capability::Fsetid,
    Capability::IpcLock,
    Capability::IpcOwner,
    Capability::Kill,
    Capability::Lease,
    Capability::LinuxImmutable,
    Capability::MacAdmin,
    Capability::MacOverride,
    Capability::Mknod,
    Capability::NetAdmin,
    Capability::NetBindService,
    Capability::NetBroadcast,
    Capability::NetRaw,
    Capability::Perfmon,
    Capability::Setgid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::Setuid,
    Capability::SysAdmin,
    Capability::SysBoot,
    Capability::SysChroot,
    Capability::SysModule,
    Capability::SysNice,
    Capability::SysPacct,
    Capability::SysPtrace,
    Capability::SysRawio,
    Capability::SysResource,
    Capability::SysTime,
    Capability::SysTtyConfig,
    Capability::Syslog,
    Capability::WakeAlarm,
];

/// Capability names in kernel numbering order (`CAP_CHOWN` is 0).
const KERNEL_ORDER: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// "Every capability" for a privileged container or `add: [ALL]`: those the
/// runtime itself holds (`host_mask`, its bounding set as a bit mask), as
/// containerd's WithAllCurrentCapabilities does. A capability the runtime
/// lacks cannot be granted: asking for it makes container creation fail
/// (here root lacks CAP_SYS_RESOURCE).
pub fn all_capabilities(host_mask: u64) -> Capabilities {
    KERNEL_ORDER
        .iter()
        .enumerate()
        .filter(|(bit, _)| host_mask & (1u64 << bit) != 0)
        .filter_map(|(_, name)| Capability::from_str(name).ok())
        .collect()
}

/// A capability from its Kubernetes name: `NET_ADMIN`, `CAP_NET_ADMIN` or
/// `net_admin`.
pub fn parse_capability(name: &str) -> Result<Capability, SpecError> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    Capability::from_str(bare).map_err(|_| SpecError::UnknownCapability(name.to_string()))
}

/// The capability set (bounding = effective = permitted) of a container.
pub fn capability_set(
    security: Option<&LinuxContainerSecurityContext>,
    host_mask: u64,
) -> Result<Capabilities, SpecError> {
    if security.is_some_and(|s| s.privileged) {
        return Ok(all_capabilities(host_mask));
    }
    let mut set: Capabilities = DEFAULT_CAPABILITIES.into_iter().collect();
    let Some(changes) = security.and_then(|s| s.capabilities.as_ref()) else {
        return Ok(set);
    };
    let is_all = |name: &String| name.eq_ignore_ascii_case("ALL");
    if changes.add_capabilities.iter().any(is_all) {
        set = all_capabilities(host_mask);
    }
    if changes.drop_capabilities.iter().any(is_all) {
        set.clear();
    }
    for name in changes.add_capabilities.iter().filter(|n| !is_all(n)) {
        set.insert(parse_capability(name)?);
    }
    for name in &changes.add_ambient_capabilities {
        set.insert(parse_capability(name)?);
    }
    for name in changes.drop_capabilities.iter().filter(|n| !is_all(n)) {
        set.remove(&parse_capability(name)?);
    }
    Ok(set)
}

/// The OCI capabilities of the container's process (see the module docs).
pub fn process_capabilities(
    security: Option<&LinuxContainerSecurityContext>,
    host_mask: u64,
) -> Result<LinuxCapabilities, SpecError> {
    let set = capability_set(security, host_mask)?;
    let mut ambient = Capabilities::new();
    if let Some(changes) = security.and_then(|s| s.capabilities.as_ref()) {
        for name in &changes.add_ambient_capabilities {
            let capability = parse_capability(name)?;
            // A dropped capability cannot be ambient.
            if set.contains(&capability) {
                ambient.insert(capability);
            }
        }
    }
    let mut capabilities = LinuxCapabilities::default();
    capabilities
        .set_bounding(Some(set.clone()))
        .set_effective(Some(set.clone()))
        .set_permitted(Some(set))
        .set_inheritable(Some(ambient.clone()))
        .set_ambient(Some(ambient));
    Ok(capabilities)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::v1::Capability as CriCapability;

    fn context(add: &[&str], drop: &[&str]) -> LinuxContainerSecurityContext {
        LinuxContainerSecurityContext {
            capabilities: Some(CriCapability {
                add_capabilities: add.iter().map(|s| s.to_string()).collect(),
                drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
                add_ambient_capabilities: Vec::new(),
            }),
            ..Default::default()
        }
    }

    fn set(capabilities: &[Capability]) -> Capabilities {
        capabilities.iter().copied().collect()
    }

    #[test]
    fn all_means_what_the_runtime_holds() {
        assert_eq!(all_capabilities(u64::MAX).len(), 41);
        let without_sys_resource = !(1u64 << 24);
        let all = all_capabilities(without_sys_resource);
        assert_eq!(all.len(), 40);
        assert!(!all.contains(&Capability::SysResource));
        assert!(all.contains(&Capability::Chown) && all.contains(&Capability::CheckpointRestore));
        let privileged = LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        };
        assert!(!capability_set(Some(&privileged), without_sys_resource)
            .unwrap()
            .contains(&Capability::SysResource));
    }

    #[test]
    fn names_parse_with_or_without_prefix_in_any_case() {
        for name in ["NET_ADMIN", "CAP_NET_ADMIN", "net_admin", "Cap_Net_Admin"] {
            assert_eq!(
                parse_capability(name).unwrap(),
                Capability::NetAdmin,
                "{name}"
            );
        }
        assert!(
            matches!(parse_capability("FLY"), Err(SpecError::UnknownCapability(n)) if n == "FLY")
        );
    }

    #[test]
    fn no_changes_give_the_default_set() {
        assert_eq!(
            capability_set(None, u64::MAX).unwrap(),
            set(&DEFAULT_CAPABILITIES)
        );
        let empty = LinuxContainerSecurityContext::default();
        assert_eq!(
            capability_set(Some(&empty), u64::MAX).unwrap(),
            set(&DEFAULT_CAPABILITIES)
        );
    }

    #[test]
    fn add_and_drop_change_the_default_set() {
        let got = capability_set(Some(&context(&["SYS_ADMIN"], &["CHOWN"])), u64::MAX).unwrap();
        assert!(got.contains(&Capability::SysAdmin));
        assert!(!got.contains(&Capability::Chown));
        assert_eq!(got.len(), DEFAULT_CAPABILITIES.len());
    }

    #[test]
    fn add_all_then_drop_one() {
        let got = capability_set(Some(&context(&["ALL"], &["CHOWN"])), u64::MAX).unwrap();
        assert_eq!(got.len(), ALL_CAPABILITIES.len() - 1);
        assert!(!got.contains(&Capability::Chown));
    }

    #[test]
    fn drop_all_then_add_one() {
        let got = capability_set(Some(&context(&["chown"], &["all"])), u64::MAX).unwrap();
        assert_eq!(got, set(&[Capability::Chown]));
    }

    #[test]
    fn privileged_gets_everything_whatever_it_drops() {
        let mut sc = context(&[], &["ALL"]);
        sc.privileged = true;
        assert_eq!(capability_set(Some(&sc), u64::MAX).unwrap().len(), 41);
    }

    #[test]
    fn unknown_names_are_errors() {
        assert!(capability_set(Some(&context(&["BOGUS"], &[])), u64::MAX).is_err());
        assert!(capability_set(Some(&context(&[], &["BOGUS"])), u64::MAX).is_err());
    }

    #[test]
    fn process_capabilities_fill_the_sets() {
        let caps = process_capabilities(None, u64::MAX).unwrap();
        let defaults = Some(set(&DEFAULT_CAPABILITIES));
        assert_eq!(caps.bounding(), &defaults);
        assert_eq!(caps.effective(), &defaults);
        assert_eq!(caps.permitted(), &defaults);
        assert_eq!(caps.inheritable(), &Some(Capabilities::new()));
        assert_eq!(caps.ambient(), &Some(Capabilities::new()));
    }

    #[test]
    fn ambient_capabilities_are_in_every_set() {
        let mut sc = context(&[], &[]);
        if let Some(changes) = sc.capabilities.as_mut() {
            changes.add_ambient_capabilities = vec!["NET_ADMIN".into()];
        }
        let caps = process_capabilities(Some(&sc), u64::MAX).unwrap();
        for which in [
            caps.bounding(),
            caps.permitted(),
            caps.inheritable(),
            caps.ambient(),
        ] {
            assert!(which.as_ref().unwrap().contains(&Capability::NetAdmin));
        }
    }
}
