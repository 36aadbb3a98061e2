//! `ListImages`: what the store holds, in CRI terms.

use cri_api::v1::{Image, ImageFilter, ListImagesRequest, ListImagesResponse};
use tonic::Status;

use super::image_status::to_cri_image;
use super::CriService;

impl CriService {
    pub(super) async fn serve_list_images(
        &self,
        request: ListImagesRequest,
    ) -> Result<ListImagesResponse, Status> {
        Ok(ListImagesResponse {
            images: self.filtered_images(request.filter),
        })
    }

    pub(super) fn filtered_images(&self, filter: Option<ImageFilter>) -> Vec<Image> {
        let store = self.context().images.store();
        let wanted = filter
            .and_then(|filter| filter.image)
            .map(|spec| spec.image)
            .filter(|name| !name.is_empty());
        let records = match wanted {
            Some(name) => store.resolve(&name).into_iter().collect(),
            None => store.list(),
        };
        let pinned = self.pinned_image_ids();
        records
            .iter()
            .map(|record| to_cri_image(record, pinned.contains(&record.id)))
            .collect()
    }
}
