//! What spec generation needs to know about the host, behind one trait.
//!
//! The conversions in this crate are pure: they never touch the file system
//! themselves. The few facts they need from the host (does a mount source
//! exist, what device is `/dev/fuse`, what does a seccomp profile file say, is an AppArmor profile loaded)
//! come through [`HostLookup`], the way youki puts every privileged call
//! behind its `Syscall` trait. Tests use a fake; berthd uses [`OsHost`].

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Propagation of the host mount that holds a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPropagation {
    /// A member of a peer group (`shared:N` in mountinfo).
    Shared,
    /// Receives events from a master (`master:N`) but is not shared.
    Slave,
    /// Neither.
    Private,
}

/// Kind of a device node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Char,
    Block,
}

/// A device node on the host, as the OCI spec needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDevice {
    /// Path of the node on the host.
    pub path: PathBuf,
    pub kind: DeviceKind,
    pub major: i64,
    pub minor: i64,
    /// Permission bits of the node (without the file type bits).
    pub file_mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The host facts spec generation asks for.
pub trait HostLookup {
    /// `path` with every symlink resolved; `NotFound` when it does not exist.
    fn resolve(&self, path: &Path) -> io::Result<PathBuf>;
    /// Propagation of the mount that holds `path` (already resolved).
    fn propagation(&self, path: &Path) -> io::Result<HostPropagation>;
    /// The device nodes at `path`: the node itself, or every node below it
    /// when `path` is a directory. A regular file is `InvalidInput`.
    fn devices(&self, path: &Path) -> io::Result<Vec<HostDevice>>;
    /// Contents of a seccomp profile file.
    fn read_profile(&self, path: &Path) -> io::Result<String>;
    /// The node's hostname, for `HOSTNAME` when the pod sets none.
    fn hostname(&self) -> io::Result<String>;
    /// Whether the kernel has the AppArmor profile `name` loaded.
    fn apparmor_profile_loaded(&self, name: &str) -> io::Result<bool>;
    /// The runtime's capability bounding set as a bit mask: containers
    /// can have no capability outside it.
    fn capability_mask(&self) -> u64 {
        u64::MAX
    }
}

/// [`HostLookup`] on the real host, reading `/proc` and `/dev`.
#[derive(Clone, Copy, Debug, Default)]
pub struct OsHost;

/// Directories of /dev that hold no device nodes a container should get
/// (runc and containerd skip the same ones when they list host devices).
const SKIPPED_DEV_DIRS: &[&str] = &["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];

impl HostLookup for OsHost {
    fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }

    fn propagation(&self, path: &Path) -> io::Result<HostPropagation> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        propagation_from_mountinfo(&mountinfo, path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no mount holds this path"))
    }

    fn devices(&self, path: &Path) -> io::Result<Vec<HostDevice>> {
        let metadata = std::fs::metadata(path)?;
        if metadata.is_dir() {
            let mut found = Vec::new();
            collect_devices(path, &mut found)?;
            return Ok(found);
        }
        device_from_metadata(path, &metadata)
            .map(|device| vec![device])
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a device node"))
    }

    fn read_profile(&self, path: &Path) -> io::Result<String> {
        read_profile_file(path)
    }

    fn capability_mask(&self) -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("CapBnd:"))
                    .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            })
            .unwrap_or(u64::MAX)
    }

    fn hostname(&self) -> io::Result<String> {
        Ok(std::fs::read_to_string("/proc/sys/kernel/hostname")?
            .trim()
            .to_string())
    }

    fn apparmor_profile_loaded(&self, name: &str) -> io::Result<bool> {
        let profiles = std::fs::read_to_string(APPARMOR_PROFILES)?;
        Ok(crate::lsm::profiles_list_has(&profiles, name))
    }
}

/// The kernel's list of loaded AppArmor profiles.
pub const APPARMOR_PROFILES: &str = "/sys/kernel/security/apparmor/profiles";

/// Every device node below `dir`, skipping symlinks and [`SKIPPED_DEV_DIRS`].
fn collect_devices(dir: &Path, found: &mut Vec<HostDevice>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file_type = entry.file_type()?;
        let path = entry.path();
        if file_type.is_dir() {
            let name = entry.file_name();
            if !SKIPPED_DEV_DIRS.iter().any(|skip| name == *skip) {
                collect_devices(&path, found)?;
            }
        } else if file_type.is_char_device() || file_type.is_block_device() {
            // A node that vanished meanwhile is not worth failing for.
            if let Ok(metadata) = std::fs::symlink_metadata(&path) {
                found.extend(device_from_metadata(&path, &metadata));
            }
        }
    }
    Ok(())
}

fn device_from_metadata(path: &Path, metadata: &std::fs::Metadata) -> Option<HostDevice> {
    let file_type = metadata.file_type();
    let kind = if file_type.is_char_device() {
        DeviceKind::Char
    } else if file_type.is_block_device() {
        DeviceKind::Block
    } else {
        return None;
    };
    let rdev = metadata.rdev();
    Some(HostDevice {
        path: path.to_path_buf(),
        kind,
        major: dev_major(rdev) as i64,
        minor: dev_minor(rdev) as i64,
        file_mode: metadata.mode() & 0o7777,
        uid: metadata.uid(),
        gid: metadata.gid(),
    })
}

/// Major number of a Linux `dev_t`, as glibc's `major()` computes it.
pub fn dev_major(dev: u64) -> u64 {
    ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000)
}

/// Minor number of a Linux `dev_t`, as glibc's `minor()` computes it.
pub fn dev_minor(dev: u64) -> u64 {
    (dev & 0xff) | ((dev >> 12) & 0xffff_ff00)
}

/// Propagation of the mount holding `path`, from `/proc/self/mountinfo` text:
/// the entry with the longest mount point that contains `path` (the last
/// one listed wins among equals: it is mounted on top).
pub fn propagation_from_mountinfo(mountinfo: &str, path: &Path) -> Option<HostPropagation> {
    let mut best: Option<(usize, HostPropagation)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(mount_point) = fields.get(4) else {
            continue;
        };
        let mount_point = unescape_mountinfo(mount_point);
        if !path.starts_with(&mount_point) {
            continue;
        }
        let optional = fields.iter().skip(6).take_while(|field| **field != "-");
        let mut propagation = HostPropagation::Private;
        for field in optional {
            if field.starts_with("shared:") {
                propagation = HostPropagation::Shared;
                break;
            }
            if field.starts_with("master:") {
                propagation = HostPropagation::Slave;
            }
        }
        let depth = mount_point.len();
        if best.is_none_or(|(best_depth, _)| depth >= best_depth) {
            best = Some((depth, propagation));
        }
    }
    best.map(|(_, propagation)| propagation)
}

/// Whether `path` is a mount point in `/proc/self/mountinfo` text.
pub fn is_mount_point_in(mountinfo: &str, path: &Path) -> bool {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|mount_point| Path::new(&unescape_mountinfo(mount_point)) == path)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match octal {
            Some(digits) => {
                let code = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(code as u8);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
24 27 0:6 / /dev rw,relatime shared:2 - devtmpfs devtmpfs rw
90 27 0:50 / /tmp/test1/mnt rw,relatime shared:41 - tmpfs tmpfs rw
91 27 0:51 / /tmp/test2/mnt rw,relatime master:41 - tmpfs tmpfs rw
92 27 0:52 / /tmp/with\\040space rw,relatime shared:7 master:3 - tmpfs tmpfs rw
";

    #[test]
    fn propagation_picks_the_deepest_mount() {
        let at = |p: &str| propagation_from_mountinfo(MOUNTINFO, Path::new(p));
        assert_eq!(at("/var/lib"), Some(HostPropagation::Private));
        assert_eq!(at("/dev/fuse"), Some(HostPropagation::Shared));
        assert_eq!(at("/tmp/test1/mnt/x"), Some(HostPropagation::Shared));
        assert_eq!(at("/tmp/test2/mnt"), Some(HostPropagation::Slave));
        // A sibling with a common string prefix is not inside the mount.
        assert_eq!(at("/tmp/test1/mntx"), Some(HostPropagation::Private));
    }

    #[test]
    fn propagation_reads_escaped_mount_points_and_prefers_shared() {
        let got = propagation_from_mountinfo(MOUNTINFO, Path::new("/tmp/with space/a"));
        assert_eq!(got, Some(HostPropagation::Shared));
    }

    #[test]
    fn mount_points_are_whole_unescaped_paths() {
        assert!(is_mount_point_in(MOUNTINFO, Path::new("/tmp/with space")));
        assert!(!is_mount_point_in(
            MOUNTINFO,
            Path::new("/tmp/with space/a")
        ));
        assert!(!is_mount_point_in("", Path::new("/")));
    }

    #[test]
    fn propagation_of_unmounted_path_is_none() {
        assert_eq!(propagation_from_mountinfo("", Path::new("/")), None);
    }

    /// glibc's makedev(), the inverse of dev_major/dev_minor.
    fn makedev(major: u64, minor: u64) -> u64 {
        (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12) | ((major & !0xfff) << 32)
    }

    #[test]
    fn dev_numbers_split_like_glibc() {
        assert_eq!(makedev(1, 3), 0x103);
        for (major, minor) in [(1, 3), (259, 65536), (4096, 1 << 20), (10, 229)] {
            let dev = makedev(major, minor);
            assert_eq!((dev_major(dev), dev_minor(dev)), (major, minor));
        }
    }

    #[test]
    fn os_host_lists_dev_null_and_rejects_regular_files() {
        let null = OsHost.devices(Path::new("/dev/null")).unwrap();
        assert_eq!(null.len(), 1);
        assert_eq!(
            (null[0].kind, null[0].major, null[0].minor),
            (DeviceKind::Char, 1, 3)
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = OsHost.devices(file.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn os_host_resolves_symlinks_and_reports_missing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            OsHost.resolve(&link).unwrap(),
            target.canonicalize().unwrap()
        );
        let missing = OsHost.resolve(&dir.path().join("nope")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}

/// The largest seccomp profile berth reads; the default profile is ~30 KiB.
const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// Reads a Localhost seccomp profile: a regular file of bounded size. A
/// request may name any path, and `/dev/zero` or a FIFO would otherwise
/// keep berthd reading (or blocked in `open`) forever.
fn read_profile_file(path: &Path) -> io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;

    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)?;
    match read_regular(file, MAX_PROFILE_BYTES)? {
        Regular::Read(bytes) => {
            String::from_utf8(bytes).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
        }
        Regular::NotRegular => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        )),
        Regular::TooLarge(_) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {MAX_PROFILE_BYTES} bytes"),
        )),
    }
}

/// What [`read_regular`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Regular {
    Read(Vec<u8>),
    /// A FIFO, device, directory or socket: not read.
    NotRegular,
    /// More than the cap, with the size seen.
    TooLarge(u64),
}

/// Reads an open file that a request or an image named, but only if it is
/// a regular file (checked on the fd, so nothing can be swapped in after
/// the check) and at most `cap` bytes of it (it may grow after the
/// check). Open it with `O_NONBLOCK`, so a FIFO cannot block the open.
pub fn read_regular(file: std::fs::File, cap: u64) -> io::Result<Regular> {
    use std::io::Read;

    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Regular::NotRegular);
    }
    if meta.len() > cap {
        return Ok(Regular::TooLarge(meta.len()));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Ok(Regular::TooLarge(bytes.len() as u64));
    }
    Ok(Regular::Read(bytes))
}

#[cfg(test)]
mod profile_tests {
    use super::*;

    #[test]
    fn device_nodes_and_fifos_are_not_profiles() {
        // /dev/zero would be read forever; a FIFO would block in open.
        let err = read_profile_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let dir = std::env::temp_dir();
        let err = read_profile_file(&dir).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let fifo = dir.join(format!("berth-spec-fifo-{}", std::process::id()));
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_profile_file(&fifo);
        let _ = std::fs::remove_file(&fifo);
        assert_eq!(err.unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
