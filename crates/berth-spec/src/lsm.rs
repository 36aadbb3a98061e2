//! The Linux security modules a container asks for: its AppArmor profile
//! and its SELinux label. Each request is honoured or refused with an
//! error that names it; none is dropped.
//!
//! AppArmor, as containerd's CRI plugin decides it
//! (`internal/cri/sputil/apparmor_linux.go`):
//!
//! - The request is the structured `apparmor` field, else the deprecated
//!   `apparmor_profile` string (`runtime/default`, `unconfined`,
//!   `localhost/<name>`); the structured field wins when both are set
//!   (critest: "runtime should prefer new apparmor field").
//! - On a host whose kernel has AppArmor ([`AppArmorHost::Enabled`]):
//!   `RuntimeDefault` is berth's profile [`DEFAULT_APPARMOR_PROFILE`],
//!   which berthd loads at start-up; a request for it fails, naming it,
//!   when it is not loaded. No request at all means the same for a
//!   container that is not privileged (kubernetes#51746), but only when
//!   the profile is loaded: kubelet sends nothing for a pod that asks for
//!   nothing, and that pod is not refused because `apparmor_parser` is
//!   missing. `Localhost` is the named profile when the kernel has it
//!   loaded, else an error naming it. `Unconfined` is no profile. A
//!   privileged container gets no profile unless it names one.
//! - On a host without AppArmor ([`AppArmorHost::Disabled`]): nothing
//!   asked, or `Unconfined`, is no profile; `RuntimeDefault` and
//!   `Localhost` are errors naming the profile, as containerd's "apparmor
//!   is not supported" (kubelet itself refuses such pods on such nodes).
//!
//! SELinux: berth applies no SELinux labels. On a host whose kernel runs
//! SELinux a request for one (any of user, role, type, level set) is
//! refused, naming it. On a host without SELinux a label has no meaning
//! (no process or file carries one), so it is accepted and nothing is
//! applied, as containerd and CRI-O do (go-selinux's `InitLabels` answers
//! no labels when SELinux is off): Kubernetes sets a level on pods of its
//! own conformance specs (the EmptyDir ones), which run on such hosts.

use cri_api::v1::security_profile::ProfileType;
use cri_api::v1::{
    LinuxContainerSecurityContext, LinuxSandboxSecurityContext, SeLinuxOption, SecurityProfile,
};

use crate::error::SpecError;
use crate::host::HostLookup;

/// The name of berth's default AppArmor profile (containerd's is
/// `cri-containerd.apparmor.d`, CRI-O's `crio-default`).
pub const DEFAULT_APPARMOR_PROFILE: &str = "berth-default";

/// What berthd found about the host's AppArmor at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppArmorHost {
    /// The kernel has no AppArmor, or has it disabled.
    Disabled,
    /// The kernel enforces AppArmor profiles. `default_profile` says
    /// whether berthd loaded [`DEFAULT_APPARMOR_PROFILE`], or why not.
    Enabled { default_profile: Result<(), String> },
}

/// The host's security modules, as the spec needs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LsmHost {
    pub apparmor: AppArmorHost,
    /// Whether the kernel runs SELinux.
    pub selinux: bool,
}

impl Default for LsmHost {
    /// A host without either module (the tests' and doc examples' host).
    fn default() -> Self {
        Self {
            apparmor: AppArmorHost::Disabled,
            selinux: false,
        }
    }
}

/// An AppArmor request, as the CRI fields give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppArmorRequest {
    /// Neither field is set.
    Unset,
    Unconfined,
    RuntimeDefault,
    /// A profile loaded on the node, by name.
    Localhost(String),
}

impl AppArmorRequest {
    /// The request as kubelet's deprecated string spells it, for messages.
    fn spelled(&self) -> String {
        match self {
            Self::Unset => String::new(),
            Self::Unconfined => "unconfined".into(),
            Self::RuntimeDefault => "runtime/default".into(),
            Self::Localhost(name) => format!("localhost/{name}"),
        }
    }
}

const LOCALHOST_PREFIX: &str = "localhost/";

/// What the security context asks for (see the module docs).
pub fn apparmor_request(
    security: Option<&LinuxContainerSecurityContext>,
) -> Result<AppArmorRequest, SpecError> {
    let Some(security) = security else {
        return Ok(AppArmorRequest::Unset);
    };
    #[allow(deprecated)]
    let legacy = security.apparmor_profile.as_str();
    request_from(security.apparmor.as_ref(), legacy)
}

/// The request of a structured profile, else of the deprecated string.
pub fn request_from(
    profile: Option<&SecurityProfile>,
    legacy: &str,
) -> Result<AppArmorRequest, SpecError> {
    if let Some(profile) = profile {
        let localhost_ref = profile.localhost_ref.as_str();
        return match ProfileType::try_from(profile.profile_type) {
            Ok(ProfileType::Localhost) => localhost(localhost_ref, localhost_ref),
            Ok(kind) if !localhost_ref.is_empty() => Err(SpecError::AppArmorLocalhostRef {
                localhost_ref: localhost_ref.to_string(),
                profile_type: kind.as_str_name(),
            }),
            Ok(ProfileType::RuntimeDefault) => Ok(AppArmorRequest::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(AppArmorRequest::Unconfined),
            Err(_) => Err(SpecError::AppArmorProfileType(profile.profile_type)),
        };
    }
    match legacy {
        "" => Ok(AppArmorRequest::Unset),
        "unconfined" => Ok(AppArmorRequest::Unconfined),
        "runtime/default" => Ok(AppArmorRequest::RuntimeDefault),
        name if name.starts_with(LOCALHOST_PREFIX) => localhost(name, legacy),
        other => Err(SpecError::AppArmorProfileName(other.to_string())),
    }
}

/// A Localhost request: the name, without the `localhost/` prefix older
/// kubelets (and critest) put on it.
fn localhost(reference: &str, asked: &str) -> Result<AppArmorRequest, SpecError> {
    let name = reference
        .strip_prefix(LOCALHOST_PREFIX)
        .unwrap_or(reference);
    // A name the kernel's profile list could not show unambiguously.
    if name.is_empty() || name.contains(['\n', '\0']) {
        return Err(SpecError::AppArmorProfileName(asked.to_string()));
    }
    Ok(AppArmorRequest::Localhost(name.to_string()))
}

/// The profile for the container's `process.apparmorProfile`, or `None`
/// for none (see the module docs).
pub fn container_apparmor_profile(
    security: Option<&LinuxContainerSecurityContext>,
    apparmor: &AppArmorHost,
    host: &dyn HostLookup,
) -> Result<Option<String>, SpecError> {
    let request = apparmor_request(security)?;
    let privileged = security.is_some_and(|security| security.privileged);
    let default_loaded = match apparmor {
        AppArmorHost::Disabled => {
            return match request {
                AppArmorRequest::Unset | AppArmorRequest::Unconfined => Ok(None),
                asked => Err(SpecError::AppArmorNotEnabled(asked.spelled())),
            };
        }
        AppArmorHost::Enabled { default_profile } => default_profile,
    };
    match request {
        AppArmorRequest::Unconfined => Ok(None),
        AppArmorRequest::Unset if privileged || default_loaded.is_err() => Ok(None),
        AppArmorRequest::RuntimeDefault if privileged => Ok(None),
        AppArmorRequest::Unset | AppArmorRequest::RuntimeDefault => {
            if let Err(reason) = default_loaded {
                return Err(SpecError::AppArmorDefaultProfile {
                    name: DEFAULT_APPARMOR_PROFILE,
                    reason: reason.clone(),
                });
            }
            // Loaded at start-up; still there unless someone removed it.
            match profile_loaded(host, DEFAULT_APPARMOR_PROFILE)? {
                true => Ok(Some(DEFAULT_APPARMOR_PROFILE.to_string())),
                false => Err(SpecError::AppArmorDefaultProfile {
                    name: DEFAULT_APPARMOR_PROFILE,
                    reason: "it is no longer loaded in the kernel".into(),
                }),
            }
        }
        AppArmorRequest::Localhost(name) => match profile_loaded(host, &name)? {
            true => Ok(Some(name)),
            false => Err(SpecError::AppArmorProfileNotLoaded(name)),
        },
    }
}

fn profile_loaded(host: &dyn HostLookup, name: &str) -> Result<bool, SpecError> {
    host.apparmor_profile_loaded(name)
        .map_err(|source| SpecError::AppArmorProfiles {
            name: name.to_string(),
            source,
        })
}

/// A pod's own requests, checked as its containers' would be: berth's
/// infra process is its own binary, not a container, so no profile is
/// applied to it (kubelet puts the pod's profile into each container's
/// context, where it is), but a request the host cannot honour is
/// refused here, before anything is made for the pod.
pub fn check_sandbox(
    security: Option<&LinuxSandboxSecurityContext>,
    lsm: &LsmHost,
    host: &dyn HostLookup,
) -> Result<(), SpecError> {
    let Some(security) = security else {
        return Ok(());
    };
    check_selinux_options(
        security.selinux_options.as_ref(),
        "selinux_options",
        lsm.selinux,
    )?;
    let as_container = LinuxContainerSecurityContext {
        privileged: security.privileged,
        apparmor: security.apparmor.clone(),
        ..Default::default()
    };
    container_apparmor_profile(Some(&as_container), &lsm.apparmor, host).map(drop)
}

/// Whether the kernel's list of loaded profiles (the text of
/// `/sys/kernel/security/apparmor/profiles`: `<name> (<mode>)` a line)
/// has `name`. Names may hold spaces, so a line is split at its last
/// " (".
pub fn profiles_list_has(profiles: &str, name: &str) -> bool {
    profiles
        .lines()
        .filter_map(|line| line.rsplit_once(" ("))
        .any(|(loaded, _mode)| loaded == name)
}

/// Refuses an SELinux label request where SELinux runs (see the module
/// docs); without SELinux there is nothing to label. `field` names where
/// the options came from in the request.
pub fn check_selinux_options(
    options: Option<&SeLinuxOption>,
    field: &'static str,
    selinux_enabled: bool,
) -> Result<(), SpecError> {
    if !selinux_enabled {
        return Ok(());
    }
    match selinux_label(options) {
        None => Ok(()),
        Some(label) => Err(SpecError::SeLinuxLabel {
            field,
            label,
            reason: "berth does not apply SELinux labels",
        }),
    }
}

/// The label `options` ask for (`user "u", level "s0"`), None when they
/// ask for none. berthd logs one it accepts on a host without SELinux, so
/// that the label left unapplied is said, not silent.
pub fn selinux_label(options: Option<&SeLinuxOption>) -> Option<String> {
    let options = options?;
    let parts: Vec<String> = [
        ("user", &options.user),
        ("role", &options.role),
        ("type", &options.r#type),
        ("level", &options.level),
    ]
    .into_iter()
    .filter(|(_, value)| !value.is_empty())
    .map(|(name, value)| format!("{name} {value:?}"))
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

#[cfg(test)]
#[path = "lsm_tests.rs"]
mod tests;
