//! The registry settings pulls use, built from the `[registry]` table and
//! the host directory it names. Start-up and a reload both call
//! [`registry_hosts`], so a broken entry is reported the same way by both,
//! and a reload that fails keeps the settings in use.

use std::path::Path;

use berth_image::hosts::{HostsError, Mirrors, RegistryHosts};

use crate::config::Config;

/// Reads `registry.config_path` (when set and present) and checks every
/// mirror; errors name the file and key, or the mirror URL.
pub fn registry_hosts(config: &Config) -> Result<RegistryHosts, HostsError> {
    let registry = &config.registry;
    let mirrors = registry
        .mirrors
        .iter()
        .map(|(host, mirror)| {
            let mirrors = Mirrors {
                endpoints: mirror.endpoints.clone(),
                fallback_to_upstream: mirror.fallback_to_upstream,
            };
            (host.clone(), mirrors)
        })
        .collect();
    let config_path = config_dir(&registry.config_path);
    let hosts = RegistryHosts::load(registry.insecure_hosts.clone(), mirrors, config_path)?;
    tracing::info!(
        config_path = %registry.config_path.display(),
        host_dirs = ?hosts.host_dirs.keys().collect::<Vec<_>>(),
        mirrored = ?hosts.mirrors.keys().collect::<Vec<_>>(),
        "registry settings loaded"
    );
    Ok(hosts)
}

/// The host directory, unless it is off (empty) or absent (containerd, too,
/// takes a missing directory as no host configuration).
fn config_dir(path: &Path) -> Option<&Path> {
    if path.as_os_str().is_empty() {
        return None;
    }
    match std::fs::symlink_metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        _ => Some(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MirrorConfig;

    #[test]
    fn absent_or_off_config_path_configures_nothing() {
        let mut config = Config::default();
        config.registry.config_path = "/nonexistent/berth/certs.d".into();
        assert!(registry_hosts(&config).unwrap().host_dirs.is_empty());
        config.registry.config_path = "".into();
        assert!(registry_hosts(&config).unwrap().host_dirs.is_empty());
    }

    #[test]
    fn a_broken_hosts_toml_names_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("docker.io")).unwrap();
        let file = dir.path().join("docker.io/hosts.toml");
        std::fs::write(&file, "[host.\"https://m\"]\ncapabilities = [\"pul\"]\n").unwrap();
        let mut config = Config::default();
        config.registry.config_path = dir.path().to_path_buf();
        let err = registry_hosts(&config).unwrap_err().to_string();
        assert!(err.contains(&file.display().to_string()), "{err}");
        assert!(err.contains("host.\"https://m\".capabilities"), "{err}");

        std::fs::write(&file, "[host.\"https://m/prefix\"]\n").unwrap();
        let hosts = registry_hosts(&config).unwrap();
        assert_eq!(
            hosts.endpoints("docker.io")[0].url("a", "manifests/b"),
            "https://m/prefix/v2/a/manifests/b"
        );
    }

    #[test]
    fn a_host_in_both_places_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("docker.io")).unwrap();
        let mut config = Config::default();
        config.registry.config_path = dir.path().to_path_buf();
        config.registry.mirrors.insert(
            "docker.io".into(),
            MirrorConfig {
                endpoints: vec!["https://m".into()],
                fallback_to_upstream: true,
            },
        );
        let err = registry_hosts(&config).unwrap_err().to_string();
        assert!(
            err.contains("docker.io") && err.contains("keep one"),
            "{err}"
        );
    }
}
