//! `ContainerStatus`, and the record-to-CRI conversions that the list and
//! the events share.

use berth_shim_api::protocol::{RunState, StateInfo};
use cri_api::v1::{
    ContainerResources, ContainerState, ContainerStatus, ContainerStatusRequest,
    ContainerStatusResponse, ContainerUser, ImageSpec, LinuxContainerUser, Signal as CriSignal,
};
use tonic::Status;

use super::CriService;
use crate::clock::rfc3339_nanos;
use crate::container::store::ContainerRecord;

impl CriService {
    pub(super) async fn serve_container_status(
        &self,
        request: ContainerStatusRequest,
    ) -> Result<ContainerStatusResponse, Status> {
        let containers = &self.context().containers;
        let record = containers.published(&request.container_id)?;
        let state = containers.state(&record).await;
        let spec = read_spec(&record);
        let mut info = std::collections::HashMap::new();
        if request.verbose {
            let verbose = serde_json::json!({
                "pid": state.as_ref().map(|state| state.pid).unwrap_or(record.pid),
                "sandboxID": record.sandbox_id,
                "bundle": record.bundle,
                "cgroupsPath": record.cgroups_path,
                "shimDir": record.shim_dir,
                "runtimeSpec": spec,
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        let mut status = to_status(&record, state.as_ref());
        status.user = spec.as_ref().and_then(process_user);
        Ok(ContainerStatusResponse {
            status: Some(status),
            info,
        })
    }
}

/// The OCI spec berth wrote for the container.
fn read_spec(record: &ContainerRecord) -> Option<serde_json::Value> {
    let bytes = std::fs::read(record.bundle.join("config.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The user the container's process really runs as, from its spec.
fn process_user(spec: &serde_json::Value) -> Option<ContainerUser> {
    let user = spec.get("process")?.get("user")?;
    let groups = user
        .get("additionalGids")
        .and_then(|gids| gids.as_array())
        .map(|gids| gids.iter().filter_map(|gid| gid.as_i64()).collect())
        .unwrap_or_default();
    Some(ContainerUser {
        linux: Some(LinuxContainerUser {
            uid: user.get("uid")?.as_i64()?,
            gid: user.get("gid")?.as_i64()?,
            supplemental_groups: groups,
        }),
    })
}

pub(super) fn image_spec(record: &ContainerRecord) -> ImageSpec {
    ImageSpec {
        image: record.image_name().to_string(),
        user_specified_image: record.image_name().to_string(),
        ..Default::default()
    }
}

/// The CRI state for what the shim says (no shim at all: unknown).
pub(super) fn cri_state(state: Option<&StateInfo>) -> ContainerState {
    match state.map(|state| state.status) {
        Some(RunState::Created) => ContainerState::ContainerCreated,
        Some(RunState::Running) => ContainerState::ContainerRunning,
        Some(RunState::Stopped) => ContainerState::ContainerExited,
        None => ContainerState::ContainerUnknown,
    }
}

pub(super) fn to_status(record: &ContainerRecord, state: Option<&StateInfo>) -> ContainerStatus {
    let config = &record.config;
    let cri = cri_state(state);
    let exit_code = state.and_then(|state| state.exit_code).unwrap_or(0);
    let oom = state.is_some_and(|state| state.oom_killed);
    let unknown = state.is_some_and(|state| state.unknown);
    let reason = match cri {
        ContainerState::ContainerExited if unknown => "Unknown",
        ContainerState::ContainerExited if oom => "OOMKilled",
        ContainerState::ContainerExited if exit_code == 0 => "Completed",
        ContainerState::ContainerExited => "Error",
        _ => "",
    };
    ContainerStatus {
        id: record.id.clone(),
        metadata: config.metadata.clone(),
        state: cri as i32,
        created_at: record.created_at,
        started_at: state
            .and_then(|state| state.started_at.as_deref())
            .and_then(rfc3339_nanos)
            .unwrap_or(0),
        finished_at: state
            .and_then(|state| state.exited_at.as_deref())
            .and_then(rfc3339_nanos)
            .unwrap_or(0),
        exit_code,
        image: Some(image_spec(record)),
        image_ref: record.image_id.clone(),
        reason: reason.to_string(),
        message: String::new(),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        mounts: config.mounts.clone(),
        log_path: record
            .log_path
            .as_ref()
            .map(|path| path.display().to_string())
            .unwrap_or_default(),
        resources: config
            .linux
            .as_ref()
            .and_then(|linux| linux.resources.clone())
            .map(|linux| ContainerResources {
                linux: Some(linux),
                windows: None,
            }),
        image_id: record.image_id.clone(),
        user: None,
        stop_signal: stop_signal(record.stop_signal) as i32,
    }
}

/// The effective stop signal as the CRI enum (KEP-4960): the config's, else
/// the image's, else SIGTERM, as resolved at creation.
fn stop_signal(number: i32) -> CriSignal {
    nix::sys::signal::Signal::try_from(number)
        .ok()
        // The enum's names are `SIGNAL_SIGTERM` since cri-api v0.37.
        .and_then(|signal| CriSignal::from_str_name(&format!("SIGNAL_{}", signal.as_str())))
        .unwrap_or(CriSignal::RuntimeDefault)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_comes_from_the_spec() {
        let spec = serde_json::json!({"process": {"user": {"uid": 1000, "gid": 50, "additionalGids": [50, 1234]}}});
        let user = process_user(&spec).unwrap().linux.unwrap();
        assert_eq!((user.uid, user.gid), (1000, 50));
        assert_eq!(user.supplemental_groups, [50, 1234]);
        assert!(process_user(&serde_json::json!({})).is_none());
    }

    #[test]
    fn stop_signal_names_map_to_the_cri_enum() {
        assert_eq!(stop_signal(15), CriSignal::Sigterm);
        assert_eq!(stop_signal(2), CriSignal::Sigint);
        assert_eq!(stop_signal(0), CriSignal::RuntimeDefault);
    }

    #[test]
    fn exited_reasons() {
        let state = |code: i32, oom: bool| StateInfo {
            id: String::new(),
            status: RunState::Stopped,
            pid: 0,
            created_at: String::new(),
            started_at: None,
            exit_code: Some(code),
            exited_at: None,
            oom_killed: oom,
            unknown: false,
        };
        assert_eq!(
            cri_state(Some(&state(0, false))),
            ContainerState::ContainerExited
        );
        assert_eq!(cri_state(None), ContainerState::ContainerUnknown);
    }
}
