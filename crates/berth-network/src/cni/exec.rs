//! Running one plugin binary with the CNI environment/stdin protocol.

use std::ffi::OsString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::statfs::{statfs, NSFS_MAGIC};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::error::{CniCommand, CniError};
use super::result::plugin_failure;

/// How often, and how long apart, a spawn that fails with `ETXTBSY` is retried.
///
/// A plugin binary that was just written (a package upgrade, or a test) can
/// still be open for writing in a child another thread forked before its
/// `exec`; the kernel then refuses to execute it for a moment.
const SPAWN_RETRIES: u32 = 10;
const SPAWN_RETRY_DELAY: Duration = Duration::from_millis(20);

/// One call of one plugin.
#[derive(Debug)]
pub(crate) struct Invocation<'a> {
    pub command: CniCommand,
    /// The plugin's `type`, the name of its binary.
    pub plugin_type: &'a str,
    pub container_id: &'a str,
    /// `CNI_NETNS`; empty when the namespace is gone (DEL only).
    pub netns: OsString,
    pub ifname: &'a str,
    pub cni_args: &'a str,
    /// The JSON written to the plugin's stdin.
    pub stdin: Vec<u8>,
}

/// Finds the plugin's binary: the first executable file named `plugin_type`
/// in `bin_dirs`, in order.
pub fn find_plugin(bin_dirs: &[PathBuf], plugin_type: &str) -> Result<PathBuf, CniError> {
    // A type is a file name, never a path: a config must not run `../../x`.
    let is_plain_name = !plugin_type.is_empty()
        && !plugin_type.contains('/')
        && plugin_type != "."
        && plugin_type != "..";
    if is_plain_name {
        for dir in bin_dirs {
            let candidate = dir.join(plugin_type);
            let executable = std::fs::metadata(&candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if executable {
                return Ok(candidate);
            }
        }
    }
    Err(CniError::PluginNotFound {
        plugin: plugin_type.to_string(),
        dirs: join_paths(bin_dirs).to_string_lossy().into_owned(),
    })
}

/// `CNI_PATH`: the bin directories joined by `:`.
pub fn join_paths(dirs: &[PathBuf]) -> OsString {
    let mut joined = OsString::new();
    for (i, dir) in dirs.iter().enumerate() {
        if i > 0 {
            joined.push(":");
        }
        joined.push(dir.as_os_str());
    }
    joined
}

/// Runs a plugin to completion and returns its stdout.
///
/// The plugin inherits berthd's environment plus the `CNI_*` variables, runs
/// in its own process group, and is killed with that group when it takes
/// longer than `timeout`. A non-zero exit becomes
/// [`CniError::PluginFailed`] carrying the plugin's CNI error object.
pub(crate) async fn run_plugin(
    bin_dirs: &[PathBuf],
    invocation: &Invocation<'_>,
    timeout: Duration,
) -> Result<Vec<u8>, CniError> {
    let path = find_plugin(bin_dirs, invocation.plugin_type)?;
    let mut command = Command::new(&path);
    command
        .env("CNI_COMMAND", invocation.command.as_str())
        .env("CNI_CONTAINERID", invocation.container_id)
        .env("CNI_NETNS", &invocation.netns)
        .env("CNI_IFNAME", invocation.ifname)
        .env("CNI_ARGS", invocation.cni_args)
        .env("CNI_PATH", join_paths(bin_dirs))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);

    let started = Instant::now();
    let mut child = spawn_retrying(&mut command, &path).await?;
    let plugin = invocation.plugin_type.to_string();
    let io_err = |source: io::Error| CniError::PluginIo {
        plugin: plugin.clone(),
        command: invocation.command,
        source,
    };

    let outcome = tokio::time::timeout(timeout, communicate(&mut child, &invocation.stdin)).await;
    let (status, stdout, stderr) = match outcome {
        Ok(result) => result.map_err(io_err)?,
        Err(_elapsed) => {
            kill_group(&mut child).await;
            return Err(CniError::Timeout {
                plugin,
                command: invocation.command,
                timeout,
            });
        }
    };

    tracing::debug!(
        plugin = invocation.plugin_type,
        command = %invocation.command,
        container_id = invocation.container_id,
        elapsed_ms = started.elapsed().as_millis() as u64,
        status = ?status.code(),
        "CNI plugin finished"
    );
    if !stderr.is_empty() {
        tracing::debug!(
            plugin = invocation.plugin_type,
            stderr = %String::from_utf8_lossy(&stderr).trim(),
            "CNI plugin stderr"
        );
    }
    if status.success() {
        Ok(stdout)
    } else {
        Err(CniError::PluginFailed {
            plugin,
            command: invocation.command,
            failure: plugin_failure(status.code(), &stdout, &stderr),
        })
    }
}

async fn spawn_retrying(command: &mut Command, path: &Path) -> Result<Child, CniError> {
    let mut attempt = 0;
    loop {
        match command.spawn() {
            Ok(child) => return Ok(child),
            Err(err)
                if err.raw_os_error() == Some(nix::libc::ETXTBSY) && attempt < SPAWN_RETRIES =>
            {
                attempt += 1;
                tokio::time::sleep(SPAWN_RETRY_DELAY).await;
            }
            Err(err) => {
                return Err(CniError::Spawn {
                    path: path.to_path_buf(),
                    source: err,
                })
            }
        }
    }
}

/// Feeds stdin, collects stdout and stderr, and waits for the exit, all at
/// once so that neither side blocks on a full pipe.
async fn communicate(
    child: &mut Child,
    input: &[u8],
) -> io::Result<(ExitStatus, Vec<u8>, Vec<u8>)> {
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            match stdin.write_all(input).await {
                // A plugin that does not need its config may exit unread.
                Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {}
                other => other?,
            }
            // Dropping stdin closes it: the plugin sees end of input.
        }
        Ok::<_, io::Error>(())
    };
    let read_out = read_all(stdout);
    let read_err = read_all(stderr);
    let (written, out, err, status) = tokio::join!(write, read_out, read_err, child.wait());
    written?;
    Ok((status?, out?, err?))
}

async fn read_all<R: tokio::io::AsyncRead + Unpin>(pipe: Option<R>) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if let Some(mut pipe) = pipe {
        pipe.read_to_end(&mut buf).await?;
    }
    Ok(buf)
}

/// Kills the plugin's whole process group (it was made leader with
/// `process_group(0)`), then reaps the plugin.
async fn kill_group(child: &mut Child) {
    if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
        if let Err(err) = killpg(Pid::from_raw(pid), Signal::SIGKILL) {
            tracing::debug!(pid, %err, "killing CNI plugin process group");
        }
    }
    if let Err(err) = child.kill().await {
        tracing::debug!(%err, "reaping killed CNI plugin");
    }
}

/// `CNI_NETNS` for DEL: the path while it is a namespace, empty otherwise.
///
/// Empty when the path is gone, or is no longer an `nsfs` mount (a pin file
/// left behind by a reboot or an unmount): plugins such as `bridge` fail DEL
/// on a path that is not a namespace, but with an empty `CNI_NETNS` they skip
/// the namespace and still release what lives outside it (IP allocations,
/// iptables rules). When the check itself fails for another reason (say
/// `EACCES`), the path is passed and the plugin decides.
pub fn netns_env(netns: &Path) -> OsString {
    if netns.as_os_str().is_empty() {
        return OsString::new();
    }
    match statfs(netns) {
        Ok(fs) if fs.filesystem_type() != NSFS_MAGIC => OsString::new(),
        Err(Errno::ENOENT | Errno::ENOTDIR) => OsString::new(),
        Ok(_) | Err(_) => netns.as_os_str().to_os_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cni_path_joins_with_colons() {
        let dirs = vec![PathBuf::from("/a"), PathBuf::from("/b/c")];
        assert_eq!(join_paths(&dirs), "/a:/b/c");
        assert_eq!(join_paths(&[]), "");
    }

    #[test]
    fn find_plugin_searches_dirs_in_order() {
        let first = tempfile::tempdir().unwrap();
        let second = tempfile::tempdir().unwrap();
        let write = |dir: &Path, name: &str, mode: u32| {
            let p = dir.join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(first.path(), "both", 0o755);
        write(second.path(), "both", 0o755);
        write(first.path(), "noexec", 0o644);
        write(second.path(), "noexec", 0o755);
        std::fs::create_dir(first.path().join("dir")).unwrap();
        let dirs = vec![first.path().to_path_buf(), second.path().to_path_buf()];

        assert_eq!(
            find_plugin(&dirs, "both").unwrap(),
            first.path().join("both")
        );
        assert_eq!(
            find_plugin(&dirs, "noexec").unwrap(),
            second.path().join("noexec")
        );
        let err = find_plugin(&dirs, "dir").unwrap_err().to_string();
        assert!(err.contains("\"dir\" not found"), "{err}");
        assert!(err.contains(&first.path().display().to_string()), "{err}");
        assert!(find_plugin(&dirs, "../both").is_err());
        assert!(find_plugin(&dirs, "").is_err());
    }

    #[test]
    fn netns_env_is_empty_unless_the_path_is_a_namespace() {
        let netns = Path::new("/proc/self/ns/net");
        assert_eq!(netns_env(netns), netns.as_os_str());
        let dir = tempfile::tempdir().unwrap();
        let pin = dir.path().join("net");
        std::fs::write(&pin, "").unwrap();
        assert_eq!(netns_env(&pin), "", "a pin file that is not mounted");
        assert_eq!(netns_env(&dir.path().join("gone")), "");
        assert_eq!(netns_env(&pin.join("below-a-file")), "");
        assert_eq!(netns_env(Path::new("")), "");
    }
}
