//! Which seccomp filter a container gets, and reading Localhost profiles.
//!
//! - `RuntimeDefault` (also an empty `SecurityProfile`, whose type is 0):
//!   berth's default profile ([`crate::seccomp_default`]).
//! - `Unconfined`, or no profile at all: no filter (critest: "nil profile,
//!   which is unconfined").
//! - `Localhost`: the JSON profile at `localhost_ref`, an absolute path on
//!   the node (a `localhost/` prefix, as older kubelets wrote, is dropped).
//! - A privileged container gets no filter, whatever it asked for (critest:
//!   "should ignore a seccomp profile that blocks setting hostname when
//!   privileged").
//!
//! Profiles are read in the format Docker and containerd accept: the OCI
//! fields plus `archMap`, `name` beside `names`, and `includes`/`excludes`
//! by capability and architecture, so profiles written for Docker work.
//! Their arguments stay in the OCI operand order, as written (see
//! [`crate::seccomp_default::masked_equal`]).

use std::path::PathBuf;

use cri_api::v1::security_profile::ProfileType;
use cri_api::v1::LinuxContainerSecurityContext;
use oci_spec::runtime::{
    Arch, Capabilities, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompFilterFlag,
    LinuxSyscall,
};
use serde::Deserialize;

use crate::capabilities::parse_capability;
use crate::error::SpecError;
use crate::host::HostLookup;
use crate::seccomp_default::{default_profile, native_architectures};

/// The seccomp choice of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeccompChoice {
    Unconfined,
    RuntimeDefault,
    Localhost(PathBuf),
}

/// What the security context asks for (see the module docs).
pub fn seccomp_choice(
    security: Option<&LinuxContainerSecurityContext>,
) -> Result<SeccompChoice, SpecError> {
    let Some(security) = security else {
        return Ok(SeccompChoice::Unconfined);
    };
    if security.privileged {
        return Ok(SeccompChoice::Unconfined);
    }
    if let Some(profile) = &security.seccomp {
        return match ProfileType::try_from(profile.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(SeccompChoice::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(SeccompChoice::Unconfined),
            Ok(ProfileType::Localhost) => localhost(&profile.localhost_ref),
            Err(_) => Err(SpecError::SeccompProfileType(profile.profile_type)),
        };
    }
    #[allow(deprecated)]
    let legacy = security.seccomp_profile_path.as_str();
    match legacy {
        "" | "unconfined" => Ok(SeccompChoice::Unconfined),
        "runtime/default" | "docker/default" => Ok(SeccompChoice::RuntimeDefault),
        path if path.starts_with("localhost/") => localhost(path),
        other => Err(SpecError::SeccompProfilePath(other.to_string())),
    }
}

fn localhost(reference: &str) -> Result<SeccompChoice, SpecError> {
    let path = reference.strip_prefix("localhost/").unwrap_or(reference);
    if !path.starts_with('/') {
        return Err(SpecError::SeccompProfilePath(reference.to_string()));
    }
    Ok(SeccompChoice::Localhost(PathBuf::from(path)))
}

/// The filter of a container with capability set `capabilities` (the
/// default profile and Docker-style profiles allow more to more capable
/// containers), or `None` for unconfined.
pub fn container_seccomp(
    security: Option<&LinuxContainerSecurityContext>,
    capabilities: &Capabilities,
    host: &dyn HostLookup,
) -> Result<Option<LinuxSeccomp>, SpecError> {
    match seccomp_choice(security)? {
        SeccompChoice::Unconfined => Ok(None),
        SeccompChoice::RuntimeDefault => Ok(Some(default_profile(capabilities))),
        SeccompChoice::Localhost(path) => {
            let json =
                host.read_profile(&path)
                    .map_err(|source| SpecError::SeccompProfileRead {
                        path: path.clone(),
                        source,
                    })?;
            parse_profile(&json, capabilities)
                .map(Some)
                .map_err(|source| SpecError::SeccompProfileParse { path, source })
        }
    }
}

/// A profile file (OCI or Docker format) as the OCI filter for a container
/// with `capabilities` on this machine's architecture.
pub fn parse_profile(
    json: &str,
    capabilities: &Capabilities,
) -> Result<LinuxSeccomp, serde_json::Error> {
    let file: ProfileFile = serde_json::from_str(json)?;
    let native = native_architectures();
    let architectures = match file
        .arch_map
        .iter()
        .find(|m| native.first() == Some(&m.architecture))
    {
        Some(entry) => std::iter::once(entry.architecture)
            .chain(entry.sub_architectures.iter().copied())
            .collect(),
        None => file.architectures,
    };
    let syscalls: Vec<LinuxSyscall> = file
        .syscalls
        .into_iter()
        .filter(|rule| rule.includes.admits(capabilities) && !rule.excludes.rejects(capabilities))
        .map(|rule| {
            let mut names = rule.names;
            names.extend(rule.name);
            let mut syscall = LinuxSyscall::default();
            syscall
                .set_names(names)
                .set_action(rule.action)
                .set_errno_ret(rule.errno_ret)
                .set_args((!rule.args.is_empty()).then_some(rule.args));
            syscall
        })
        .collect();
    let mut seccomp = LinuxSeccomp::default();
    seccomp
        .set_default_action(file.default_action)
        .set_default_errno_ret(file.default_errno_ret)
        .set_architectures((!architectures.is_empty()).then_some(architectures))
        .set_flags((!file.flags.is_empty()).then_some(file.flags))
        .set_syscalls(Some(syscalls));
    Ok(seccomp)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProfileFile {
    default_action: LinuxSeccompAction,
    #[serde(default)]
    default_errno_ret: Option<u32>,
    #[serde(default)]
    architectures: Vec<Arch>,
    #[serde(default)]
    arch_map: Vec<ArchMapEntry>,
    #[serde(default)]
    flags: Vec<LinuxSeccompFilterFlag>,
    #[serde(default)]
    syscalls: Vec<SyscallRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchMapEntry {
    architecture: Arch,
    #[serde(default)]
    sub_architectures: Vec<Arch>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SyscallRule {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    names: Vec<String>,
    action: LinuxSeccompAction,
    #[serde(default)]
    errno_ret: Option<u32>,
    #[serde(default)]
    args: Vec<LinuxSeccompArg>,
    #[serde(default)]
    includes: Filter,
    #[serde(default)]
    excludes: Filter,
}

/// Docker's conditions on a rule. `minKernel` is not checked: berth needs
/// a kernel newer than any the default profiles name.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default)]
    caps: Vec<String>,
    #[serde(default)]
    arches: Vec<String>,
}

impl Filter {
    /// As an `includes`: every listed capability held, and this machine's
    /// architecture listed (when any are).
    fn admits(&self, capabilities: &Capabilities) -> bool {
        self.caps.iter().all(|c| holds(capabilities, c))
            && (self.arches.is_empty() || self.arches.iter().any(|a| a == go_arch()))
    }

    /// As an `excludes`: any listed capability held, or this architecture listed.
    fn rejects(&self, capabilities: &Capabilities) -> bool {
        self.caps.iter().any(|c| holds(capabilities, c))
            || self.arches.iter().any(|a| a == go_arch())
    }
}

fn holds(capabilities: &Capabilities, name: &str) -> bool {
    parse_capability(name).is_ok_and(|c| capabilities.contains(&c))
}

/// This machine's architecture in Go's naming, as Docker profiles use it.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
mod tests;
