//! Routes each `ImageService` RPC to the file of its family. RPCs not
//! built yet answer `UNIMPLEMENTED` naming themselves.

use cri_api::v1::image_service_server::ImageService;
use cri_api::v1::*;
use tonic::{Request, Response, Status};

use super::{unimplemented, CriService, ResponseStream};

#[tonic::async_trait]
impl ImageService for CriService {
    type StreamImagesStream = ResponseStream<StreamImagesResponse>;

    async fn list_images(
        &self,
        _request: Request<ListImagesRequest>,
    ) -> Result<Response<ListImagesResponse>, Status> {
        Err(unimplemented("ListImages"))
    }

    async fn stream_images(
        &self,
        _request: Request<StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        Err(unimplemented("StreamImages"))
    }

    async fn image_status(
        &self,
        _request: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        Err(unimplemented("ImageStatus"))
    }

    async fn pull_image(
        &self,
        _request: Request<PullImageRequest>,
    ) -> Result<Response<PullImageResponse>, Status> {
        Err(unimplemented("PullImage"))
    }

    async fn remove_image(
        &self,
        _request: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        Err(unimplemented("RemoveImage"))
    }

    async fn image_fs_info(
        &self,
        _request: Request<ImageFsInfoRequest>,
    ) -> Result<Response<ImageFsInfoResponse>, Status> {
        self.serve_image_fs_info().await.map(Response::new)
    }
}
