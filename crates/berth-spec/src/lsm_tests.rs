use super::*;
use crate::fixtures::{self, build_on, container_config, sandbox_config, NO_LSM};
use crate::testing::FakeHost;

fn enabled() -> AppArmorHost {
    AppArmorHost::Enabled {
        default_profile: Ok(()),
    }
}

fn parser_missing() -> AppArmorHost {
    AppArmorHost::Enabled {
        default_profile: Err("apparmor_parser not found".into()),
    }
}

/// A host with berth's default profile and `deny-write` loaded.
fn host() -> FakeHost {
    fixtures::host()
        .with_apparmor_profile(DEFAULT_APPARMOR_PROFILE)
        .with_apparmor_profile("deny-write")
}

fn structured(profile_type: ProfileType, localhost_ref: &str) -> LinuxContainerSecurityContext {
    LinuxContainerSecurityContext {
        apparmor: Some(SecurityProfile {
            profile_type: profile_type as i32,
            localhost_ref: localhost_ref.into(),
        }),
        ..Default::default()
    }
}

#[allow(deprecated)]
fn legacy(profile: &str) -> LinuxContainerSecurityContext {
    LinuxContainerSecurityContext {
        apparmor_profile: profile.into(),
        ..Default::default()
    }
}

fn privileged(mut security: LinuxContainerSecurityContext) -> LinuxContainerSecurityContext {
    security.privileged = true;
    security
}

fn profile_of(
    security: Option<&LinuxContainerSecurityContext>,
    apparmor: &AppArmorHost,
) -> Result<Option<String>, SpecError> {
    container_apparmor_profile(security, apparmor, &host())
}

#[test]
fn both_spellings_make_the_same_requests() {
    use AppArmorRequest::*;
    let cases = [
        (legacy(""), Unset),
        (legacy("unconfined"), Unconfined),
        (legacy("runtime/default"), RuntimeDefault),
        (
            legacy("localhost/deny-write"),
            Localhost("deny-write".into()),
        ),
        (structured(ProfileType::RuntimeDefault, ""), RuntimeDefault),
        (structured(ProfileType::Unconfined, ""), Unconfined),
        (
            structured(ProfileType::Localhost, "deny-write"),
            Localhost("deny-write".into()),
        ),
        // critest sends the ref with the prefix.
        (
            structured(ProfileType::Localhost, "localhost/deny-write"),
            Localhost("deny-write".into()),
        ),
    ];
    for (security, want) in cases {
        assert_eq!(
            apparmor_request(Some(&security)).unwrap(),
            want,
            "{security:?}"
        );
    }
    assert_eq!(apparmor_request(None).unwrap(), Unset);
}

#[test]
fn the_structured_field_wins_over_the_string() {
    // critest: "runtime should prefer new apparmor field".
    let mut security = structured(ProfileType::Localhost, "localhost/deny-write");
    #[allow(deprecated)]
    {
        security.apparmor_profile = "localhost/non-existent-profile".into();
    }
    assert_eq!(
        profile_of(Some(&security), &enabled()).unwrap().as_deref(),
        Some("deny-write")
    );
}

#[test]
fn malformed_requests_are_refused() {
    for bad in ["docker/default", "localhost/", "deny-write"] {
        let err = apparmor_request(Some(&legacy(bad))).unwrap_err();
        assert!(matches!(err, SpecError::AppArmorProfileName(_)), "{bad}");
        assert!(err.to_string().contains(bad), "{err}");
    }
    let err = apparmor_request(Some(&structured(ProfileType::Localhost, ""))).unwrap_err();
    assert!(matches!(err, SpecError::AppArmorProfileName(_)));
    let err = apparmor_request(Some(&structured(ProfileType::Unconfined, "x"))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "apparmor localhost_ref \"x\" is only valid with profile type Localhost, not Unconfined"
    );
    let mut security = structured(ProfileType::Localhost, "x");
    if let Some(profile) = security.apparmor.as_mut() {
        profile.profile_type = 7;
    }
    let err = apparmor_request(Some(&security)).unwrap_err();
    assert!(matches!(err, SpecError::AppArmorProfileType(7)));
}

#[test]
fn enabled_host_runs_default_and_localhost_profiles() {
    let aa = enabled();
    let default = Some(DEFAULT_APPARMOR_PROFILE.to_string());
    assert_eq!(profile_of(None, &aa).unwrap(), default);
    assert_eq!(profile_of(Some(&legacy("")), &aa).unwrap(), default);
    assert_eq!(
        profile_of(Some(&legacy("runtime/default")), &aa).unwrap(),
        default
    );
    assert_eq!(profile_of(Some(&legacy("unconfined")), &aa).unwrap(), None);
    assert_eq!(
        profile_of(Some(&legacy("localhost/deny-write")), &aa).unwrap(),
        Some("deny-write".into())
    );
}

#[test]
fn an_unloaded_localhost_profile_is_an_error_naming_it() {
    let security = structured(ProfileType::Localhost, "localhost/non-existent-profile");
    let err = profile_of(Some(&security), &enabled()).unwrap_err();
    assert!(matches!(err, SpecError::AppArmorProfileNotLoaded(_)));
    assert!(
        err.to_string().contains("\"non-existent-profile\""),
        "{err}"
    );
    // A profile's name must match whole: a prefix is another profile.
    let security = legacy("localhost/deny");
    assert!(profile_of(Some(&security), &enabled()).is_err());
}

#[test]
fn privileged_containers_are_unconfined_unless_they_name_a_profile() {
    let aa = enabled();
    assert_eq!(
        profile_of(Some(&privileged(legacy(""))), &aa).unwrap(),
        None
    );
    assert_eq!(
        profile_of(Some(&privileged(legacy("runtime/default"))), &aa).unwrap(),
        None
    );
    assert_eq!(
        profile_of(Some(&privileged(legacy("localhost/deny-write"))), &aa).unwrap(),
        Some("deny-write".into())
    );
}

#[test]
fn without_the_default_profile_only_an_explicit_request_fails() {
    let aa = parser_missing();
    // Nothing asked: the pod runs, as with no AppArmor at all.
    assert_eq!(profile_of(None, &aa).unwrap(), None);
    let err = profile_of(Some(&legacy("runtime/default")), &aa).unwrap_err();
    assert_eq!(
        err.to_string(),
        "apparmor profile \"berth-default\" (runtime/default) is not available: apparmor_parser not found"
    );
    // A profile loaded by someone else still applies.
    assert_eq!(
        profile_of(Some(&legacy("localhost/deny-write")), &aa).unwrap(),
        Some("deny-write".into())
    );
    // Loaded at start-up but removed since.
    let bare = FakeHost::new();
    let err = container_apparmor_profile(Some(&legacy("runtime/default")), &enabled(), &bare)
        .unwrap_err();
    assert!(err.to_string().contains("no longer loaded"), "{err}");
}

#[test]
fn disabled_host_refuses_explicit_profiles_and_ignores_the_rest() {
    let aa = AppArmorHost::Disabled;
    assert_eq!(profile_of(None, &aa).unwrap(), None);
    assert_eq!(profile_of(Some(&legacy("")), &aa).unwrap(), None);
    assert_eq!(profile_of(Some(&legacy("unconfined")), &aa).unwrap(), None);
    let err = profile_of(Some(&legacy("localhost/deny-write")), &aa).unwrap_err();
    assert_eq!(
        err.to_string(),
        "apparmor profile \"localhost/deny-write\" cannot be applied: AppArmor is not enabled on this host"
    );
    let security = structured(ProfileType::RuntimeDefault, "");
    let err = profile_of(Some(&security), &aa).unwrap_err();
    assert!(err.to_string().contains("\"runtime/default\""), "{err}");
}

#[test]
fn an_unreadable_profile_list_is_an_error() {
    let mut host = FakeHost::new();
    host.apparmor_profiles = None;
    let err =
        container_apparmor_profile(Some(&legacy("localhost/x")), &enabled(), &host).unwrap_err();
    assert!(matches!(err, SpecError::AppArmorProfiles { .. }));
}

#[test]
fn the_kernel_list_is_matched_by_whole_names() {
    let list = "berth-default (enforce)\nmy profile (complain)\n/usr/bin/man (enforce)\n";
    assert!(profiles_list_has(list, "berth-default"));
    assert!(profiles_list_has(list, "my profile"));
    assert!(profiles_list_has(list, "/usr/bin/man"));
    assert!(!profiles_list_has(list, "berth"));
    assert!(!profiles_list_has(list, "my"));
    assert!(!profiles_list_has("", "berth-default"));
}

#[test]
fn selinux_labels_are_refused_naming_the_field_where_selinux_runs() {
    let label = SeLinuxOption {
        r#type: "spc_t".into(),
        level: "s0:c1,c2".into(),
        ..Default::default()
    };
    let err = check_selinux_options(Some(&label), "selinux_options", true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "selinux_options asks for the SELinux label type \"spc_t\", level \"s0:c1,c2\": \
         berth does not apply SELinux labels"
    );
    check_selinux_options(Some(&SeLinuxOption::default()), "selinux_options", true).unwrap();
    check_selinux_options(None, "selinux_options", true).unwrap();
}

#[test]
fn selinux_labels_mean_nothing_without_selinux() {
    // As containerd and CRI-O: Kubernetes' EmptyDir conformance specs ask
    // for level "s0" on hosts without SELinux.
    let label = SeLinuxOption {
        level: "s0".into(),
        ..Default::default()
    };
    check_selinux_options(Some(&label), "selinux_options", false).unwrap();
}

#[test]
fn the_spec_carries_the_profile_and_refuses_labels() {
    let lsm = LsmHost {
        apparmor: enabled(),
        selinux: false,
    };
    let config = container_config();
    let spec = build_on(&config, &sandbox_config(false), &host(), &lsm).unwrap();
    let process = spec.process().as_ref().unwrap();
    assert_eq!(
        process.apparmor_profile().as_deref(),
        Some(DEFAULT_APPARMOR_PROFILE)
    );
    // The same container on a host without AppArmor: no profile.
    let spec = build_on(&config, &sandbox_config(false), &host(), &NO_LSM).unwrap();
    assert_eq!(spec.process().as_ref().unwrap().apparmor_profile(), &None);

    let mut config = container_config();
    let linux = config.linux.get_or_insert_with(Default::default);
    let security = linux.security_context.get_or_insert_with(Default::default);
    security.selinux_options = Some(SeLinuxOption {
        user: "system_u".into(),
        ..Default::default()
    });
    let selinux = LsmHost {
        apparmor: AppArmorHost::Disabled,
        selinux: true,
    };
    let err = build_on(&config, &sandbox_config(false), &host(), &selinux).unwrap_err();
    assert!(matches!(err, SpecError::SeLinuxLabel { .. }), "{err}");
    // Without SELinux the label is no request at all.
    build_on(&config, &sandbox_config(false), &host(), &NO_LSM).unwrap();
}

#[test]
fn a_pods_own_requests_are_checked_like_a_containers() {
    let pod = |apparmor: Option<SecurityProfile>, selinux: Option<SeLinuxOption>| {
        LinuxSandboxSecurityContext {
            apparmor,
            selinux_options: selinux,
            ..Default::default()
        }
    };
    let localhost = |name: &str| {
        Some(SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: name.into(),
        })
    };
    let on = LsmHost {
        apparmor: enabled(),
        selinux: false,
    };
    check_sandbox(None, &NO_LSM, &host()).unwrap();
    check_sandbox(Some(&pod(None, None)), &NO_LSM, &host()).unwrap();
    check_sandbox(Some(&pod(localhost("deny-write"), None)), &on, &host()).unwrap();
    let err = check_sandbox(Some(&pod(localhost("missing"), None)), &on, &host()).unwrap_err();
    assert!(
        matches!(err, SpecError::AppArmorProfileNotLoaded(_)),
        "{err}"
    );
    let err =
        check_sandbox(Some(&pod(localhost("deny-write"), None)), &NO_LSM, &host()).unwrap_err();
    assert!(matches!(err, SpecError::AppArmorNotEnabled(_)), "{err}");
    let label = SeLinuxOption {
        level: "s0:c0,c1".into(),
        ..Default::default()
    };
    check_sandbox(Some(&pod(None, Some(label.clone()))), &on, &host()).unwrap();
    let selinux = LsmHost {
        apparmor: AppArmorHost::Disabled,
        selinux: true,
    };
    let err = check_sandbox(Some(&pod(None, Some(label))), &selinux, &host()).unwrap_err();
    assert!(matches!(err, SpecError::SeLinuxLabel { .. }), "{err}");
}

#[test]
fn the_label_logged_names_what_was_asked_and_nothing_for_empty_options() {
    assert_eq!(selinux_label(None), None);
    assert_eq!(selinux_label(Some(&SeLinuxOption::default())), None);
    let asked = SeLinuxOption {
        r#type: "container_logreader_t".into(),
        level: "s0".into(),
        ..Default::default()
    };
    assert_eq!(
        selinux_label(Some(&asked)).as_deref(),
        Some(r#"type "container_logreader_t", level "s0""#)
    );
}
