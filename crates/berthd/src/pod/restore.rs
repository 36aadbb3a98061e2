//! RestorePod: a new pod from a checkpoint. `crate::pod_checkpoint` checks
//! the request against the checkpoint before anything is made; then the
//! pod is run and each container created from its archive (created, not
//! started: StartContainer restores its processes). A failure at any
//! container removes the containers made so far and the pod, with no
//! event for any of them.

use super::{Lifecycle, Pods};
use crate::pod_checkpoint::{self, PodCheckpointError, RestorePod, Restored};

impl Pods {
    pub async fn restore(&self, request: RestorePod<'_>) -> Result<Restored, PodCheckpointError> {
        let plan = pod_checkpoint::prepare_restore(&self.containers, &request).await?;
        let pod_id = self
            .sandboxes
            .run(request.config.clone(), request.runtime_handler)
            .await?;
        let mut made: Vec<(String, String)> = Vec::new();
        for (name, config) in plan.containers {
            match self
                .containers
                .create(&pod_id, config, Some(request.config.clone()))
                .await
            {
                Ok(id) => made.push((name, id)),
                Err(source) => {
                    self.undo_restore(&pod_id, &made).await;
                    return Err(PodCheckpointError::Container {
                        context: format!("restoring container {name}"),
                        source: Box::new(source),
                    });
                }
            }
        }
        tracing::info!(sandbox = %pod_id, from = %plan.dir.display(), containers = made.len(), "pod restored (containers created)");
        for what in [Lifecycle::Created, Lifecycle::Started] {
            self.events.emit(&pod_id, &pod_id, what).await;
        }
        for (_, id) in &made {
            self.events.emit(id, &pod_id, Lifecycle::Created).await;
        }
        Ok(Restored {
            pod_sandbox_id: pod_id,
            containers: made,
        })
    }

    /// Removes what a failed restore made, the containers first. Nobody
    /// heard of them: no events.
    async fn undo_restore(&self, pod_id: &str, made: &[(String, String)]) {
        for (_, id) in made.iter().rev() {
            if let Err(err) = self.containers.remove(id).await {
                tracing::warn!(id, %err, "removing a container of a failed pod restore");
            }
        }
        if let Err(err) = self.sandboxes.remove(pod_id).await {
            tracing::warn!(sandbox = pod_id, %err, "removing the pod of a failed restore");
        }
    }
}
