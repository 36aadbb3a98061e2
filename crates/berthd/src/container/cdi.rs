//! The CDI spec files on this node (`cdi.spec_dirs`), read when a container
//! asks for CDI devices: device plugins and DRA drivers write them at any
//! time, so they are read again for each such create, never cached.

use std::path::{Path, PathBuf};

use berth_spec::cdi::{self, CdiSpec};

/// Spec files larger than this are refused: a CDI spec is a few KiB.
const MAX_SPEC_BYTES: u64 = 4 << 20;

/// Every spec in `dirs`, in priority order (later dirs, and within a dir
/// later names, win), and the files that could not be used, each with why.
pub fn load_specs(dirs: &[PathBuf]) -> (Vec<CdiSpec>, Vec<String>) {
    let mut specs = Vec::new();
    let mut problems = Vec::new();
    for dir in dirs {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries.flatten().map(|entry| entry.path()).collect(),
            // A node without CDI devices has no such dir.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                problems.push(format!("{}: {err}", dir.display()));
                continue;
            }
        };
        files.sort();
        for file in files {
            let Some(json) = spec_format(&file) else {
                continue;
            };
            match read_spec(&file, json) {
                Ok(spec) => specs.push(spec),
                Err(reason) => {
                    tracing::warn!(file = %file.display(), %reason, "CDI spec skipped");
                    problems.push(format!("{}: {reason}", file.display()));
                }
            }
        }
    }
    (specs, problems)
}

/// `Some(true)` for `.json`, `Some(false)` for `.yaml`/`.yml`, else `None`.
fn spec_format(path: &Path) -> Option<bool> {
    match path.extension()?.to_str()? {
        "json" => Some(true),
        "yaml" | "yml" => Some(false),
        _ => None,
    }
}

fn read_spec(path: &Path, json: bool) -> Result<CdiSpec, String> {
    let file = std::fs::File::open(path).map_err(|err| err.to_string())?;
    use berth_spec::host::{read_regular, Regular};
    let bytes = match read_regular(file, MAX_SPEC_BYTES).map_err(|err| err.to_string())? {
        Regular::Read(bytes) => bytes,
        Regular::NotRegular => return Err("not a regular file".to_string()),
        Regular::TooLarge(size) => {
            return Err(format!("{size} bytes, over the cap of {MAX_SPEC_BYTES}"))
        }
    };
    cdi::parse_spec(&bytes, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_load_in_priority_order_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (etc, run) = (dir.path().join("etc"), dir.path().join("run"));
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            etc.join("a.yaml"),
            "cdiVersion: 0.6.0\nkind: v.com/c\ndevices: [{name: d, containerEdits: {env: [A=etc]}}]\n",
        )
        .unwrap();
        std::fs::write(
            run.join("b.json"),
            r#"{"cdiVersion":"0.6.0","kind":"v.com/c","devices":[{"name":"d","containerEdits":{"env":["A=run"]}}]}"#,
        )
        .unwrap();
        std::fs::write(run.join("broken.json"), "{").unwrap();
        std::fs::write(run.join("notes.txt"), "ignored").unwrap();
        let (specs, problems) = load_specs(&[etc, run, dir.path().join("missing")]);
        assert_eq!(specs.len(), 2);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("broken.json"), "{problems:?}");
        let edits = cdi::resolve(&specs, &["v.com/c=d".to_string()], &problems).unwrap();
        assert_eq!(edits.last().unwrap().1.env, ["A=run"]);
    }
}
