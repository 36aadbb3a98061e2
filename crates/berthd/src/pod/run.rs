//! RunPodSandbox: the sandbox (namespaces, cgroup, network), then, for a
//! handler with `sandbox_container`, the pod's sandbox container run by
//! that handler's runtime, which the pod's containers join. A failed
//! sandbox container takes the pod down with it: kubelet retries the whole
//! sandbox.

use super::{PodError, Pods};

impl Pods {
    /// Runs a pod sandbox under `handler`; returns its id.
    pub async fn run(
        &self,
        config: cri_api::v1::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, PodError> {
        let id = self.sandboxes.run(config, handler).await?;
        let image = self
            .sandboxes
            .runtime_handlers
            .get(handler)
            .and_then(|handler| handler.sandbox_image.clone());
        let Some(image) = image else {
            return Ok(id);
        };
        if let Err(err) = self.start_sandbox_container(&id, &image).await {
            if let Err(undo) = self.remove(&id).await {
                tracing::warn!(
                    sandbox = %id,
                    error = %undo,
                    "removing a pod whose sandbox container failed; recovery or the next \
                     RemovePodSandbox finishes it"
                );
            }
            return Err(err);
        }
        Ok(id)
    }

    async fn start_sandbox_container(&self, id: &str, image: &str) -> Result<(), PodError> {
        let container = self.containers.create_sandbox_container(id, image).await?;
        self.containers.start(&container).await?;
        tracing::info!(sandbox = %id, %image, "sandbox container running");
        Ok(())
    }
}
