//! One gRPC channel to a CRI socket, cloned into both service clients.

use std::path::Path;

use cri_api::v1::image_service_client::ImageServiceClient;
use cri_api::v1::runtime_service_client::RuntimeServiceClient;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The runtime and image services of one socket.
#[derive(Clone)]
pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub image: ImageServiceClient<Channel>,
}

impl Cri {
    pub async fn connect(socket: &Path) -> Result<Self, String> {
        let path = socket.to_path_buf();
        // The URI is required by the API but unused: the connector dials the socket.
        let channel = Endpoint::try_from("http://[::]:50051")
            .map_err(|err| err.to_string())?
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|err| format!("connect to {}: {err}", socket.display()))?;
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            image: ImageServiceClient::new(channel).max_decoding_message_size(64 << 20),
        })
    }
}
