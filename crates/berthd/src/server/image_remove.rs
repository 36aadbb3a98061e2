//! `RemoveImage`: the image with every tag and digest, whichever names it.

use cri_api::v1::{RemoveImageRequest, RemoveImageResponse};
use tonic::Status;

use super::CriService;

impl CriService {
    pub(super) async fn serve_remove_image(
        &self,
        request: RemoveImageRequest,
    ) -> Result<RemoveImageResponse, Status> {
        let name = request.image.map(|spec| spec.image).unwrap_or_default();
        if name.is_empty() {
            return Err(Status::invalid_argument(
                "image.image must name the image to remove",
            ));
        }
        let store = self.context().images.store().clone();
        // Garbage collection deletes files: off the async workers.
        let removed = tokio::task::spawn_blocking(move || store.remove(&name))
            .await
            .map_err(|err| Status::internal(format!("remove task failed: {err}")))?
            .map_err(|err| Status::internal(err.to_string()))?;
        if let Some(record) = removed {
            tracing::info!(id = %record.id, tags = ?record.repo_tags, "image removed");
        }
        // Removing an image that is not there is success (CRI).
        Ok(RemoveImageResponse {})
    }
}
