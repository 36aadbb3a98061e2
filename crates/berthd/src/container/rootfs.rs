//! A container's root filesystem: an overlay of its image's unpacked layers
//! (read-only lower dirs, topmost first) under a writable upper dir; and its
//! image volumes, read-only overlays of other images' layers mounted beside
//! it in the bundle and unmounted with it, as are the idmapped views of a
//! user-namespaced container's binds (`idmapped_binds`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::Mode;

use super::idmap::{self, IdmapError};

/// Where one container's overlay lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsPaths {
    /// The writable layer: persistent, under the root dir.
    pub upper: PathBuf,
    /// overlayfs's scratch dir, on the same filesystem as `upper`.
    pub work: PathBuf,
    /// The mounted rootfs the container runs in.
    pub merged: PathBuf,
    /// The image volumes' mount points (`<n>`, by the index of their CRI
    /// mount) and the empty bottom layer they share (`empty`).
    pub image_volumes: PathBuf,
    /// Where the idmapped views of the image layers are attached while an
    /// idmapped overlay is being mounted (`<n>`, by layer).
    pub layer_views: PathBuf,
    /// Where the idmapped views of a user-namespaced container's bind
    /// mounts are attached for its life (`<n>`, see `idmapped_binds`).
    pub idmapped_binds: PathBuf,
}

impl RootfsPaths {
    /// `<layer_dir>/{upper,work,idmap}`, `<bundle>/rootfs`,
    /// `<bundle>/image-volumes` and `<bundle>/idmapped`.
    pub fn new(layer_dir: &Path, bundle: &Path) -> Self {
        Self {
            upper: layer_dir.join("upper"),
            work: layer_dir.join("work"),
            merged: bundle.join("rootfs"),
            image_volumes: bundle.join("image-volumes"),
            layer_views: layer_dir.join("idmap"),
            idmapped_binds: bundle.join("idmapped"),
        }
    }

    /// Where the image volume of CRI mount `index` is mounted.
    pub fn image_volume(&self, index: usize) -> PathBuf {
        self.image_volumes.join(index.to_string())
    }

    fn empty_layer(&self) -> PathBuf {
        self.image_volumes.join("empty")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("an image needs at least one layer")]
    NoLayers,
    #[error("layer path {0} contains a character overlayfs options cannot carry")]
    BadPath(PathBuf),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("mounting the overlay at {path}: {source}")]
    Mount { path: PathBuf, source: nix::Error },
    #[error("idmapped layer view: {0}")]
    Idmap(#[from] IdmapError),
}

/// The overlay mount options for `layers` given bottom-most first (the
/// order of an image manifest). overlayfs wants the topmost lower dir first.
pub fn overlay_options(layers: &[PathBuf], paths: &RootfsPaths) -> Result<String, RootfsError> {
    check_paths(layers, &[&paths.upper, &paths.work])?;
    Ok(format!(
        "lowerdir={},upperdir={},workdir={}",
        lower_dirs(layers),
        paths.upper.display(),
        paths.work.display()
    ))
}

/// The options of a read-only overlay of `layers` (bottom-most first) for
/// an image volume. Without an upper dir overlayfs wants two lower dirs at
/// least, so `empty` is always the bottom one.
pub fn image_volume_options(layers: &[PathBuf], empty: &Path) -> Result<String, RootfsError> {
    check_paths(layers, &[empty])?;
    Ok(format!(
        "lowerdir={}:{}",
        lower_dirs(layers),
        empty.display()
    ))
}

/// An image has layers, and overlayfs options cannot carry `:`, `,` or a
/// newline in a path.
fn check_paths(layers: &[PathBuf], others: &[&Path]) -> Result<(), RootfsError> {
    if layers.is_empty() {
        return Err(RootfsError::NoLayers);
    }
    for path in layers
        .iter()
        .map(PathBuf::as_path)
        .chain(others.iter().copied())
    {
        let text = path.to_string_lossy();
        if text.contains([':', ',', '\n']) {
            return Err(RootfsError::BadPath(path.to_path_buf()));
        }
    }
    Ok(())
}

/// `layers` (bottom-most first) as overlayfs's `lowerdir`: topmost first.
fn lower_dirs(layers: &[PathBuf]) -> String {
    let lower: Vec<String> = layers
        .iter()
        .rev()
        .map(|layer| layer.display().to_string())
        .collect();
    lower.join(":")
}

/// Creates each dir (and its parents); errors name the dir by `what`.
fn make_dirs(dirs: &[(&'static str, &PathBuf)]) -> Result<(), RootfsError> {
    for (what, dir) in dirs {
        std::fs::create_dir_all(dir).map_err(|source| RootfsError::Io {
            what,
            path: dir.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// Creates the dirs and mounts the overlay.
pub fn mount_rootfs(layers: &[PathBuf], paths: &RootfsPaths) -> Result<(), RootfsError> {
    let options = overlay_options(layers, paths)?;
    make_dirs(&[
        ("upper dir", &paths.upper),
        ("work dir", &paths.work),
        ("rootfs dir", &paths.merged),
    ])?;
    mount(
        Some("overlay"),
        &paths.merged,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .map_err(|source| RootfsError::Mount {
        path: paths.merged.clone(),
        source,
    })
}

/// Mounts image volume `index`: `layers` (bottom-most first) as a
/// read-only overlay. Returns its mount point.
pub fn mount_image_volume(
    layers: &[PathBuf],
    paths: &RootfsPaths,
    index: usize,
) -> Result<PathBuf, RootfsError> {
    let empty = paths.empty_layer();
    let options = image_volume_options(layers, &empty)?;
    let target = paths.image_volume(index);
    make_dirs(&[("empty layer dir", &empty), ("image volume dir", &target)])?;
    mount(
        Some("overlay"),
        &target,
        Some("overlay"),
        MsFlags::MS_RDONLY,
        Some(options.as_str()),
    )
    .map_err(|source| RootfsError::Mount {
        path: target.clone(),
        source,
    })?;
    Ok(target)
}

/// Mounts the overlay over idmapped views of its image layers, mapped
/// through the user namespace pinned at `userns` (a pod with `hostUsers:
/// false`): root of that namespace then owns what host root owns in the
/// layers, which stay shared by pods of any mapping, unchowned.
///
/// overlayfs cannot be idmapped itself, but takes idmapped layers (Linux
/// 5.19). Each layer is cloned with `open_tree`, idmapped with
/// `mount_setattr` and attached under `<layer dir>/idmap/` only until the
/// overlay has found it by path (overlayfs keeps private copies). The
/// upper dir is not idmapped: overlayfs makes its work dir there as host
/// root, which such a view cannot represent (the mount would fall back to
/// read-only). So what the container writes is stored as the host ids it
/// runs as, and the upper dir's root is chowned to `owner`, the host ids
/// of the namespace's root, which must own the container's `/`.
pub fn mount_rootfs_idmapped(
    layers: &[PathBuf],
    paths: &RootfsPaths,
    userns: &Path,
    owner: (u32, u32),
) -> Result<(), RootfsError> {
    make_dirs(&[("upper dir", &paths.upper), ("work dir", &paths.work)])?;
    std::os::unix::fs::chown(&paths.upper, Some(owner.0), Some(owner.1)).map_err(|source| {
        RootfsError::Io {
            what: "chown upper dir",
            path: paths.upper.clone(),
            source,
        }
    })?;
    let userns = std::fs::File::open(userns).map_err(|source| RootfsError::Io {
        what: "user namespace",
        path: userns.to_path_buf(),
        source,
    })?;
    let staging = &paths.layer_views;
    let mut attached = Vec::new();
    let result = (|| {
        let mut views = Vec::new();
        for (index, source) in layers.iter().enumerate() {
            let target = staging.join(index.to_string());
            std::fs::create_dir_all(&target).map_err(|source| RootfsError::Io {
                what: "idmap staging dir",
                path: target.clone(),
                source,
            })?;
            idmap::attach_idmapped(source, &target, &userns, false)?;
            attached.push(target.clone());
            views.push(target);
        }
        mount_rootfs(&views, paths)
    })();
    for target in attached.iter().rev() {
        if let Err(err) = umount2(target, MntFlags::MNT_DETACH) {
            tracing::warn!(path = %target.display(), error = %err, "unmount idmapped layer view");
        }
    }
    // rmdir, never a recursive delete: a view whose unmount failed is
    // the image's layer itself, and stays for recovery to unmount.
    remove_empty_dirs(staging);
    result
}

/// Removes `dir`'s empty subdirs and then `dir`, if empty; a mount point
/// or a dir with files in it stays.
fn remove_empty_dirs(dir: &Path) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
        Err(err) => {
            tracing::warn!(path = %dir.display(), error = %err, "list staging dir");
            return;
        }
    };
    for entry in entries.flatten() {
        let _ = std::fs::remove_dir(entry.path());
    }
    if let Err(err) = std::fs::remove_dir(dir) {
        tracing::warn!(path = %dir.display(), error = %err, "remove staging dir");
    }
}

/// A rootfs overlay detached from its path but still held by berthd, so
/// its filesystem is not shut down yet. Dropping it shuts the overlay down,
/// and that syncs the whole filesystem its upper dir is on (the node's
/// disk): 0.4 ms on a quiet disk and tens of ms on a busy one, measured
/// here, for writes a container being removed no longer needs. Callers on
/// a request's path drop it on a blocking thread.
#[derive(Debug, Default)]
#[must_use = "dropping it shuts the overlay down, which can take long"]
pub struct DetachedRootfs {
    _held: Option<OwnedFd>,
}

/// Unmounts the idmapped bind views, the image volumes, layer views a
/// crash left mid-mount, and the rootfs; not mounted is fine. Each is
/// detached before anything may delete the dirs they are in: deleting
/// through a view would delete the volume's or the image's own files. The
/// rootfs is detached too, but released only when the result is dropped.
pub fn unmount_rootfs(paths: &RootfsPaths) -> Result<DetachedRootfs, RootfsError> {
    let mut targets = Vec::new();
    for (what, dir) in [
        ("listing idmapped binds", &paths.idmapped_binds),
        ("listing image volumes", &paths.image_volumes),
        ("listing idmapped layer views", &paths.layer_views),
    ] {
        targets.extend(entries(what, dir)?);
    }
    for path in &targets {
        unmount(path)?;
    }
    // Held through an O_PATH descriptor: the lazy unmount then only takes
    // the overlay off its path. Not there (never mounted, or gone) holds
    // nothing.
    let held = nix::fcntl::open(
        &paths.merged,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok();
    unmount(&paths.merged)?;
    Ok(DetachedRootfs { _held: held })
}

/// The entries of `dir`; none when it does not exist.
fn entries(what: &'static str, dir: &Path) -> Result<Vec<PathBuf>, RootfsError> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries.flatten().map(|entry| entry.path()).collect()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(RootfsError::Io {
            what,
            path: dir.to_path_buf(),
            source,
        }),
    }
}

fn unmount(path: &Path) -> Result<(), RootfsError> {
    match umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(source) => Err(RootfsError::Mount {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> RootfsPaths {
        RootfsPaths::new(
            Path::new("/var/lib/berth/containers/c1"),
            Path::new("/run/berth/containers/c1"),
        )
    }

    #[test]
    fn topmost_layer_comes_first() {
        let layers = [
            PathBuf::from("/l/base"),
            PathBuf::from("/l/mid"),
            PathBuf::from("/l/top"),
        ];
        assert_eq!(
            overlay_options(&layers, &paths()).unwrap(),
            "lowerdir=/l/top:/l/mid:/l/base,upperdir=/var/lib/berth/containers/c1/upper,workdir=/var/lib/berth/containers/c1/work"
        );
    }

    #[test]
    fn paths_that_would_break_the_options_are_refused() {
        assert!(matches!(
            overlay_options(&[], &paths()),
            Err(RootfsError::NoLayers)
        ));
        for bad in ["/l/a:b", "/l/a,b"] {
            assert!(matches!(
                overlay_options(&[PathBuf::from(bad)], &paths()),
                Err(RootfsError::BadPath(_))
            ));
        }
    }

    #[test]
    fn image_volumes_are_lower_dirs_over_an_empty_one() {
        let layers = [PathBuf::from("/l/base"), PathBuf::from("/l/top")];
        assert_eq!(
            image_volume_options(&layers, Path::new("/b/image-volumes/empty")).unwrap(),
            "lowerdir=/l/top:/l/base:/b/image-volumes/empty"
        );
        assert!(matches!(
            image_volume_options(&[], Path::new("/e")),
            Err(RootfsError::NoLayers)
        ));
    }

    #[test]
    fn a_real_image_volume_is_read_only_and_unmounted_with_the_rootfs() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        std::fs::create_dir_all(base.join("data")).unwrap();
        std::fs::write(base.join("data/a"), "base").unwrap();
        let paths = RootfsPaths::new(&dir.path().join("layer"), &dir.path().join("bundle"));
        let target = mount_image_volume(std::slice::from_ref(&base), &paths, 3).unwrap();
        let read = std::fs::read_to_string(target.join("data/a"));
        let write = std::fs::write(target.join("new"), "x");
        drop(unmount_rootfs(&paths).unwrap());
        assert_eq!(target, paths.image_volume(3));
        assert_eq!(read.unwrap(), "base");
        assert_eq!(write.unwrap_err().raw_os_error(), Some(nix::libc::EROFS));
        assert!(!target.join("data").exists(), "unmounted");
    }

    /// A view a crash left mid-mount is the image's layer itself: the
    /// unmount detaches it, and the layer keeps its files.
    #[test]
    fn a_real_leftover_layer_view_is_unmounted_with_the_rootfs() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join("layer-content");
        std::fs::create_dir_all(&layer).unwrap();
        std::fs::write(layer.join("a"), "layer").unwrap();
        let paths = RootfsPaths::new(&dir.path().join("layer"), &dir.path().join("bundle"));
        let view = paths.layer_views.join("0");
        std::fs::create_dir_all(&view).unwrap();
        mount(
            Some(&layer),
            &view,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        let seen = std::fs::read_to_string(view.join("a"));
        drop(unmount_rootfs(&paths).unwrap());
        assert_eq!(seen.unwrap(), "layer");
        assert!(!view.join("a").exists(), "unmounted");
        std::fs::remove_dir_all(dir.path().join("layer")).unwrap();
        assert_eq!(std::fs::read_to_string(layer.join("a")).unwrap(), "layer");
    }

    #[test]
    fn a_real_overlay_shows_upper_over_lower() {
        let dir = tempfile::tempdir().unwrap();
        let (base, top) = (dir.path().join("base"), dir.path().join("top"));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&top).unwrap();
        std::fs::write(base.join("a"), "base").unwrap();
        std::fs::write(base.join("b"), "base").unwrap();
        std::fs::write(top.join("a"), "top").unwrap();
        let paths = RootfsPaths::new(&dir.path().join("layer"), &dir.path().join("bundle"));
        mount_rootfs(&[base.clone(), top], &paths).unwrap();
        let result = (
            std::fs::read_to_string(paths.merged.join("a")),
            std::fs::read_to_string(paths.merged.join("b")),
        );
        std::fs::write(paths.merged.join("new"), "x").unwrap();
        drop(unmount_rootfs(&paths).unwrap());
        assert_eq!(result.0.unwrap(), "top");
        assert_eq!(result.1.unwrap(), "base");
        assert!(
            paths.upper.join("new").exists(),
            "writes land in the upper dir"
        );
        assert!(!base.join("new").exists());
        drop(unmount_rootfs(&paths).unwrap());
    }

    /// The unmount takes the overlay off its path at once and keeps it
    /// alive for whoever drops the result.
    #[test]
    fn a_real_rootfs_is_detached_at_once_and_held_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("a"), "base").unwrap();
        let paths = RootfsPaths::new(&dir.path().join("layer"), &dir.path().join("bundle"));
        mount_rootfs(std::slice::from_ref(&base), &paths).unwrap();
        let detached = unmount_rootfs(&paths).unwrap();
        assert!(!paths.merged.join("a").exists(), "off its path");
        let held = detached._held.as_ref().expect("the overlay is held");
        let fs = nix::sys::statfs::fstatfs(held).unwrap();
        assert_eq!(
            fs.filesystem_type(),
            nix::sys::statfs::OVERLAYFS_SUPER_MAGIC
        );
        drop(detached);
        let again = unmount_rootfs(&paths).unwrap();
        let fs = again
            ._held
            .as_ref()
            .map(|fd| nix::sys::statfs::fstatfs(fd).unwrap());
        assert_ne!(
            fs.map(|fs| fs.filesystem_type()),
            Some(nix::sys::statfs::OVERLAYFS_SUPER_MAGIC),
            "unmounting again finds no overlay to hold"
        );
    }
}
