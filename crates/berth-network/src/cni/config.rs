//! Loading network configuration lists from a CNI configuration directory.
//!
//! Follows libcni: files ending in `.conf`, `.conflist` or `.json` are
//! candidates, sorted by name, and the first one is the pod network. A single
//! plugin configuration is wrapped into a list of one, so the rest of the
//! client only deals with lists.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::error::CniError;

/// File name extensions libcni accepts in a configuration directory.
pub const CONFIG_EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];

/// A network configuration list: named plugins run in order for ADD and in
/// reverse for DEL.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    /// The network name, injected into every plugin's configuration.
    pub name: String,
    /// The CNI spec version, injected into every plugin's configuration.
    pub cni_version: String,
    /// The plugins, in ADD order. Never empty for a loaded list.
    pub plugins: Vec<PluginConfig>,
    /// The file the list was loaded from (empty for built-in lists).
    pub source: PathBuf,
}

/// One plugin's configuration inside a list.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    /// The plugin's `type`: the name of its binary.
    pub plugin_type: String,
    /// The whole configuration object as written in the file.
    pub config: Map<String, Value>,
}

impl PluginConfig {
    /// Whether the plugin declares `capability` as `true` in its
    /// `capabilities` map, so the runtime passes it in `runtimeConfig`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.config
            .get("capabilities")
            .and_then(|caps| caps.get(capability))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

impl NetworkConfigList {
    /// Parses a configuration file's contents.
    ///
    /// A `.conflist` must be a list (`plugins`). Any other file is a list when
    /// it has a `plugins` key and a single plugin configuration otherwise; a
    /// single plugin is wrapped into a list with the same name and version.
    /// `source` only names the file in errors and in [`Self::source`].
    pub fn from_slice(bytes: &[u8], source: &Path) -> Result<Self, CniError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|err| CniError::ParseConfig {
            path: source.to_path_buf(),
            source: err,
        })?;
        let invalid = |reason: &str| CniError::InvalidConfig {
            path: source.to_path_buf(),
            reason: reason.to_string(),
        };
        let Value::Object(object) = value else {
            return Err(invalid("not a JSON object"));
        };
        let is_conflist = source.extension().is_some_and(|ext| ext == "conflist");
        let name = non_empty_string(&object, "name").ok_or_else(|| invalid("missing \"name\""))?;
        let cni_version = non_empty_string(&object, "cniVersion")
            .ok_or_else(|| invalid("missing \"cniVersion\""))?;

        let plugins = match object.get("plugins") {
            Some(Value::Array(items)) => {
                if items.is_empty() {
                    return Err(invalid("\"plugins\" is empty"));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| {
                        plugin_config(item)
                            .map_err(|reason| invalid(&format!("plugins[{index}]: {reason}")))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            Some(_) => return Err(invalid("\"plugins\" is not a list")),
            None if is_conflist => return Err(invalid("missing \"plugins\"")),
            None => vec![plugin_config(&Value::Object(object.clone())).map_err(|r| invalid(&r))?],
        };

        Ok(NetworkConfigList {
            name,
            cni_version,
            plugins,
            source: source.to_path_buf(),
        })
    }
}

fn non_empty_string(object: &Map<String, Value>, key: &str) -> Option<String> {
    object
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

fn plugin_config(value: &Value) -> Result<PluginConfig, String> {
    let Value::Object(config) = value else {
        return Err("not a JSON object".to_string());
    };
    let plugin_type =
        non_empty_string(config, "type").ok_or_else(|| "missing \"type\"".to_string())?;
    Ok(PluginConfig {
        plugin_type,
        config: config.clone(),
    })
}

/// The candidate configuration files of `conf_dir`, sorted by name. A
/// missing directory holds none.
pub fn config_files(conf_dir: &Path) -> Result<Vec<PathBuf>, CniError> {
    let read_err = |err: io::Error| CniError::ReadConfDir {
        dir: conf_dir.to_path_buf(),
        source: err,
    };
    let entries = match fs::read_dir(conf_dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(read_err(err)),
    };
    let mut files: Vec<(OsString, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_err)?;
        let path = entry.path();
        let has_config_ext = path
            .extension()
            .and_then(|ext| ext.to_str())
            .is_some_and(|ext| CONFIG_EXTENSIONS.contains(&ext));
        // Follow symlinks: configs are often links into a package's directory.
        if has_config_ext && path.is_file() {
            files.push((entry.file_name(), path));
        }
    }
    files.sort();
    Ok(files.into_iter().map(|(_, path)| path).collect())
}

/// Loads the pod network: the first configuration file of `conf_dir` by name.
///
/// Returns `Ok(None)` when the directory does not exist or holds no
/// configuration file (kubelet then reports the network as not ready). An
/// invalid first file is an error naming it; later files are not tried, as
/// in libcni.
pub fn load_network(conf_dir: &Path) -> Result<Option<NetworkConfigList>, CniError> {
    let Some(first) = config_files(conf_dir)?.into_iter().next() else {
        return Ok(None);
    };
    let bytes = fs::read(&first).map_err(|err| CniError::ReadConfig {
        path: first.clone(),
        source: err,
    })?;
    NetworkConfigList::from_slice(&bytes, &first).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str, file: &str) -> Result<NetworkConfigList, CniError> {
        NetworkConfigList::from_slice(json.as_bytes(), Path::new(file))
    }

    #[test]
    fn conflist_keeps_plugins_in_order() {
        let list = parse(
            r#"{"cniVersion":"1.0.0","name":"pods","plugins":[
                {"type":"bridge","bridge":"cni0"},
                {"type":"portmap","capabilities":{"portMappings":true}}]}"#,
            "/etc/cni/net.d/10-pods.conflist",
        )
        .unwrap();
        assert_eq!(list.name, "pods");
        assert_eq!(list.cni_version, "1.0.0");
        let types: Vec<_> = list
            .plugins
            .iter()
            .map(|p| p.plugin_type.as_str())
            .collect();
        assert_eq!(types, ["bridge", "portmap"]);
        assert_eq!(list.plugins[0].config["bridge"], "cni0");
        assert!(list.plugins[1].has_capability("portMappings"));
        assert!(!list.plugins[0].has_capability("portMappings"));
        assert_eq!(list.source, Path::new("/etc/cni/net.d/10-pods.conflist"));
    }

    #[test]
    fn single_conf_is_wrapped_into_a_list() {
        let list = parse(
            r#"{"cniVersion":"0.4.0","name":"single","type":"bridge","ipam":{"type":"host-local"}}"#,
            "10-single.conf",
        )
        .unwrap();
        assert_eq!(list.name, "single");
        assert_eq!(list.cni_version, "0.4.0");
        assert_eq!(list.plugins.len(), 1);
        assert_eq!(list.plugins[0].plugin_type, "bridge");
        assert_eq!(list.plugins[0].config["ipam"]["type"], "host-local");
    }

    #[test]
    fn json_file_with_plugins_is_a_list() {
        let list = parse(
            r#"{"cniVersion":"1.0.0","name":"j","plugins":[{"type":"ptp"}]}"#,
            "a.json",
        )
        .unwrap();
        assert_eq!(list.plugins[0].plugin_type, "ptp");
    }

    #[test]
    fn invalid_configs_name_the_file_and_the_problem() {
        let cases = [
            (
                r#"{"cniVersion":"1.0.0","plugins":[{"type":"a"}]}"#,
                "x.conflist",
                "\"name\"",
            ),
            (
                r#"{"name":"n","plugins":[{"type":"a"}]}"#,
                "x.conflist",
                "\"cniVersion\"",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[]}"#,
                "x.conflist",
                "empty",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","type":"a"}"#,
                "x.conflist",
                "missing \"plugins\"",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0","plugins":[{}]}"#,
                "x.conflist",
                "plugins[0]: missing \"type\"",
            ),
            (
                r#"{"name":"n","cniVersion":"1.0.0"}"#,
                "x.conf",
                "missing \"type\"",
            ),
            (r#"[1]"#, "x.conf", "not a JSON object"),
        ];
        for (json, file, want) in cases {
            let err = parse(json, file).unwrap_err().to_string();
            assert!(err.contains(file), "{err}");
            assert!(err.contains(want), "{err} should mention {want}");
        }
        let err = parse("{not json", "broken.conf").unwrap_err();
        assert!(matches!(err, CniError::ParseConfig { .. }));
        assert!(err.to_string().contains("broken.conf"));
    }

    #[test]
    fn load_network_takes_the_first_file_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| fs::write(dir.path().join(name), body).unwrap();
        write("README", "not a config");
        write(
            "99-last.conflist",
            r#"{"cniVersion":"1.0.0","name":"last","plugins":[{"type":"a"}]}"#,
        );
        write(
            "20-second.conf",
            r#"{"cniVersion":"1.0.0","name":"second","type":"b"}"#,
        );
        write(
            "10-first.json",
            r#"{"cniVersion":"1.0.0","name":"first","type":"c"}"#,
        );
        fs::create_dir(dir.path().join("00-dir.conf")).unwrap();

        assert!(config_files(&dir.path().join("missing"))
            .unwrap()
            .is_empty());
        let files = config_files(dir.path()).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["10-first.json", "20-second.conf", "99-last.conflist"]
        );

        let list = load_network(dir.path()).unwrap().unwrap();
        assert_eq!(list.name, "first");
        assert_eq!(list.source, dir.path().join("10-first.json"));
    }

    #[test]
    fn load_network_without_configs_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_network(dir.path()).unwrap().is_none());
        assert!(load_network(&dir.path().join("missing")).unwrap().is_none());
    }

    #[test]
    fn load_network_reports_an_invalid_first_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("10-bad.conflist"), "{}").unwrap();
        fs::write(
            dir.path().join("20-good.conflist"),
            r#"{"cniVersion":"1.0.0","name":"good","plugins":[{"type":"a"}]}"#,
        )
        .unwrap();
        let err = load_network(dir.path()).unwrap_err().to_string();
        assert!(err.contains("10-bad.conflist"), "{err}");
    }
}
