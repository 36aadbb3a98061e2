//! `ImageFsInfo`: how much of the disk images and writable container layers use.
//! kubelet uses it for image garbage collection and disk-pressure eviction.
//! The trees are walked at most every few seconds (see `fs_usage`).

use std::path::Path;

use cri_api::v1::{FilesystemIdentifier, FilesystemUsage, ImageFsInfoResponse, UInt64Value};
use tonic::Status;

use super::CriService;
use crate::disk_usage::DiskUsage;
use crate::layout::RootLayout;

impl CriService {
    pub(super) async fn serve_image_fs_info(&self) -> Result<ImageFsInfoResponse, Status> {
        let layout = RootLayout::new(&self.context().config.root_dir);
        let changes = self.context().images.store().changes();
        let usage = self.context().fs_usage.get(changes).await.map_err(|err| {
            Status::internal(format!(
                "cannot measure the disk usage of {}: {err}",
                self.context().config.root_dir.display()
            ))
        })?;
        Ok(ImageFsInfoResponse {
            image_filesystems: vec![filesystem_usage(
                &layout.images(),
                usage.timestamp,
                usage.images,
            )],
            container_filesystems: vec![filesystem_usage(
                &layout.containers(),
                usage.timestamp,
                usage.containers,
            )],
        })
    }
}

/// One tree's usage as CRI reports it, named by its directory.
fn filesystem_usage(dir: &Path, timestamp: i64, usage: DiskUsage) -> FilesystemUsage {
    FilesystemUsage {
        timestamp,
        fs_id: Some(FilesystemIdentifier {
            mountpoint: dir.display().to_string(),
        }),
        used_bytes: Some(UInt64Value { value: usage.bytes }),
        inodes_used: Some(UInt64Value {
            value: usage.inodes,
        }),
    }
}
