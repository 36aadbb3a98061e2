//! StopPodSandbox: every container of the pod stopped (force, kubelet
//! stopped them gracefully before), then the sandbox; STOPPED events in
//! that order.

use super::{Lifecycle, PodError, Pods};

impl Pods {
    /// Stops pod `id` (a full id or a unique prefix). Unknown is success.
    /// A container that fails to stop fails the call before the sandbox is
    /// touched: the pod is never NotReady around a running container.
    pub async fn stop(&self, id: &str) -> Result<(), PodError> {
        let sandbox_id = self.full_id(id)?;
        if let Some(sandbox_id) = &sandbox_id {
            for container in self.container_ids(sandbox_id).await {
                self.containers.stop(&container, 0).await?;
                self.events
                    .emit(&container, sandbox_id, Lifecycle::Stopped)
                    .await;
            }
        }
        self.sandboxes.stop(id).await?;
        if let Some(sandbox_id) = &sandbox_id {
            self.events
                .emit(sandbox_id, sandbox_id, Lifecycle::Stopped)
                .await;
        }
        Ok(())
    }
}
