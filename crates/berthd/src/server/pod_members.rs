//! A pod's full id and its containers, for the sandbox RPCs that act on
//! them too.

use tonic::Status;

use super::CriService;

impl CriService {
    /// The full id of the sandbox `id` names, if it exists (ids never
    /// change: no need to wait for a change in progress).
    pub(super) async fn full_sandbox_id(&self, id: &str) -> Result<Option<String>, Status> {
        let record = self.context().sandboxes.store.published(id);
        Ok(record
            .map_err(crate::sandbox::SandboxError::from)?
            .map(|record| record.id.clone()))
    }

    /// Ids of the containers in the sandbox `id` names (none if unknown).
    pub(super) async fn sandbox_containers(&self, id: &str) -> Result<Vec<String>, Status> {
        let Some(sandbox_id) = self.full_sandbox_id(id).await? else {
            return Ok(Vec::new());
        };
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
