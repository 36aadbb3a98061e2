//! RemovePodSandbox: the pod's containers removed, then the sandbox (its
//! journal's teardown); each container's DELETED before the pod's.

use super::{Lifecycle, PodError, Pods};

impl Pods {
    /// Removes pod `id` (a full id or a unique prefix). Unknown is success.
    /// A failing sandbox teardown keeps the pod listed and NotReady, with no
    /// DELETED event for it; the next remove finishes it.
    pub async fn remove(&self, id: &str) -> Result<(), PodError> {
        let sandbox_id = self.full_id(id)?;
        if let Some(sandbox_id) = &sandbox_id {
            for container in self.container_ids(sandbox_id).await {
                self.containers.remove(&container).await?;
                self.events
                    .emit(&container, sandbox_id, Lifecycle::Removed)
                    .await;
            }
        }
        self.sandboxes.remove(id).await?;
        if let Some(sandbox_id) = &sandbox_id {
            self.events
                .emit(sandbox_id, sandbox_id, Lifecycle::Removed)
                .await;
        }
        Ok(())
    }
}
