use super::*;
use crate::capabilities::{ALL_CAPABILITIES, DEFAULT_CAPABILITIES};

fn defaults() -> Capabilities {
    DEFAULT_CAPABILITIES.into_iter().collect()
}

fn unconditional(profile: &LinuxSeccomp) -> Vec<String> {
    profile
        .syscalls()
        .as_ref()
        .unwrap()
        .iter()
        .filter(|s| s.args().is_none() && s.action() == LinuxSeccompAction::ScmpActAllow)
        .flat_map(|s| s.names().clone())
        .collect()
}

fn rules_for<'a>(profile: &'a LinuxSeccomp, name: &str) -> Vec<&'a LinuxSyscall> {
    profile
        .syscalls()
        .as_ref()
        .unwrap()
        .iter()
        .filter(|s| s.names().iter().any(|n| n == name))
        .collect()
}

#[test]
fn denies_by_default_with_eperm() {
    let profile = default_profile(&defaults());
    assert_eq!(profile.default_action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(profile.default_errno_ret(), Some(EPERM));
}

#[test]
fn lists_the_native_architecture_first() {
    let profile = default_profile(&defaults());
    if cfg!(target_arch = "x86_64") {
        let arches = profile.architectures().clone().unwrap();
        assert_eq!(arches[0], Arch::ScmpArchX86_64);
        assert!(arches.contains(&Arch::ScmpArchX86));
    }
}

#[test]
fn allows_what_ordinary_programs_need() {
    let allowed = unconditional(&default_profile(&defaults()));
    for name in [
        "read",
        "write",
        "openat",
        "execve",
        "exit_group",
        "mmap",
        "futex",
        "wait4",
        "capset",
        "setgroups",
        "chroot",
        "getrandom",
        "arch_prctl",
    ] {
        assert!(
            allowed.iter().any(|n| n == name),
            "{name} should be allowed"
        );
    }
}

#[test]
fn keeps_administration_calls_for_capable_containers() {
    let allowed = unconditional(&default_profile(&defaults()));
    for name in [
        "mount",
        "umount2",
        "unshare",
        "setns",
        "sethostname",
        "init_module",
        "reboot",
        "clock_settime",
        "bpf",
        "kcmp",
    ] {
        assert!(
            !allowed.iter().any(|n| n == name),
            "{name} should be denied"
        );
    }
    let everything: Capabilities = ALL_CAPABILITIES.into_iter().collect();
    let allowed = unconditional(&default_profile(&everything));
    for name in [
        "mount",
        "unshare",
        "setns",
        "sethostname",
        "init_module",
        "reboot",
        "clock_settime",
        "bpf",
        "kcmp",
        "clone",
        "clone3",
    ] {
        assert!(
            allowed.iter().any(|n| n == name),
            "{name} should be allowed with all capabilities"
        );
    }
}

#[test]
fn chroot_needs_sys_chroot() {
    let mut caps = defaults();
    caps.remove(&Capability::SysChroot);
    assert!(!unconditional(&default_profile(&caps))
        .iter()
        .any(|n| n == "chroot"));
}

#[test]
fn clone_without_sys_admin_cannot_create_namespaces() {
    let profile = default_profile(&defaults());
    let clone = rules_for(&profile, "clone");
    assert_eq!(clone.len(), 1);
    let args = clone[0].args().clone().unwrap();
    assert_eq!(args.len(), 1);
    assert_eq!(args[0].op(), LinuxSeccompOperator::ScmpCmpMaskedEq);
    // The OCI order: the mask first, the compared value second.
    assert_eq!(
        (args[0].value(), args[0].value_two()),
        (CLONE_NAMESPACE_FLAGS, Some(0))
    );
    let clone3 = rules_for(&profile, "clone3");
    assert_eq!(clone3.len(), 1);
    assert_eq!(clone3[0].action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(clone3[0].errno_ret(), Some(ENOSYS));
}

#[test]
fn clone_with_sys_admin_is_unconditional() {
    let mut caps = defaults();
    caps.insert(Capability::SysAdmin);
    let profile = default_profile(&caps);
    let clone = rules_for(&profile, "clone");
    assert_eq!(clone.len(), 1);
    assert!(clone[0].args().is_none());
    assert!(rules_for(&profile, "clone3")
        .iter()
        .all(|r| r.action() == LinuxSeccompAction::ScmpActAllow));
}

#[test]
fn socket_refuses_only_af_vsock() {
    let profile = default_profile(&defaults());
    assert!(!unconditional(&profile).iter().any(|n| n == "socket"));
    let rules = rules_for(&profile, "socket");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].action(), LinuxSeccompAction::ScmpActAllow);
    let args = rules[0].args().clone().unwrap();
    assert_eq!(args.len(), 1);
    assert_eq!(
        (args[0].index(), args[0].op(), args[0].value()),
        (0, LinuxSeccompOperator::ScmpCmpNe, AF_VSOCK)
    );
}

#[test]
fn personality_is_limited_to_known_personas() {
    let profile = default_profile(&defaults());
    let rules = rules_for(&profile, "personality");
    let values: Vec<u64> = rules
        .iter()
        .map(|r| {
            let args = r.args().clone().unwrap();
            assert_eq!(args[0].op(), LinuxSeccompOperator::ScmpCmpEq);
            args[0].value()
        })
        .collect();
    assert_eq!(values, PERSONALITIES);
}

#[test]
fn no_syscall_is_listed_twice_unconditionally() {
    let everything: Capabilities = ALL_CAPABILITIES.into_iter().collect();
    let allowed = unconditional(&default_profile(&everything));
    let unique: BTreeSet<_> = allowed.iter().collect();
    assert_eq!(unique.len(), allowed.len());
}

#[test]
fn serializes_as_oci_json() {
    let json = serde_json::to_value(default_profile(&defaults())).unwrap();
    assert_eq!(json["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(json["defaultErrnoRet"], 1);
    assert!(json["syscalls"].as_array().unwrap().len() > 5);
}
