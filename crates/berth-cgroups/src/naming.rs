//! Cgroup naming per driver: where a sandbox's and a container's cgroups go.
//!
//! kubelet creates the pod cgroup itself (see the pod resource management
//! design) and sends it as `CgroupParent`. berth puts every container (and the
//! infra process, when a pod has one) in a child of that parent:
//!
//! | driver     | parent sent by kubelet                   | child                                     |
//! |------------|------------------------------------------|-------------------------------------------|
//! | `cgroupfs` | `/kubepods/burstable/pod<uid>`            | path `<parent>/<id>`                      |
//! | `systemd`  | `kubepods-burstable-pod<uid>.slice`       | name `<slice>:berth:<id>`, path `<expanded slice>/berth-<id>.scope` |
//!
//! Everything here is pure: no file system, no D-Bus.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Suffix every systemd slice unit carries.
const SLICE_SUFFIX: &str = ".slice";
/// The prefix of the middle part of `<slice>:berth:<id>` and of `berth-<id>.scope`.
const SCOPE_PREFIX: &str = "berth";
/// systemd's `UNIT_NAME_MAX` is 256 including the terminating NUL.
const UNIT_NAME_MAX: usize = 255;
/// `auto` uses systemd when this directory exists (as `sd_booted()` does).
const SYSTEMD_RUN_DIR: &str = "/run/systemd/system";

/// Errors from naming: a parent, slice or id that cannot be used, or a parent
/// that does not fit the configured driver.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum NamingError {
    /// A systemd slice name was sent while berth runs the cgroupfs driver.
    #[error(
        "cgroup parent {parent:?} is a systemd slice, but berth's cgroup driver is cgroupfs: \
         set cgroup_driver = \"systemd\" (or \"auto\" on a systemd host) in berth's config, \
         or have the client send a cgroupfs path such as /kubepods/burstable/pod<uid> \
         (kubelet: cgroupDriver must match berth's, or be left unset)"
    )]
    SliceWithCgroupfs { parent: String },
    /// A cgroupfs path was sent while berth runs the systemd driver.
    #[error(
        "cgroup parent {parent:?} is a cgroupfs path, but berth's cgroup driver is systemd: \
         set cgroup_driver = \"cgroupfs\" in berth's config, or have the client send a slice \
         name such as kubepods-burstable-pod<uid>.slice (kubelet: cgroupDriver must match \
         berth's, or be left unset)"
    )]
    PathWithSystemd { parent: String },
    /// The cgroupfs driver needs an absolute path.
    #[error(
        "cgroup parent {parent:?} is not an absolute path; the cgroupfs driver needs one \
         such as /kubepods/burstable/pod<uid>"
    )]
    NotAbsolute { parent: String },
    /// The parent is unusable whatever the driver (`..`, control characters, ...).
    #[error("invalid cgroup parent {parent:?}: {reason}")]
    InvalidParent {
        parent: String,
        reason: &'static str,
    },
    /// The parent ends in `.slice` but is not a valid slice unit name.
    #[error("invalid systemd slice name {slice:?}: {reason}")]
    InvalidSlice { slice: String, reason: &'static str },
    /// A slice path whose directories are not where systemd puts its slice.
    #[error(
        "cgroup parent {parent:?} is not where systemd puts slice {slice}: that is {expected:?}"
    )]
    SliceElsewhere {
        parent: String,
        slice: String,
        expected: String,
    },
    /// The sandbox or container id cannot be part of a cgroup name.
    #[error("invalid id {id:?} for a cgroup name: {reason}")]
    InvalidId { id: String, reason: &'static str },
    /// A container was given no parent; it must get its sandbox's resolved parent.
    #[error("container cgroup parent is empty; pass the sandbox's resolved parent")]
    EmptyParent,
    /// `cgroup_driver` in the configuration has an unknown value.
    #[error("unknown cgroup driver {0:?}: expected \"cgroupfs\", \"systemd\" or \"auto\"")]
    UnknownDriver(String),
}

/// How berth names and manages cgroups (KEP-4033). It must match kubelet's
/// `--cgroup-driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    /// Direct manipulation of the cgroup file system; parents are paths.
    Cgroupfs,
    /// Transient systemd units; parents are slices.
    Systemd,
}

impl Driver {
    /// The name used in configuration files and in `RuntimeConfig`.
    pub fn as_str(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }

    /// The parent for sandboxes whose `CgroupParent` is empty, unless the
    /// config names one (`default_cgroup_parent`).
    pub fn default_parent(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "/berth",
            Driver::Systemd => "system.slice",
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Driver {
    type Err = NamingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cgroupfs" => Ok(Driver::Cgroupfs),
            "systemd" => Ok(Driver::Systemd),
            other => Err(NamingError::UnknownDriver(other.to_string())),
        }
    }
}

/// Whether this host was booted with systemd, tested as `sd_booted()` does:
/// the one place berth asks.
pub fn systemd_booted() -> bool {
    Path::new(SYSTEMD_RUN_DIR).is_dir()
}

/// Where a sandbox's or container's cgroup lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupLocation {
    /// The driver the names below are for.
    pub driver: Driver,
    /// The parent in the driver's own form, after applying the default:
    /// a normalized path (cgroupfs) or a slice name without a leading `/`
    /// (systemd). Store it with the sandbox and pass it to
    /// [`container_cgroup`].
    pub parent: String,
    /// The parent's path relative to a hierarchy root, starting with `/`.
    pub parent_path: String,
    /// The child's path relative to a hierarchy root, starting with `/`.
    pub path: String,
    /// Under systemd, the runc-style `<slice>:berth:<id>` name.
    pub systemd_name: Option<String>,
}

impl CgroupLocation {
    /// The value for the OCI spec's `linux.cgroupsPath`: the path under
    /// cgroupfs, the `slice:prefix:name` triple under systemd.
    pub fn oci_cgroups_path(&self) -> &str {
        self.systemd_name.as_deref().unwrap_or(&self.path)
    }
}

/// Expands a systemd slice name to its cgroup path, as systemd and runc do.
///
/// Every dash-separated prefix of a slice is its own parent slice:
/// `kubepods-burstable-pod123_456.slice` lives at
/// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123_456.slice`.
/// The root slice `-.slice` is `/`.
///
/// Rejected: names that do not end in `.slice`, contain `/`, have an empty
/// dash component (`a--b.slice`, `-a.slice`, `a-.slice`), use characters
/// systemd does not allow in unit names, or are longer than systemd allows.
pub fn expand_slice(slice: &str) -> Result<String, NamingError> {
    let invalid = |reason| NamingError::InvalidSlice {
        slice: slice.to_string(),
        reason,
    };
    let Some(stem) = slice.strip_suffix(SLICE_SUFFIX) else {
        return Err(invalid("it does not end in \".slice\""));
    };
    if slice.contains('/') {
        return Err(invalid("it contains '/'"));
    }
    if slice.len() > UNIT_NAME_MAX {
        return Err(invalid("it is longer than 255 bytes"));
    }
    if !slice.chars().all(is_unit_name_char) {
        return Err(invalid(
            "systemd unit names may only contain ASCII letters, digits, ':', '-', '_', '.' and '\\'",
        ));
    }
    if stem == "-" {
        return Ok("/".to_string());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for component in stem.split('-') {
        if component.is_empty() {
            return Err(invalid("it has an empty '-'-separated component"));
        }
        path.push('/');
        path.push_str(&prefix);
        path.push_str(component);
        path.push_str(SLICE_SUFFIX);
        prefix.push_str(component);
        prefix.push('-');
    }
    Ok(path)
}

/// The cgroup of a sandbox: a child of `parent`, or of `default_parent` when
/// `parent` is empty (critest sends an empty parent under cgroupfs).
///
/// Under cgroupfs the parent must be an absolute path and not a slice; the
/// child is `<parent>/<id>`. Under systemd the parent must be a slice name
/// (a leading `/`, as critest sends in `/test.slice`, is accepted); the child
/// is `<slice>:berth:<id>` at `<expanded slice>/berth-<id>.scope`.
pub fn sandbox_cgroup(
    driver: Driver,
    parent: &str,
    default_parent: &str,
    id: &str,
) -> Result<CgroupLocation, NamingError> {
    let parent = if parent.is_empty() {
        default_parent
    } else {
        parent
    };
    child_cgroup(driver, parent, id)
}

/// The cgroup of a container: a child of its pod's parent, named like
/// [`sandbox_cgroup`]'s. `parent` is the sandbox's [`CgroupLocation::parent`]
/// and must not be empty.
pub fn container_cgroup(
    driver: Driver,
    parent: &str,
    id: &str,
) -> Result<CgroupLocation, NamingError> {
    child_cgroup(driver, parent, id)
}

/// The cgroup path of a pod's `parent` as kubelet names it (a path for
/// cgroupfs, a slice for systemd): the pod cgroup itself, whose files hold
/// what kubelet sized for the whole pod.
pub fn parent_path(driver: Driver, parent: &str) -> Result<String, NamingError> {
    if parent.is_empty() {
        return Err(NamingError::EmptyParent);
    }
    match driver {
        Driver::Cgroupfs => cgroupfs_parent(parent),
        Driver::Systemd => systemd_parent(parent).map(|(_, path)| path),
    }
}

fn child_cgroup(driver: Driver, parent: &str, id: &str) -> Result<CgroupLocation, NamingError> {
    if parent.is_empty() {
        return Err(NamingError::EmptyParent);
    }
    validate_id(id)?;
    match driver {
        Driver::Cgroupfs => {
            let parent_path = cgroupfs_parent(parent)?;
            let path = if parent_path == "/" {
                format!("/{id}")
            } else {
                format!("{parent_path}/{id}")
            };
            Ok(CgroupLocation {
                driver,
                parent: parent_path.clone(),
                parent_path,
                path,
                systemd_name: None,
            })
        }
        Driver::Systemd => {
            let (slice, parent_path) = systemd_parent(parent)?;
            let scope = format!("{SCOPE_PREFIX}-{id}.scope");
            let path = if parent_path == "/" {
                format!("/{scope}")
            } else {
                format!("{parent_path}/{scope}")
            };
            Ok(CgroupLocation {
                driver,
                systemd_name: Some(format!("{slice}:{SCOPE_PREFIX}:{id}")),
                parent: slice,
                parent_path,
                path,
            })
        }
    }
}

/// Checks a cgroupfs parent and returns it normalized (no repeated or
/// trailing `/`).
fn cgroupfs_parent(parent: &str) -> Result<String, NamingError> {
    check_common(parent)?;
    if is_slice(parent) {
        return Err(NamingError::SliceWithCgroupfs {
            parent: parent.to_string(),
        });
    }
    if !parent.starts_with('/') {
        return Err(NamingError::NotAbsolute {
            parent: parent.to_string(),
        });
    }
    let components: Vec<&str> = parent.split('/').filter(|c| !c.is_empty()).collect();
    Ok(format!("/{}", components.join("/")))
}

/// Checks a systemd parent; returns the slice name and its expanded path.
///
/// kubelet sends the slice's expanded path
/// (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`,
/// what its `CgroupName.ToSystemd` returns); crictl and critest send a name,
/// with or without a leading `/`. Either way the slice is the last component,
/// as containerd and CRI-O take it; a path must be that slice's expansion.
fn systemd_parent(parent: &str) -> Result<(String, String), NamingError> {
    check_common(parent)?;
    if !is_slice(parent) {
        return Err(NamingError::PathWithSystemd {
            parent: parent.to_string(),
        });
    }
    let trimmed = parent.trim_end_matches('/');
    let slice = trimmed.rsplit('/').next().unwrap_or(trimmed);
    let path = expand_slice(slice)?;
    let given: Vec<&str> = trimmed.split('/').filter(|c| !c.is_empty()).collect();
    if given.len() > 1 && format!("/{}", given.join("/")) != path {
        return Err(NamingError::SliceElsewhere {
            parent: parent.to_string(),
            slice: slice.to_string(),
            expected: path,
        });
    }
    Ok((slice.to_string(), path))
}

/// Whether a parent names a systemd slice: its last path component ends in
/// `.slice` (CRI-O's test, so `/kubepods.slice/x.slice` counts as one too).
fn is_slice(parent: &str) -> bool {
    parent
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .is_some_and(|last| last.ends_with(SLICE_SUFFIX))
}

/// Checks that hold for a parent under any driver.
fn check_common(parent: &str) -> Result<(), NamingError> {
    let invalid = |reason| NamingError::InvalidParent {
        parent: parent.to_string(),
        reason,
    };
    if parent.split('/').any(|c| c == "..") {
        return Err(invalid("it must not contain \"..\""));
    }
    if parent.split('/').any(|c| c == ".") {
        return Err(invalid("it must not contain \".\" components"));
    }
    if parent.chars().any(char::is_control) {
        return Err(invalid("it must not contain control characters"));
    }
    // Each component becomes a directory name (NAME_MAX).
    if parent.split('/').any(|c| c.len() > 255) {
        return Err(invalid("each of its components must be at most 255 bytes"));
    }
    Ok(())
}

/// Ids become a path component and part of a unit name, so they are kept to
/// characters valid in both (container ids are hex in practice).
fn validate_id(id: &str) -> Result<(), NamingError> {
    let invalid = |reason| NamingError::InvalidId {
        id: id.to_string(),
        reason,
    };
    if id.is_empty() {
        return Err(invalid("it is empty"));
    }
    if id == "." || id == ".." {
        return Err(invalid("it is \".\" or \"..\""));
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(invalid(
            "it may only contain ASCII letters, digits, '-', '_' and '.'",
        ));
    }
    Ok(())
}

/// Characters systemd accepts in unit names (`VALID_CHARS` in systemd's
/// `unit-name.c`).
fn is_unit_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, ':' | '-' | '_' | '.' | '\\')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_mismatch_names_both_drivers_and_the_fix() {
        let err =
            sandbox_cgroup(Driver::Cgroupfs, "kubepods-pod1.slice", "/berth", "a").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("systemd slice") && text.contains("driver is cgroupfs"));
        assert!(text.contains("cgroup_driver = \"systemd\""), "{text}");
        let err =
            sandbox_cgroup(Driver::Systemd, "/kubepods/pod1", "system.slice", "a").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("cgroupfs path") && text.contains("driver is systemd"));
        assert!(text.contains("cgroup_driver = \"cgroupfs\""), "{text}");
    }

    #[test]
    fn expand_slice_examples() {
        assert_eq!(
            expand_slice("kubepods-burstable-pod123_456.slice").unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123_456.slice"
        );
        assert_eq!(expand_slice("-.slice").unwrap(), "/");
        assert_eq!(expand_slice("system.slice").unwrap(), "/system.slice");
        assert_eq!(expand_slice("test.slice").unwrap(), "/test.slice");
        assert_eq!(expand_slice("a-b.slice").unwrap(), "/a.slice/a-b.slice");
    }

    #[test]
    fn expand_slice_rejects_invalid_names() {
        for bad in [
            "kubepods",
            "kubepods.scope",
            ".slice",
            "a--b.slice",
            "-a.slice",
            "a-.slice",
            "/kubepods.slice",
            "kubepods.slice/x.slice",
            "a b.slice",
            "pod\u{e9}.slice",
            "",
        ] {
            let err = expand_slice(bad).unwrap_err();
            assert!(
                matches!(err, NamingError::InvalidSlice { .. }),
                "{bad:?}: {err}"
            );
        }
        let long = format!("{}.slice", "a".repeat(250));
        assert!(expand_slice(&long).is_err());
    }

    #[test]
    fn expand_slice_error_names_the_slice() {
        let err = expand_slice("a--b.slice").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid systemd slice name \"a--b.slice\": it has an empty '-'-separated component"
        );
    }

    #[test]
    fn cgroupfs_sandbox_under_kubelet_parent() {
        let loc = sandbox_cgroup(
            Driver::Cgroupfs,
            "/kubepods/burstable/pod123",
            "/berth",
            "abc",
        )
        .unwrap();
        assert_eq!(
            loc,
            CgroupLocation {
                driver: Driver::Cgroupfs,
                parent: "/kubepods/burstable/pod123".into(),
                parent_path: "/kubepods/burstable/pod123".into(),
                path: "/kubepods/burstable/pod123/abc".into(),
                systemd_name: None,
            }
        );
        assert_eq!(loc.oci_cgroups_path(), "/kubepods/burstable/pod123/abc");
    }

    #[test]
    fn cgroupfs_empty_parent_uses_default() {
        let loc = sandbox_cgroup(Driver::Cgroupfs, "", "/berth", "abc").unwrap();
        assert_eq!(loc.parent_path, "/berth");
        assert_eq!(loc.path, "/berth/abc");
    }

    #[test]
    fn parent_path_is_the_childs_parent_path() {
        for (driver, parent) in [
            (Driver::Cgroupfs, "//kubepods//pod1/"),
            (Driver::Systemd, "kubepods-burstable-pod1.slice"),
        ] {
            assert_eq!(
                parent_path(driver, parent).unwrap(),
                container_cgroup(driver, parent, "c1").unwrap().parent_path
            );
        }
        assert_eq!(
            parent_path(Driver::Systemd, "kubepods-burstable-pod1.slice").unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
        );
        assert!(parent_path(Driver::Cgroupfs, "").is_err());
    }

    #[test]
    fn cgroupfs_parent_is_normalized() {
        let loc = sandbox_cgroup(Driver::Cgroupfs, "//kubepods//pod1/", "/berth", "c1").unwrap();
        assert_eq!(loc.parent, "/kubepods/pod1");
        assert_eq!(loc.path, "/kubepods/pod1/c1");
        let root = sandbox_cgroup(Driver::Cgroupfs, "/", "/berth", "c1").unwrap();
        assert_eq!(root.parent_path, "/");
        assert_eq!(root.path, "/c1");
    }

    #[test]
    fn cgroupfs_rejects_slice_parent_naming_both() {
        let err = sandbox_cgroup(Driver::Cgroupfs, "kubepods.slice", "/berth", "abc").unwrap_err();
        assert!(err.to_string().starts_with(
            "cgroup parent \"kubepods.slice\" is a systemd slice, but berth's cgroup driver is cgroupfs: "
        ));
        for slice in ["/test.slice", "/kubepods.slice/kubepods-burstable.slice"] {
            assert_eq!(
                sandbox_cgroup(Driver::Cgroupfs, slice, "/berth", "abc").unwrap_err(),
                NamingError::SliceWithCgroupfs {
                    parent: slice.into()
                }
            );
        }
    }

    #[test]
    fn cgroupfs_rejects_relative_parent() {
        let err = sandbox_cgroup(Driver::Cgroupfs, "kubepods/pod1", "/berth", "abc").unwrap_err();
        assert!(matches!(err, NamingError::NotAbsolute { .. }), "{err}");
        assert!(err.to_string().contains("\"kubepods/pod1\""));
    }

    #[test]
    fn cgroupfs_rejects_bad_default_parent() {
        let err = sandbox_cgroup(Driver::Cgroupfs, "", "system.slice", "abc").unwrap_err();
        assert!(matches!(err, NamingError::SliceWithCgroupfs { .. }));
    }

    #[test]
    fn rejects_dot_dot_under_both_drivers() {
        for (driver, parent) in [
            (Driver::Cgroupfs, "/kubepods/../etc"),
            (Driver::Cgroupfs, "/.."),
            (Driver::Systemd, "/../x.slice"),
            (Driver::Systemd, "../kubepods.slice"),
        ] {
            let err = sandbox_cgroup(driver, parent, "", "abc").unwrap_err();
            assert!(matches!(err, NamingError::InvalidParent { .. }), "{err}");
            assert!(err.to_string().contains(".."), "{err}");
        }
        assert!(sandbox_cgroup(Driver::Cgroupfs, "/a/./b", "", "abc").is_err());
        let long = format!("/kubepods/{}", "x".repeat(256));
        let err = sandbox_cgroup(Driver::Cgroupfs, &long, "", "abc").unwrap_err();
        assert!(err.to_string().contains("255 bytes"), "{err}");
        let fits = format!("/kubepods/{}", "x".repeat(255));
        assert!(sandbox_cgroup(Driver::Cgroupfs, &fits, "", "abc").is_ok());
        assert!(sandbox_cgroup(Driver::Cgroupfs, "/a\nb", "", "abc").is_err());
        // ".." inside a name is not a traversal.
        assert!(sandbox_cgroup(Driver::Cgroupfs, "/a..b", "", "abc").is_ok());
    }

    #[test]
    fn systemd_sandbox_under_kubelet_slice() {
        let loc = sandbox_cgroup(
            Driver::Systemd,
            "kubepods-burstable-pod123_456.slice",
            "system.slice",
            "abc",
        )
        .unwrap();
        assert_eq!(
            loc,
            CgroupLocation {
                driver: Driver::Systemd,
                parent: "kubepods-burstable-pod123_456.slice".into(),
                parent_path:
                    "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123_456.slice"
                        .into(),
                path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123_456.slice/berth-abc.scope".into(),
                systemd_name: Some("kubepods-burstable-pod123_456.slice:berth:abc".into()),
            }
        );
        assert_eq!(
            loc.oci_cgroups_path(),
            "kubepods-burstable-pod123_456.slice:berth:abc"
        );
    }

    #[test]
    fn systemd_accepts_the_expanded_path_kubelet_sends() {
        let kubelet =
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod123_456.slice";
        for parent in [kubelet, &kubelet[1..], &format!("{kubelet}/")] {
            let loc = sandbox_cgroup(Driver::Systemd, parent, "system.slice", "abc").unwrap();
            assert_eq!(
                loc.parent, "kubepods-burstable-pod123_456.slice",
                "{parent}"
            );
            assert_eq!(loc.parent_path, kubelet);
            assert_eq!(loc.path, format!("{kubelet}/berth-abc.scope"));
        }
        let qos = sandbox_cgroup(
            Driver::Systemd,
            "/kubepods.slice/kubepods-besteffort.slice",
            "",
            "abc",
        )
        .unwrap();
        assert_eq!(qos.parent, "kubepods-besteffort.slice");
    }

    #[test]
    fn systemd_rejects_a_slice_path_systemd_would_not_make() {
        let err = sandbox_cgroup(
            Driver::Systemd,
            "/other.slice/kubepods-pod1.slice",
            "",
            "abc",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cgroup parent \"/other.slice/kubepods-pod1.slice\" is not where systemd puts slice \
             kubepods-pod1.slice: that is \"/kubepods.slice/kubepods-pod1.slice\""
        );
    }

    #[test]
    fn systemd_accepts_leading_slash_as_critest_sends() {
        let loc = sandbox_cgroup(Driver::Systemd, "/test.slice", "system.slice", "abc").unwrap();
        assert_eq!(loc.parent, "test.slice");
        assert_eq!(loc.parent_path, "/test.slice");
        assert_eq!(loc.path, "/test.slice/berth-abc.scope");
        assert_eq!(loc.systemd_name.as_deref(), Some("test.slice:berth:abc"));
    }

    #[test]
    fn systemd_empty_parent_uses_default() {
        let loc = sandbox_cgroup(Driver::Systemd, "", "system.slice", "abc").unwrap();
        assert_eq!(loc.path, "/system.slice/berth-abc.scope");
        assert_eq!(loc.systemd_name.as_deref(), Some("system.slice:berth:abc"));
    }

    #[test]
    fn systemd_root_slice() {
        let loc = sandbox_cgroup(Driver::Systemd, "-.slice", "", "abc").unwrap();
        assert_eq!(loc.parent_path, "/");
        assert_eq!(loc.path, "/berth-abc.scope");
        assert_eq!(loc.systemd_name.as_deref(), Some("-.slice:berth:abc"));
    }

    #[test]
    fn systemd_rejects_path_parent_naming_both() {
        let err =
            sandbox_cgroup(Driver::Systemd, "/kubepods/pod1", "system.slice", "abc").unwrap_err();
        assert!(err.to_string().starts_with(
            "cgroup parent \"/kubepods/pod1\" is a cgroupfs path, but berth's cgroup driver is systemd: "
        ));
    }

    #[test]
    fn systemd_rejects_invalid_slices() {
        for bad in ["a--b.slice", "-a.slice", "/kubepods.slice/a--b.slice"] {
            let err = sandbox_cgroup(Driver::Systemd, bad, "", "abc").unwrap_err();
            assert!(
                matches!(err, NamingError::InvalidSlice { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn container_is_child_of_sandbox_parent() {
        let sandbox = sandbox_cgroup(Driver::Systemd, "/test.slice", "", "pod").unwrap();
        let ctr = container_cgroup(Driver::Systemd, &sandbox.parent, "ctr").unwrap();
        assert_eq!(ctr.parent_path, sandbox.parent_path);
        assert_eq!(ctr.path, "/test.slice/berth-ctr.scope");
        assert_eq!(ctr.systemd_name.as_deref(), Some("test.slice:berth:ctr"));

        let sandbox = sandbox_cgroup(Driver::Cgroupfs, "", "/berth", "pod").unwrap();
        let ctr = container_cgroup(Driver::Cgroupfs, &sandbox.parent, "ctr").unwrap();
        assert_eq!(ctr.path, "/berth/ctr");
    }

    #[test]
    fn container_needs_a_parent() {
        assert_eq!(
            container_cgroup(Driver::Cgroupfs, "", "ctr").unwrap_err(),
            NamingError::EmptyParent
        );
        assert!(matches!(
            container_cgroup(Driver::Cgroupfs, "kubepods.slice", "ctr").unwrap_err(),
            NamingError::SliceWithCgroupfs { .. }
        ));
    }

    #[test]
    fn rejects_bad_ids() {
        for bad in ["", ".", "..", "a/b", "a:b", "a b", "a\0b"] {
            for driver in [Driver::Cgroupfs, Driver::Systemd] {
                let parent = match driver {
                    Driver::Cgroupfs => "/berth",
                    Driver::Systemd => "system.slice",
                };
                let err = sandbox_cgroup(driver, parent, "", bad).unwrap_err();
                assert!(
                    matches!(err, NamingError::InvalidId { .. }),
                    "{bad:?}: {err}"
                );
            }
        }
        let hex = "0123456789abcdef".repeat(4);
        assert!(sandbox_cgroup(Driver::Cgroupfs, "/berth", "", &hex).is_ok());
    }

    #[test]
    fn driver_parse_and_display() {
        assert_eq!("cgroupfs".parse::<Driver>().unwrap(), Driver::Cgroupfs);
        assert_eq!("systemd".parse::<Driver>().unwrap(), Driver::Systemd);
        assert!(matches!(
            "Systemd".parse::<Driver>(),
            Err(NamingError::UnknownDriver(_))
        ));
        assert_eq!(Driver::Systemd.to_string(), "systemd");
        assert!("cgroupfs2".parse::<Driver>().is_err());
    }

    #[test]
    fn default_parents_follow_driver_naming() {
        assert!(Driver::Cgroupfs.default_parent().starts_with('/'));
        assert!(Driver::Systemd.default_parent().ends_with(".slice"));
    }
}
