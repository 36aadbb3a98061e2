//! A pod's full id and its containers, for the sandbox RPCs that act on
//! them too.

use tonic::Status;

use super::CriService;

impl CriService {
    /// The full id of the sandbox `id` names, if it exists.
    pub(super) async fn full_sandbox_id(&self, id: &str) -> Result<Option<String>, Status> {
        Ok(match self.context().sandboxes.find(id)? {
            Some(handle) => Some(handle.lock().await.id.clone()),
            None => None,
        })
    }

    /// Ids of the containers in the sandbox `id` names (none if unknown).
    pub(super) async fn sandbox_containers(&self, id: &str) -> Result<Vec<String>, Status> {
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
