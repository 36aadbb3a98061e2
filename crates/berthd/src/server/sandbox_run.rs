//! `RunPodSandbox`, `StopPodSandbox` and `RemovePodSandbox`.

use cri_api::v1::{
    ContainerEventType, RemovePodSandboxRequest, RemovePodSandboxResponse, RunPodSandboxRequest,
    RunPodSandboxResponse, StopPodSandboxRequest, StopPodSandboxResponse,
};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_run_pod_sandbox(
        &self,
        request: RunPodSandboxRequest,
    ) -> Result<RunPodSandboxResponse, Status> {
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        let pod_sandbox_id = self
            .context()
            .sandboxes
            .run(config, &request.runtime_handler)
            .await?;
        tracing::info!(sandbox = %pod_sandbox_id, "pod sandbox ready");
        for kind in [
            ContainerEventType::ContainerCreatedEvent,
            ContainerEventType::ContainerStartedEvent,
        ] {
            self.emit_sandbox_event(&pod_sandbox_id, kind).await;
        }
        Ok(RunPodSandboxResponse { pod_sandbox_id })
    }

    pub(super) async fn serve_stop_pod_sandbox(
        &self,
        request: StopPodSandboxRequest,
    ) -> Result<StopPodSandboxResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        // CRI: stopping a sandbox force-stops its containers (kubelet has
        // already stopped them gracefully).
        let sandbox_id = self.full_sandbox_id(&request.pod_sandbox_id).await?;
        for container in self.sandbox_containers(&request.pod_sandbox_id).await? {
            self.context().containers.stop(&container, 0).await?;
            if let Some(sandbox_id) = &sandbox_id {
                self.emit_stopped(&container, sandbox_id).await;
            }
        }
        self.context()
            .sandboxes
            .stop(&request.pod_sandbox_id)
            .await?;
        if let Some(sandbox_id) = &sandbox_id {
            self.emit_stopped(sandbox_id, sandbox_id).await;
        }
        Ok(StopPodSandboxResponse {})
    }

    pub(super) async fn serve_remove_pod_sandbox(
        &self,
        request: RemovePodSandboxRequest,
    ) -> Result<RemovePodSandboxResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        let sandbox_id = self.full_sandbox_id(&request.pod_sandbox_id).await?;
        for container in self.sandbox_containers(&request.pod_sandbox_id).await? {
            self.context().containers.remove(&container).await?;
            if let Some(sandbox_id) = &sandbox_id {
                self.emit_removed(&container, sandbox_id).await;
            }
        }
        self.context()
            .sandboxes
            .remove(&request.pod_sandbox_id)
            .await?;
        if let Some(sandbox_id) = &sandbox_id {
            self.emit_removed(sandbox_id, sandbox_id).await;
        }
        Ok(RemovePodSandboxResponse {})
    }

    /// The full id of the sandbox `id` names, if it exists.
    async fn full_sandbox_id(&self, id: &str) -> Result<Option<String>, Status> {
        Ok(match self.context().sandboxes.find(id)? {
            Some(handle) => Some(handle.lock().await.id.clone()),
            None => None,
        })
    }

    /// Ids of the containers in the sandbox `id` names (none if unknown).
    async fn sandbox_containers(&self, id: &str) -> Result<Vec<String>, Status> {
        let Some(handle) = self.context().sandboxes.find(id)? else {
            return Ok(Vec::new());
        };
        let sandbox_id = handle.lock().await.id.clone();
        Ok(self
            .context()
            .containers
            .of_sandbox(&sandbox_id)
            .await
            .into_iter()
            .map(|record| record.id)
            .collect())
    }
}
