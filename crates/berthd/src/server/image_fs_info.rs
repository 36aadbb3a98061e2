//! `ImageFsInfo`: how much of the disk images and writable container layers use.
//! kubelet uses it for image garbage collection and disk-pressure eviction.

use std::path::Path;

use cri_api::v1::{FilesystemIdentifier, FilesystemUsage, ImageFsInfoResponse, UInt64Value};
use tonic::Status;

use super::CriService;
use crate::clock::now_nanos;
use crate::disk_usage::disk_usage;
use crate::layout::RootLayout;

impl CriService {
    pub(super) async fn serve_image_fs_info(&self) -> Result<ImageFsInfoResponse, Status> {
        let layout = RootLayout::new(&self.context().config.root_dir);
        // Walking a tree is blocking I/O: keep it off the async workers.
        tokio::task::spawn_blocking(move || {
            Ok(ImageFsInfoResponse {
                image_filesystems: vec![filesystem_usage(&layout.images())?],
                container_filesystems: vec![filesystem_usage(&layout.containers())?],
            })
        })
        .await
        .map_err(|err| Status::internal(format!("ImageFsInfo task failed: {err}")))?
    }
}

fn filesystem_usage(dir: &Path) -> Result<FilesystemUsage, Status> {
    let usage = disk_usage(dir).map_err(|err| {
        Status::internal(format!(
            "cannot measure disk usage of {}: {err}",
            dir.display()
        ))
    })?;
    Ok(FilesystemUsage {
        timestamp: now_nanos(),
        fs_id: Some(FilesystemIdentifier {
            mountpoint: dir.display().to_string(),
        }),
        used_bytes: Some(UInt64Value { value: usage.bytes }),
        inodes_used: Some(UInt64Value {
            value: usage.inodes,
        }),
    })
}
