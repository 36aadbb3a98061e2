//! A pod's full id and its containers, for the pod-wide calls.

use super::Pods;
use crate::sandbox::SandboxError;

impl Pods {
    /// The full id of the sandbox `id` names, if it exists (ids never
    /// change: no need to wait for a change in progress).
    pub fn full_id(&self, id: &str) -> Result<Option<String>, SandboxError> {
        Ok(self
            .sandboxes
            .store
            .published(id)
            .map_err(SandboxError::from)?
            .map(|record| record.id.clone()))
    }

    /// Ids of the containers of pod `sandbox_id` (a full id).
    pub async fn container_ids(&self, sandbox_id: &str) -> Vec<String> {
        self.containers
            .of_sandbox(sandbox_id)
            .await
            .into_iter()
            .map(|record| record.id)
            .collect()
    }
}
