//! Emitting lifecycle events: each event carries the pod sandbox status and
//! the statuses of every container of the pod, which is what kubelet's
//! evented PLEG rebuilds a pod from.

use berth_shim_api::protocol::RunState;
use cri_api::v1::{
    ContainerEventResponse, ContainerEventType, ContainerStatus, PodSandboxState, PodSandboxStatus,
};
use tokio::sync::mpsc;

use super::CriService;
use crate::clock::now_nanos;
use crate::container::store::ContainerRecord;
use crate::pod::{Lifecycle, PodEvents};
use crate::sandbox::store::SandboxState;

/// The pod layer's moves as CRI events.
#[async_trait::async_trait]
impl PodEvents for CriService {
    async fn emit(&self, id: &str, sandbox_id: &str, what: Lifecycle) {
        match what {
            Lifecycle::Created => {
                self.emit_container_event(id, sandbox_id, ContainerEventType::ContainerCreatedEvent)
                    .await
            }
            Lifecycle::Started => {
                self.emit_container_event(id, sandbox_id, ContainerEventType::ContainerStartedEvent)
                    .await
            }
            Lifecycle::Stopped => self.emit_stopped(id, sandbox_id).await,
            Lifecycle::Removed => self.emit_removed(id, sandbox_id).await,
        }
    }
}

impl CriService {
    /// Emits a container event (if it follows the container's last one).
    pub(crate) async fn emit_container_event(
        &self,
        container_id: &str,
        sandbox_id: &str,
        kind: ContainerEventType,
    ) {
        let context = self.context();
        let oom_killed = std::sync::atomic::AtomicBool::new(false);
        let build = async {
            let event = self.build_event(container_id, sandbox_id, kind).await;
            oom_killed.store(
                kind == ContainerEventType::ContainerStoppedEvent
                    && event
                        .containers_statuses
                        .iter()
                        .any(|status| status.id == container_id && status.reason == "OOMKilled"),
                std::sync::atomic::Ordering::Relaxed,
            );
            event
        };
        // STOPPED is emitted once per container, so the count is of
        // containers, not of times their status was read.
        if context.events.emit(container_id, kind, build).await
            && oom_killed.load(std::sync::atomic::Ordering::Relaxed)
        {
            context.metrics.observe_oom_kill();
        }
        if kind == ContainerEventType::ContainerDeletedEvent {
            context.stats.forget(container_id);
        }
    }

    /// Emits a sandbox event: the sandbox id stands in the container id.
    pub(crate) async fn emit_sandbox_event(&self, sandbox_id: &str, kind: ContainerEventType) {
        self.emit_container_event(sandbox_id, sandbox_id, kind)
            .await;
    }

    /// The last event of a container or sandbox, if it has one.
    pub(crate) async fn last_event(&self, id: &str) -> Option<ContainerEventType> {
        self.context().events.last(id).await
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

    async fn build_event(
        &self,
        id: &str,
        sandbox_id: &str,
        kind: ContainerEventType,
    ) -> ContainerEventResponse {
        // Records as last persisted: an event is built under the bus's
        // lock, and must not wait for a pod stop in progress (it holds its
        // record through CNI DEL) nor hold up every other event meanwhile.
        let sandbox = self
            .context()
            .sandboxes
            .store
            .published(sandbox_id)
            .ok()
            .flatten();
        let pod_sandbox_status = match &sandbox {
            Some(record) => super::sandbox_status::to_status(record),
            // Removed already: its id, and that it is not ready.
            None => PodSandboxStatus {
                id: sandbox_id.to_string(),
                state: PodSandboxState::SandboxNotready as i32,
                ..Default::default()
            },
        };
        let mut containers_statuses = Vec::new();
        for record in self
            .context()
            .containers
            .store
            .published_owned_by(sandbox_id)
        {
            containers_statuses.push(self.event_container_status(&record).await);
        }
        ContainerEventResponse {
            container_id: id.to_string(),
            container_event_type: kind as i32,
            created_at: now_nanos(),
            pod_sandbox_status: Some(pod_sandbox_status),
            containers_statuses,
        }
    }

    async fn event_container_status(&self, record: &ContainerRecord) -> ContainerStatus {
        let state = self.context().containers.state(record).await;
        super::container_status::to_status(record, state.as_ref())
    }

    /// At start-up: records where every container and sandbox already is
    /// (no event for them), watches running containers for their exit, and
    /// turns exits into STOPPED events from then on.
    pub async fn start_events(&self, mut exits: mpsc::UnboundedReceiver<String>) {
        let context = self.context();
        for handle in context.sandboxes.store.all() {
            let record = handle.lock().await.clone();
            let kind = match record.state {
                SandboxState::Ready => ContainerEventType::ContainerStartedEvent,
                _ => ContainerEventType::ContainerStoppedEvent,
            };
            context.events.seed(&record.id, kind).await;
        }
        for handle in context.containers.store.all() {
            let record = handle.lock().await.clone();
            // A sandbox container's events are its pod's.
            if record.is_sandbox_container() {
                continue;
            }
            let state = context.containers.state(&record).await;
            let kind = match state.map(|state| state.status) {
                Some(RunState::Created) => ContainerEventType::ContainerCreatedEvent,
                Some(RunState::Running) => ContainerEventType::ContainerStartedEvent,
                _ => ContainerEventType::ContainerStoppedEvent,
            };
            context.events.seed(&record.id, kind).await;
            if kind == ContainerEventType::ContainerStartedEvent {
                self.watch_exit(&record);
            }
        }
        let service = self.clone();
        tokio::spawn(async move {
            while let Some(id) = exits.recv().await {
                let Ok(record) = service.context().containers.get(&id).await else {
                    continue;
                };
                service
                    .emit_container_event(
                        &record.id,
                        &record.sandbox_id,
                        ContainerEventType::ContainerStoppedEvent,
                    )
                    .await;
            }
        });
    }

    /// Starts watching a started container for its exit.
    pub(crate) fn watch_exit(&self, record: &ContainerRecord) {
        if let Some(watcher) = &self.context().exit_watcher {
            if let Err(err) = watcher.watch(&record.id, &record.shim_dir) {
                tracing::warn!(container = %record.id, error = %err, "cannot watch for the container's exit");
            }
        }
    }
}
