//! The OCI spec in libcontainer's dialect.
//!
//! libcontainer 0.7 reads the operands of `SCMP_CMP_MASKED_EQ` the other
//! way round from the OCI spec, runc, crun and libseccomp: it takes
//! `valueTwo` as the mask and `value` as the compared value. libseccomp
//! treats a zero mask as always true, so the default profile's `clone`
//! rule, written the OCI way (mask `CLONE_NAMESPACE_FLAGS`, value 0), would
//! never refuse a namespace flag under libcontainer. The backend swaps
//! them before libcontainer sees the spec: in the container's filter
//! (through a copy of the bundle, [`adapted_bundle`]) and in the filter it
//! loads itself into exec'd processes.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use libcontainer::oci_spec::runtime::{
    LinuxSeccomp, LinuxSeccompArg, LinuxSeccompArgBuilder, LinuxSeccompOperator, Spec,
};

use super::BackendError;

/// Where the adapted copy of a bundle's `config.json` goes, in the bundle
/// (removed with it, and kept in a trimmed mount table as it is).
pub const ADAPTED_DIR: &str = "libcontainer";

/// `seccomp` with every `SCMP_CMP_MASKED_EQ` argument's operands swapped;
/// `None` when it has none (nothing to adapt).
pub fn libcontainer_seccomp(seccomp: &LinuxSeccomp) -> Option<LinuxSeccomp> {
    let masked = |arg: &LinuxSeccompArg| arg.op() == LinuxSeccompOperator::ScmpCmpMaskedEq;
    let syscalls = seccomp.syscalls().as_ref()?;
    if !syscalls
        .iter()
        .any(|s| s.args().iter().flatten().any(masked))
    {
        return None;
    }
    let mut adapted = seccomp.clone();
    let syscalls = syscalls
        .iter()
        .map(|syscall| {
            let mut syscall = syscall.clone();
            let args = syscall
                .args()
                .as_ref()
                .map(|args| args.iter().map(swap_masked).collect());
            syscall.set_args(args);
            syscall
        })
        .collect();
    adapted.set_syscalls(Some(syscalls));
    Some(adapted)
}

/// OCI (`value` mask, `valueTwo` compared value) to libcontainer's order.
fn swap_masked(arg: &LinuxSeccompArg) -> LinuxSeccompArg {
    if arg.op() != LinuxSeccompOperator::ScmpCmpMaskedEq {
        return *arg;
    }
    LinuxSeccompArgBuilder::default()
        .index(arg.index())
        .value(arg.value_two().unwrap_or(0))
        .value_two(arg.value())
        .op(arg.op())
        .build()
        // every field is set: the builder cannot fail
        .unwrap_or(*arg)
}

/// `spec` in libcontainer's dialect, or `None` when it needs no change.
pub fn libcontainer_spec(spec: &Spec) -> Option<Spec> {
    let seccomp = spec.linux().as_ref()?.seccomp().as_ref()?;
    let adapted = libcontainer_seccomp(seccomp)?;
    let mut spec = spec.clone();
    if let Some(linux) = spec.linux_mut() {
        linux.set_seccomp(Some(adapted));
    }
    Some(spec)
}

/// The bundle libcontainer is given: `bundle` itself when its spec needs
/// no change, else `<bundle>/libcontainer` holding the adapted
/// `config.json` (libcontainer reads only `<bundle>/config.json`, and
/// berthd's stays the standard one). The copy's root is absolute, as the
/// original's is relative to `bundle`; the dir has the bundle's mode and
/// group, which a user namespace's root may need to search it.
pub fn adapted_bundle(bundle: &Path) -> Result<PathBuf, BackendError> {
    let path = bundle.join("config.json");
    let spec = Spec::load(&path)
        .map_err(|e| BackendError::Message(format!("cannot load {}: {e}", path.display())))?;
    let Some(mut adapted) = libcontainer_spec(&spec) else {
        return Ok(bundle.to_path_buf());
    };
    if let Some(root) = adapted.root_mut() {
        let absolute = bundle.join(root.path());
        root.set_path(absolute);
    }
    let dir = bundle.join(ADAPTED_DIR);
    let meta = std::fs::metadata(bundle).map_err(|e| BackendError::io("the bundle", e))?;
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(BackendError::io(format!("creating {}", dir.display()), e)),
    }
    std::os::unix::fs::chown(&dir, None, Some(meta.gid()))
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(meta.mode() & 0o7777))
        })
        .map_err(|e| BackendError::io(format!("setting up {}", dir.display()), e))?;
    let json = serde_json::to_vec(&adapted)
        .map_err(|e| BackendError::Message(format!("encoding the adapted spec: {e}")))?;
    // 0600 as berthd's: the spec carries the container's env.
    berth_atomic_file::write_atomic(&dir.join("config.json"), &json, 0o600)
        .map_err(|e| BackendError::io("writing the adapted config.json", e))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_spec::capabilities::DEFAULT_CAPABILITIES;
    use berth_spec::seccomp_default::{default_profile, CLONE_NAMESPACE_FLAGS};
    use libcontainer::oci_spec::runtime::Capabilities;

    fn clone_args(seccomp: &LinuxSeccomp) -> Vec<LinuxSeccompArg> {
        seccomp
            .syscalls()
            .iter()
            .flatten()
            .filter(|s| s.names().iter().any(|n| n == "clone"))
            .flat_map(|s| s.args().clone().unwrap_or_default())
            .collect()
    }

    fn default_oci_profile() -> LinuxSeccomp {
        let caps: Capabilities = DEFAULT_CAPABILITIES.into_iter().collect();
        default_profile(&caps)
    }

    #[test]
    fn masked_eq_operands_are_swapped_and_nothing_else_changes() {
        let oci = default_oci_profile();
        // berth-spec writes the OCI order: mask first.
        let [arg] = clone_args(&oci)[..] else {
            panic!("one clone argument expected")
        };
        assert_eq!(
            (arg.value(), arg.value_two()),
            (CLONE_NAMESPACE_FLAGS, Some(0))
        );
        let adapted = libcontainer_seccomp(&oci).expect("the default profile needs adapting");
        let [swapped] = clone_args(&adapted)[..] else {
            panic!("one clone argument expected")
        };
        assert_eq!(swapped.op(), LinuxSeccompOperator::ScmpCmpMaskedEq);
        assert_eq!(swapped.index(), arg.index());
        assert_eq!(
            (swapped.value(), swapped.value_two()),
            (0, Some(CLONE_NAMESPACE_FLAGS))
        );
        // Every other rule (socket's NE, personality's EQ) is as it was.
        let others = |s: &LinuxSeccomp| -> Vec<_> {
            s.syscalls()
                .iter()
                .flatten()
                .filter(|s| !s.names().iter().any(|n| n == "clone"))
                .cloned()
                .collect()
        };
        assert_eq!(others(&adapted), others(&oci));
        assert_eq!(adapted.default_action(), oci.default_action());
        assert_eq!(adapted.architectures(), oci.architectures());
    }

    #[test]
    fn a_profile_without_masked_arguments_is_left_alone() {
        let mut caps: Capabilities = DEFAULT_CAPABILITIES.into_iter().collect();
        caps.insert(libcontainer::oci_spec::runtime::Capability::SysAdmin);
        // With CAP_SYS_ADMIN the clone rule has no argument.
        assert_eq!(libcontainer_seccomp(&default_profile(&caps)), None);
    }

    fn write_bundle(dir: &Path, seccomp: Option<LinuxSeccomp>) {
        let mut spec: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.2.0",
            "process": {"args": ["sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "linux": {"namespaces": [{"type": "mount"}]}
        }))
        .expect("spec");
        if let Some(linux) = spec.linux_mut() {
            linux.set_seccomp(seccomp);
        }
        std::fs::write(
            dir.join("config.json"),
            serde_json::to_vec(&spec).expect("json"),
        )
        .expect("write config.json");
    }

    #[test]
    fn the_adapted_bundle_is_a_copy_with_the_swap_and_an_absolute_root() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let bundle = tmp.path();
        write_bundle(bundle, Some(default_oci_profile()));
        let original = std::fs::read(bundle.join("config.json")).expect("read");
        let adapted = adapted_bundle(bundle).expect("adapt");
        assert_eq!(adapted, bundle.join(ADAPTED_DIR));
        // berthd's config.json is untouched.
        assert_eq!(std::fs::read(bundle.join("config.json")).unwrap(), original);
        let spec = Spec::load(adapted.join("config.json")).expect("adapted spec");
        assert_eq!(
            spec.root().as_ref().map(|r| r.path().clone()),
            Some(bundle.join("rootfs"))
        );
        let seccomp = spec.linux().as_ref().and_then(|l| l.seccomp().clone());
        let [arg] = clone_args(&seccomp.expect("seccomp"))[..] else {
            panic!("one clone argument expected")
        };
        assert_eq!(
            (arg.value(), arg.value_two()),
            (0, Some(CLONE_NAMESPACE_FLAGS))
        );
        // A second create from the same bundle (a retry) adapts again.
        assert_eq!(adapted_bundle(bundle).expect("again"), adapted);
    }

    #[test]
    fn a_spec_that_needs_nothing_is_used_in_place() {
        let tmp = tempfile::tempdir().expect("tempdir");
        write_bundle(tmp.path(), None);
        assert_eq!(adapted_bundle(tmp.path()).expect("adapt"), tmp.path());
        assert!(!tmp.path().join(ADAPTED_DIR).exists());
    }
}

#[cfg(test)]
#[path = "libcontainer_seccomp_tests.rs"]
mod kernel_tests;
