//! The container's first process: its arguments, environment and working
//! directory, merged from the CRI config and the image as kubelet and
//! containerd (and before them Docker) do.

use std::path::PathBuf;

use cri_api::v1::ContainerConfig;

use crate::error::SpecError;
use crate::image::ImageConfigView;

/// `PATH` when neither the image nor the config sets one (containerd's and
/// runc's default).
pub const DEFAULT_PATH_ENV: &str =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The process's argv.
///
/// The rules are Docker's, which kubelet documents for `command`/`args`:
/// - `command` replaces the image ENTRYPOINT, and then the image CMD is
///   dropped too: a new entrypoint would not understand the old arguments;
/// - `args` alone replace the image CMD and keep its ENTRYPOINT;
/// - neither: ENTRYPOINT followed by CMD.
///
/// An ENTRYPOINT of `[""]` is how an image says "no entrypoint". Nothing to
/// run at all is an error, rather than a spec that fails at start.
pub fn process_args(
    config: &ContainerConfig,
    image: &ImageConfigView,
) -> Result<Vec<String>, SpecError> {
    let argv: Vec<String> = if !config.command.is_empty() {
        config.command.iter().chain(&config.args).cloned().collect()
    } else {
        let entrypoint: &[String] = match image.entrypoint.as_slice() {
            [only] if only.is_empty() => &[],
            entrypoint => entrypoint,
        };
        let args = if config.args.is_empty() {
            &image.cmd
        } else {
            &config.args
        };
        entrypoint.iter().chain(args).cloned().collect()
    };
    if argv.is_empty() {
        return Err(SpecError::NoCommand);
    }
    Ok(argv)
}

/// The process's environment, lowest precedence first: the default `PATH`,
/// `TERM=xterm` for a tty, `HOSTNAME`, the image's ENV, then the config's
/// envs. A later value for a key replaces the earlier one in place, so the
/// config wins per key and the order stays stable.
///
/// The spec's env is JSON text: a config value that is not UTF-8 appears
/// here with U+FFFD in place of its bad bytes, and [`raw_env`] carries the
/// exact bytes for the shim to set instead.
pub fn process_env(
    config: &ContainerConfig,
    image: &ImageConfigView,
    hostname: &str,
) -> Vec<String> {
    let mut env = vec![DEFAULT_PATH_ENV.to_string()];
    if config.tty {
        env = merge_env(env, ["TERM=xterm".to_string()]);
    }
    env = merge_env(env, [format!("HOSTNAME={hostname}")]);
    env = merge_env(env, image.env.iter().cloned());
    merge_env(
        env,
        config
            .envs
            .iter()
            .map(|kv| format!("{}={}", kv.key, String::from_utf8_lossy(&kv.value))),
    )
}

/// The config's envs whose final value is not UTF-8, as `KEY=value` bytes
/// in config order: what [`process_env`] could only approximate. A key set
/// again later with a UTF-8 value is not here, as that value wins.
pub fn raw_env(config: &ContainerConfig) -> Vec<Vec<u8>> {
    let mut raw: Vec<Vec<u8>> = Vec::new();
    for (index, kv) in config.envs.iter().enumerate() {
        let overridden = config.envs[index + 1..]
            .iter()
            .any(|later| later.key == kv.key);
        if overridden || std::str::from_utf8(&kv.value).is_ok() {
            continue;
        }
        let mut entry = Vec::with_capacity(kv.key.len() + 1 + kv.value.len());
        entry.extend_from_slice(kv.key.as_bytes());
        entry.push(b'=');
        entry.extend_from_slice(&kv.value);
        raw.push(entry);
    }
    raw
}

/// Applies `overrides` to `base`: `KEY=value` replaces an existing `KEY` in
/// place or is appended; a bare `KEY` (no `=`) removes it, as in Docker.
pub fn merge_env(base: Vec<String>, overrides: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut env: Vec<Option<String>> = base.into_iter().map(Some).collect();
    let key_of = |entry: &str| entry.split('=').next().unwrap_or_default().to_string();
    for entry in overrides {
        let key = key_of(&entry);
        let existing = env
            .iter()
            .position(|e| e.as_deref().is_some_and(|e| key_of(e) == key));
        match (entry.contains('='), existing) {
            (true, Some(index)) => env[index] = Some(entry),
            (true, None) => env.push(Some(entry)),
            (false, Some(index)) => env[index] = None,
            (false, None) => {}
        }
    }
    env.into_iter().flatten().collect()
}

/// The working directory: the config's, else the image's WORKDIR, else `/`.
/// It must be absolute: the OCI spec requires it, and a relative one would
/// only fail later, inside the runtime, with a vaguer message.
pub fn working_dir(
    config: &ContainerConfig,
    image: &ImageConfigView,
) -> Result<PathBuf, SpecError> {
    let dir = [&config.working_dir, &image.working_dir]
        .into_iter()
        .find(|dir| !dir.is_empty())
        .map_or("/", |dir| dir.as_str());
    if !dir.starts_with('/') {
        return Err(SpecError::RelativeWorkingDir(dir.to_string()));
    }
    Ok(PathBuf::from(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri_api::v1::KeyValue;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn image() -> ImageConfigView {
        ImageConfigView {
            entrypoint: strings(&["/entry", "--flag"]),
            cmd: strings(&["serve"]),
            ..Default::default()
        }
    }

    fn config(command: &[&str], args: &[&str]) -> ContainerConfig {
        ContainerConfig {
            command: strings(command),
            args: strings(args),
            ..Default::default()
        }
    }

    #[test]
    fn neither_command_nor_args_runs_entrypoint_and_cmd() {
        let argv = process_args(&config(&[], &[]), &image()).unwrap();
        assert_eq!(argv, ["/entry", "--flag", "serve"]);
    }

    #[test]
    fn command_replaces_entrypoint_and_drops_cmd() {
        let argv = process_args(&config(&["sh"], &[]), &image()).unwrap();
        assert_eq!(argv, ["sh"]);
    }

    #[test]
    fn command_and_args_ignore_the_image() {
        let argv = process_args(&config(&["sh", "-c"], &["echo hi"]), &image()).unwrap();
        assert_eq!(argv, ["sh", "-c", "echo hi"]);
    }

    #[test]
    fn args_replace_cmd_and_keep_entrypoint() {
        let argv = process_args(&config(&[], &["run", "--fast"]), &image()).unwrap();
        assert_eq!(argv, ["/entry", "--flag", "run", "--fast"]);
    }

    #[test]
    fn empty_string_entrypoint_means_none() {
        let image = ImageConfigView {
            entrypoint: strings(&[""]),
            cmd: strings(&["sh"]),
            ..Default::default()
        };
        assert_eq!(process_args(&config(&[], &[]), &image).unwrap(), ["sh"]);
    }

    #[test]
    fn nothing_to_run_is_an_error() {
        let err = process_args(&config(&[], &[]), &ImageConfigView::default()).unwrap_err();
        assert!(matches!(err, SpecError::NoCommand));
    }

    #[test]
    fn env_layers_default_path_hostname_image_and_config() {
        let image = ImageConfigView {
            env: strings(&["PATH=/image/bin", "A=image", "B=image"]),
            ..Default::default()
        };
        let mut config = config(&[], &[]);
        config.envs = vec![
            KeyValue {
                key: "B".into(),
                value: "config".into(),
            },
            KeyValue {
                key: "C".into(),
                value: "x=y".into(),
            },
        ];
        let env = process_env(&config, &image, "web-0");
        assert_eq!(
            env,
            [
                "PATH=/image/bin",
                "HOSTNAME=web-0",
                "A=image",
                "B=config",
                "C=x=y"
            ]
        );
    }

    #[test]
    fn env_values_that_are_not_utf8_go_through_raw_env() {
        let mut config = config(&[], &[]);
        config.envs = vec![
            KeyValue {
                key: "BIN".into(),
                value: vec![b'a', 0xff, 0xfe, b'z'],
            },
            KeyValue {
                key: "TEXT".into(),
                value: "plain".into(),
            },
            KeyValue {
                key: "LATER".into(),
                value: vec![0xff],
            },
            KeyValue {
                key: "LATER".into(),
                value: "fixed".into(),
            },
        ];
        let env = process_env(&config, &ImageConfigView::default(), "h");
        assert!(
            env.contains(&"BIN=a\u{fffd}\u{fffd}z".to_string()),
            "{env:?}"
        );
        assert!(env.contains(&"TEXT=plain".to_string()), "{env:?}");
        assert!(env.contains(&"LATER=fixed".to_string()), "{env:?}");
        assert_eq!(raw_env(&config), [b"BIN=a\xff\xfez".to_vec()]);
    }

    #[test]
    fn utf8_envs_need_no_raw_env() {
        let mut config = config(&[], &[]);
        config.envs = vec![KeyValue {
            key: "A".into(),
            value: "ünïcode".into(),
        }];
        assert!(raw_env(&config).is_empty());
    }

    #[test]
    fn env_has_default_path_and_term_for_tty() {
        let mut config = config(&[], &[]);
        config.tty = true;
        let env = process_env(&config, &ImageConfigView::default(), "h");
        assert_eq!(env, [DEFAULT_PATH_ENV, "TERM=xterm", "HOSTNAME=h"]);
    }

    #[test]
    fn merge_env_unsets_bare_keys() {
        let merged = merge_env(strings(&["A=1", "B=2"]), strings(&["A", "C"]));
        assert_eq!(merged, ["B=2"]);
    }

    #[test]
    fn merge_env_keeps_the_last_value_of_repeated_keys() {
        let merged = merge_env(Vec::new(), strings(&["A=1", "A=2"]));
        assert_eq!(merged, ["A=2"]);
    }

    #[test]
    fn working_dir_prefers_config_then_image_then_root() {
        let image = ImageConfigView {
            working_dir: "/srv".into(),
            ..Default::default()
        };
        let mut config = config(&[], &[]);
        assert_eq!(
            working_dir(&config, &ImageConfigView::default()).unwrap(),
            PathBuf::from("/")
        );
        assert_eq!(working_dir(&config, &image).unwrap(), PathBuf::from("/srv"));
        config.working_dir = "/data".into();
        assert_eq!(
            working_dir(&config, &image).unwrap(),
            PathBuf::from("/data")
        );
    }

    #[test]
    fn relative_working_dir_is_an_error() {
        let mut config = config(&[], &[]);
        config.working_dir = "data".into();
        let err = working_dir(&config, &ImageConfigView::default()).unwrap_err();
        assert!(matches!(err, SpecError::RelativeWorkingDir(dir) if dir == "data"));
    }
}
