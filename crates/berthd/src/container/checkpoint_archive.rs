//! The checkpoint archive: the layout CRI-O writes and kubelet's checkpoint
//! API and `checkpointctl` read (names from checkpointctl's `lib`):
//!
//! ```text
//! checkpoint/        CRIU's images
//! dump.log           CRIU's log of the dump
//! stats-dump         CRIU's statistics of the dump
//! config.dump        ConfigDump (JSON)
//! spec.dump          the container's OCI spec (its bundle's config.json)
//! rootfs-diff.tar    what the container added or changed in its rootfs
//! deleted.files      what it deleted there (JSON list of absolute paths)
//! ```
//!
//! Built in a work directory, then tarred (uncompressed, as CRI-O does)
//! to a temporary name next to `location` and renamed over it.

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The archive's members, by their names in it.
pub const CHECKPOINT_DIR: &str = "checkpoint";
pub const CONFIG_DUMP: &str = "config.dump";
pub const SPEC_DUMP: &str = "spec.dump";
pub const ROOTFS_DIFF: &str = "rootfs-diff.tar";
pub const DELETED_FILES: &str = "deleted.files";
pub const DUMP_LOG: &str = "dump.log";
pub const STATS_DUMP: &str = "stats-dump";

/// Go's zero `time.Time` as JSON: what CRI-O writes for "never".
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// `config.dump`: checkpointctl's `ContainerConfig`, field for field
/// (Go's JSON names; times RFC 3339).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigDump {
    pub id: String,
    pub name: String,
    /// The image as the client asked for it.
    #[serde(
        rename = "rootfsImage",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub rootfs_image: String,
    /// The image's id (its config digest).
    #[serde(
        rename = "rootfsImageRef",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub rootfs_image_ref: String,
    /// A name of the image (what a restore pulls or looks up).
    #[serde(
        rename = "rootfsImageName",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub rootfs_image_name: String,
    #[serde(rename = "runtime", default, skip_serializing_if = "String::is_empty")]
    pub runtime: String,
    #[serde(rename = "createdTime")]
    pub created_time: String,
    #[serde(rename = "checkpointedTime")]
    pub checkpointed_time: String,
    #[serde(rename = "restoredTime", default = "go_zero_time")]
    pub restored_time: String,
    #[serde(default)]
    pub restored: bool,
}

fn go_zero_time() -> String {
    GO_ZERO_TIME.to_string()
}

/// What `config.dump` says about a container, from berth's record of it.
pub struct ContainerFacts<'a> {
    pub id: &'a str,
    /// The CRI metadata name.
    pub name: &'a str,
    /// The image as the client asked for it, and the image's id.
    pub image: &'a str,
    pub image_id: &'a str,
    /// A tagged name of the image when it has one, else `image`.
    pub image_name: String,
    /// RFC 3339 with nanoseconds.
    pub created: String,
    pub checkpointed: String,
}

/// Builds `config.dump`. The runtime field names the OCI runtime, as CRI-O
/// does (its `default_runtime`); berth's is libcontainer, through berth.
pub fn config_dump(facts: &ContainerFacts<'_>) -> ConfigDump {
    ConfigDump {
        id: facts.id.to_string(),
        name: facts.name.to_string(),
        rootfs_image: facts.image.to_string(),
        rootfs_image_ref: facts.image_id.to_string(),
        rootfs_image_name: facts.image_name.clone(),
        runtime: "berth".to_string(),
        created_time: facts.created.clone(),
        checkpointed_time: facts.checkpointed.clone(),
        restored_time: go_zero_time(),
        restored: false,
    }
}

/// JSON as Go's `json.MarshalIndent(v, "", "  ")` writes it.
pub fn to_json_file<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec_pretty(value)
}

/// `spec.dump`: the bundle's `config.json`, re-indented as checkpointctl
/// writes it. Must be an OCI spec object.
pub fn spec_dump(config_json: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let spec: serde_json::Value = serde_json::from_slice(config_json)?;
    if !spec.is_object() {
        return Err(serde::de::Error::custom("the spec is not a JSON object"));
    }
    to_json_file(&spec)
}

/// Paths of the container's rootfs that are mounted over (the spec's
/// mount destinations, and the runtime's own mount points as CRI-O lists
/// them): what the writable layer holds there is a mount point made for the
/// mount, not the container's data.
pub fn excluded_paths(mount_destinations: &[String]) -> BTreeSet<String> {
    let mut set: BTreeSet<String> = ["/dev", "/dev/shm", "/proc", "/run", "/sys"]
        .into_iter()
        .map(String::from)
        .collect();
    set.extend(mount_destinations.iter().map(|d| normalize(d)));
    set
}

/// `/a//b/` → `/a/b`.
fn normalize(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

/// One entry of the writable layer, as overlayfs stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpperEntry {
    /// A character device 0:0: the file was deleted.
    Whiteout,
    /// Anything else: added or changed.
    Changed,
}

/// What an upper-dir entry with this type and device number means.
pub fn classify(is_char_device: bool, rdev: u64) -> UpperEntry {
    if is_char_device && rdev == 0 {
        UpperEntry::Whiteout
    } else {
        UpperEntry::Changed
    }
}

/// The container's changes, as paths from its root (`/etc/x`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RootfsChanges {
    /// Added or changed, parents before children.
    pub changed: Vec<String>,
    /// Deleted (whiteouts).
    pub deleted: Vec<String>,
}

/// Walks the overlay's upper dir. Excluded paths are left out with what
/// is under them.
pub fn rootfs_changes(upper: &Path, excluded: &BTreeSet<String>) -> io::Result<RootfsChanges> {
    let mut changes = RootfsChanges::default();
    walk(upper, "", excluded, &mut changes)?;
    Ok(changes)
}

fn walk(
    dir: &Path,
    prefix: &str,
    excluded: &BTreeSet<String>,
    changes: &mut RootfsChanges,
) -> io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let path = format!("{prefix}/{}", name.to_string_lossy());
        if excluded.contains(&path) {
            continue;
        }
        let meta = entry.path().symlink_metadata()?;
        match classify(meta.file_type().is_char_device(), meta.rdev()) {
            UpperEntry::Whiteout => changes.deleted.push(path),
            UpperEntry::Changed => {
                changes.changed.push(path.clone());
                if meta.is_dir() {
                    walk(&entry.path(), &path, excluded, changes)?;
                }
            }
        }
    }
    Ok(())
}

/// Writes `rootfs-diff.tar`: the changed entries of `upper`, named
/// relative to the root (`etc/x`), as CRI-O's archive names them.
pub fn write_rootfs_diff(upper: &Path, changes: &RootfsChanges, out: &Path) -> io::Result<()> {
    let file = File::create(out)?;
    let mut tar = tar::Builder::new(file);
    tar.follow_symlinks(false);
    for path in &changes.changed {
        let relative = path.trim_start_matches('/');
        let source = upper.join(relative);
        let meta = source.symlink_metadata()?;
        if meta.is_dir() {
            // the directory entry alone: its children are entries of their own
            let mut header = tar::Header::new_gnu();
            header.set_metadata(&meta);
            header.set_size(0);
            tar.append_data(&mut header, relative, io::empty())?;
        } else {
            tar.append_path_with_name(&source, relative)?;
        }
    }
    tar.into_inner()?.sync_all()
}

/// Tars the work dir's members into `location`: first to a temporary name
/// beside it (mode 0600: it holds every memory page of the container),
/// then renamed, so a failed checkpoint never leaves half an archive.
pub fn write_archive(work: &Path, location: &Path) -> io::Result<()> {
    let parent = location
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    let name = location
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let temporary = parent.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        let mut tar = tar::Builder::new(file);
        tar.follow_symlinks(false);
        for member in [
            CHECKPOINT_DIR,
            DUMP_LOG,
            STATS_DUMP,
            CONFIG_DUMP,
            SPEC_DUMP,
            ROOTFS_DIFF,
            DELETED_FILES,
        ] {
            let path = work.join(member);
            if path.is_dir() {
                tar.append_dir_all(member, &path)?;
            } else if path.exists() {
                tar.append_path_with_name(&path, member)?;
            }
        }
        tar.into_inner()?.sync_all()?;
        std::fs::rename(&temporary, location)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// What a restore reads from an archive, unpacked into `dir` (its
/// `config.dump` was read before, to find the image: [`read_config_dump`]).
#[derive(Debug)]
pub struct Unpacked {
    pub dir: PathBuf,
    pub deleted: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{path}: {}", with_causes(source))]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is not a checkpoint archive: {reason}")]
    NotACheckpoint { path: PathBuf, reason: String },
}

impl ArchiveError {
    /// For `map_err`: an I/O error on `path`.
    pub fn io(path: &Path) -> impl Fn(io::Error) -> Self + Copy + '_ {
        move |source| Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// `path` is no checkpoint archive, for `reason`.
    pub fn not_a_checkpoint(path: &Path, reason: impl Into<String>) -> Self {
        Self::NotACheckpoint {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// For `map_err`: `path` is no checkpoint archive, since its `what`
    /// cannot be read (the error says why).
    pub fn unreadable<'a, E: std::fmt::Display>(
        path: &'a Path,
        what: &'a str,
    ) -> impl Fn(E) -> Self + Copy + 'a {
        move |err| Self::not_a_checkpoint(path, format!("{what}: {err}"))
    }
}

/// An I/O error with what it wraps: the tar crate's errors say which entry
/// failed and keep the reason inside.
fn with_causes(err: &io::Error) -> String {
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        text.push_str(&format!(": {inner}"));
        cause = inner.source();
    }
    text
}

/// Unpacks the archive at `archive` into `dir` and reads its
/// `deleted.files`.
pub fn unpack(archive: &Path, dir: &Path) -> Result<Unpacked, ArchiveError> {
    let file = File::open(archive).map_err(ArchiveError::io(archive))?;
    std::fs::create_dir_all(dir).map_err(ArchiveError::io(dir))?;
    let mut tar = tar::Archive::new(file);
    tar.set_preserve_permissions(true);
    tar.unpack(dir).map_err(ArchiveError::io(archive))?;
    load_unpacked(dir, archive)
}

/// Reads `deleted.files` of an archive unpacked in `dir` (`origin` names
/// it in errors) and checks it has CRIU's images.
pub fn load_unpacked(dir: &Path, origin: &Path) -> Result<Unpacked, ArchiveError> {
    if !dir.join(CHECKPOINT_DIR).is_dir() {
        return Err(ArchiveError::not_a_checkpoint(
            origin,
            format!("no {CHECKPOINT_DIR}/ directory"),
        ));
    }
    let deleted = match std::fs::read(dir.join(DELETED_FILES)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(ArchiveError::unreadable(origin, DELETED_FILES))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(ArchiveError::io(&dir.join(DELETED_FILES))(e)),
    };
    Ok(Unpacked {
        dir: dir.to_path_buf(),
        deleted,
    })
}

/// Reads `config.dump` from the archive without unpacking the rest: what
/// CreateContainer needs before it makes anything.
pub fn read_config_dump(archive: &Path) -> Result<ConfigDump, ArchiveError> {
    let file = File::open(archive).map_err(ArchiveError::io(archive))?;
    // Past the open, a read that fails is a file that is no tar archive.
    let unreadable = ArchiveError::unreadable(archive, "not a tar archive");
    let mut tar = tar::Archive::new(file);
    for entry in tar.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let is_config = entry
            .path()
            .map(|p| p.components().eq(Path::new(CONFIG_DUMP).components()))
            .unwrap_or(false);
        if is_config {
            let mut bytes = Vec::new();
            io::Read::read_to_end(&mut io::Read::take(&mut entry, 1 << 20), &mut bytes)
                .map_err(unreadable)?;
            return serde_json::from_slice(&bytes)
                .map_err(ArchiveError::unreadable(archive, CONFIG_DUMP));
        }
    }
    Err(ArchiveError::not_a_checkpoint(
        archive,
        format!("no {CONFIG_DUMP}"),
    ))
}

/// Reads `config.dump` of an archive already unpacked in `dir` (a
/// checkpoint image's layer).
pub fn read_config_dump_in(dir: &Path) -> Result<ConfigDump, ArchiveError> {
    let bytes =
        std::fs::read(dir.join(CONFIG_DUMP)).map_err(ArchiveError::unreadable(dir, CONFIG_DUMP))?;
    serde_json::from_slice(&bytes).map_err(ArchiveError::unreadable(dir, CONFIG_DUMP))
}

/// Copies an unpacked archive (directories, regular files and symlinks;
/// CRIU's images and the rootfs diff are nothing else) from `from` into
/// `to`, keeping modes: the restore writes its log beside the images, and
/// a checkpoint image's layer is shared and must stay as it is.
pub fn copy_unpacked(from: &Path, to: &Path) -> Result<(), ArchiveError> {
    std::fs::create_dir_all(to).map_err(ArchiveError::io(to))?;
    for entry in std::fs::read_dir(from).map_err(ArchiveError::io(from))? {
        let entry = entry.map_err(ArchiveError::io(from))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(ArchiveError::io(&source))?;
        if kind.is_dir() {
            copy_unpacked(&source, &target)?;
            let mode = std::fs::metadata(&source)
                .map_err(ArchiveError::io(&source))?
                .permissions();
            std::fs::set_permissions(&target, mode).map_err(ArchiveError::io(&target))?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target).map_err(ArchiveError::io(&source))?;
        } else if kind.is_symlink() {
            let link = std::fs::read_link(&source).map_err(ArchiveError::io(&source))?;
            std::os::unix::fs::symlink(link, &target).map_err(ArchiveError::io(&target))?;
        } else {
            return Err(ArchiveError::not_a_checkpoint(
                from,
                format!(
                    "{} is neither a file, a directory nor a symlink",
                    source.display()
                ),
            ));
        }
    }
    Ok(())
}

/// The image a checkpoint was made from, by the name a restore looks up:
/// CRI-O's `rootfsImageName`, else what was asked for, else the id.
pub fn source_image(config: &ConfigDump) -> Option<&str> {
    [
        &config.rootfs_image_name,
        &config.rootfs_image,
        &config.rootfs_image_ref,
    ]
    .into_iter()
    .find(|name| !name.is_empty())
    .map(String::as_str)
}

/// Unpacks `rootfs-diff.tar` of an unpacked archive into the container's
/// mounted rootfs (the tar crate refuses entries that would land outside
/// it), then removes what `deleted` lists.
pub fn apply_rootfs_changes(unpacked: &Unpacked, rootfs: &Path) -> Result<(), ArchiveError> {
    let diff = unpacked.dir.join(ROOTFS_DIFF);
    match File::open(&diff) {
        Ok(file) => {
            let mut tar = tar::Archive::new(file);
            tar.set_preserve_permissions(true);
            tar.set_preserve_ownerships(true);
            tar.set_overwrite(true);
            tar.unpack(rootfs).map_err(ArchiveError::io(&diff))?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(ArchiveError::io(&diff)(source)),
    }
    for path in &unpacked.deleted {
        remove_inside(rootfs, path)
            .map_err(ArchiveError::io(&rootfs.join(path.trim_start_matches('/'))))?;
    }
    Ok(())
}

/// Removes `path` (absolute in the container) under `rootfs`, never
/// outside it: a `..` or a symlink on the way is refused, since the
/// container's own symlinks resolve against the host here.
pub fn remove_inside(rootfs: &Path, path: &str) -> io::Result<()> {
    let relative = Path::new(path.trim_start_matches('/'));
    let mut names = Vec::new();
    for component in relative.components() {
        match component {
            std::path::Component::Normal(name) => names.push(name),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{path:?} is not a plain path"),
                ))
            }
        }
    }
    let mut at = rootfs.to_path_buf();
    for (i, name) in names.iter().enumerate() {
        at.push(name);
        let meta = match at.symlink_metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let last = i + 1 == names.len();
        if last {
            return if meta.is_dir() {
                std::fs::remove_dir_all(&at)
            } else {
                std::fs::remove_file(&at)
            };
        }
        if meta.file_type().is_symlink() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{path:?} passes through a symlink"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unpacked_archive_is_copied_and_loaded_without_touching_the_original() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (dir.path().join("layer"), dir.path().join("restore"));
        std::fs::create_dir_all(from.join(CHECKPOINT_DIR)).expect("dirs");
        std::fs::write(from.join(CHECKPOINT_DIR).join("pages-1.img"), b"pages").expect("img");
        std::fs::write(from.join(CONFIG_DUMP), br#"{"id":"x","name":"main","createdTime":"2026-11-26T00:00:00Z","checkpointedTime":"2026-11-26T00:00:00Z"}"#).expect("config");
        std::fs::write(from.join(DELETED_FILES), br#"["/tmp/gone"]"#).expect("deleted");
        std::os::unix::fs::symlink("pages-1.img", from.join(CHECKPOINT_DIR).join("link"))
            .expect("symlink");
        copy_unpacked(&from, &to).expect("copy");
        let unpacked = load_unpacked(&to, &from).expect("load");
        assert_eq!(read_config_dump_in(&to).expect("config").name, "main");
        assert_eq!(unpacked.deleted, ["/tmp/gone"]);
        assert_eq!(
            std::fs::read(to.join(CHECKPOINT_DIR).join("pages-1.img")).expect("copied"),
            b"pages"
        );
        assert_eq!(
            std::fs::read_link(to.join(CHECKPOINT_DIR).join("link")).expect("link"),
            Path::new("pages-1.img")
        );
        assert!(from.join(CHECKPOINT_DIR).join("pages-1.img").is_file());
    }

    #[test]
    fn an_unpacked_dir_without_criu_images_is_not_a_checkpoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(CONFIG_DUMP), br#"{"id":"x","name":"main","createdTime":"2026-11-26T00:00:00Z","checkpointedTime":"2026-11-26T00:00:00Z"}"#).expect("config");
        let err = load_unpacked(dir.path(), dir.path()).expect_err("no checkpoint/");
        assert!(err.to_string().contains("no checkpoint/"), "{err}");
        assert!(read_config_dump_in(&dir.path().join("nothing")).is_err());
    }

    fn facts() -> ContainerFacts<'static> {
        ContainerFacts {
            id: "c0ffee",
            name: "counter",
            image: "busybox",
            image_id: "sha256:abc",
            image_name: "docker.io/library/busybox:latest".into(),
            created: "2026-01-02T03:04:05.000000006Z".into(),
            checkpointed: "2026-01-02T03:05:00.5Z".into(),
        }
    }

    #[test]
    fn config_dump_has_checkpointctls_json_names() {
        let json: serde_json::Value =
            serde_json::from_slice(&to_json_file(&config_dump(&facts())).unwrap()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "id": "c0ffee",
                "name": "counter",
                "rootfsImage": "busybox",
                "rootfsImageRef": "sha256:abc",
                "rootfsImageName": "docker.io/library/busybox:latest",
                "runtime": "berth",
                "createdTime": "2026-01-02T03:04:05.000000006Z",
                "checkpointedTime": "2026-01-02T03:05:00.5Z",
                "restoredTime": "0001-01-01T00:00:00Z",
                "restored": false,
            })
        );
    }

    #[test]
    fn config_dump_reads_what_cri_o_writes() {
        let cri_o = r#"{"id":"x","name":"n","rootfsImageName":"quay.io/a:b",
            "createdTime":"2026-01-01T00:00:00Z","checkpointedTime":"2026-01-01T00:00:01Z"}"#;
        let dump: ConfigDump = serde_json::from_str(cri_o).unwrap();
        assert_eq!(dump.rootfs_image_name, "quay.io/a:b");
        assert_eq!(dump.restored_time, GO_ZERO_TIME);
        assert!(!dump.restored);
    }

    #[test]
    fn spec_dump_is_the_spec_reindented_and_must_be_an_object() {
        let out = spec_dump(br#"{"ociVersion":"1.2.0","process":{"args":["sh"]}}"#).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("\n  \"ociVersion\""));
        assert!(spec_dump(b"[1]").is_err());
        assert!(spec_dump(b"{").is_err());
    }

    #[test]
    fn whiteouts_are_char_devices_zero_zero() {
        assert_eq!(classify(true, 0), UpperEntry::Whiteout);
        assert_eq!(classify(true, 259), UpperEntry::Changed);
        assert_eq!(classify(false, 0), UpperEntry::Changed);
    }

    #[test]
    fn mount_points_are_excluded_normalized() {
        let set = excluded_paths(&["/etc/hosts".into(), "/data//".into()]);
        assert!(set.contains("/etc/hosts") && set.contains("/data") && set.contains("/proc"));
        assert!(!set.contains("/etc"));
    }

    #[test]
    fn changes_skip_mount_points_and_the_archive_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir_all(upper.join("etc")).unwrap();
        std::fs::create_dir_all(upper.join("proc")).unwrap();
        std::fs::write(upper.join("etc/new"), "x").unwrap();
        std::fs::write(upper.join("etc/hosts"), "").unwrap();
        std::os::unix::fs::symlink("new", upper.join("etc/link")).unwrap();
        let excluded = excluded_paths(&["/etc/hosts".into()]);
        let changes = rootfs_changes(&upper, &excluded).unwrap();
        assert_eq!(changes.changed, ["/etc", "/etc/link", "/etc/new"]);
        assert!(changes.deleted.is_empty());

        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join(CHECKPOINT_DIR)).unwrap();
        std::fs::write(work.join(CHECKPOINT_DIR).join("core-1.img"), "img").unwrap();
        std::fs::write(
            work.join(CONFIG_DUMP),
            to_json_file(&config_dump(&facts())).unwrap(),
        )
        .unwrap();
        std::fs::write(work.join(DELETED_FILES), b"[\"/etc/gone\"]").unwrap();
        write_rootfs_diff(&upper, &changes, &work.join(ROOTFS_DIFF)).unwrap();
        let location = dir.path().join("out.tar");
        write_archive(&work, &location).unwrap();
        let mode = std::fs::metadata(&location).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let unpacked = unpack(&location, &dir.path().join("unpacked")).unwrap();
        assert_eq!(
            read_config_dump_in(&unpacked.dir).unwrap(),
            config_dump(&facts())
        );
        assert_eq!(unpacked.deleted, ["/etc/gone"]);
        assert!(unpacked.dir.join("checkpoint/core-1.img").is_file());
        let mut names: Vec<String> =
            tar::Archive::new(File::open(unpacked.dir.join(ROOTFS_DIFF)).unwrap())
                .entries()
                .unwrap()
                .map(|e| e.unwrap().path().unwrap().display().to_string())
                .collect();
        names.sort();
        assert_eq!(names, ["etc", "etc/link", "etc/new"]);
    }

    #[test]
    fn a_restore_applies_the_diff_and_removes_inside_the_rootfs_only() {
        let dir = tempfile::tempdir().unwrap();
        let upper = dir.path().join("upper");
        std::fs::create_dir_all(upper.join("data")).unwrap();
        std::fs::write(upper.join("data/count"), "41").unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join(CHECKPOINT_DIR)).unwrap();
        std::fs::write(
            work.join(CONFIG_DUMP),
            to_json_file(&config_dump(&facts())).unwrap(),
        )
        .unwrap();
        std::fs::write(
            work.join(DELETED_FILES),
            br#"["/bin/wget", "/etc/../../escape", "/link/x", "/missing"]"#,
        )
        .unwrap();
        let changes = rootfs_changes(&upper, &BTreeSet::new()).unwrap();
        write_rootfs_diff(&upper, &changes, &work.join(ROOTFS_DIFF)).unwrap();
        let archive = dir.path().join("a.tar");
        write_archive(&work, &archive).unwrap();
        assert_eq!(read_config_dump(&archive).unwrap(), config_dump(&facts()));
        assert_eq!(
            source_image(&read_config_dump(&archive).unwrap()),
            Some("docker.io/library/busybox:latest")
        );

        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("bin")).unwrap();
        std::fs::write(rootfs.join("bin/wget"), "").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("x"), "keep").unwrap();
        std::os::unix::fs::symlink(&outside, rootfs.join("link")).unwrap();
        let unpacked = unpack(&archive, &dir.path().join("unpacked")).unwrap();
        // the two hostile entries fail; the others are applied first
        let mut good = unpacked;
        good.deleted = vec!["/bin/wget".into(), "/missing".into()];
        apply_rootfs_changes(&good, &rootfs).unwrap();
        assert_eq!(
            std::fs::read_to_string(rootfs.join("data/count")).unwrap(),
            "41"
        );
        assert!(!rootfs.join("bin/wget").exists());
        assert!(remove_inside(&rootfs, "/etc/../../escape").is_err());
        assert!(remove_inside(&rootfs, "/link/x").is_err());
        assert!(outside.join("x").exists());
    }

    #[test]
    fn a_tar_without_config_dump_is_not_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join(CHECKPOINT_DIR)).unwrap();
        let location = dir.path().join("x.tar");
        write_archive(&work, &location).unwrap();
        let err = read_config_dump(&location).unwrap_err();
        assert!(
            err.to_string().contains("not a checkpoint archive"),
            "{err}"
        );
    }
}
