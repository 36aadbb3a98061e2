//! Tests for layer unpacking. They run as root (as the runtime does) since
//! they check ownership, whiteout devices and `trusted.*` xattrs.

use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::libc;
use sha2::{Digest, Sha256};
use tar::{Builder, EntryType, Header};
use tempfile::TempDir;

use super::{unpack_stream, Compression, UnpackError, UnpackedLayer};

const MTIME: u64 = 1_600_000_000;

/// Builds a layer tar in memory.
struct Layer {
    builder: Builder<Vec<u8>>,
}

impl Layer {
    fn new() -> Self {
        Self {
            builder: Builder::new(Vec::new()),
        }
    }

    fn header(kind: EntryType, mode: u32, uid: u64, gid: u64) -> Header {
        let mut header = Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(uid);
        header.set_gid(gid);
        header.set_mtime(MTIME);
        header.set_size(0);
        header
    }

    fn file(mut self, path: &str, mode: u32, owner: (u64, u64), data: &[u8]) -> Self {
        let mut header = Self::header(EntryType::Regular, mode, owner.0, owner.1);
        header.set_size(data.len() as u64);
        self.builder.append_data(&mut header, path, data).unwrap();
        self
    }

    fn dir(mut self, path: &str, mode: u32, owner: (u64, u64)) -> Self {
        let mut header = Self::header(EntryType::Directory, mode, owner.0, owner.1);
        self.builder
            .append_data(&mut header, path, io::empty())
            .unwrap();
        self
    }

    fn link(mut self, kind: EntryType, path: &str, target: &str, owner: (u64, u64)) -> Self {
        let mut header = Self::header(kind, 0o777, owner.0, owner.1);
        self.builder.append_link(&mut header, path, target).unwrap();
        self
    }

    fn symlink(self, path: &str, target: &str) -> Self {
        self.link(EntryType::Symlink, path, target, (0, 0))
    }

    fn node(mut self, kind: EntryType, path: &str, mode: u32, dev: (u32, u32)) -> Self {
        let mut header = Self::header(kind, mode, 0, 0);
        header.set_device_major(dev.0).unwrap();
        header.set_device_minor(dev.1).unwrap();
        self.builder
            .append_data(&mut header, path, io::empty())
            .unwrap();
        self
    }

    /// An entry whose name and link name are written verbatim, bypassing
    /// the builder's refusal of `..` and absolute names.
    fn raw(mut self, kind: EntryType, name: &[u8], link: &[u8], data: &[u8]) -> Self {
        let mut header = Self::header(kind, 0o644, 0, 0);
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        header.set_size(data.len() as u64);
        header.set_cksum();
        self.builder.append(&header, data).unwrap();
        self
    }

    /// PAX records for the next entry.
    fn pax(mut self, records: &[(&str, &[u8])]) -> Self {
        self.builder
            .append_pax_extensions(records.iter().copied())
            .unwrap();
        self
    }

    fn finish(self) -> Vec<u8> {
        self.builder.into_inner().unwrap()
    }
}

/// A temp dir holding the blob, the layer directory `dest` and an
/// `outside` directory that must stay untouched.
struct Fixture {
    tmp: TempDir,
}

impl Fixture {
    fn new() -> Self {
        let tmp = TempDir::new().unwrap();
        fs::create_dir(tmp.path().join("dest")).unwrap();
        fs::create_dir(tmp.path().join("outside")).unwrap();
        Self { tmp }
    }

    fn dest(&self) -> PathBuf {
        self.tmp.path().join("dest")
    }

    fn outside(&self) -> PathBuf {
        self.tmp.path().join("outside")
    }

    fn unpack(&self, tar: &[u8]) -> Result<UnpackedLayer, UnpackError> {
        self.unpack_blob(tar, Compression::None)
    }

    fn unpack_blob(
        &self,
        blob: &[u8],
        compression: Compression,
    ) -> Result<UnpackedLayer, UnpackError> {
        let path = self.tmp.path().join("blob");
        fs::write(&path, blob).unwrap();
        let result = unpack_stream(
            fs::File::open(&path).unwrap(),
            compression,
            &self.dest(),
            &path,
        );
        fs::remove_file(&path).unwrap();
        result
    }

    /// Asserts nothing appeared next to `dest` or inside `outside`.
    fn assert_nothing_outside(&self) {
        assert_eq!(names(self.tmp.path()), ["dest", "outside"]);
        assert!(
            names(&self.outside()).is_empty(),
            "something written to outside/"
        );
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn lgetxattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let path = CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: NUL-terminated strings and a buffer of the length passed.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

#[test]
fn creates_files_dirs_links_and_fifos_with_metadata() {
    let tar = Layer::new()
        .dir("bin", 0o755, (0, 0))
        .file("bin/su", 0o4755, (0, 0), b"#!su")
        .link(EntryType::Link, "bin/su2", "bin/su", (0, 0))
        .dir("tmp", 0o1777, (0, 0))
        .dir("home/user", 0o750, (1000, 1001))
        .file("home/user/notes", 0o640, (1000, 1001), b"hello")
        .file("sgid", 0o2711, (0, 50), b"")
        .link(EntryType::Symlink, "home/user/lnk", "/bin/su", (1000, 1001))
        .symlink("rel", "../../../../etc")
        .node(EntryType::Fifo, "run/fifo", 0o620, (0, 0))
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    let dest = fx.dest();

    let su = fs::symlink_metadata(dest.join("bin/su")).unwrap();
    assert!(su.is_file());
    assert_eq!(su.mode() & 0o7777, 0o4755);
    assert_eq!(su.mtime(), MTIME as i64);
    assert_eq!(fs::read(dest.join("bin/su")).unwrap(), b"#!su");
    let su2 = fs::symlink_metadata(dest.join("bin/su2")).unwrap();
    assert_eq!(su2.ino(), su.ino());
    assert_eq!(su.nlink(), 2);

    assert_eq!(
        fs::symlink_metadata(dest.join("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );
    assert_eq!(
        fs::symlink_metadata(dest.join("sgid")).unwrap().mode() & 0o7777,
        0o2711
    );
    assert_eq!(fs::symlink_metadata(dest.join("sgid")).unwrap().gid(), 50);

    let home = fs::symlink_metadata(dest.join("home/user")).unwrap();
    assert!(home.is_dir());
    assert_eq!(
        (home.uid(), home.gid(), home.mode() & 0o7777),
        (1000, 1001, 0o750)
    );
    // Set after the directory's contents were created.
    assert_eq!(home.mtime(), MTIME as i64);
    // Parent not listed in the tar: created with the default mode.
    let implicit = fs::symlink_metadata(dest.join("home")).unwrap();
    assert_eq!(implicit.mode() & 0o7777, 0o755);

    let notes = fs::symlink_metadata(dest.join("home/user/notes")).unwrap();
    assert_eq!(
        (notes.uid(), notes.gid(), notes.mode() & 0o7777),
        (1000, 1001, 0o640)
    );
    assert_eq!(fs::read(dest.join("home/user/notes")).unwrap(), b"hello");

    let lnk = fs::symlink_metadata(dest.join("home/user/lnk")).unwrap();
    assert!(lnk.file_type().is_symlink());
    assert_eq!((lnk.uid(), lnk.gid()), (1000, 1001));
    assert_eq!(
        fs::read_link(dest.join("home/user/lnk")).unwrap(),
        Path::new("/bin/su")
    );
    assert_eq!(
        fs::read_link(dest.join("rel")).unwrap(),
        Path::new("../../../../etc")
    );

    let fifo = fs::symlink_metadata(dest.join("run/fifo")).unwrap();
    assert!(fifo.file_type().is_fifo());
    assert_eq!(fifo.mode() & 0o7777, 0o620);
}

#[test]
fn whiteout_becomes_char_device_0_0() {
    let tar = Layer::new()
        .file(".wh.gone", 0o644, (0, 0), b"")
        .dir("etc", 0o755, (0, 0))
        .file("etc/.wh.passwd", 0o644, (0, 0), b"")
        // Parent not in the tar: created.
        .file("var/lib/.wh.apt", 0o644, (0, 0), b"")
        // aufs bookkeeping: ignored.
        .file(".wh..wh.plnk", 0o644, (0, 0), b"")
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    let dest = fx.dest();
    for path in ["gone", "etc/passwd", "var/lib/apt"] {
        let meta = fs::symlink_metadata(dest.join(path)).unwrap();
        assert!(meta.file_type().is_char_device(), "{path}");
        assert_eq!(meta.rdev(), 0, "{path}");
    }
    assert_eq!(names(&dest), ["etc", "gone", "var"]);
    assert_eq!(names(&dest.join("etc")), ["passwd"]);
}

#[test]
fn opaque_whiteout_sets_overlay_xattr() {
    let tar = Layer::new()
        .dir("etc", 0o755, (0, 0))
        .file("etc/.wh..wh..opq", 0o644, (0, 0), b"")
        .file("etc/fresh", 0o644, (0, 0), b"x")
        .file("var/cache/.wh..wh..opq", 0o644, (0, 0), b"")
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    let dest = fx.dest();
    for dir in ["etc", "var/cache"] {
        let value = lgetxattr(&dest.join(dir), "trusted.overlay.opaque");
        assert_eq!(value.as_deref(), Some(&b"y"[..]), "{dir}");
    }
    assert_eq!(names(&dest.join("etc")), ["fresh"]);
    assert!(names(&dest.join("var/cache")).is_empty());
    assert_eq!(lgetxattr(&dest.join("var"), "trusted.overlay.opaque"), None);
}

#[test]
fn forged_overlay_xattrs_are_dropped() {
    let tar = Layer::new()
        .pax(&[
            ("SCHILY.xattr.trusted.overlay.opaque", b"y"),
            ("SCHILY.xattr.user.overlay.opaque", b"y"),
            ("SCHILY.xattr.user.keep", b"kept"),
        ])
        .dir("forged", 0o755, (0, 0))
        .pax(&[("SCHILY.xattr.trusted.overlay.redirect", b"/etc")])
        .file("forged/file", 0o644, (0, 0), b"")
        // A ready-made overlay whiteout is a device node: not created.
        .node(EntryType::Char, "fake", 0o644, (0, 0))
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    let dest = fx.dest();
    let forged = dest.join("forged");
    assert_eq!(lgetxattr(&forged, "trusted.overlay.opaque"), None);
    assert_eq!(lgetxattr(&forged, "user.overlay.opaque"), None);
    assert_eq!(
        lgetxattr(&forged, "user.keep").as_deref(),
        Some(&b"kept"[..])
    );
    assert_eq!(
        lgetxattr(&forged.join("file"), "trusted.overlay.redirect"),
        None
    );
    assert!(!dest.join("fake").exists());
}

#[test]
fn parent_dir_escape_is_rejected() {
    for name in [&b"../evil"[..], b"a/../../evil", b"./../outside/evil"] {
        let tar = Layer::new()
            .raw(EntryType::Regular, name, b"", b"pwned")
            .finish();
        let fx = Fixture::new();
        let err = fx.unpack(&tar).unwrap_err();
        assert!(matches!(err, UnpackError::PathEscapes { .. }), "{err}");
        fx.assert_nothing_outside();
    }
}

#[test]
fn dot_dot_that_stays_inside_is_cleaned() {
    let tar = Layer::new()
        .raw(EntryType::Regular, b"a/b/../c", b"", b"ok")
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    assert_eq!(fs::read(fx.dest().join("a/c")).unwrap(), b"ok");
    fx.assert_nothing_outside();
}

#[test]
fn absolute_path_lands_inside_dest() {
    let tar = Layer::new()
        .raw(EntryType::Regular, b"/etc/x", b"", b"inside")
        .raw(EntryType::Directory, b"/", b"", b"")
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    assert_eq!(fs::read(fx.dest().join("etc/x")).unwrap(), b"inside");
    fx.assert_nothing_outside();
}

#[test]
fn entries_below_a_symlink_are_rejected() {
    let fx = Fixture::new();
    let outside = fx.outside();
    let cases = [
        (outside.to_str().unwrap().to_owned(), "evil/pwned"),
        ("../outside".to_owned(), "evil/pwned"),
        ("../../..".to_owned(), "evil/tmp/pwned"),
        ("/".to_owned(), "evil/tmp/pwned"),
    ];
    for (target, entry) in cases {
        let fx = Fixture::new();
        let tar = Layer::new()
            .symlink("evil", &target)
            .file(entry, 0o644, (0, 0), b"pwned")
            .finish();
        let err = fx.unpack(&tar).unwrap_err();
        assert!(
            matches!(&err, UnpackError::SymlinkInPath { component, .. } if component == Path::new("evil")),
            "{target}: {err}"
        );
        fx.assert_nothing_outside();
        // Directories below the symlink are not created either.
        let tar = Layer::new()
            .symlink("evil", &target)
            .dir("evil/sub", 0o755, (0, 0))
            .finish();
        let fx = Fixture::new();
        assert!(fx.unpack(&tar).is_err());
        fx.assert_nothing_outside();
    }
}

#[test]
fn hard_links_outside_or_through_symlinks_are_rejected() {
    let fx = Fixture::new();
    fs::write(fx.outside().join("secret"), b"s").unwrap();
    let outside = fx.outside().to_str().unwrap().to_owned();
    let cases: [(&str, Vec<u8>); 3] = [
        ("escapes", b"../../etc/passwd".to_vec()),
        ("escapes", b"../outside/secret".to_vec()),
        ("symlink", b"lnk/secret".to_vec()),
    ];
    for (reason, target) in cases {
        let tar = Layer::new()
            .symlink("lnk", &outside)
            .raw(EntryType::Link, b"x", &target, b"")
            .finish();
        fs::remove_dir_all(fx.dest()).unwrap();
        fs::create_dir(fx.dest()).unwrap();
        let err = fx.unpack(&tar).unwrap_err();
        match &err {
            UnpackError::InvalidHardLink { reason: r, .. } if r.contains(reason) => {}
            other => panic!("{target:?}: unexpected {other}"),
        }
        assert!(fs::symlink_metadata(fx.dest().join("x")).is_err());
        assert_eq!(names(&fx.outside()), ["secret"]);
        assert_eq!(
            fs::symlink_metadata(fx.outside().join("secret"))
                .unwrap()
                .nlink(),
            1
        );
    }
}

#[test]
fn hard_link_to_symlink_links_the_symlink() {
    let tar = Layer::new()
        .symlink("lnk", "/etc/passwd")
        .link(EntryType::Link, "hard", "lnk", (0, 0))
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    let hard = fs::symlink_metadata(fx.dest().join("hard")).unwrap();
    assert!(hard.file_type().is_symlink());
    assert_eq!(
        hard.ino(),
        fs::symlink_metadata(fx.dest().join("lnk")).unwrap().ino()
    );
}

#[test]
fn device_nodes_are_skipped() {
    let tar = Layer::new()
        .dir("dev", 0o755, (0, 0))
        .node(EntryType::Char, "dev/null", 0o666, (1, 3))
        .node(EntryType::Block, "dev/sda", 0o660, (8, 0))
        .node(EntryType::Fifo, "dev/initctl", 0o600, (0, 0))
        .finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    assert_eq!(names(&fx.dest().join("dev")), ["initctl"]);
}

#[test]
fn later_entries_replace_earlier_ones() {
    let fx = Fixture::new();
    let target = fx.outside().join("target");
    let tar = Layer::new()
        .file("f", 0o644, (0, 0), b"old")
        .file("f", 0o600, (0, 0), b"new")
        // A file replacing a directory and its contents.
        .dir("d", 0o755, (0, 0))
        .file("d/inner", 0o644, (0, 0), b"")
        .file("d", 0o644, (0, 0), b"now a file")
        // A directory replacing a file.
        .file("e", 0o644, (0, 0), b"")
        .dir("e", 0o700, (0, 0))
        .file("e/inner", 0o644, (0, 0), b"in e")
        // A file replacing a symlink is written in place of the link.
        .symlink("s", target.to_str().unwrap())
        .file("s", 0o644, (0, 0), b"not through the link")
        // A directory replacing a symlink to a directory outside.
        .symlink("t", fx.outside().to_str().unwrap())
        .dir("t", 0o755, (0, 0))
        .file("t/inner", 0o644, (0, 0), b"")
        // A directory over a directory keeps its contents, takes new metadata.
        .dir("k", 0o755, (0, 0))
        .file("k/keep", 0o644, (0, 0), b"")
        .dir("k", 0o711, (0, 0))
        .finish();
    fx.unpack(&tar).unwrap();
    let dest = fx.dest();
    assert_eq!(fs::read(dest.join("f")).unwrap(), b"new");
    assert_eq!(
        fs::symlink_metadata(dest.join("f")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(fs::read(dest.join("d")).unwrap(), b"now a file");
    assert_eq!(fs::read(dest.join("e/inner")).unwrap(), b"in e");
    assert!(fs::symlink_metadata(dest.join("s")).unwrap().is_file());
    assert_eq!(fs::read(dest.join("s")).unwrap(), b"not through the link");
    assert!(fs::symlink_metadata(dest.join("t")).unwrap().is_dir());
    assert_eq!(names(&dest.join("k")), ["keep"]);
    assert_eq!(
        fs::symlink_metadata(dest.join("k")).unwrap().mode() & 0o777,
        0o711
    );
    fx.assert_nothing_outside();
}

#[test]
fn replacing_a_directory_does_not_delete_through_symlinks() {
    let fx = Fixture::new();
    fs::write(fx.outside().join("precious"), b"p").unwrap();
    let tar = Layer::new()
        .dir("d", 0o755, (0, 0))
        .symlink("d/out", fx.outside().to_str().unwrap())
        .file("d", 0o644, (0, 0), b"")
        .finish();
    fx.unpack(&tar).unwrap();
    assert!(fs::symlink_metadata(fx.dest().join("d")).unwrap().is_file());
    assert_eq!(names(&fx.outside()), ["precious"]);
}

#[test]
fn diff_id_covers_the_whole_uncompressed_stream() {
    let mut tar = Layer::new()
        .dir("etc", 0o755, (0, 0))
        .file("etc/hostname", 0o644, (0, 0), b"berth\n")
        .finish();
    // GNU tar pads the archive to a 10 KiB record after the two zero
    // blocks; those bytes are part of the diffID.
    tar.resize(10240, 0);
    let expected = UnpackedLayer {
        diff_id: sha256(&tar),
        size: tar.len() as u64,
    };
    // Two gzip members, as pigz-style tools produce.
    let (head, tail) = tar.split_at(3000);
    let multi_gzip = [gzip(head), gzip(tail)].concat();
    let blobs = [
        (Compression::None, tar.clone()),
        (Compression::Gzip, gzip(&tar)),
        (Compression::Gzip, multi_gzip),
        (Compression::Zstd, zstd::encode_all(&tar[..], 3).unwrap()),
    ];
    for (compression, blob) in blobs {
        let fx = Fixture::new();
        let layer = fx.unpack_blob(&blob, compression).unwrap();
        assert_eq!(layer, expected, "{compression:?}");
        assert_eq!(
            fs::read(fx.dest().join("etc/hostname")).unwrap(),
            b"berth\n"
        );
    }
}

#[test]
fn long_names_and_old_style_directories() {
    let long = format!("{}/file", "d".repeat(150));
    let mut old_dir = Header::new_old();
    old_dir.as_old_mut().name[..7].copy_from_slice(b"olddir/");
    old_dir.set_mode(0o700);
    old_dir.set_uid(0);
    old_dir.set_gid(0);
    old_dir.set_size(0);
    old_dir.set_mtime(MTIME);
    old_dir.set_cksum();
    let mut layer = Layer::new().file(&long, 0o644, (0, 0), b"long");
    layer.builder.append(&old_dir, io::empty()).unwrap();
    let tar = layer.finish();
    let fx = Fixture::new();
    fx.unpack(&tar).unwrap();
    assert_eq!(fs::read(fx.dest().join(&long)).unwrap(), b"long");
    assert!(fs::symlink_metadata(fx.dest().join("olddir"))
        .unwrap()
        .is_dir());
}

#[test]
fn corrupt_blob_is_an_error() {
    let fx = Fixture::new();
    let err = fx
        .unpack_blob(b"not gzip at all", Compression::Gzip)
        .unwrap_err();
    assert!(matches!(err, UnpackError::Io { .. }), "{err}");
}

#[test]
fn media_types_map_to_compression() {
    let cases = [
        ("application/vnd.oci.image.layer.v1.tar", Compression::None),
        (
            "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Gzip,
        ),
        (
            "application/vnd.oci.image.layer.v1.tar+zstd",
            Compression::Zstd,
        ),
        (
            "application/vnd.oci.image.layer.nondistributable.v1.tar",
            Compression::None,
        ),
        (
            "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
            Compression::Gzip,
        ),
        (
            "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
            Compression::Zstd,
        ),
        (
            "application/vnd.docker.image.rootfs.diff.tar.gzip",
            Compression::Gzip,
        ),
        (
            "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
            Compression::Gzip,
        ),
    ];
    for (media_type, compression) in cases {
        assert_eq!(
            Compression::from_media_type(media_type).unwrap(),
            compression,
            "{media_type}"
        );
    }
    for unknown in [
        "application/vnd.oci.image.config.v1+json",
        "application/octet-stream",
        "",
    ] {
        let err = Compression::from_media_type(unknown).unwrap_err();
        assert!(
            matches!(&err, UnpackError::UnsupportedMediaType(m) if m == unknown),
            "{err}"
        );
    }
}

/// Many small files across directories, with owners, modes, hard links,
/// a large file and a replacement in between: each comes out as its entry
/// says, and directory mtimes survive the files written into them.
#[test]
fn many_small_files_unpack_as_in_order() {
    let fx = Fixture::new();
    let mut layer = Layer::new();
    for d in 0..5 {
        layer = layer.dir(&format!("d{d}"), 0o750, (0, 0));
        for f in 0..100u64 {
            let data = format!("file {d}/{f}");
            let mode = 0o640 | (f % 2) as u32;
            let owner = (f % 3, f % 5);
            layer = layer.file(&format!("d{d}/f{f}"), mode, owner, data.as_bytes());
        }
        // A hard link to a file that may still be queued.
        layer = layer.link(
            EntryType::Link,
            &format!("d{d}/link"),
            &format!("d{d}/f7"),
            (0, 0),
        );
    }
    let large = vec![7u8; 300 << 10];
    let tar = layer
        .file("large", 0o600, (0, 0), &large)
        .file("d0/f1", 0o600, (9, 9), b"replaced")
        .finish();
    fx.unpack(&tar).unwrap();
    let dest = fx.dest();
    for d in 0..5u64 {
        for f in 0..100u64 {
            let path = dest.join(format!("d{d}/f{f}"));
            let meta = fs::symlink_metadata(&path).unwrap();
            if (d, f) == (0, 1) {
                assert_eq!(fs::read(&path).unwrap(), b"replaced");
                assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (9, 9, 0o600));
                continue;
            }
            assert_eq!(fs::read(&path).unwrap(), format!("file {d}/{f}").as_bytes());
            assert_eq!(
                (u64::from(meta.uid()), u64::from(meta.gid())),
                (f % 3, f % 5),
                "{path:?}"
            );
            assert_eq!(u64::from(meta.mode() & 0o777), 0o640 | (f % 2), "{path:?}");
            assert_eq!(meta.mtime() as u64, MTIME, "{path:?}");
        }
        let link = fs::symlink_metadata(dest.join(format!("d{d}/link"))).unwrap();
        let target = fs::symlink_metadata(dest.join(format!("d{d}/f7"))).unwrap();
        assert_eq!(link.ino(), target.ino());
        assert_eq!(
            fs::symlink_metadata(dest.join(format!("d{d}")))
                .unwrap()
                .mtime() as u64,
            MTIME,
            "a directory's mtime survives the files written into it"
        );
    }
    assert_eq!(fs::read(dest.join("large")).unwrap(), large);
    fx.assert_nothing_outside();
}
