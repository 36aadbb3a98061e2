//! Block device names by number (`254:0` is `/dev/vda`), the way cadvisor
//! labels its IO metrics: cgroups count IO per device number only.

use std::collections::HashMap;

/// Block device paths by major and minor number.
pub type DeviceNames = HashMap<(u64, u64), String>;

/// The names of `devices`, from sysfs; a device sysfs does not know is
/// left out (callers fall back to `major:minor`).
pub fn names(devices: impl IntoIterator<Item = (u64, u64)>) -> DeviceNames {
    devices
        .into_iter()
        .filter_map(|(major, minor)| {
            let uevent =
                std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent")).ok()?;
            Some(((major, minor), uevent_device_path(&uevent)?))
        })
        .collect()
}

/// The `/dev` path in a sysfs `uevent` file's `DEVNAME=` line.
pub fn uevent_device_path(uevent: &str) -> Option<String> {
    uevent
        .lines()
        .find_map(|line| line.strip_prefix("DEVNAME="))
        .filter(|name| !name.is_empty())
        .map(|name| format!("/dev/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devname_becomes_a_dev_path() {
        let uevent = "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\nDISKSEQ=1\n";
        assert_eq!(uevent_device_path(uevent).as_deref(), Some("/dev/vda"));
        assert_eq!(uevent_device_path("MAJOR=1\n"), None);
        assert_eq!(uevent_device_path("DEVNAME=\n"), None);
    }
}
