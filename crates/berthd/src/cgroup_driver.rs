//! The cgroup driver (KEP-4033): chosen in the config, resolved once at
//! start-up, and reported to kubelet through the `RuntimeConfig` RPC.
//!
//! kubelet configures its own cgroup manager from what berth reports, so the
//! answer must never change while berthd runs: it is resolved here, once,
//! into a [`Driver`] (berth-cgroups' one enum) that the rest of the daemon
//! only reads.

use berth_cgroups::Driver;
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

/// What the host offers; a trait so resolution is testable without a systemd host.
pub trait HostInit {
    /// Whether PID 1 is systemd, judged as systemd itself does (`sd_booted`).
    fn systemd_booted(&self) -> bool;
}

/// The real host, asked as berth-cgroups asks it.
pub struct RealHost;

impl HostInit for RealHost {
    fn systemd_booted(&self) -> bool {
        berth_cgroups::systemd_booted()
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
) -> Result<Driver, SystemdUnavailable> {
    match setting {
        CgroupDriverSetting::Cgroupfs => Ok(Driver::Cgroupfs),
        CgroupDriverSetting::Systemd if host.systemd_booted() => Ok(Driver::Systemd),
        CgroupDriverSetting::Systemd => Err(SystemdUnavailable),
        CgroupDriverSetting::Auto if host.systemd_booted() => Ok(Driver::Systemd),
        CgroupDriverSetting::Auto => Ok(Driver::Cgroupfs),
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
                Ok(Driver::Cgroupfs)
            );
        }
    }

    #[test]
    fn systemd_needs_a_systemd_host() {
        assert_eq!(
            resolve(CgroupDriverSetting::Systemd, &FakeHost(true)),
            Ok(Driver::Systemd)
        );
        let err = resolve(CgroupDriverSetting::Systemd, &FakeHost(false)).unwrap_err();
        assert!(err.to_string().contains("not booted with systemd"));
    }

    #[test]
    fn auto_follows_the_host() {
        assert_eq!(
            resolve(CgroupDriverSetting::Auto, &FakeHost(true)),
            Ok(Driver::Systemd)
        );
        assert_eq!(
            resolve(CgroupDriverSetting::Auto, &FakeHost(false)),
            Ok(Driver::Cgroupfs)
        );
    }
}
