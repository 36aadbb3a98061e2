//! Host devices in the container: the nodes the runtime creates, and the
//! device cgroup rules that let the container use them.
//!
//! The cgroup starts by denying every device; the runtime then allows the
//! OCI default set (null, zero, full, tty, random, urandom, ptmx, pts), and we
//! allow the CRI's devices with their permissions. A CRI device that is a
//! directory (e.g. `/dev/snd`) brings every node below it, as containerd's
//! `WithDevices` does. A privileged container gets every host device and
//! may use any device at all.

use std::path::{Path, PathBuf};

use cri_api::v1::Device;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType};

use crate::error::SpecError;
use crate::host::{DeviceKind, HostDevice, HostLookup};

/// Device nodes and device cgroup rules of a container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DevicePlan {
    pub devices: Vec<LinuxDevice>,
    pub cgroup_rules: Vec<LinuxDeviceCgroup>,
}

/// The devices of a container from its CRI `devices`, looked up on the host.
pub fn container_devices(
    requested: &[Device],
    privileged: bool,
    host: &dyn HostLookup,
) -> Result<DevicePlan, SpecError> {
    let mut plan = DevicePlan {
        devices: Vec::new(),
        cgroup_rules: vec![cgroup_rule(false, None, "rwm")],
    };
    if privileged {
        let dev = Path::new("/dev");
        let all = host.devices(dev).map_err(|source| SpecError::Device {
            path: dev.into(),
            source,
        })?;
        plan.devices = all.iter().map(|d| linux_device(d, &d.path)).collect();
        plan.cgroup_rules = vec![cgroup_rule(true, None, "rwm")];
    }
    for device in requested {
        let permissions = device_permissions(device)?;
        let host_path = Path::new(&device.host_path);
        let container_path = if device.container_path.is_empty() {
            host_path
        } else {
            Path::new(&device.container_path)
        };
        let found = host
            .devices(host_path)
            .map_err(|source| SpecError::Device {
                path: host_path.into(),
                source,
            })?;
        for node in &found {
            let suffix = node.path.strip_prefix(host_path).unwrap_or(Path::new(""));
            let path = if suffix.as_os_str().is_empty() {
                container_path.to_path_buf()
            } else {
                container_path.join(suffix)
            };
            // A requested device wins over the same path from the host list.
            plan.devices.retain(|d| d.path() != &path);
            plan.devices.push(linux_device(node, &path));
            if !privileged {
                plan.cgroup_rules
                    .push(cgroup_rule(true, Some(node), &permissions));
            }
        }
    }
    Ok(plan)
}

/// The cgroup access of a CRI device: letters of "rwm"; empty means all.
fn device_permissions(device: &Device) -> Result<String, SpecError> {
    let permissions = &device.permissions;
    if permissions.is_empty() {
        return Ok("rwm".into());
    }
    if !permissions.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
        return Err(SpecError::DevicePermissions {
            path: device.host_path.clone(),
            permissions: permissions.clone(),
        });
    }
    Ok(permissions.clone())
}

fn device_type(kind: DeviceKind) -> LinuxDeviceType {
    match kind {
        DeviceKind::Char => LinuxDeviceType::C,
        DeviceKind::Block => LinuxDeviceType::B,
    }
}

fn linux_device(node: &HostDevice, path: &Path) -> LinuxDevice {
    let mut device = LinuxDevice::default();
    device
        .set_path(PathBuf::from(path))
        .set_typ(device_type(node.kind))
        .set_major(node.major)
        .set_minor(node.minor)
        .set_file_mode(Some(node.file_mode))
        .set_uid(Some(node.uid))
        .set_gid(Some(node.gid));
    device
}

/// A rule for one node, or for every device when `node` is `None`.
fn cgroup_rule(allow: bool, node: Option<&HostDevice>, access: &str) -> LinuxDeviceCgroup {
    let mut rule = LinuxDeviceCgroup::default();
    rule.set_allow(allow).set_access(Some(access.into()));
    if let Some(node) = node {
        rule.set_typ(Some(device_type(node.kind)))
            .set_major(Some(node.major))
            .set_minor(Some(node.minor));
    } else {
        rule.set_typ(Some(LinuxDeviceType::A));
    }
    rule
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{char_device, FakeHost};

    fn request(host: &str, container: &str, permissions: &str) -> Device {
        Device {
            host_path: host.into(),
            container_path: container.into(),
            permissions: permissions.into(),
        }
    }

    fn paths(plan: &DevicePlan) -> Vec<String> {
        plan.devices
            .iter()
            .map(|d| d.path().display().to_string())
            .collect()
    }

    #[test]
    fn no_devices_denies_everything_else() {
        let plan = container_devices(&[], false, &FakeHost::new()).unwrap();
        assert!(plan.devices.is_empty());
        assert_eq!(plan.cgroup_rules.len(), 1);
        let deny = &plan.cgroup_rules[0];
        assert!(!deny.allow());
        assert_eq!(deny.access().as_deref(), Some("rwm"));
    }

    #[test]
    fn a_device_is_created_and_allowed_with_its_permissions() {
        let host = FakeHost::new().with_char_device("/dev/fuse", 10, 229);
        let plan =
            container_devices(&[request("/dev/fuse", "/dev/myfuse", "rw")], false, &host).unwrap();
        assert_eq!(paths(&plan), ["/dev/myfuse"]);
        let device = &plan.devices[0];
        assert_eq!(
            (device.typ(), device.major(), device.minor()),
            (LinuxDeviceType::C, 10, 229)
        );
        assert_eq!(device.file_mode(), Some(0o666));
        let allow = &plan.cgroup_rules[1];
        assert!(allow.allow());
        assert_eq!((allow.major(), allow.minor()), (Some(10), Some(229)));
        assert_eq!(allow.access().as_deref(), Some("rw"));
    }

    #[test]
    fn empty_container_path_and_permissions_default() {
        let host = FakeHost::new().with_char_device("/dev/fuse", 10, 229);
        let plan = container_devices(&[request("/dev/fuse", "", "")], false, &host).unwrap();
        assert_eq!(paths(&plan), ["/dev/fuse"]);
        assert_eq!(plan.cgroup_rules[1].access().as_deref(), Some("rwm"));
    }

    #[test]
    fn a_directory_brings_every_node_below_it() {
        let host = FakeHost::new().with_device_dir(
            "/dev/snd",
            vec![
                char_device("/dev/snd/controlC0", 116, 0),
                char_device("/dev/snd/timer", 116, 33),
            ],
        );
        let plan =
            container_devices(&[request("/dev/snd", "/dev/sound", "rwm")], false, &host).unwrap();
        assert_eq!(paths(&plan), ["/dev/sound/controlC0", "/dev/sound/timer"]);
        assert_eq!(plan.cgroup_rules.len(), 3);
    }

    #[test]
    fn bad_permissions_and_missing_devices_are_errors() {
        let host = FakeHost::new().with_char_device("/dev/fuse", 10, 229);
        let err = container_devices(&[request("/dev/fuse", "", "rwx")], false, &host).unwrap_err();
        assert!(matches!(err, SpecError::DevicePermissions { .. }));
        let err = container_devices(&[request("/dev/nope", "", "r")], false, &host).unwrap_err();
        assert!(matches!(&err, SpecError::Device { path, .. } if path == Path::new("/dev/nope")));
    }

    #[test]
    fn privileged_gets_all_host_devices_and_all_access() {
        let host = FakeHost::new()
            .with_device_dir(
                "/dev",
                vec![
                    char_device("/dev/null", 1, 3),
                    char_device("/dev/fuse", 10, 229),
                ],
            )
            .with_char_device("/dev/fuse", 10, 229);
        let plan =
            container_devices(&[request("/dev/fuse", "/dev/fuse", "r")], true, &host).unwrap();
        assert_eq!(paths(&plan), ["/dev/null", "/dev/fuse"]);
        assert_eq!(plan.cgroup_rules.len(), 1);
        let rule = &plan.cgroup_rules[0];
        assert!(rule.allow());
        assert_eq!(rule.typ(), Some(LinuxDeviceType::A));
    }
}
