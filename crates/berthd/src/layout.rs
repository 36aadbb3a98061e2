//! Where berth keeps things on disk, in one place.

use std::path::{Path, PathBuf};

/// Directories under the persistent root (`root_dir`, default `/var/lib/berth`).
#[derive(Debug, Clone)]
pub struct RootLayout {
    root: PathBuf,
}

impl RootLayout {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    /// The image store: blobs, unpacked layers and the image index. Its usage
    /// is the image filesystem reported by `ImageFsInfo`.
    pub fn images(&self) -> PathBuf {
        self.root.join("images")
    }

    /// Writable container layers, reported as the container filesystem.
    pub fn containers(&self) -> PathBuf {
        self.root.join("containers")
    }

    /// Every directory the daemon creates at start-up.
    pub fn all(&self) -> [PathBuf; 3] {
        [self.root.clone(), self.images(), self.containers()]
    }
}
