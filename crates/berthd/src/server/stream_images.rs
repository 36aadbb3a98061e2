//! `StreamImages`: the `ListImages` answer in chunks.

use cri_api::v1::{StreamImagesRequest, StreamImagesResponse};
use tonic::Status;

use super::{stream_in_chunks, CriService, ResponseStream};

/// Images per `StreamImages` message: far below 16 MiB even with many tags.
const IMAGES_PER_MESSAGE: usize = 500;

impl CriService {
    /// `StreamImages`: the `ListImages` answer in chunks, so a node with very
    /// many images never hits the message size limit.
    pub(super) async fn serve_stream_images(
        &self,
        request: StreamImagesRequest,
    ) -> Result<ResponseStream<StreamImagesResponse>, Status> {
        let images = self.filtered_images(request.filter);
        Ok(stream_in_chunks(images, IMAGES_PER_MESSAGE, |images| {
            StreamImagesResponse { images }
        }))
    }
}
