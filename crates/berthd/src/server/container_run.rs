//! `CreateContainer`, `StartContainer`, `StopContainer`, `RemoveContainer`.

use cri_api::v1::{
    ContainerEventType, CreateContainerRequest, CreateContainerResponse, RemoveContainerRequest,
    RemoveContainerResponse, StartContainerRequest, StartContainerResponse, StopContainerRequest,
    StopContainerResponse,
};
use tonic::Status;

use super::{require, CriService};

impl CriService {
    pub(super) async fn serve_create_container(
        &self,
        request: CreateContainerRequest,
    ) -> Result<CreateContainerResponse, Status> {
        require("pod_sandbox_id", &request.pod_sandbox_id)?;
        let config = request
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        let container_id = self
            .context()
            .containers
            .create(&request.pod_sandbox_id, config, request.sandbox_config)
            .await?;
        if let Ok(record) = self.context().containers.get(&container_id).await {
            self.emit_container_event(
                &record.id,
                &record.sandbox_id,
                ContainerEventType::ContainerCreatedEvent,
            )
            .await;
        }
        Ok(CreateContainerResponse { container_id })
    }

    pub(super) async fn serve_start_container(
        &self,
        request: StartContainerRequest,
    ) -> Result<StartContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .start(&request.container_id)
            .await?;
        let record = self.context().containers.get(&request.container_id).await?;
        self.emit_container_event(
            &record.id,
            &record.sandbox_id,
            ContainerEventType::ContainerStartedEvent,
        )
        .await;
        // Watched only once STARTED is out, so STOPPED cannot overtake it.
        self.watch_exit(&record);
        Ok(StartContainerResponse {})
    }

    pub(super) async fn serve_stop_container(
        &self,
        request: StopContainerRequest,
    ) -> Result<StopContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        self.context()
            .containers
            .stop(&request.container_id, request.timeout)
            .await?;
        if let Ok(record) = self.context().containers.get(&request.container_id).await {
            self.emit_stopped(&record.id, &record.sandbox_id).await;
        }
        Ok(StopContainerResponse {})
    }

    pub(super) async fn serve_remove_container(
        &self,
        request: RemoveContainerRequest,
    ) -> Result<RemoveContainerResponse, Status> {
        require("container_id", &request.container_id)?;
        let removed = self
            .context()
            .containers
            .get(&request.container_id)
            .await
            .ok();
        self.context()
            .containers
            .remove(&request.container_id)
            .await?;
        if let Some(record) = removed {
            self.emit_removed(&record.id, &record.sandbox_id).await;
        }
        Ok(RemoveContainerResponse {})
    }

    /// STOPPED, for a container that was started (a container stopped
    /// before it ever ran has no STOPPED event).
    pub(super) async fn emit_stopped(&self, id: &str, sandbox_id: &str) {
        if self.last_event(id).await == Some(ContainerEventType::ContainerStartedEvent) {
            self.emit_container_event(id, sandbox_id, ContainerEventType::ContainerStoppedEvent)
                .await;
        }
    }

    /// STOPPED if still due (the exit watcher may not have told yet), then
    /// DELETED.
    pub(super) async fn emit_removed(&self, id: &str, sandbox_id: &str) {
        self.emit_stopped(id, sandbox_id).await;
        self.emit_container_event(id, sandbox_id, ContainerEventType::ContainerDeletedEvent)
            .await;
    }
}
