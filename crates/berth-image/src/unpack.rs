//! Unpacking OCI image layers into directories for overlayfs.
//!
//! Every layer is unpacked into its own, initially empty directory, which
//! later becomes one `lowerdir` of the container's overlay mount; layers are
//! never unpacked over each other. OCI whiteouts are therefore translated
//! into the form overlayfs understands:
//!
//! * `dir/.wh.NAME` becomes a 0:0 character device `dir/NAME`;
//! * `dir/.wh..wh..opq` becomes the xattr `trusted.overlay.opaque=y` on `dir`.
//!
//! Layer tars are untrusted input and unpacking runs as root, so nothing may
//! be written outside the layer directory: see the `resolve` module for how
//! every path is walked from a directory fd without following symlinks.
//! Device nodes are not created (the runtime provides `/dev`), which also
//! means a layer cannot smuggle in a ready-made 0:0 whiteout, and overlayfs
//! xattrs in the tar are dropped so an image cannot forge opaque markers.
//!
//! While unpacking, the uncompressed stream is hashed, giving the layer's
//! diffID to check against the image config.

mod entry;
mod resolve;
mod xattr;

#[cfg(test)]
mod tests;

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use self::entry::Unpacker;
use self::resolve::LayerRoot;

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// A plain tar stream.
    None,
    /// gzip; possibly several concatenated members.
    Gzip,
    /// zstd; possibly several concatenated frames.
    Zstd,
}

impl Compression {
    /// Maps an OCI or Docker layer media type to its compression.
    ///
    /// Non-distributable ("foreign") layers are accepted too: whether to
    /// fetch them is the puller's decision, their content is an ordinary
    /// layer. Unknown media types are an
    /// [`UnpackError::UnsupportedMediaType`].
    pub fn from_media_type(media_type: &str) -> Result<Self, UnpackError> {
        match media_type {
            "application/vnd.oci.image.layer.v1.tar"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar"
            | "application/vnd.docker.image.rootfs.diff.tar"
            | "application/vnd.docker.image.rootfs.foreign.diff.tar" => Ok(Self::None),
            "application/vnd.oci.image.layer.v1.tar+gzip"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
            | "application/vnd.docker.image.rootfs.diff.tar.gzip"
            | "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip" => Ok(Self::Gzip),
            "application/vnd.oci.image.layer.v1.tar+zstd"
            | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => Ok(Self::Zstd),
            other => Err(UnpackError::UnsupportedMediaType(other.to_owned())),
        }
    }
}

/// What unpacking a layer produced besides the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpackedLayer {
    /// `sha256:<hex>` of the whole uncompressed tar stream: the layer's
    /// diffID, to compare with `rootfs.diff_ids` in the image config.
    pub diff_id: String,
    /// Length of the uncompressed tar stream in bytes.
    pub size: u64,
}

/// Errors from unpacking a layer. Entry paths are the names in the tar.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The layer's media type is not one this unpacker handles.
    #[error("unsupported layer media type {0:?}")]
    UnsupportedMediaType(String),
    /// A read or system call failed; `path` is the blob or the tar entry.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "creating file".
        op: &'static str,
        /// The blob, or the tar entry being unpacked.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: io::Error,
    },
    /// The entry's `..` components climb out of the layer directory.
    #[error("tar entry {}: path escapes the layer directory", path.display())]
    PathEscapes {
        /// The entry name.
        path: PathBuf,
    },
    /// A parent of the entry is a symlink, which is never written through.
    #[error(
        "tar entry {}: parent {} is a symlink, refusing to write through it",
        path.display(),
        component.display()
    )]
    SymlinkInPath {
        /// The entry name.
        path: PathBuf,
        /// The symlink, relative to the layer directory.
        component: PathBuf,
    },
    /// A parent of the entry exists but is not a directory.
    #[error(
        "tar entry {}: parent {} is not a directory",
        path.display(),
        component.display()
    )]
    NotADirectory {
        /// The entry name.
        path: PathBuf,
        /// The non-directory, relative to the layer directory.
        component: PathBuf,
    },
    /// A hard link's target is not a file of this layer reachable without
    /// leaving the layer directory or passing through a symlink.
    #[error(
        "tar entry {}: hard link target {} {reason}",
        path.display(),
        target.display()
    )]
    InvalidHardLink {
        /// The entry name.
        path: PathBuf,
        /// The link target as written in the tar.
        target: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The entry is malformed (bad header field, empty link target, ...).
    #[error("tar entry {}: {reason}", path.display())]
    InvalidEntry {
        /// The entry name.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The entry has a type this unpacker does not know.
    #[error(
        "tar entry {}: unsupported entry type {:?}",
        path.display(),
        char::from(*kind)
    )]
    UnsupportedEntryType {
        /// The entry name.
        path: PathBuf,
        /// The raw type flag from the header.
        kind: u8,
    },
}

/// Unpacks the compressed layer read from `blob` into `dest` (an existing,
/// empty directory that will serve as one overlayfs lower dir), translating
/// OCI whiteouts to overlayfs form, and returns the layer's diffID and
/// uncompressed size; `name` stands for the blob in errors.
///
/// Nothing is ever written outside `dest`: entries that would escape it, or
/// reach a path through a symlink in the layer, fail the whole unpack. On
/// error `dest` is left partially populated; the caller discards it.
pub fn unpack_stream(
    blob: impl Read + 'static,
    compression: Compression,
    dest: &Path,
    name: &Path,
) -> Result<UnpackedLayer, UnpackError> {
    let root = LayerRoot::open(dest).map_err(|source| UnpackError::Io {
        op: "opening layer directory",
        path: dest.to_path_buf(),
        source,
    })?;
    let stream = decompress(blob, compression).map_err(|source| UnpackError::Io {
        op: "starting to decompress",
        path: name.to_path_buf(),
        source,
    })?;
    let mut stream = DigestReader::new(stream);
    unpack_entries(&mut stream, root, name)?;
    // The tar reader stops at the first end-of-archive block, but the diffID
    // covers the whole stream: the second zero block and any padding up to
    // the record size written after it.
    io::copy(&mut stream, &mut io::sink()).map_err(|source| UnpackError::Io {
        op: "reading trailer of layer",
        path: name.to_path_buf(),
        source,
    })?;
    Ok(stream.finish())
}

/// Wraps the blob in the decompressor its media type calls for.
fn decompress(blob: impl Read + 'static, compression: Compression) -> io::Result<Box<dyn Read>> {
    Ok(match compression {
        Compression::None => Box::new(io::BufReader::new(blob)),
        // Multi-member: pigz and some registries' tooling concatenate
        // members, and a single-member decoder would stop after the first.
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(blob)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(blob)?),
    })
}

/// Unpacks every tar entry read from `stream` below `root`.
fn unpack_entries(stream: &mut impl Read, root: LayerRoot, blob: &Path) -> Result<(), UnpackError> {
    let read_error = |source| UnpackError::Io {
        op: "reading layer archive",
        path: blob.to_path_buf(),
        source,
    };
    let mut archive = tar::Archive::new(stream);
    let mut unpacker = Unpacker::new(root);
    for entry in archive.entries().map_err(read_error)? {
        let mut entry = entry.map_err(read_error)?;
        unpacker.unpack(&mut entry)?;
    }
    unpacker.finish()
}

/// A reader that hashes and counts everything read through it.
struct DigestReader<R> {
    inner: R,
    hasher: Sha256,
    size: u64,
}

impl<R: Read> DigestReader<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            size: 0,
        }
    }

    /// The diffID and size of everything read so far.
    fn finish(self) -> UnpackedLayer {
        UnpackedLayer {
            diff_id: format!("sha256:{}", hex::encode(self.hasher.finalize())),
            size: self.size,
        }
    }
}

impl<R: Read> Read for DigestReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        // usize always fits in u64 on supported targets.
        self.size += n as u64;
        Ok(n)
    }
}
