//! `RuntimeConfig` (KEP-4033): the cgroup driver kubelet must use.

use berth_cgroups::Driver;
use cri_api::v1::{
    CgroupDriver, LinuxRuntimeConfiguration, RuntimeConfigRequest, RuntimeConfigResponse,
};

use super::CriService;

impl CriService {
    pub(super) fn serve_runtime_config(
        &self,
        _request: RuntimeConfigRequest,
    ) -> RuntimeConfigResponse {
        RuntimeConfigResponse {
            linux: Some(LinuxRuntimeConfiguration {
                cgroup_driver: cri_driver(self.context().cgroup_driver) as i32,
            }),
        }
    }
}

/// The CRI enum value (`SYSTEMD = 0`, `CGROUPFS = 1`).
fn cri_driver(driver: Driver) -> CgroupDriver {
    match driver {
        Driver::Cgroupfs => CgroupDriver::Cgroupfs,
        Driver::Systemd => CgroupDriver::Systemd,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cri_enum_values_match_the_wire() {
        assert_eq!(cri_driver(Driver::Systemd) as i32, 0);
        assert_eq!(cri_driver(Driver::Cgroupfs) as i32, 1);
    }
}
