//! Image volumes (KEP-4639): a CRI mount whose source is an image kubelet
//! has pulled (`Mount.image`), optionally a directory in it
//! (`Mount.image_sub_path`). Each is a read-only overlay of the image's
//! layers in the bundle (`rootfs.rs`), which the container then binds like
//! any host path; the container holds the image's layers as it holds its
//! own image's.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use berth_image::store::{ImageRecord, ImageStore};
use cri_api::v1::{ContainerConfig, MountPropagation};

use super::ContainerError;

/// Symlinks followed in one sub path at most, as the kernel's limit.
const MAX_LINKS: usize = 40;

/// One image volume of a container, its image found in the store.
#[derive(Debug, Clone)]
pub struct ImageVolume {
    /// The index of its mount in `ContainerConfig.mounts`.
    pub index: usize,
    pub container_path: String,
    /// The reference kubelet sent (the image's id or digest).
    pub reference: String,
    pub image: ImageRecord,
    pub sub_path: String,
}

/// Why an `image_sub_path` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    #[error("must be a relative path without \"..\"")]
    NotRelative,
    #[error("{0:?} does not exist in the image")]
    Missing(PathBuf),
    #[error("{0:?} in the image is not a directory")]
    NotADirectory(PathBuf),
    #[error("more than {MAX_LINKS} symlinks")]
    TooManyLinks,
    #[error("{path:?}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The config's image volumes, each resolved to a pulled image; one that
/// is not in the store is NotFound naming it (kubelet pulls it first).
pub fn find(
    config: &ContainerConfig,
    images: &ImageStore,
) -> Result<Vec<ImageVolume>, ContainerError> {
    let mut volumes = Vec::new();
    for (index, mount) in config.mounts.iter().enumerate() {
        let Some(spec) = &mount.image else {
            continue;
        };
        let image =
            images
                .resolve(&spec.image)
                .ok_or_else(|| ContainerError::ImageVolumeNotFound {
                    container_path: mount.container_path.clone(),
                    image: spec.image.clone(),
                })?;
        volumes.push(ImageVolume {
            index,
            container_path: mount.container_path.clone(),
            reference: spec.image.clone(),
            image,
            sub_path: mount.image_sub_path.clone(),
        });
    }
    Ok(volumes)
}

/// The config the spec is built from: the mount of each image volume
/// becomes a read-only, private bind of its source (`sources`: mount
/// index and host path). An image never changes, so nothing propagates.
pub fn bind_config(config: &ContainerConfig, sources: &[(usize, PathBuf)]) -> ContainerConfig {
    let mut config = config.clone();
    for (index, source) in sources {
        if let Some(mount) = config.mounts.get_mut(*index) {
            mount.host_path = source.display().to_string();
            mount.image = None;
            mount.image_sub_path.clear();
            mount.readonly = true;
            mount.propagation = MountPropagation::PropagationPrivate as i32;
        }
    }
    config
}

/// A part of a path still to walk.
enum Part {
    Name(OsString),
    Up,
}

/// `sub_path` inside `root` (a mounted image), with every symlink on the
/// way resolved as if `root` were `/`: an absolute target starts again at
/// `root`, and `..` stops there, so the result never leaves the image (as
/// containerd's `securejoin`). The sub path itself must be relative and
/// without `..`, and must exist.
pub fn resolve_sub_path(root: &Path, sub_path: &str) -> Result<PathBuf, SubPathError> {
    let relative = Path::new(sub_path);
    if relative.is_absolute()
        || relative
            .components()
            .any(|part| part == Component::ParentDir)
    {
        return Err(SubPathError::NotRelative);
    }
    // A stack: the next part to walk is last.
    let mut pending: Vec<Part> = parts(relative).into_iter().rev().collect();
    let mut resolved = PathBuf::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        let name = match part {
            Part::Up => {
                resolved.pop();
                continue;
            }
            Part::Name(name) => name,
        };
        let next = resolved.join(&name);
        let full = root.join(&next);
        let meta = std::fs::symlink_metadata(&full).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                SubPathError::Missing(next.clone())
            } else {
                SubPathError::Io {
                    path: next.clone(),
                    source,
                }
            }
        })?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(SubPathError::TooManyLinks);
            }
            let target = std::fs::read_link(&full).map_err(|source| SubPathError::Io {
                path: next.clone(),
                source,
            })?;
            if target.is_absolute() {
                resolved = PathBuf::new();
            }
            pending.extend(parts(&target).into_iter().rev());
        } else if !meta.is_dir() && !pending.is_empty() {
            return Err(SubPathError::NotADirectory(next));
        } else {
            resolved = next;
        }
    }
    Ok(root.join(resolved))
}

/// A path's names and `..`s; `/` and `.` add nothing.
fn parts(path: &Path) -> Vec<Part> {
    path.components()
        .filter_map(|part| match part {
            Component::Normal(name) => Some(Part::Name(name.to_os_string())),
            Component::ParentDir => Some(Part::Up),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use cri_api::v1::{ImageSpec, Mount};

    use super::*;

    /// An image root: `data/file`, `etc/`, and symlinks that try to leave.
    fn image_root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("data/sub")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("data/file"), "x").unwrap();
        symlink("/etc", root.join("abs")).unwrap();
        symlink("../../../../etc", root.join("data/up")).unwrap();
        symlink("sub", root.join("data/rel")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        dir
    }

    #[test]
    fn sub_paths_resolve_inside_the_image() {
        let dir = image_root();
        let root = dir.path();
        for (sub, want) in [
            ("", ""),
            ("data", "data"),
            ("./data/sub/", "data/sub"),
            ("data/rel", "data/sub"),
            ("data/file", "data/file"),
            // Symlinks leaving the image land inside it.
            ("abs", "etc"),
            ("data/up", "etc"),
        ] {
            let got = resolve_sub_path(root, sub).unwrap_or_else(|err| panic!("{sub}: {err}"));
            assert_eq!(got, root.join(want), "{sub}");
        }
    }

    #[test]
    fn bad_sub_paths_say_why() {
        let dir = image_root();
        let root = dir.path();
        for (sub, want) in [
            ("../etc", "relative"),
            ("/data", "relative"),
            ("data/../data", "relative"),
            ("missing", "does not exist"),
            ("data/file/x", "not a directory"),
            ("loop", "symlinks"),
        ] {
            let err = resolve_sub_path(root, sub).unwrap_err().to_string();
            assert!(err.contains(want), "{sub}: {err}");
        }
    }

    #[test]
    fn image_mounts_become_read_only_private_binds() {
        let config = ContainerConfig {
            mounts: vec![
                Mount {
                    container_path: "/host".into(),
                    host_path: "/srv".into(),
                    ..Default::default()
                },
                Mount {
                    container_path: "/img".into(),
                    image: Some(ImageSpec {
                        image: "sha256:abc".into(),
                        ..Default::default()
                    }),
                    image_sub_path: "data".into(),
                    propagation: MountPropagation::PropagationHostToContainer as i32,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let bound = bind_config(&config, &[(1, PathBuf::from("/b/image-volumes/1/data"))]);
        assert_eq!(bound.mounts[0], config.mounts[0]);
        let image = &bound.mounts[1];
        assert_eq!(image.host_path, "/b/image-volumes/1/data");
        assert!(image.image.is_none() && image.image_sub_path.is_empty());
        assert!(image.readonly);
        assert_eq!(
            image.propagation,
            MountPropagation::PropagationPrivate as i32
        );
    }
}
