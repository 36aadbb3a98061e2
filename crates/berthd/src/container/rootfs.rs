//! A container's root filesystem: an overlay of its image's unpacked layers
//! (read-only lower dirs, topmost first) under a writable upper dir.

use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Where one container's overlay lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootfsPaths {
    /// The writable layer: persistent, under the root dir.
    pub upper: PathBuf,
    /// overlayfs's scratch dir, on the same filesystem as `upper`.
    pub work: PathBuf,
    /// The mounted rootfs the container runs in.
    pub merged: PathBuf,
}

impl RootfsPaths {
    /// `<layer_dir>/{upper,work}` and `<bundle>/rootfs`.
    pub fn new(layer_dir: &Path, bundle: &Path) -> Self {
        Self {
            upper: layer_dir.join("upper"),
            work: layer_dir.join("work"),
            merged: bundle.join("rootfs"),
        }
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
}

/// The overlay mount options for `layers` given bottom-most first (the
/// order of an image manifest). overlayfs wants the topmost lower dir first.
pub fn overlay_options(layers: &[PathBuf], paths: &RootfsPaths) -> Result<String, RootfsError> {
    if layers.is_empty() {
        return Err(RootfsError::NoLayers);
    }
    for path in layers.iter().chain([&paths.upper, &paths.work]) {
        let text = path.to_string_lossy();
        if text.contains([':', ',', '\n']) {
            return Err(RootfsError::BadPath(path.clone()));
        }
    }
    let lower: Vec<String> = layers
        .iter()
        .rev()
        .map(|layer| layer.display().to_string())
        .collect();
    Ok(format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.join(":"),
        paths.upper.display(),
        paths.work.display()
    ))
}

/// Creates the dirs and mounts the overlay.
pub fn mount_rootfs(layers: &[PathBuf], paths: &RootfsPaths) -> Result<(), RootfsError> {
    let options = overlay_options(layers, paths)?;
    for (what, dir) in [
        ("upper dir", &paths.upper),
        ("work dir", &paths.work),
        ("rootfs dir", &paths.merged),
    ] {
        std::fs::create_dir_all(dir).map_err(|source| RootfsError::Io {
            what,
            path: dir.clone(),
            source,
        })?;
    }
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

/// Unmounts the rootfs; not mounted is fine.
pub fn unmount_rootfs(paths: &RootfsPaths) -> Result<(), RootfsError> {
    match umount2(&paths.merged, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(source) => Err(RootfsError::Mount {
            path: paths.merged.clone(),
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
        unmount_rootfs(&paths).unwrap();
        assert_eq!(result.0.unwrap(), "top");
        assert_eq!(result.1.unwrap(), "base");
        assert!(
            paths.upper.join("new").exists(),
            "writes land in the upper dir"
        );
        assert!(!base.join("new").exists());
        unmount_rootfs(&paths).unwrap();
    }
}
