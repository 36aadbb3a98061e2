//! `PodSandboxStatus`, and the record-to-CRI conversions that the list and
//! the events share.

use cri_api::v1::{
    LinuxPodSandboxStatus, Namespace, NamespaceMode, NamespaceOption, PodIp,
    PodSandboxNetworkStatus, PodSandboxState, PodSandboxStatus, PodSandboxStatusRequest,
    PodSandboxStatusResponse,
};
use tonic::Status;

use super::CriService;
use crate::sandbox::store::{SandboxRecord, SandboxState};

impl CriService {
    pub(super) async fn serve_pod_sandbox_status(
        &self,
        request: PodSandboxStatusRequest,
    ) -> Result<PodSandboxStatusResponse, Status> {
        let sandboxes = &self.context().sandboxes;
        let record = sandboxes.published(&request.pod_sandbox_id)?;
        // A handler's sandbox container (the pod's id): the pod is ready
        // only while it runs, as containerd's pause container.
        let containers = &self.context().containers;
        let sandbox_container = match containers.store.published(&record.id) {
            Ok(Some(container)) if container.is_sandbox_container() => {
                let state = containers.state(&container).await;
                Some((container, state))
            }
            _ => None,
        };
        let container_runs = sandbox_container.as_ref().map(|(_, state)| {
            state
                .as_ref()
                .is_some_and(|state| state.status == berth_shim_api::protocol::RunState::Running)
        });
        let mut info = std::collections::HashMap::new();
        if request.verbose {
            let verbose = serde_json::json!({
                "pid": record.infra.as_ref().map(|infra| infra.pid).unwrap_or(0),
                "netns": record.namespaces.get("net"),
                "namespaces": record.namespaces,
                "cgroupPath": record.cgroup_path,
                "cgroupParent": record.cgroup_parent,
                "dir": record.dir,
                "filesDir": record.files_dir(),
                "cniResult": record.cni_result,
                "sandboxContainer": sandbox_container.as_ref().map(|(container, state)| {
                    serde_json::json!({
                        "id": container.id,
                        "image": container.image_ref,
                        "runtimeHandler": container.runtime_handler,
                        "pid": state.as_ref().map(|state| state.pid),
                        "running": container_runs,
                    })
                }),
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        let mut status = to_status(&record);
        if container_runs == Some(false) {
            status.state = PodSandboxState::SandboxNotready as i32;
        }
        Ok(PodSandboxStatusResponse {
            status: Some(status),
            info,
            containers_statuses: Vec::new(),
            timestamp: crate::clock::now_nanos(),
        })
    }
}

pub(super) fn cri_state(state: SandboxState) -> PodSandboxState {
    match state {
        SandboxState::Ready => PodSandboxState::SandboxReady,
        SandboxState::NotReady => PodSandboxState::SandboxNotready,
    }
}

/// A record as CRI's `PodSandboxStatus`.
pub(super) fn to_status(record: &SandboxRecord) -> PodSandboxStatus {
    let config = &record.config;
    let options = config
        .linux
        .as_ref()
        .and_then(|linux| linux.security_context.as_ref())
        .and_then(|context| context.namespace_options.clone())
        .unwrap_or(NamespaceOption {
            network: NamespaceMode::Pod as i32,
            pid: NamespaceMode::Pod as i32,
            ipc: NamespaceMode::Pod as i32,
            ..Default::default()
        });
    let mut ips = record.ips.iter();
    PodSandboxStatus {
        id: record.id.clone(),
        metadata: config.metadata.clone(),
        state: cri_state(record.effective_state()) as i32,
        created_at: record.created_at,
        network: Some(PodSandboxNetworkStatus {
            ip: ips.next().cloned().unwrap_or_default(),
            additional_ips: ips.map(|ip| PodIp { ip: ip.clone() }).collect(),
        }),
        linux: Some(LinuxPodSandboxStatus {
            namespaces: Some(Namespace {
                options: Some(options),
            }),
        }),
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        runtime_handler: record.runtime_handler.clone(),
    }
}
