//! Finding CNI network configs, the way libcni does: files ending in
//! `.conf`, `.conflist` or `.json` in the config directory, in name order.

use std::io;
use std::path::{Path, PathBuf};

const CONFIG_EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];

/// The network config files in `dir`, sorted by name. A missing directory
/// holds none.
pub fn network_config_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let is_config = path
            .extension()
            .and_then(|ext| ext.to_str())
            .is_some_and(|ext| CONFIG_EXTENSIONS.contains(&ext));
        if is_config && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_only_config_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "20-b.conflist",
            "10-a.conf",
            "README",
            "99-c.json",
            "x.conf.bak",
        ] {
            std::fs::write(dir.path().join(name), "{}").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.conf")).unwrap();
        let names: Vec<_> = network_config_files(dir.path())
            .unwrap()
            .into_iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["10-a.conf", "20-b.conflist", "99-c.json"]);
    }

    #[test]
    fn missing_dir_has_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(network_config_files(&dir.path().join("nope"))
            .unwrap()
            .is_empty());
    }
}
