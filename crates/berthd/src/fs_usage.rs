//! ImageFsInfo's numbers, measured at most once per [`REFRESH`] and shared
//! by concurrent callers.
//!
//! Measuring walks every file of the image store and of every container's
//! writable layer: its cost grows with the images and containers on the
//! node, and kubelet asks every 10-15 s (image garbage collection, eviction).
//! containerd answers from snapshot usage it refreshes every 10 s; berth
//! keeps the last measurement for as long, but measures again at once when
//! the image store has changed since (a pull or a removal), so a pull shows
//! in the next answer.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::clock::now_nanos;
use crate::disk_usage::{disk_usage, DiskUsage};

/// How long a measurement is served while the image store is unchanged.
pub const REFRESH: Duration = Duration::from_secs(10);

/// One measurement of both trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    /// When it was taken, in nanoseconds since the epoch (the CRI timestamp).
    pub timestamp: i64,
    pub images: DiskUsage,
    pub containers: DiskUsage,
}

#[derive(Debug, Clone, Copy)]
struct Measured {
    usage: FsUsage,
    at: Instant,
    /// The image store's change count when it was taken.
    image_changes: u64,
}

/// Serves [`FsUsage`] of the image store and the containers' layers.
#[derive(Debug)]
pub struct FsUsageCache {
    images_dir: PathBuf,
    containers_dir: PathBuf,
    /// Held across a measurement: concurrent callers wait for it and share
    /// it rather than walking the trees side by side.
    last: tokio::sync::Mutex<Option<Measured>>,
}

impl FsUsageCache {
    pub fn new(images_dir: PathBuf, containers_dir: PathBuf) -> Self {
        Self {
            images_dir,
            containers_dir,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The usage, measured anew unless the last measurement is younger than
    /// [`REFRESH`] and the image store's change count is still
    /// `image_changes`.
    pub async fn get(&self, image_changes: u64) -> std::io::Result<FsUsage> {
        let mut last = self.last.lock().await;
        if let Some(measured) = *last {
            if is_fresh(&measured, image_changes, Instant::now()) {
                return Ok(measured.usage);
            }
        }
        let (images_dir, containers_dir) = (self.images_dir.clone(), self.containers_dir.clone());
        // Walking trees is blocking I/O: off the async workers.
        let usage = tokio::task::spawn_blocking(move || {
            Ok::<_, std::io::Error>(FsUsage {
                timestamp: now_nanos(),
                images: disk_usage(&images_dir)?,
                containers: disk_usage(&containers_dir)?,
            })
        })
        .await
        .map_err(std::io::Error::other)??;
        *last = Some(Measured {
            usage,
            at: Instant::now(),
            image_changes,
        });
        Ok(usage)
    }
}

/// Whether `measured` may still be served at `now`.
fn is_fresh(measured: &Measured, image_changes: u64, now: Instant) -> bool {
    measured.image_changes == image_changes && now.duration_since(measured.at) < REFRESH
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(at: Instant, image_changes: u64) -> Measured {
        Measured {
            usage: FsUsage {
                timestamp: 1,
                images: DiskUsage::default(),
                containers: DiskUsage::default(),
            },
            at,
            image_changes,
        }
    }

    #[test]
    fn a_measurement_is_served_until_it_ages_or_the_images_change() {
        let at = Instant::now();
        let m = measured(at, 7);
        assert!(is_fresh(&m, 7, at + Duration::from_secs(9)));
        assert!(!is_fresh(&m, 7, at + REFRESH));
        assert!(!is_fresh(&m, 8, at + Duration::from_millis(1)));
    }

    #[tokio::test]
    async fn a_change_to_the_images_is_measured_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let images = tmp.path().join("images");
        let containers = tmp.path().join("containers");
        std::fs::create_dir_all(&images).unwrap();
        std::fs::create_dir_all(&containers).unwrap();
        let cache = FsUsageCache::new(images.clone(), containers);
        let first = cache.get(0).await.unwrap();
        std::fs::write(images.join("blob"), vec![7u8; 64 << 10]).unwrap();
        assert_eq!(
            cache.get(0).await.unwrap(),
            first,
            "unchanged count: served"
        );
        let after = cache.get(1).await.unwrap();
        assert!(after.images.bytes >= first.images.bytes + (64 << 10));
        assert_eq!(after.images.inodes, first.images.inodes + 1);
    }
}
