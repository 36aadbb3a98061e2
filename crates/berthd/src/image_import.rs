//! `berthd images import FILE`: loads a docker-archive or OCI archive into
//! the image store, for nodes that cannot reach a registry.
//!
//! It works on the store directly, under the root directory's lock: a
//! running berthd holds that lock for its whole life and keeps the store's
//! index in memory (a pull or removal rewrites the index from it, and its
//! clean-up removes layers the index does not name), so writing under it
//! would lose the import or corrupt the store. The command therefore
//! refuses while berthd runs on the same root; stop berthd (containers
//! keep running under their shims), import, start it again.

use std::path::Path;
use std::time::Duration;

use berth_image::import::{import_archive, ImportError};
use berth_image::platform::Platform;
use berth_image::store::{ImageRecord, ImageStore, StoreError};

use crate::config::Config;
use crate::layout::RootLayout;
use crate::root_lock::{RootLock, RootLockError};

/// How long the import waits for a berthd that is just stopping.
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ImportCommandError {
    #[error(
        "berthd is running on root directory {0}: stop it, import, then start it again \
         (running containers are not affected)"
    )]
    Running(std::path::PathBuf),
    #[error(transparent)]
    Lock(RootLockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Import(#[from] ImportError),
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Imports every image of `file`; `name` names the image of an archive
/// holding one.
pub fn import(
    config: &Config,
    file: &Path,
    name: Option<&str>,
) -> Result<Vec<ImageRecord>, ImportCommandError> {
    let layout = RootLayout::new(&config.root_dir);
    std::fs::create_dir_all(&config.root_dir).map_err(|source| ImportCommandError::CreateDir {
        path: config.root_dir.clone(),
        source,
    })?;
    let _lock = match RootLock::acquire_within(&config.root_dir, LOCK_PATIENCE) {
        Ok(lock) => lock,
        Err(RootLockError::Busy(root)) => return Err(ImportCommandError::Running(root)),
        Err(err) => return Err(ImportCommandError::Lock(err)),
    };
    let store = ImageStore::open(&layout.images())?;
    Ok(import_archive(&store, file, name, &Platform::host())?)
}
