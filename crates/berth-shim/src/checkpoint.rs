//! Checkpoints with CRIU: the dump goes through libcontainer
//! (`Container::checkpoint`, which drives `criu swrk`).

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use libcontainer::container::{CheckpointOptions, Container};
use libcontainer::oci_spec::runtime::{LinuxNamespaceType, Spec};
use rust_criu::rust_criu_protobuf::rpc;

use crate::server::error_chain;

/// Dumps the container's processes into `images_dir` and leaves them
/// running (kubelet's checkpoint is a copy, not a migration). CRIU writes
/// `dump.log` and `stats-dump` into `work_dir`.
pub fn dump(container: &mut Container, images_dir: &Path, work_dir: &Path) -> Result<(), String> {
    let opts = CheckpointOptions {
        ext_unix_sk: false,
        file_locks: false,
        image_path: images_dir.to_path_buf(),
        leave_running: true,
        shell_job: false,
        tcp_established: false,
        work_path: Some(work_dir.to_path_buf()),
        // CRIU's own default for a dump: cgroup properties are saved, and
        // restore makes only the cgroups that are missing.
        manage_cgroups_mode: rust_criu::CgMode::SOFT,
        link_remap: false,
    };
    container.checkpoint(&opts).map_err(|err| {
        let mut message = format!("criu dump: {}", error_chain(&err));
        if let Some(reason) = criu_errors(&work_dir.join("dump.log")) {
            message.push_str(&format!(": {reason}"));
        }
        message
    })
}

/// CRIU's last error lines in `log` (at most three), joined: its own
/// account of why it failed, which libcontainer's error does not carry.
pub fn criu_errors(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    last_errors(&text)
}

fn last_errors(text: &str) -> Option<String> {
    let errors: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("Error (") || line.starts_with("Error"))
        .map(str::trim)
        .collect();
    let tail = &errors[errors.len().saturating_sub(3)..];
    (!tail.is_empty()).then(|| tail.join("; "))
}

/// What a restore works from.
pub struct RestoreInput<'a> {
    /// CRIU's images (the archive's `checkpoint/`).
    pub images_dir: &'a Path,
    /// Where CRIU writes `restore.log`.
    pub work_dir: &'a Path,
    /// The new container's bundle: its spec and rootfs.
    pub bundle: &'a Path,
    /// The placeholder init libcontainer created: its cgroups are the new
    /// container's, and it dies once the restored tree runs.
    pub placeholder: i32,
    /// The container's stdin, stdout and stderr ends (the pipes the shim
    /// reads); a dumped pipe at fd N is replaced by `stdio[N]`.
    pub stdio: &'a [OwnedFd; 3],
}

/// Restores the dumped process tree into the new container with `criu
/// swrk`, driven here rather than through rust-criu's `restore()`, which
/// cannot join namespaces, map the cgroup root, or tell the new pid. As
/// runc does: CRIU runs in the container's cgroups (so the tree lands
/// there), the tree is the shim's child (`rst_sibling`), bind mounts are
/// external and mapped to the new spec's sources, the pod's network and
/// (when shared) PID namespaces are the external ones the dump recorded,
/// its IPC and UTS namespaces are joined, and dumped pipes at fds 0-2 are
/// the new container's. Returns the restored init's pid.
pub fn restore(input: &RestoreInput<'_>) -> Result<i32, String> {
    let spec_path = input.bundle.join("config.json");
    let spec = Spec::load(&spec_path).map_err(|e| format!("{}: {e}", spec_path.display()))?;
    // Every fd CRIU inherits must be open without close-on-exec: dups are.
    let mut inherited: Vec<OwnedFd> = Vec::new();
    let mut keep = |fd: BorrowedFd<'_>| -> Result<i32, String> {
        let dup = nix::unistd::dup(fd).map_err(|e| format!("dup: {e}"))?;
        let raw = dup.as_raw_fd();
        inherited.push(dup);
        Ok(raw)
    };
    let mut opts = rpc::Criu_opts::new();
    let images =
        File::open(input.images_dir).map_err(|e| format!("{}: {e}", input.images_dir.display()))?;
    opts.set_images_dir_fd(keep(images.as_fd())?);
    let work =
        File::open(input.work_dir).map_err(|e| format!("{}: {e}", input.work_dir.display()))?;
    opts.set_work_dir_fd(keep(work.as_fd())?);
    opts.set_log_file(RESTORE_LOG.to_string());
    opts.set_log_level(4);
    let root = spec
        .root()
        .as_ref()
        .map(|r| r.path().clone())
        .unwrap_or_else(|| PathBuf::from("rootfs"));
    opts.set_root(input.bundle.join(root).to_string_lossy().into_owned());
    opts.set_rst_sibling(true);
    opts.set_manage_cgroups(true);
    opts.set_manage_cgroups_mode(rpc::Criu_cg_mode::SOFT);
    opts.set_orphan_pts_master(false);

    for (destination, source) in bind_mounts(&spec) {
        let mut m = rpc::Ext_mount_map::new();
        m.set_key(destination);
        m.set_val(source);
        opts.ext_mnt.push(m);
    }
    for (kind, path) in namespace_paths(&spec) {
        match kind {
            // the dump recorded these as external (libcontainer's dump)
            "net" | "pid" => {
                let ns = File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let mut fd = rpc::Inherit_fd::new();
                fd.set_fd(keep(ns.as_fd())?);
                fd.set_key(rust_criu::criu_ns_to_key(kind));
                opts.inherit_fd.push(fd);
            }
            "ipc" | "uts" => {
                let mut join = rpc::Join_namespace::new();
                join.set_ns(kind.to_string());
                join.set_ns_file(path.to_string_lossy().into_owned());
                opts.join_ns.push(join);
            }
            _ => {}
        }
    }
    let descriptors = std::fs::read(input.images_dir.join(DESCRIPTORS))
        .map_err(|e| format!("{DESCRIPTORS}: {e}"))?;
    let descriptors: Vec<String> =
        serde_json::from_slice(&descriptors).map_err(|e| format!("{DESCRIPTORS}: {e}"))?;
    for (n, key) in descriptors.iter().enumerate().take(3) {
        if key.starts_with("pipe:") {
            let mut fd = rpc::Inherit_fd::new();
            fd.set_fd(keep(input.stdio[n].as_fd())?);
            fd.set_key(key.clone());
            opts.inherit_fd.push(fd);
        }
    }
    let cgroups = cgroups_of(input.placeholder)?;
    for (controllers, path) in &cgroups {
        let mut root = rpc::Cgroup_root::new();
        if !controllers.is_empty() {
            root.set_ctrl(controllers.clone());
        }
        root.set_path(path.clone());
        opts.cg_root.push(root);
    }
    let procs: Vec<PathBuf> = cgroups
        .iter()
        .filter_map(|(controllers, path)| procs_file(controllers, path))
        .collect();
    let result = swrk_restore(opts, &procs);
    drop(inherited);
    result.map_err(|message| {
        let log = input.work_dir.join(RESTORE_LOG);
        match criu_errors(&log) {
            Some(reason) => format!(
                "criu restore: {message}: {reason} (CRIU's log: {})",
                log.display()
            ),
            None => format!("criu restore: {message}"),
        }
    })
}

/// libcontainer's dump writes where fds 0-2 pointed (`pipe:[ino]`,
/// `/dev/null`) here.
const DESCRIPTORS: &str = "descriptors.json";
/// CRIU's log of the restore, in the work dir.
pub const RESTORE_LOG: &str = "restore.log";

/// Bind mounts of the spec: destination to source.
fn bind_mounts(spec: &Spec) -> Vec<(String, String)> {
    spec.mounts()
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|m| {
            m.typ().as_deref() == Some("bind")
                || m.options()
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .any(|o| o == "bind" || o == "rbind")
        })
        .filter_map(|m| {
            let source = m.source().as_ref()?;
            Some((
                m.destination().to_string_lossy().into_owned(),
                source.to_string_lossy().into_owned(),
            ))
        })
        .collect()
}

/// The namespaces the spec joins by path, by CRIU's names.
fn namespace_paths(spec: &Spec) -> Vec<(&'static str, PathBuf)> {
    let namespaces = spec
        .linux()
        .as_ref()
        .and_then(|l| l.namespaces().clone())
        .unwrap_or_default();
    namespaces
        .iter()
        .filter_map(|ns| {
            let kind = match ns.typ() {
                LinuxNamespaceType::Network => "net",
                LinuxNamespaceType::Pid => "pid",
                LinuxNamespaceType::Ipc => "ipc",
                LinuxNamespaceType::Uts => "uts",
                _ => return None,
            };
            Some((kind, ns.path().clone()?))
        })
        .collect()
}

/// `/proc/<pid>/cgroup` as (controllers, path): `("", "/a.slice/b.scope")`
/// on cgroup v2.
fn cgroups_of(pid: i32) -> Result<Vec<(String, String)>, String> {
    let path = format!("/proc/{pid}/cgroup");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    Ok(parse_cgroups(&text))
}

fn parse_cgroups(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let _id = fields.next()?;
            let controllers = fields.next()?.to_string();
            let path = fields.next()?.to_string();
            Some((controllers, path))
        })
        .collect()
}

/// The `cgroup.procs` of a `/proc/<pid>/cgroup` entry.
fn procs_file(controllers: &str, path: &str) -> Option<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mount = if controllers.is_empty() {
        if root.join("cgroup.controllers").exists() {
            root.to_path_buf()
        } else {
            root.join("unified")
        }
    } else {
        root.join(controllers.strip_prefix("name=").unwrap_or(controllers))
    };
    let file = mount
        .join(path.trim_start_matches('/'))
        .join("cgroup.procs");
    file.exists().then_some(file)
}

/// One RESTORE request over `criu swrk`: CRIU is put into the cgroups of
/// `procs` before it gets the request. Returns the restored init's pid.
fn swrk_restore(opts: rpc::Criu_opts, procs: &[PathBuf]) -> Result<i32, String> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use protobuf::Message;

    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| format!("socketpair: {e}"))?;
    // CRIU's end must survive exec: an fd without close-on-exec.
    let theirs = nix::unistd::dup(&theirs).map_err(|e| format!("dup: {e}"))?;
    let mut criu = std::process::Command::new("criu")
        .arg("swrk")
        .arg(theirs.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run criu: {e}"))?;
    drop(theirs);
    let result = (|| {
        for file in procs {
            std::fs::write(file, criu.id().to_string())
                .map_err(|e| format!("putting CRIU into {}: {e}", file.display()))?;
        }
        let mut request = rpc::Criu_req::new();
        request.set_type(rpc::Criu_req_type::RESTORE);
        request.opts = protobuf::MessageField::some(opts);
        let bytes = request
            .write_to_bytes()
            .map_err(|e| format!("encoding the request: {e}"))?;
        nix::unistd::write(&ours, &bytes).map_err(|e| format!("sending the request: {e}"))?;
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let n = nix::unistd::read(&ours, &mut buffer)
                .map_err(|e| format!("reading CRIU's answer: {e}"))?;
            if n == 0 {
                return Err("CRIU closed its socket without answering".to_string());
            }
            let answer = rpc::Criu_resp::parse_from_bytes(&buffer[..n])
                .map_err(|e| format!("decoding CRIU's answer: {e}"))?;
            if !answer.success() {
                let errmsg = answer.cr_errmsg().to_string();
                return Err(if errmsg.is_empty() {
                    format!("failed (errno {})", answer.cr_errno())
                } else {
                    format!("failed: {errmsg}")
                });
            }
            match answer.type_() {
                rpc::Criu_req_type::NOTIFY => {
                    let mut ack = rpc::Criu_req::new();
                    ack.set_type(rpc::Criu_req_type::NOTIFY);
                    ack.set_notify_success(true);
                    let bytes = ack
                        .write_to_bytes()
                        .map_err(|e| format!("encoding an ack: {e}"))?;
                    nix::unistd::write(&ours, &bytes)
                        .map_err(|e| format!("acknowledging a notification: {e}"))?;
                }
                rpc::Criu_req_type::RESTORE => {
                    let pid = answer.restore.pid();
                    return if pid > 0 {
                        Ok(pid)
                    } else {
                        Err("CRIU restored no process".to_string())
                    };
                }
                other => return Err(format!("unexpected answer {other:?}")),
            }
        }
    })();
    if result.is_err() {
        let _ = criu.kill();
    }
    let _ = criu.wait();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_three_error_lines_are_kept() {
        let log = "(00.001) Version: 3.17.1\n\
                   (00.002) Error (criu/a.c:1): one\n\
                   (00.003) Error (criu/b.c:2): two\n\
                   (00.004) plain line\n\
                   (00.005) Error (criu/c.c:3): three\n\
                   (00.006) Error (criu/d.c:4): four\n";
        assert_eq!(
            last_errors(log).as_deref(),
            Some("(00.003) Error (criu/b.c:2): two; (00.005) Error (criu/c.c:3): three; (00.006) Error (criu/d.c:4): four")
        );
        assert_eq!(last_errors("(00.001) all fine\n"), None);
    }

    #[test]
    fn cgroup_lines_split_into_controllers_and_paths() {
        let v2 = "0::/kubepods.slice/berth-c1.scope\n";
        assert_eq!(
            parse_cgroups(v2),
            [(String::new(), "/kubepods.slice/berth-c1.scope".to_string())]
        );
        let v1 = "4:cpu,cpuacct:/berth/c1\n1:name=systemd:/x\n";
        assert_eq!(
            parse_cgroups(v1),
            [
                ("cpu,cpuacct".to_string(), "/berth/c1".to_string()),
                ("name=systemd".to_string(), "/x".to_string())
            ]
        );
    }

    #[test]
    fn bind_mounts_and_namespace_paths_come_from_the_spec() {
        let spec: Spec = serde_json::from_str(
            r#"{"ociVersion":"1.2.0","root":{"path":"rootfs"},
                "mounts":[{"destination":"/proc","type":"proc","source":"proc"},
                          {"destination":"/etc/hosts","type":"bind","source":"/pod/hosts","options":["rbind","ro"]},
                          {"destination":"/data","source":"/host/data","options":["rbind"]}],
                "linux":{"namespaces":[{"type":"network","path":"/run/ns/net"},{"type":"pid"},
                                       {"type":"ipc","path":"/run/ns/ipc"},{"type":"mount"}]}}"#,
        )
        .expect("spec");
        assert_eq!(
            bind_mounts(&spec),
            [
                ("/etc/hosts".to_string(), "/pod/hosts".to_string()),
                ("/data".to_string(), "/host/data".to_string())
            ]
        );
        assert_eq!(
            namespace_paths(&spec),
            [
                ("net", PathBuf::from("/run/ns/net")),
                ("ipc", PathBuf::from("/run/ns/ipc"))
            ]
        );
    }
}
