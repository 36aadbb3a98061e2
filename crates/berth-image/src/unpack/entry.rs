//! Turning one tar entry at a time into filesystem nodes below the layer
//! root. See [`super::resolve`] for how paths are kept inside the root.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{
    fchmod, fchmodat, futimens, makedev, mkdirat, mknodat, utimensat, FchmodatFlags, Mode, SFlag,
    UtimensatFlags,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, fchownat, linkat, symlinkat, Gid, Uid};
use tar::EntryType;
use tracing::{debug, warn};

use super::resolve::{self, clear_slot, LayerRoot, ResolveError, Slot};
use super::{xattr, UnpackError};

/// Prefix of OCI whiteout files.
const WHITEOUT_PREFIX: &[u8] = b".wh.";
/// Prefix of whiteout "meta" files (aufs bookkeeping such as `.wh..wh.plnk`).
const WHITEOUT_META_PREFIX: &[u8] = b".wh..wh.";
/// The OCI opaque-directory whiteout.
const WHITEOUT_OPAQUE: &[u8] = b".wh..wh..opq";
/// PAX record prefix carrying extended attributes (GNU tar, Go, BuildKit).
const PAX_XATTR_PREFIX: &[u8] = b"SCHILY.xattr.";
/// Permission bits kept from the header: rwx for all plus setuid, setgid
/// and sticky.
const PERMISSION_BITS: u32 = 0o7777;
/// Mode of files and directories until the header's mode is applied; private
/// so nothing half-written is ever exposed with wider permissions.
const CREATE_MODE: u32 = 0o700;

/// Which OCI whiteout, if any, a file name is.
enum Whiteout<'a> {
    /// `.wh..wh..opq`: the parent directory hides all lower content.
    Opaque,
    /// Other `.wh..wh.*` names: aufs bookkeeping, meaningless here.
    Meta,
    /// `.wh.NAME`: `NAME` is deleted from lower layers.
    Remove(&'a OsStr),
}

impl<'a> Whiteout<'a> {
    /// Classifies the final component of an entry name.
    fn parse(name: &'a OsStr) -> Option<Self> {
        let bytes = name.as_bytes();
        if bytes == WHITEOUT_OPAQUE {
            Some(Self::Opaque)
        } else if bytes.starts_with(WHITEOUT_META_PREFIX) {
            Some(Self::Meta)
        } else {
            bytes
                .strip_prefix(WHITEOUT_PREFIX)
                .map(|hidden| Self::Remove(OsStr::from_bytes(hidden)))
        }
    }
}

/// Ownership, permissions, times and xattrs from a tar header, applied to
/// the node an entry creates.
struct Metadata {
    uid: Uid,
    gid: Gid,
    mode: Mode,
    mtime: TimeSpec,
    xattrs: Vec<(CString, Vec<u8>)>,
}

/// A node metadata is applied to.
#[derive(Clone, Copy)]
enum Node<'a> {
    /// A regular file or directory we hold open.
    Open(BorrowedFd<'a>),
    /// A symlink or FIFO, addressed by its single-component name in its
    /// parent: opening it would follow the link or block on the FIFO.
    Named {
        dir: BorrowedFd<'a>,
        name: &'a OsStr,
        symlink: bool,
    },
}

/// Unpacks the entries of one layer, in order, below a [`LayerRoot`].
pub(super) struct Unpacker {
    root: LayerRoot,
    /// Directory mtimes, applied by [`Unpacker::finish`] because creating
    /// the directory's contents afterwards would overwrite them.
    dir_mtimes: Vec<(Vec<OsString>, TimeSpec)>,
    /// The parent directory of the previous entry. Tars list siblings
    /// together, so this saves walking from the root for most entries. It
    /// is dropped whenever anything is removed, since that may have been
    /// (an ancestor of) this directory.
    last_parent: Option<(Vec<OsString>, OwnedFd)>,
}

impl Unpacker {
    /// Starts unpacking into `root`.
    pub(super) fn new(root: LayerRoot) -> Self {
        Self {
            root,
            dir_mtimes: Vec::new(),
            last_parent: None,
        }
    }

    /// Unpacks one entry; its data is read from `entry` as needed.
    pub(super) fn unpack<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<(), UnpackError> {
        let path = PathBuf::from(OsStr::from_bytes(&entry.path_bytes()));
        let kind = entry_kind(entry);
        if kind.is_pax_global_extensions() {
            // Global PAX records only carry defaults we do not use.
            debug!(entry = %path.display(), "ignoring global pax header");
            return Ok(());
        }
        let components = resolve::normalize(&path).map_err(|e| entry_error(&path, e))?;
        let Some((name, parent)) = components.split_last() else {
            return self.root_entry(entry, &path, kind);
        };
        if let Some(whiteout) = Whiteout::parse(name) {
            return self.whiteout(entry, &path, parent, whiteout);
        }
        match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                self.regular_file(entry, &path, parent, name)
            }
            EntryType::Directory => self.directory(entry, &path, parent, name),
            EntryType::Symlink => self.symlink(entry, &path, parent, name),
            EntryType::Link => self.hard_link(entry, &path, parent, name),
            EntryType::Fifo => self.fifo(entry, &path, parent, name),
            EntryType::Char | EntryType::Block => {
                // The runtime mounts its own /dev; device nodes from an image
                // would only be a way to reach host devices.
                warn!(entry = %path.display(), "skipping device node in layer");
                Ok(())
            }
            other => Err(UnpackError::UnsupportedEntryType {
                path,
                kind: other.as_byte(),
            }),
        }
    }

    /// Applies the directory mtimes recorded while unpacking. Directories
    /// that a later entry replaced are skipped.
    pub(super) fn finish(self) -> Result<(), UnpackError> {
        for (components, mtime) in &self.dir_mtimes {
            let path = resolve::join(components);
            let dir = match self.root.open_dir(components, false) {
                Ok(dir) => dir,
                Err(e) => {
                    debug!(dir = %path.display(), error = ?e, "directory gone, not setting its mtime");
                    continue;
                }
            };
            futimens(&dir, mtime, mtime).map_err(io_err("setting mtime of", &path))?;
        }
        Ok(())
    }

    /// An entry naming the root itself (`./` or `/`): only a directory
    /// makes sense, and it updates the root's metadata.
    fn root_entry<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        kind: EntryType,
    ) -> Result<(), UnpackError> {
        if kind != EntryType::Directory {
            return Err(UnpackError::InvalidEntry {
                path: path.to_path_buf(),
                reason: format!("names the layer root but is a {kind:?} entry"),
            });
        }
        let meta = Metadata::read(entry, path)?;
        apply_metadata(Node::Open(self.root.fd()), &meta, path, false)?;
        self.dir_mtimes.push((Vec::new(), meta.mtime));
        Ok(())
    }

    /// Translates an OCI whiteout into overlayfs form: `.wh.NAME` becomes a
    /// 0:0 character device `NAME`, `.wh..wh..opq` the opaque xattr on the
    /// parent. The whiteout file itself is not written.
    fn whiteout<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        parent: &[OsString],
        whiteout: Whiteout<'_>,
    ) -> Result<(), UnpackError> {
        match whiteout {
            Whiteout::Meta => {
                debug!(entry = %path.display(), "ignoring whiteout meta file");
                Ok(())
            }
            Whiteout::Opaque => {
                let dir = self.parent_dir(path, parent)?;
                xattr::fset(dir.as_fd(), xattr::OVERLAY_OPAQUE, b"y")
                    .map_err(io_err("marking directory opaque for", path))
            }
            Whiteout::Remove(hidden) => {
                if matches!(hidden.as_bytes(), b"" | b"." | b"..") {
                    return Err(UnpackError::InvalidEntry {
                        path: path.to_path_buf(),
                        reason: "whiteout does not name a file".into(),
                    });
                }
                let header = entry.header();
                let uid = header_id(header.uid(), path, "uid")?;
                let gid = header_id(header.gid(), path, "gid")?;
                let dir = self.parent_dir(path, parent)?;
                self.clear(dir.as_fd(), hidden, false, path)?;
                mknodat(&dir, hidden, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0))
                    .map_err(io_err("creating whiteout device for", path))?;
                fchownat(
                    &dir,
                    hidden,
                    Some(uid),
                    Some(gid),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(io_err("setting owner of whiteout for", path))
            }
        }
    }

    /// Creates a regular file and copies the entry's data into it.
    fn regular_file<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        parent: &[OsString],
        name: &OsStr,
    ) -> Result<(), UnpackError> {
        let meta = Metadata::read(entry, path)?;
        let dir = self.parent_dir(path, parent)?;
        self.clear(dir.as_fd(), name, false, path)?;
        // O_EXCL also refuses to open through a symlink created meanwhile.
        let fd = openat(
            &dir,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(CREATE_MODE),
        )
        .map_err(io_err("creating file", path))?;
        let mut file = File::from(fd);
        io::copy(entry, &mut file).map_err(io_err("unpacking data of", path))?;
        apply_metadata(Node::Open(file.as_fd()), &meta, path, true)
    }

    /// Creates a directory, or updates an existing one's metadata. Its mtime
    /// is set at the end of the layer.
    fn directory<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        parent: &[OsString],
        name: &OsStr,
    ) -> Result<(), UnpackError> {
        let meta = Metadata::read(entry, path)?;
        let dir = self.parent_dir(path, parent)?;
        if self.clear(dir.as_fd(), name, true, path)? != Slot::KeptDir {
            mkdirat(&dir, name, Mode::from_bits_truncate(CREATE_MODE))
                .map_err(io_err("creating directory", path))?;
        }
        let fd = openat(
            &dir,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_err("opening directory", path))?;
        apply_metadata(Node::Open(fd.as_fd()), &meta, path, false)?;
        let mut components = parent.to_vec();
        components.push(name.to_os_string());
        self.dir_mtimes.push((components, meta.mtime));
        Ok(())
    }

    /// Creates a symlink. Its target is stored verbatim, absolute or not:
    /// it is resolved inside the container's root later and never followed
    /// here.
    fn symlink<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        parent: &[OsString],
        name: &OsStr,
    ) -> Result<(), UnpackError> {
        let target = link_target(entry, path)?;
        let meta = Metadata::read(entry, path)?;
        let dir = self.parent_dir(path, parent)?;
        self.clear(dir.as_fd(), name, false, path)?;
        symlinkat(target.as_os_str(), &dir, name).map_err(io_err("creating symlink", path))?;
        let node = Node::Named {
            dir: dir.as_fd(),
            name,
            symlink: true,
        };
        apply_metadata(node, &meta, path, true)
    }

    /// Creates a hard link to an earlier entry of this layer. The target is
    /// resolved like an entry name, so it can neither leave the layer nor
    /// pass through a symlink; a symlink as the final target is linked
    /// itself, not followed. The link shares the target's inode, so the
    /// header's metadata is not applied.
    fn hard_link<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        parent: &[OsString],
        name: &OsStr,
    ) -> Result<(), UnpackError> {
        let target = link_target(entry, path)?;
        let bad_target = |reason: String| UnpackError::InvalidHardLink {
            path: path.to_path_buf(),
            target: target.clone(),
            reason,
        };
        let target_components = resolve::normalize(&target).map_err(|e| bad_target(describe(e)))?;
        let Some((target_name, target_parent)) = target_components.split_last() else {
            return Err(bad_target("names the layer directory itself".into()));
        };
        if target_name == name && target_parent == parent {
            debug!(entry = %path.display(), "ignoring hard link to itself");
            return Ok(());
        }
        let target_dir = self
            .root
            .open_dir(target_parent, false)
            .map_err(|e| bad_target(describe(e)))?;
        let dir = self.parent_dir(path, parent)?;
        self.clear(dir.as_fd(), name, false, path)?;
        linkat(
            &target_dir,
            target_name.as_os_str(),
            &dir,
            name,
            AtFlags::empty(),
        )
        .map_err(io_err("creating hard link", path))
    }

    /// Creates a FIFO.
    fn fifo<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        path: &Path,
        parent: &[OsString],
        name: &OsStr,
    ) -> Result<(), UnpackError> {
        let meta = Metadata::read(entry, path)?;
        let dir = self.parent_dir(path, parent)?;
        self.clear(dir.as_fd(), name, false, path)?;
        mknodat(
            &dir,
            name,
            SFlag::S_IFIFO,
            Mode::from_bits_truncate(CREATE_MODE),
            0,
        )
        .map_err(io_err("creating fifo", path))?;
        let node = Node::Named {
            dir: dir.as_fd(),
            name,
            symlink: false,
        };
        apply_metadata(node, &meta, path, true)
    }

    /// Opens (creating as needed) the parent directory of an entry.
    fn parent_dir(&mut self, path: &Path, parent: &[OsString]) -> Result<OwnedFd, UnpackError> {
        if let Some((cached, fd)) = &self.last_parent {
            if cached == parent {
                return fd
                    .try_clone()
                    .map_err(io_err("duplicating parent of", path));
            }
        }
        let fd = self
            .root
            .open_dir(parent, true)
            .map_err(|e| entry_error(path, e))?;
        let dup = fd
            .try_clone()
            .map_err(io_err("duplicating parent of", path))?;
        self.last_parent = Some((parent.to_vec(), dup));
        Ok(fd)
    }

    /// [`clear_slot`] for an entry, invalidating the parent cache if
    /// anything was removed.
    fn clear(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        keep_dir: bool,
        path: &Path,
    ) -> Result<Slot, UnpackError> {
        let slot = clear_slot(dir, name, keep_dir).map_err(io_err("replacing existing", path))?;
        if slot == Slot::Removed {
            self.last_parent = None;
        }
        Ok(slot)
    }
}

impl Metadata {
    /// Reads an entry's metadata; must be called before its data is read,
    /// since PAX records may have to be read from the stream.
    fn read<R: Read>(entry: &mut tar::Entry<'_, R>, path: &Path) -> Result<Self, UnpackError> {
        let header = entry.header();
        let uid = header_id(header.uid(), path, "uid")?;
        let gid = header_id(header.gid(), path, "gid")?;
        let mode = header
            .mode()
            .map_err(|e| invalid(path, format!("bad mode: {e}")))?;
        let mtime = header
            .mtime()
            .map_err(|e| invalid(path, format!("bad mtime: {e}")))?;
        let mtime = i64::try_from(mtime).map_err(|_| invalid(path, "mtime out of range".into()))?;
        Ok(Self {
            uid,
            gid,
            mode: Mode::from_bits_truncate(mode & PERMISSION_BITS),
            mtime: TimeSpec::new(mtime, 0),
            xattrs: pax_xattrs(entry, path)?,
        })
    }
}

/// The entry's type; old-style (`\0`) regular entries whose name ends in
/// `/` are directories, as GNU tar and Go's archive/tar read them.
fn entry_kind<R: Read>(entry: &tar::Entry<'_, R>) -> EntryType {
    let header = entry.header();
    if header.as_old().linkflag[0] == 0 && entry.path_bytes().ends_with(b"/") {
        EntryType::Directory
    } else {
        header.entry_type()
    }
}

/// Extended attributes from `SCHILY.xattr.*` PAX records, minus the ones
/// overlayfs interprets (see [`xattr::is_overlay_xattr`]).
fn pax_xattrs<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    path: &Path,
) -> Result<Vec<(CString, Vec<u8>)>, UnpackError> {
    let records = entry
        .pax_extensions()
        .map_err(|e| invalid(path, format!("bad pax records: {e}")))?;
    let Some(records) = records else {
        return Ok(Vec::new());
    };
    let mut xattrs = Vec::new();
    for record in records {
        let record = record.map_err(|e| invalid(path, format!("bad pax record: {e}")))?;
        let Some(name) = record.key_bytes().strip_prefix(PAX_XATTR_PREFIX) else {
            continue;
        };
        if xattr::is_overlay_xattr(name) {
            warn!(
                entry = %path.display(),
                xattr = %String::from_utf8_lossy(name),
                "dropping overlayfs xattr from layer"
            );
            continue;
        }
        let name = CString::new(name)
            .map_err(|_| invalid(path, "xattr name contains a NUL byte".into()))?;
        xattrs.push((name, record.value_bytes().to_vec()));
    }
    Ok(xattrs)
}

/// Applies ownership, permissions, xattrs and (if `set_mtime`) the mtime.
///
/// Order matters: chown clears setuid/setgid bits and `security.capability`,
/// so it comes first; the mtime comes last since setting xattrs and modes
/// does not touch it but writing would.
fn apply_metadata(
    node: Node<'_>,
    meta: &Metadata,
    path: &Path,
    set_mtime: bool,
) -> Result<(), UnpackError> {
    let owner = (Some(meta.uid), Some(meta.gid));
    match node {
        Node::Open(fd) => {
            fchown(fd, owner.0, owner.1).map_err(io_err("setting owner of", path))?;
            fchmod(fd, meta.mode).map_err(io_err("setting mode of", path))?;
        }
        Node::Named { dir, name, symlink } => {
            fchownat(dir, name, owner.0, owner.1, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(io_err("setting owner of", path))?;
            // Symlinks have no mode of their own on Linux. For the FIFO we
            // just created, following is moot: `name` is not a symlink.
            if !symlink {
                fchmodat(dir, name, meta.mode, FchmodatFlags::FollowSymlink)
                    .map_err(io_err("setting mode of", path))?;
            }
        }
    }
    for (name, value) in &meta.xattrs {
        set_xattr(node, name, value, path)?;
    }
    if set_mtime {
        match node {
            Node::Open(fd) => futimens(fd, &meta.mtime, &meta.mtime),
            Node::Named { dir, name, .. } => utimensat(
                dir,
                name,
                &meta.mtime,
                &meta.mtime,
                UtimensatFlags::NoFollowSymlink,
            ),
        }
        .map_err(io_err("setting mtime of", path))?;
    }
    Ok(())
}

/// Sets one xattr from the layer. Failures on `security.*` (e.g. SELinux
/// labels the host policy refuses) and on filesystems without xattr support
/// are logged and skipped, like containerd does; others fail the layer.
fn set_xattr(node: Node<'_>, name: &CString, value: &[u8], path: &Path) -> Result<(), UnpackError> {
    let result = match node {
        Node::Open(fd) => xattr::fset(fd, name, value),
        Node::Named {
            dir, name: file, ..
        } => xattr::lset(&resolve::fd_path(dir, file), name, value),
    };
    let Err(err) = result else {
        return Ok(());
    };
    let unsupported = err.raw_os_error() == Some(nix::libc::EOPNOTSUPP);
    if unsupported || name.to_bytes().starts_with(b"security.") {
        warn!(
            entry = %path.display(),
            xattr = %name.to_string_lossy(),
            error = %err,
            "skipping xattr"
        );
        return Ok(());
    }
    Err(UnpackError::Io {
        op: "setting xattr on",
        path: path.to_path_buf(),
        source: err,
    })
}

/// The raw link name of a symlink or hard link entry.
fn link_target<R: Read>(entry: &tar::Entry<'_, R>, path: &Path) -> Result<PathBuf, UnpackError> {
    match entry.link_name_bytes() {
        Some(target) if !target.is_empty() => Ok(PathBuf::from(OsStr::from_bytes(&target))),
        _ => Err(invalid(path, "link entry without a target".into())),
    }
}

/// A numeric owner id from the header.
fn header_id<T: From<u32>>(id: io::Result<u64>, path: &Path, what: &str) -> Result<T, UnpackError> {
    let id = id.map_err(|e| invalid(path, format!("bad {what}: {e}")))?;
    u32::try_from(id)
        .map(T::from)
        .map_err(|_| invalid(path, format!("{what} {id} out of range")))
}

/// Maps a resolution failure of an entry's own path.
fn entry_error(path: &Path, err: ResolveError) -> UnpackError {
    let path = path.to_path_buf();
    match err {
        ResolveError::Escapes => UnpackError::PathEscapes { path },
        ResolveError::Symlink(component) => UnpackError::SymlinkInPath { path, component },
        ResolveError::NotADirectory(component) => UnpackError::NotADirectory { path, component },
        // Parents are created as needed, so this means it vanished meanwhile.
        ResolveError::Missing(component) => UnpackError::InvalidEntry {
            path,
            reason: format!("parent {} disappeared while unpacking", component.display()),
        },
        ResolveError::Io(_, source) => UnpackError::Io {
            op: "opening parent directory of",
            path,
            source,
        },
    }
}

/// Describes a resolution failure of a hard link target.
fn describe(err: ResolveError) -> String {
    match err {
        ResolveError::Escapes => "escapes the layer directory".into(),
        ResolveError::Symlink(c) => format!("goes through symlink {}", c.display()),
        ResolveError::NotADirectory(c) => format!("{} is not a directory", c.display()),
        ResolveError::Missing(c) => format!("{} does not exist in this layer", c.display()),
        ResolveError::Io(c, e) => format!("resolving {}: {e}", c.display()),
    }
}

/// An [`UnpackError::InvalidEntry`].
fn invalid(path: &Path, reason: String) -> UnpackError {
    UnpackError::InvalidEntry {
        path: path.to_path_buf(),
        reason,
    }
}

/// Wraps a system call error with what was being done to which entry.
fn io_err<'a, E: Into<io::Error>>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(E) -> UnpackError + 'a {
    move |err| UnpackError::Io {
        op,
        path: path.to_path_buf(),
        source: err.into(),
    }
}
