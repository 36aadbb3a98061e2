//! The bind mounts of a container in a pod with its own user namespace,
//! idmapped through that namespace from the host side, as containerd and
//! CRI-O do: host root's files in a volume belong to root inside, and what
//! root inside writes there belongs to host root (libcontainer ignores
//! OCI mount idmaps, and would open the sources from inside the namespace,
//! where kubelet's 0750 pod dirs are closed).
//!
//! berthd clones each source with `open_tree`, idmaps the clone and
//! attaches it under `<bundle>/idmapped/<n>` (see `idmap`); the spec's
//! mount then binds that view. The views live as long as the container:
//! they are unmounted with its rootfs (`rootfs::unmount_rootfs`), by
//! RemoveContainer, a failed create's undo and recovery alike.
//!
//! Idmapped: the CRI mounts with a host path, and the pod's hostname,
//! hosts and resolv.conf. Not: image volumes and the pod's `/dev/shm`
//! (berth's own, already owned by the mapped root), and the default
//! mounts (the cgroup binds of cgroup v1 among them).

use std::fs::File;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cri_api::v1::Mount as CriMount;
use oci_spec::runtime::Mount;

use super::idmap::{self, IdmapError};

/// One bind mount of the spec to be idmapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdmappedBind {
    /// The mount's index in the spec's mounts.
    pub index: usize,
    /// Where the container sees it.
    pub container_path: String,
    /// The host path the request (or the sandbox) named, for errors.
    pub host_path: String,
    /// The spec's source: the host path with its symlinks resolved.
    pub source: PathBuf,
    /// `rbind`: the mounts below the source come along.
    pub recursive: bool,
    /// Where the idmapped view is attached, and what the spec binds.
    pub target: PathBuf,
}

/// The bind mounts of `mounts` (the spec's) to idmap, each given its view
/// `<staging>/<n>`: those whose destination is one of the CRI mounts'
/// (`cri`), and those of the sandbox's `files`. Sources inside `bundle`
/// (image volumes; give it with its symlinks resolved, as the spec's
/// sources are) are berth's own and left alone.
pub fn plan(
    mounts: &[Mount],
    cri: &[CriMount],
    files: &[PathBuf],
    bundle: &Path,
    staging: &Path,
) -> Vec<IdmappedBind> {
    let mut binds = Vec::new();
    for (index, mount) in mounts.iter().enumerate() {
        let Some(source) = mount.source() else {
            continue;
        };
        if mount.typ().as_deref() != Some("bind") || source.starts_with(bundle) {
            continue;
        }
        let destination = mount.destination().to_string_lossy();
        let host_path = if files.contains(source) {
            source.display().to_string()
        } else {
            match cri
                .iter()
                .find(|m| same_destination(&m.container_path, &destination))
            {
                Some(m) if m.image.is_none() => m.host_path.clone(),
                _ => continue,
            }
        };
        let recursive = mount
            .options()
            .as_ref()
            .is_some_and(|options| options.iter().any(|option| option == "rbind"));
        binds.push(IdmappedBind {
            index,
            container_path: destination.into_owned(),
            host_path,
            source: source.clone(),
            recursive,
            target: staging.join(binds.len().to_string()),
        });
    }
    binds
}

/// Points each planned mount of `mounts` at its idmapped view.
pub fn rewrite(mounts: &mut [Mount], binds: &[IdmappedBind]) {
    for bind in binds {
        if let Some(mount) = mounts.get_mut(bind.index) {
            mount.set_source(Some(bind.target.clone()));
        }
    }
}

/// Destinations are compared as the kernel would see them.
fn same_destination(a: &str, b: &str) -> bool {
    berth_spec::mounts::clean_path(a) == berth_spec::mounts::clean_path(b)
}

/// Attaches `bind`'s idmapped view, making the staging dir (0711: the
/// container's root, an unprivileged host uid, opens the view by path
/// from inside its namespace; the bundle above already admits only its
/// group) and the view's mount point: a dir, or an empty file for a file.
pub fn attach(bind: &IdmappedBind, userns: &Path) -> Result<(), IdmapError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source: std::io::Error| IdmapError::Io { what, path, source }
    };
    if let Some(staging) = bind.target.parent() {
        std::fs::create_dir_all(staging).map_err(io("staging dir", staging))?;
        std::fs::set_permissions(staging, std::fs::Permissions::from_mode(0o711))
            .map_err(io("staging dir", staging))?;
    }
    let is_dir = std::fs::metadata(&bind.source)
        .map_err(io("mount source", &bind.source))?
        .is_dir();
    if is_dir {
        std::fs::create_dir(&bind.target).map_err(io("view mount point", &bind.target))?;
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&bind.target)
            .map_err(io("view mount point", &bind.target))?;
    }
    let userns_file = File::open(userns).map_err(io("user namespace", userns))?;
    idmap::attach_idmapped(&bind.source, &bind.target, &userns_file, bind.recursive)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(destination: &str, source: &str, option: &str) -> Mount {
        let mut mount = Mount::default();
        mount
            .set_destination(destination.into())
            .set_typ(Some("bind".into()))
            .set_source(Some(source.into()))
            .set_options(Some(vec![option.into(), "rprivate".into(), "rw".into()]));
        mount
    }

    fn cri(container_path: &str, host_path: &str) -> CriMount {
        CriMount {
            container_path: container_path.into(),
            host_path: host_path.into(),
            ..Default::default()
        }
    }

    #[test]
    fn volumes_and_sandbox_files_are_idmapped_berths_own_mounts_are_not() {
        let mut proc = Mount::default();
        proc.set_destination("/proc".into())
            .set_typ(Some("proc".into()))
            .set_source(Some("proc".into()));
        let mounts = vec![
            proc,
            bind("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu/pod/c", "rbind"),
            bind("/etc/hosts", "/run/berth/sandboxes/s/hosts", "rbind"),
            bind("/dev/shm", "/run/berth/sandboxes/s/shm", "rbind"),
            // The CRI mount's path was a symlink: the spec has the target.
            bind("/data/", "/srv/real", "rbind"),
            bind("/img", "/run/berth/containers/c/image-volumes/2", "rbind"),
            bind("/one", "/srv/one", "bind"),
        ];
        let cri_mounts = [
            cri("/data", "/srv/link"),
            cri("/img", "/run/berth/containers/c/image-volumes/2"),
            cri("/one", "/srv/one"),
        ];
        let files = [PathBuf::from("/run/berth/sandboxes/s/hosts")];
        let staging = Path::new("/run/berth/containers/c/idmapped");
        let plan = plan(
            &mounts,
            &cri_mounts,
            &files,
            Path::new("/run/berth/containers/c"),
            staging,
        );
        let got: Vec<(usize, &str, &str, bool, PathBuf)> = plan
            .iter()
            .map(|b| {
                (
                    b.index,
                    b.container_path.as_str(),
                    b.host_path.as_str(),
                    b.recursive,
                    b.target.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    2,
                    "/etc/hosts",
                    "/run/berth/sandboxes/s/hosts",
                    true,
                    staging.join("0")
                ),
                (4, "/data/", "/srv/link", true, staging.join("1")),
                (6, "/one", "/srv/one", false, staging.join("2")),
            ]
        );
        assert_eq!(plan[1].source, Path::new("/srv/real"));

        let mut rewritten = mounts.clone();
        rewrite(&mut rewritten, &plan);
        assert_eq!(
            rewritten[4].source().as_deref(),
            Some(staging.join("1").as_path())
        );
        for untouched in [0, 1, 3, 5] {
            assert_eq!(rewritten[untouched], mounts[untouched]);
        }
    }

    #[test]
    fn an_image_volume_outside_the_bundle_is_still_left_alone() {
        let mut image = cri("/img", "/elsewhere/2");
        image.image = Some(Default::default());
        let plan = plan(
            &[bind("/img", "/elsewhere/2", "rbind")],
            &[image],
            &[],
            Path::new("/b"),
            Path::new("/b/idmapped"),
        );
        assert!(plan.is_empty(), "{plan:?}");
    }

    /// A user namespace mapping 0..65536 to `HOST`, held by a sleeping
    /// process; killed on drop.
    struct Userns(crate::test_child::TestChild);

    const HOST: u32 = 1_200_000;

    impl Userns {
        fn new() -> Self {
            let child = crate::test_child::TestChild::spawn(
                std::process::Command::new("unshare").args(["--user", "sleep", "60"]),
            );
            let pid = child.id();
            // The child may not have unshared yet: until it has, its maps
            // are the host's, which refuse writing.
            for _ in 0..100 {
                let own = std::fs::read_link("/proc/self/ns/user").expect("own userns");
                let its = std::fs::read_link(format!("/proc/{pid}/ns/user"));
                if its.is_ok_and(|its| its != own) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            for map in ["uid_map", "gid_map"] {
                std::fs::write(format!("/proc/{pid}/{map}"), format!("0 {HOST} 65536")).expect(map);
            }
            Self(child)
        }

        fn path(&self) -> PathBuf {
            PathBuf::from(format!("/proc/{}/ns/user", self.0.id()))
        }
    }

    fn staged(source: &Path, target: PathBuf) -> IdmappedBind {
        IdmappedBind {
            index: 0,
            container_path: "/data".into(),
            host_path: source.display().to_string(),
            source: source.to_path_buf(),
            recursive: true,
            target,
        }
    }

    fn mounted(path: &Path) -> bool {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let path = path.display().to_string();
        mountinfo
            .lines()
            .any(|line| line.split(' ').nth(4) == Some(path.as_str()))
    }

    /// Needs root (and user namespaces), as berthd does.
    #[test]
    fn a_real_view_shows_host_ids_mapped_and_is_unmounted_with_the_rootfs() {
        use std::os::unix::fs::{chown, MetadataExt};
        let userns = Userns::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let volume = dir.path().join("volume");
        std::fs::create_dir(&volume).expect("volume");
        std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o750)).expect("chmod");
        for (name, owner) in [("root", 0), ("user", 1000), ("far", 70_000)] {
            std::fs::write(volume.join(name), name).expect("file");
            chown(volume.join(name), Some(owner), Some(owner)).expect("chown");
        }
        let single = dir.path().join("hosts");
        std::fs::write(&single, "127.0.0.1 localhost\n").expect("hosts");
        let paths = super::super::rootfs::RootfsPaths::new(
            &dir.path().join("layer"),
            &dir.path().join("bundle"),
        );
        let views = [
            staged(&volume, paths.idmapped_binds.join("0")),
            staged(&single, paths.idmapped_binds.join("1")),
        ];
        for view in &views {
            attach(view, &userns.path()).expect("attach");
        }
        let owner = |path: &Path| std::fs::metadata(path).map(|meta| meta.uid());
        let seen = [
            owner(&views[0].target),
            owner(&views[0].target.join("root")),
            owner(&views[0].target.join("user")),
            owner(&views[0].target.join("far")),
            owner(&views[1].target),
        ];
        let mode = std::fs::metadata(&paths.idmapped_binds).map(|meta| meta.mode() & 0o777);
        drop(super::super::rootfs::unmount_rootfs(&paths).expect("unmount"));
        let left: Vec<bool> = views.iter().map(|view| mounted(&view.target)).collect();

        let seen: Vec<u32> = seen.into_iter().map(|uid| uid.expect("stat")).collect();
        // Seen from the host: shifted by the mapping (root inside owns what
        // host root owns); ids past its length are nobody's.
        assert_eq!(seen, [HOST, HOST, HOST + 1000, 65534, HOST]);
        assert_eq!(mode.expect("staging dir"), 0o711);
        assert_eq!(left, [false, false], "views unmounted");
        assert_eq!(
            std::fs::read_to_string(volume.join("root")).expect("the volume"),
            "root"
        );
    }

    /// ramfs has never supported idmapped mounts: the kernel's EINVAL is
    /// reported with what it means.
    #[test]
    fn a_filesystem_that_cannot_be_idmapped_is_refused_with_the_errno() {
        let userns = Userns::new();
        let dir = tempfile::tempdir().expect("tempdir");
        let ramfs = dir.path().join("ramfs");
        std::fs::create_dir(&ramfs).expect("mount point");
        nix::mount::mount(
            Some("ramfs"),
            &ramfs,
            Some("ramfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount ramfs");
        let view = staged(&ramfs, dir.path().join("bundle/idmapped/0"));
        let result = attach(&view, &userns.path());
        let left = mounted(&view.target);
        nix::mount::umount2(&ramfs, nix::mount::MntFlags::MNT_DETACH).expect("umount");
        let err = result.expect_err("ramfs cannot be idmapped");
        assert!(err.is_refusal(), "{err:?}");
        let text = format!("{err}{}", err.hint());
        assert!(
            text.contains("mount_setattr") && text.contains("EINVAL"),
            "{text}"
        );
        assert!(text.contains("does not support idmapped mounts"), "{text}");
        assert!(!left, "nothing attached");
    }
}
