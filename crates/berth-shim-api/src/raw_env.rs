//! Environment entries that are not UTF-8, beside the bundle's
//! `config.json`.
//!
//! A CRI env value is bytes, but the OCI spec is JSON and libcontainer's
//! env is `Vec<String>`, so such a value reaches the spec only
//! approximately (U+FFFD for its bad bytes). berthd writes the exact
//! entries to `<bundle>/raw-env` and the shim sets them over the
//! approximations just before the container's (and every exec's) process
//! runs. The file is absent when every value is UTF-8.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The file's name in the bundle.
pub const FILE_NAME: &str = "raw-env";

/// Where the file of `bundle` is.
pub fn path(bundle: &Path) -> PathBuf {
    bundle.join(FILE_NAME)
}

/// `KEY=value` entries, each followed by NUL, as `/proc/<pid>/environ`
/// has them. Entries hold no NUL: berthd refuses such envs.
pub fn encode(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        out.extend_from_slice(entry);
        out.push(0);
    }
    out
}

/// The entries of a file [`encode`] wrote, split into key and value; an
/// entry without `=` is skipped, as it sets nothing.
pub fn decode(bytes: &[u8]) -> Vec<(OsString, OsString)> {
    bytes
        .split(|byte| *byte == 0)
        .filter_map(|entry| {
            let at = entry.iter().position(|byte| *byte == b'=')?;
            let key = OsString::from_vec(entry[..at].to_vec());
            let value = OsString::from_vec(entry[at + 1..].to_vec());
            Some((key, value))
        })
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_a_round_trip_byte_for_byte() {
        let entries = vec![b"BIN=a\xff\xfe=z".to_vec(), b"EMPTY=".to_vec()];
        let decoded = decode(&encode(&entries));
        assert_eq!(
            decoded,
            [
                (
                    OsString::from("BIN"),
                    OsString::from_vec(b"a\xff\xfe=z".to_vec())
                ),
                (OsString::from("EMPTY"), OsString::new()),
            ]
        );
    }

    #[test]
    fn entries_without_a_key_are_skipped() {
        assert!(decode(b"noequals\0=x\0\0").is_empty());
    }
}
