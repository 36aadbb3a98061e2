//! Container Device Interface (CDI): devices named `vendor.com/class=name`
//! (device plugins and DRA ask for them in `ContainerConfig.CDI_devices`
//! or in `cdi.k8s.io/*` annotations), described by spec files that say
//! how to edit a container's OCI spec for them: device nodes, mounts, env,
//! hooks and groups.
//!
//! As in the CDI specification (cncf-tags/container-device-interface):
//! - a spec's `kind` is `vendor/class`; a device is found by the kind of
//!   its spec and its name;
//! - a requested device brings its own `containerEdits` and, once per spec,
//!   the spec-level ones, applied first;
//! - when two specs define the same device, the later one wins (berthd
//!   reads `/etc/cdi` before `/var/run/cdi`, so generated specs win).
//!
//! Reading the spec files is berthd's; everything here is pure but for
//! the device numbers of a node a spec leaves out, which come through
//! [`HostLookup`].

use std::path::{Path, PathBuf};

use cri_api::v1::ContainerConfig;
use oci_spec::runtime::{Hook, LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, Mount, Spec};
use serde::Deserialize;

use crate::host::{DeviceKind, HostLookup};
use crate::process::merge_env;

/// Annotations whose values list CDI devices, comma-separated (the
/// convention of CDI's `AnnotationPrefix`, which device plugins use).
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// What a CDI request cannot be turned into.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    #[error("CDI device {name:?}: {reason} (want vendor.com/class=name)")]
    BadName { name: String, reason: &'static str },
    #[error("CDI device {name:?} is not defined by any CDI spec{problems}")]
    UnknownDevice { name: String, problems: String },
    #[error("CDI device {device:?}: {reason}")]
    BadEdit { device: String, reason: String },
}

/// A CDI spec file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiSpec {
    pub cdi_version: String,
    /// `vendor.com/class`.
    pub kind: String,
    #[serde(default)]
    pub devices: Vec<CdiDevice>,
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiDevice {
    pub name: String,
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// The edits a device (or a whole spec) makes to the container.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    #[serde(default)]
    pub mounts: Vec<CdiMount>,
    #[serde(default)]
    pub hooks: Vec<CdiHook>,
    #[serde(default, rename = "additionalGIDs")]
    pub additional_gids: Vec<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Where the node appears in the container.
    pub path: String,
    /// The node on the host; `path` when absent.
    pub host_path: Option<String>,
    /// `c`, `u` or `b`; with `major` and `minor`, read from the host node
    /// when absent.
    #[serde(rename = "type")]
    pub typ: Option<String>,
    pub major: Option<i64>,
    pub minor: Option<i64>,
    pub file_mode: Option<u32>,
    /// The cgroup access, `rwm` when absent.
    pub permissions: Option<String>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiMount {
    pub host_path: String,
    pub container_path: String,
    #[serde(default)]
    pub options: Vec<String>,
    #[serde(rename = "type")]
    pub typ: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiHook {
    /// An OCI hook point: `prestart`, `createRuntime`, `createContainer`,
    /// `startContainer`, `poststart` or `poststop`.
    pub hook_name: String,
    pub path: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<String>,
    pub timeout: Option<i64>,
}

/// Parses a spec file: JSON when `json`, else YAML. The error says why.
pub fn parse_spec(text: &[u8], json: bool) -> Result<CdiSpec, String> {
    let spec: CdiSpec = if json {
        serde_json::from_slice(text).map_err(|err| err.to_string())?
    } else {
        serde_yaml_ng::from_slice(text).map_err(|err| err.to_string())?
    };
    let (vendor, class) = spec
        .kind
        .split_once('/')
        .ok_or_else(|| format!("kind {:?} is not vendor/class", spec.kind))?;
    check_vendor(vendor)
        .and_then(|()| check_class(class))
        .map_err(|reason| format!("kind {:?}: {reason}", spec.kind))?;
    Ok(spec)
}

/// A fully-qualified device name split into its kind (`vendor/class`) and
/// device name, each checked as the CDI parser does.
pub fn parse_qualified(name: &str) -> Result<(&str, &str), CdiError> {
    let bad = |reason| CdiError::BadName {
        name: name.to_string(),
        reason,
    };
    let (kind, device) = name.split_once('=').ok_or(bad("no '='"))?;
    let (vendor, class) = kind.split_once('/').ok_or(bad("no vendor/class"))?;
    check_vendor(vendor).map_err(bad)?;
    check_class(class).map_err(bad)?;
    check_device(device).map_err(bad)?;
    Ok((kind, device))
}

/// A vendor: letters, digits, `-`, `_` and `.`, starting with a letter
/// and ending with a letter or digit.
fn check_vendor(vendor: &str) -> Result<(), &'static str> {
    check_word(vendor, &['-', '_', '.'], "bad vendor")
}

/// A class: as a vendor, without `.`.
fn check_class(class: &str) -> Result<(), &'static str> {
    check_word(class, &['-', '_'], "bad class")
}

fn check_word(word: &str, extra: &[char], error: &'static str) -> Result<(), &'static str> {
    let first_ok = word.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let last_ok = word
        .chars()
        .last()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let chars_ok = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c));
    if first_ok && last_ok && chars_ok {
        Ok(())
    } else {
        Err(error)
    }
}

/// A device name: letters, digits, `-`, `_`, `.` and `:`, starting and
/// ending with a letter or digit.
fn check_device(device: &str) -> Result<(), &'static str> {
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let chars_ok = device
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ['-', '_', '.', ':'].contains(&c));
    if ends_ok(device.chars().next()) && ends_ok(device.chars().last()) && chars_ok {
        Ok(())
    } else {
        Err("bad device name")
    }
}

/// The CDI devices a container asks for: `CDI_devices`, then the
/// `cdi.k8s.io/*` annotations (keys in order), each once, each checked.
pub fn requested_devices(config: &ContainerConfig) -> Result<Vec<String>, CdiError> {
    let mut annotated: Vec<(&String, &String)> = config
        .annotations
        .iter()
        .filter(|(key, _)| key.starts_with(ANNOTATION_PREFIX))
        .collect();
    annotated.sort();
    let names = config
        .cdi_devices
        .iter()
        .map(|device| device.name.trim())
        .chain(
            annotated
                .into_iter()
                .flat_map(|(_, value)| value.split(','))
                .map(str::trim),
        )
        .filter(|name| !name.is_empty());
    let mut devices: Vec<String> = Vec::new();
    for name in names {
        parse_qualified(name)?;
        if !devices.iter().any(|known| known == name) {
            devices.push(name.to_string());
        }
    }
    Ok(devices)
}

/// The edits for `devices`, from `specs` (later specs win): each spec's
/// own edits once, before its first device's. `problems` (spec files that
/// could not be read) goes into the error for a device not found.
pub fn resolve<'a>(
    specs: &'a [CdiSpec],
    devices: &[String],
    problems: &[String],
) -> Result<Vec<(&'a str, &'a ContainerEdits)>, CdiError> {
    let mut edits: Vec<(&str, &ContainerEdits)> = Vec::new();
    let mut specs_used: Vec<usize> = Vec::new();
    for name in devices {
        let (kind, device) = parse_qualified(name)?;
        let found = specs.iter().enumerate().rev().find_map(|(index, spec)| {
            (spec.kind == kind)
                .then(|| spec.devices.iter().find(|d| d.name == device))
                .flatten()
                .map(|d| (index, spec, d))
        });
        let Some((index, spec, found)) = found else {
            return Err(CdiError::UnknownDevice {
                name: name.clone(),
                problems: if problems.is_empty() {
                    String::new()
                } else {
                    format!(" (unreadable specs: {})", problems.join("; "))
                },
            });
        };
        if !specs_used.contains(&index) {
            specs_used.push(index);
            edits.push((&spec.kind, &spec.container_edits));
        }
        edits.push((&found.name, &found.container_edits));
    }
    Ok(edits)
}

/// Applies `edits` (as [`resolve`] returns them: who asked for the edit,
/// and the edit) to `spec`.
pub fn apply(
    spec: &mut Spec,
    edits: &[(&str, &ContainerEdits)],
    host: &dyn HostLookup,
) -> Result<(), CdiError> {
    for (device, edit) in edits {
        let bad = |reason: String| CdiError::BadEdit {
            device: device.to_string(),
            reason,
        };
        if let Some(process) = spec.process_mut() {
            let env = process.env().clone().unwrap_or_default();
            process.set_env(Some(merge_env(env, edit.env.iter().cloned())));
            if !edit.additional_gids.is_empty() {
                let mut user = process.user().clone();
                let mut gids = user.additional_gids().clone().unwrap_or_default();
                gids.extend(edit.additional_gids.iter().filter(|gid| **gid != 0));
                gids.dedup();
                user.set_additional_gids(Some(gids));
                process.set_user(user);
            }
        }
        for node in &edit.device_nodes {
            let (device_node, rule) = linux_device(node, host).map_err(bad)?;
            let linux = spec.linux_mut().get_or_insert_with(Default::default);
            let mut devices = linux.devices().clone().unwrap_or_default();
            devices.retain(|d| d.path() != device_node.path());
            devices.push(device_node);
            linux.set_devices(Some(devices));
            let mut resources = linux.resources().clone().unwrap_or_default();
            let mut rules = resources.devices().clone().unwrap_or_default();
            rules.push(rule);
            resources.set_devices(Some(rules));
            linux.set_resources(Some(resources));
        }
        let mut mounts = spec.mounts().clone().unwrap_or_default();
        for mount in &edit.mounts {
            mounts.retain(|m| m.destination() != Path::new(&mount.container_path));
            mounts.push(oci_mount(mount));
        }
        spec.set_mounts(Some(mounts));
        for hook in &edit.hooks {
            add_hook(spec, hook).map_err(bad)?;
        }
    }
    Ok(())
}

/// A device node and its cgroup rule; what the spec leaves out of type
/// and numbers comes from the host's node.
fn linux_device(
    node: &DeviceNode,
    host: &dyn HostLookup,
) -> Result<(LinuxDevice, LinuxDeviceCgroup), String> {
    if !node.path.starts_with('/') {
        return Err(format!("device node path {:?} is not absolute", node.path));
    }
    let host_path = node.host_path.as_deref().unwrap_or(&node.path);
    let given = match (node.typ.as_deref(), node.major, node.minor) {
        (Some(typ), Some(major), Some(minor)) => Some((typ.to_string(), major, minor)),
        (Some("p"), _, _) => Some(("p".to_string(), 0, 0)),
        _ => None,
    };
    let (typ, major, minor, mode, uid, gid) = match given {
        Some((typ, major, minor)) => (typ, major, minor, None, None, None),
        None => {
            let found = host
                .devices(Path::new(host_path))
                .map_err(|err| format!("device node {host_path:?} on the host: {err}"))?;
            let found = found
                .into_iter()
                .next()
                .ok_or_else(|| format!("{host_path:?} on the host is not a device node"))?;
            let typ = match found.kind {
                DeviceKind::Char => "c",
                DeviceKind::Block => "b",
            };
            (
                typ.to_string(),
                found.major,
                found.minor,
                Some(found.file_mode),
                Some(found.uid),
                Some(found.gid),
            )
        }
    };
    let kind = match typ.as_str() {
        "c" => LinuxDeviceType::C,
        "u" => LinuxDeviceType::U,
        "b" => LinuxDeviceType::B,
        "p" => LinuxDeviceType::P,
        other => return Err(format!("device node type {other:?} is not c, u, b or p")),
    };
    let mut device = LinuxDevice::default();
    device
        .set_path(PathBuf::from(&node.path))
        .set_typ(kind)
        .set_major(major)
        .set_minor(minor)
        .set_file_mode(node.file_mode.or(mode))
        .set_uid(node.uid.or(uid))
        .set_gid(node.gid.or(gid));
    let mut rule = LinuxDeviceCgroup::default();
    rule.set_allow(true)
        .set_typ(Some(if kind == LinuxDeviceType::U {
            LinuxDeviceType::C
        } else {
            kind
        }))
        .set_major(Some(major))
        .set_minor(Some(minor))
        .set_access(Some(
            node.permissions
                .clone()
                .unwrap_or_else(|| "rwm".to_string()),
        ));
    Ok((device, rule))
}

/// A CDI mount as an OCI one: a bind (`rbind` added when no bind option
/// is given) unless it names its type.
fn oci_mount(mount: &CdiMount) -> Mount {
    let typ = mount.typ.clone().unwrap_or_else(|| "bind".to_string());
    let mut options = mount.options.clone();
    if typ == "bind" && !options.iter().any(|o| o == "bind" || o == "rbind") {
        options.push("rbind".to_string());
    }
    let mut oci = Mount::default();
    oci.set_destination(PathBuf::from(&mount.container_path))
        .set_source(Some(PathBuf::from(&mount.host_path)))
        .set_typ(Some(typ))
        .set_options(Some(options));
    oci
}

fn add_hook(spec: &mut Spec, hook: &CdiHook) -> Result<(), String> {
    let mut oci = Hook::default();
    oci.set_path(PathBuf::from(&hook.path))
        .set_args((!hook.args.is_empty()).then(|| hook.args.clone()))
        .set_env((!hook.env.is_empty()).then(|| hook.env.clone()))
        .set_timeout(hook.timeout);
    let mut hooks = spec.hooks().clone().unwrap_or_default();
    let list = match hook.hook_name.as_str() {
        "prestart" => hooks.prestart().clone(),
        "createRuntime" => hooks.create_runtime().clone(),
        "createContainer" => hooks.create_container().clone(),
        "startContainer" => hooks.start_container().clone(),
        "poststart" => hooks.poststart().clone(),
        "poststop" => hooks.poststop().clone(),
        other => return Err(format!("hook name {other:?} is not an OCI hook")),
    };
    let mut list = list.unwrap_or_default();
    list.push(oci);
    match hook.hook_name.as_str() {
        "prestart" => hooks.set_prestart(Some(list)),
        "createRuntime" => hooks.set_create_runtime(Some(list)),
        "createContainer" => hooks.set_create_container(Some(list)),
        "startContainer" => hooks.set_start_container(Some(list)),
        "poststart" => hooks.set_poststart(Some(list)),
        _ => hooks.set_poststop(Some(list)),
    };
    spec.set_hooks(Some(hooks));
    Ok(())
}

#[cfg(test)]
#[path = "cdi_tests.rs"]
mod tests;
