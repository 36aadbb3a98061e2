use super::*;
use crate::capabilities::DEFAULT_CAPABILITIES;
use crate::testing::FakeHost;
use cri_api::v1::SecurityProfile;
use oci_spec::runtime::Capability;

fn with_profile(profile_type: ProfileType, localhost_ref: &str) -> LinuxContainerSecurityContext {
    LinuxContainerSecurityContext {
        seccomp: Some(SecurityProfile {
            profile_type: profile_type as i32,
            localhost_ref: localhost_ref.into(),
        }),
        ..Default::default()
    }
}

#[allow(deprecated)]
fn with_legacy_path(path: &str) -> LinuxContainerSecurityContext {
    LinuxContainerSecurityContext {
        seccomp_profile_path: path.into(),
        ..Default::default()
    }
}

fn defaults() -> Capabilities {
    DEFAULT_CAPABILITIES.into_iter().collect()
}

/// critest's profile that blocks chmod.
const BLOCK_CHMOD: &str = r#"{
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"}]
}"#;

#[test]
fn choices_follow_the_profile_type() {
    assert_eq!(seccomp_choice(None).unwrap(), SeccompChoice::Unconfined);
    let empty = LinuxContainerSecurityContext {
        seccomp: Some(SecurityProfile::default()),
        ..Default::default()
    };
    assert_eq!(
        seccomp_choice(Some(&empty)).unwrap(),
        SeccompChoice::RuntimeDefault
    );
    let unconfined = with_profile(ProfileType::Unconfined, "");
    assert_eq!(
        seccomp_choice(Some(&unconfined)).unwrap(),
        SeccompChoice::Unconfined
    );
    let local = with_profile(ProfileType::Localhost, "/profiles/p.json");
    assert_eq!(
        seccomp_choice(Some(&local)).unwrap(),
        SeccompChoice::Localhost("/profiles/p.json".into())
    );
}

#[test]
fn no_profile_at_all_is_unconfined() {
    let sc = LinuxContainerSecurityContext::default();
    assert_eq!(
        seccomp_choice(Some(&sc)).unwrap(),
        SeccompChoice::Unconfined
    );
}

#[test]
fn localhost_prefix_is_dropped_and_relative_paths_refused() {
    let prefixed = with_profile(ProfileType::Localhost, "localhost//profiles/p.json");
    assert_eq!(
        seccomp_choice(Some(&prefixed)).unwrap(),
        SeccompChoice::Localhost("/profiles/p.json".into())
    );
    for bad in ["", "p.json", "localhost/p.json"] {
        let sc = with_profile(ProfileType::Localhost, bad);
        assert!(
            matches!(
                seccomp_choice(Some(&sc)),
                Err(SpecError::SeccompProfilePath(_))
            ),
            "{bad}"
        );
    }
}

#[test]
fn privileged_containers_are_never_filtered() {
    let mut sc = with_profile(ProfileType::Localhost, "/profiles/p.json");
    sc.privileged = true;
    assert_eq!(
        seccomp_choice(Some(&sc)).unwrap(),
        SeccompChoice::Unconfined
    );
}

#[test]
fn unknown_profile_type_is_an_error() {
    let sc = LinuxContainerSecurityContext {
        seccomp: Some(SecurityProfile {
            profile_type: 9,
            localhost_ref: String::new(),
        }),
        ..Default::default()
    };
    assert!(matches!(
        seccomp_choice(Some(&sc)),
        Err(SpecError::SeccompProfileType(9))
    ));
}

#[test]
fn deprecated_profile_paths_still_work() {
    let cases = [
        ("", SeccompChoice::Unconfined),
        ("unconfined", SeccompChoice::Unconfined),
        ("runtime/default", SeccompChoice::RuntimeDefault),
        ("docker/default", SeccompChoice::RuntimeDefault),
        (
            "localhost//p.json",
            SeccompChoice::Localhost("/p.json".into()),
        ),
    ];
    for (path, expected) in cases {
        assert_eq!(
            seccomp_choice(Some(&with_legacy_path(path))).unwrap(),
            expected,
            "{path}"
        );
    }
    assert!(seccomp_choice(Some(&with_legacy_path("bogus"))).is_err());
}

#[test]
fn runtime_default_builds_the_default_profile() {
    let sc = LinuxContainerSecurityContext {
        seccomp: Some(SecurityProfile::default()),
        ..Default::default()
    };
    let filter = container_seccomp(Some(&sc), &defaults(), &FakeHost::new())
        .unwrap()
        .unwrap();
    assert_eq!(filter.default_action(), LinuxSeccompAction::ScmpActErrno);
    let none = container_seccomp(None, &defaults(), &FakeHost::new()).unwrap();
    assert!(none.is_none());
}

#[test]
fn localhost_profile_is_read_through_the_host() {
    let host = FakeHost::new().with_profile("/profiles/block-chmod.json", BLOCK_CHMOD);
    let sc = with_profile(ProfileType::Localhost, "/profiles/block-chmod.json");
    let filter = container_seccomp(Some(&sc), &defaults(), &host)
        .unwrap()
        .unwrap();
    assert_eq!(filter.default_action(), LinuxSeccompAction::ScmpActAllow);
    let syscalls = filter.syscalls().clone().unwrap();
    assert_eq!(syscalls[0].names(), &["chmod", "fchmodat"]);
    assert_eq!(syscalls[0].action(), LinuxSeccompAction::ScmpActErrno);
}

#[test]
fn unreadable_or_invalid_profiles_are_errors_naming_the_file() {
    let sc = with_profile(ProfileType::Localhost, "/profiles/missing.json");
    let err = container_seccomp(Some(&sc), &defaults(), &FakeHost::new()).unwrap_err();
    assert!(matches!(err, SpecError::SeccompProfileRead { .. }));
    assert!(err.to_string().contains("/profiles/missing.json"));
    let host = FakeHost::new().with_profile("/profiles/bad.json", "{\"syscalls\": 3}");
    let sc = with_profile(ProfileType::Localhost, "/profiles/bad.json");
    let err = container_seccomp(Some(&sc), &defaults(), &host).unwrap_err();
    assert!(matches!(err, SpecError::SeccompProfileParse { .. }));
}

#[test]
fn docker_format_profiles_are_understood() {
    let json = r#"{
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]}
        ],
        "syscalls": [
            {"name": "read", "action": "SCMP_ACT_ALLOW"},
            {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
            {"names": ["chroot"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_CHROOT"]}},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}
        ]
    }"#;
    let filter = parse_profile(json, &defaults()).unwrap();
    assert_eq!(filter.default_errno_ret(), Some(1));
    let names: Vec<String> = filter
        .syscalls()
        .clone()
        .unwrap()
        .iter()
        .flat_map(|s| s.names().clone())
        .collect();
    // mount needs SYS_ADMIN (not held); chroot is excluded for SYS_CHROOT holders.
    assert_eq!(names, ["read", "clone"]);
    let clone_args = filter.syscalls().clone().unwrap()[1]
        .args()
        .clone()
        .unwrap();
    // Kept in the file's (the OCI) order: mask, then compared value.
    assert_eq!(
        (clone_args[0].value(), clone_args[0].value_two()),
        (2114060288, Some(0))
    );
    if cfg!(target_arch = "x86_64") {
        let arches = filter.architectures().clone().unwrap();
        assert_eq!(
            arches,
            [Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
        );
    }
    let mut admin = defaults();
    admin.insert(Capability::SysAdmin);
    let filter = parse_profile(json, &admin).unwrap();
    assert_eq!(filter.syscalls().as_ref().unwrap().len(), 3);
}
