//! The cgroup driver (KEP-4033): chosen in the config, resolved once at
//! start-up, and reported to kubelet through the `RuntimeConfig` RPC.
//!
//! kubelet configures its own cgroup manager from what berth reports, so the
//! answer must never change while berthd runs: it is resolved here, once,
//! into a [`CgroupDriver`] that the rest of the daemon only reads.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// What the config asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriverSetting {
    Cgroupfs,
    Systemd,
    /// systemd when the host was booted with systemd, else cgroupfs.
    Auto,
}

/// The driver in force for this run of berthd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    /// The name used in config files and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }

    /// The parent for sandboxes whose `CgroupParent` is empty.
    pub fn default_parent(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "/berth",
            CgroupDriver::Systemd => "system.slice",
        }
    }

    /// The CRI enum value (`SYSTEMD = 0`, `CGROUPFS = 1`).
    pub fn to_cri(self) -> cri_api::v1::CgroupDriver {
        match self {
            CgroupDriver::Cgroupfs => cri_api::v1::CgroupDriver::Cgroupfs,
            CgroupDriver::Systemd => cri_api::v1::CgroupDriver::Systemd,
        }
    }
}

/// What the host offers; a trait so resolution is testable without a systemd host.
pub trait HostInit {
    /// Whether PID 1 is systemd, judged as systemd itself does (`sd_booted`).
    fn systemd_booted(&self) -> bool;
}

/// The real host: systemd creates `/run/systemd/system` early at boot.
pub struct RealHost;

impl HostInit for RealHost {
    fn systemd_booted(&self) -> bool {
        Path::new("/run/systemd/system").is_dir()
    }
}

/// The configured driver cannot be used on this host.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "cgroup_driver = \"systemd\" is configured, but this host was not booted with systemd \
     (/run/systemd/system is missing); use cgroup_driver = \"cgroupfs\" or \"auto\""
)]
pub struct SystemdUnavailable;

/// Resolves the configured setting against the host, once, at start-up.
pub fn resolve(
    setting: CgroupDriverSetting,
    host: &dyn HostInit,
) -> Result<CgroupDriver, SystemdUnavailable> {
    match setting {
        CgroupDriverSetting::Cgroupfs => Ok(CgroupDriver::Cgroupfs),
        CgroupDriverSetting::Systemd if host.systemd_booted() => Ok(CgroupDriver::Systemd),
        CgroupDriverSetting::Systemd => Err(SystemdUnavailable),
        CgroupDriverSetting::Auto if host.systemd_booted() => Ok(CgroupDriver::Systemd),
        CgroupDriverSetting::Auto => Ok(CgroupDriver::Cgroupfs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host whose init system the test chooses; the real systemd path
    /// cannot be exercised on a machine whose PID 1 is not systemd.
    struct FakeHost(bool);

    impl HostInit for FakeHost {
        fn systemd_booted(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn explicit_cgroupfs_ignores_the_host() {
        for booted in [true, false] {
            assert_eq!(
                resolve(CgroupDriverSetting::Cgroupfs, &FakeHost(booted)),
                Ok(CgroupDriver::Cgroupfs)
            );
        }
    }

    #[test]
    fn systemd_needs_a_systemd_host() {
        assert_eq!(
            resolve(CgroupDriverSetting::Systemd, &FakeHost(true)),
            Ok(CgroupDriver::Systemd)
        );
        let err = resolve(CgroupDriverSetting::Systemd, &FakeHost(false)).unwrap_err();
        assert!(err.to_string().contains("not booted with systemd"));
    }

    #[test]
    fn auto_follows_the_host() {
        assert_eq!(
            resolve(CgroupDriverSetting::Auto, &FakeHost(true)),
            Ok(CgroupDriver::Systemd)
        );
        assert_eq!(
            resolve(CgroupDriverSetting::Auto, &FakeHost(false)),
            Ok(CgroupDriver::Cgroupfs)
        );
    }

    #[test]
    fn cri_enum_values_match_the_wire() {
        assert_eq!(CgroupDriver::Systemd.to_cri() as i32, 0);
        assert_eq!(CgroupDriver::Cgroupfs.to_cri() as i32, 1);
    }

    #[test]
    fn default_parents_follow_driver_naming() {
        assert!(CgroupDriver::Cgroupfs.default_parent().starts_with('/'));
        assert!(CgroupDriver::Systemd.default_parent().ends_with(".slice"));
    }
}
