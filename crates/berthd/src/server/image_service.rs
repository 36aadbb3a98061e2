//! Routes each `ImageService` RPC to `serve_<rpc>` in the file named after
//! it.

use cri_api::v1::image_service_server::ImageService;
use cri_api::v1::*;
use tonic::{Request, Response, Status};

use super::{to_completion, CriService, ResponseStream};

#[tonic::async_trait]
impl ImageService for CriService {
    type StreamImagesStream = ResponseStream<StreamImagesResponse>;

    async fn list_images(
        &self,
        request: Request<ListImagesRequest>,
    ) -> Result<Response<ListImagesResponse>, Status> {
        self.serve_list_images(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn stream_images(
        &self,
        request: Request<StreamImagesRequest>,
    ) -> Result<Response<Self::StreamImagesStream>, Status> {
        self.serve_stream_images(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn image_status(
        &self,
        request: Request<ImageStatusRequest>,
    ) -> Result<Response<ImageStatusResponse>, Status> {
        self.serve_image_status(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn pull_image(
        &self,
        request: Request<PullImageRequest>,
    ) -> Result<Response<PullImageResponse>, Status> {
        let service = self.clone();
        to_completion(async move { service.serve_pull_image(request.into_inner()).await })
            .await
            .map(Response::new)
    }

    async fn remove_image(
        &self,
        request: Request<RemoveImageRequest>,
    ) -> Result<Response<RemoveImageResponse>, Status> {
        let service = self.clone();
        to_completion(async move { service.serve_remove_image(request.into_inner()).await })
            .await
            .map(Response::new)
    }

    async fn image_fs_info(
        &self,
        _request: Request<ImageFsInfoRequest>,
    ) -> Result<Response<ImageFsInfoResponse>, Status> {
        self.serve_image_fs_info().await.map(Response::new)
    }
}
