//! Exec'd processes of a container that joined a user namespace (a pod
//! with `hostUsers: false`). libcontainer's tenant builder joins only the
//! init's ipc, uts, net, pid, mnt, cgroup and time namespaces, never its
//! user namespace: an exec'd process would run as host root. So the shim
//! has libcontainer set it up as host root (root of the parent namespace,
//! which may enter the pod's) and, just before the exec, the process joins
//! the user namespace itself and only then takes the user and capabilities
//! it was asked for, as runc's `nsexec` would.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;

use libcontainer::oci_spec::runtime::{LinuxCapabilities, LinuxIdMapping, Process, User};
use libcontainer::workload::ExecutorError;
use nix::unistd::{Gid, Uid};

/// The user namespace a container joined, as its exec'd processes need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUserns {
    /// Where it is pinned.
    pub path: PathBuf,
    /// Its uid mappings (the spec's, there for information).
    pub uid_mappings: Vec<LinuxIdMapping>,
}

/// The host id of `id` inside a namespace with `mappings`; None when no
/// mapping holds it.
pub fn host_id(mappings: &[LinuxIdMapping], id: u32) -> Option<u32> {
    mappings.iter().find_map(|mapping| {
        let offset = id.checked_sub(mapping.container_id())?;
        (offset < mapping.size()).then(|| mapping.host_id().checked_add(offset))?
    })
}

/// What the process does in the namespace, once it has joined it.
#[derive(Debug, Clone)]
pub struct JoinUserns {
    /// The namespace, open in the shim and inherited (close-on-exec).
    fd: RawFd,
    user: User,
    capabilities: Option<LinuxCapabilities>,
    /// The process's env sets no HOME: libcontainer looks one up, for the
    /// uid it set up (root's).
    home_looked_up: bool,
    /// With a terminal: the host uid its pty is given. libcontainer makes
    /// the pty before the process enters the namespace, as host root,
    /// whose files show as `nobody` inside.
    tty_owner: Option<u32>,
}

/// An exec'd process prepared for a container in a user namespace.
pub struct Prepared {
    /// What libcontainer sets up: the process as host root.
    pub process: Process,
    /// What the process does before its exec.
    pub join: JoinUserns,
    /// The namespace's file: open until libcontainer has forked.
    pub userns: File,
}

/// Prepares `process` (its user and capabilities those inside the
/// namespace) for the container's user namespace.
pub fn prepare(process: &Process, userns: &ContainerUserns) -> std::io::Result<Prepared> {
    let file = File::open(&userns.path)?;
    let join = JoinUserns {
        fd: file.as_raw_fd(),
        user: process.user().clone(),
        capabilities: process.capabilities().clone(),
        home_looked_up: !process.env().iter().flatten().any(|entry| {
            entry
                .strip_prefix("HOME=")
                .is_some_and(|home| !home.is_empty())
        }),
        tty_owner: process
            .terminal()
            .unwrap_or(false)
            .then(|| host_id(&userns.uid_mappings, process.user().uid()))
            .flatten(),
    };
    Ok(Prepared {
        process: as_host_root(process),
        join,
        userns: file,
    })
}

/// `process` run by host root until it joins the namespace: only the
/// namespace's owner (host root made it) may enter it without holding
/// CAP_SYS_ADMIN there.
fn as_host_root(process: &Process) -> Process {
    let mut root = process.clone();
    let mut user = process.user().clone();
    user.set_uid(0);
    user.set_gid(0);
    user.set_additional_gids(None);
    user.set_umask(process.user().umask());
    root.set_user(user);
    root
}

impl JoinUserns {
    /// The user's own HOME where libcontainer looked up root's (it reads
    /// the container's passwd, as this does: both run after the pivot).
    pub fn fix_home(&self, envs: &mut HashMap<String, String>) {
        if !self.home_looked_up || self.user.uid() == 0 {
            return;
        }
        let home = libcontainer::utils::get_user_home(self.user.uid())
            .and_then(|home| home.to_str().map(str::to_string));
        match home {
            Some(home) => envs.insert("HOME".to_string(), home),
            None => envs.remove("HOME"),
        };
    }
}

fn failed(step: &str, err: impl std::fmt::Display) -> ExecutorError {
    ExecutorError::Other(format!(
        "joining the container's user namespace: {step}: {err}"
    ))
}

/// Joins the namespace, then becomes the asked-for user with the
/// asked-for capabilities. Entering a user namespace grants every
/// capability in it and resets the bounding set, so the capabilities are
/// dropped again after the ids change.
pub fn join(join: &JoinUserns) -> Result<(), ExecutorError> {
    // Still host root: the pty's owner can be changed to any host uid.
    if let Some(owner) = join.tty_owner {
        let stdin = std::io::stdin();
        if nix::unistd::isatty(&stdin).unwrap_or(false) {
            nix::unistd::fchown(&stdin, Some(Uid::from_raw(owner)), None)
                .map_err(|err| failed("giving the terminal to its user", err))?;
        }
    }
    // SAFETY: setns takes an fd this process holds open (inherited from
    // the shim, closed only by the exec).
    let joined = unsafe { nix::libc::setns(join.fd, nix::libc::CLONE_NEWUSER) };
    nix::errno::Errno::result(joined).map_err(|err| failed("setns", err))?;
    let groups: Vec<Gid> = join
        .user
        .additional_gids()
        .iter()
        .flatten()
        .map(|gid| Gid::from_raw(*gid))
        .collect();
    nix::unistd::setgroups(&groups).map_err(|err| failed("setgroups", err))?;
    // Keep the permitted set across the uid change (to a non-root user)
    // so that the drop below sets exactly the asked-for capabilities.
    nix::sys::prctl::set_keepcaps(true).map_err(|err| failed("keepcaps", err))?;
    let gid = Gid::from_raw(join.user.gid());
    let uid = Uid::from_raw(join.user.uid());
    nix::unistd::setresgid(gid, gid, gid).map_err(|err| failed("setresgid", err))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|err| failed("setresuid", err))?;
    nix::sys::prctl::set_keepcaps(false).map_err(|err| failed("keepcaps", err))?;
    let syscall = libcontainer::syscall::syscall::create_syscall();
    let none = LinuxCapabilities::default();
    let wanted = join.capabilities.as_ref().unwrap_or(&none);
    libcontainer::capabilities::drop_privileges(wanted, syscall.as_ref())
        .map_err(|err| failed("capabilities", err))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(container_id: u32, host_id: u32, size: u32) -> LinuxIdMapping {
        serde_json::from_value(serde_json::json!({
            "containerID": container_id, "hostID": host_id, "size": size
        }))
        .expect("mapping")
    }

    /// A stand-in for the pinned namespace, with kubelet's mapping.
    fn userns(dir: &std::path::Path) -> ContainerUserns {
        let path = dir.join("user");
        std::fs::write(&path, b"").expect("stand-in");
        ContainerUserns {
            path,
            uid_mappings: vec![mapping(0, 65536, 65536)],
        }
    }

    #[test]
    fn host_ids_follow_the_mappings() {
        let mappings = [mapping(0, 65536, 1000), mapping(1000, 200_000, 10)];
        assert_eq!(host_id(&mappings, 0), Some(65536));
        assert_eq!(host_id(&mappings, 999), Some(66535));
        assert_eq!(host_id(&mappings, 1005), Some(200_005));
        assert_eq!(host_id(&mappings, 1010), None);
        assert_eq!(host_id(&[mapping(0, u32::MAX, 2)], 1), None, "overflow");
    }

    #[test]
    fn a_terminal_goes_to_the_users_host_uid() {
        let mut process: Process = serde_json::from_value(serde_json::json!({
            "args": ["sh"], "cwd": "/", "terminal": true, "user": {"uid": 7, "gid": 7}
        }))
        .expect("process");
        let dir = tempfile::tempdir().expect("tempdir");
        let ns = userns(dir.path());
        assert_eq!(
            prepare(&process, &ns).expect("prepare").join.tty_owner,
            Some(65543)
        );
        process.set_terminal(Some(false));
        assert_eq!(
            prepare(&process, &ns).expect("prepare").join.tty_owner,
            None
        );
    }

    #[test]
    fn libcontainer_sets_up_host_root_the_join_keeps_the_user() {
        let process: Process = serde_json::from_value(serde_json::json!({
            "args": ["sh"],
            "cwd": "/",
            "user": {"uid": 1000, "gid": 100, "additionalGids": [10, 20], "umask": 18},
            "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"]}
        }))
        .expect("process");
        let dir = tempfile::tempdir().expect("tempdir");
        let ns = userns(dir.path());
        let prepared = prepare(&process, &ns).expect("prepare");
        let user = prepared.process.user();
        assert_eq!((user.uid(), user.gid()), (0, 0));
        assert_eq!(user.additional_gids(), &None);
        assert_eq!(user.umask(), Some(18));
        assert_eq!(
            prepared.process.capabilities(),
            process.capabilities(),
            "libcontainer drops to them first; the join drops again"
        );
        assert_eq!(prepared.join.user, *process.user());
        assert_eq!(prepared.join.fd, prepared.userns.as_raw_fd());

        // No HOME in the env: the one libcontainer found for root goes
        // (uid 1000 is in no passwd of this test's root).
        let mut envs = HashMap::from([("HOME".to_string(), "/root".to_string())]);
        prepared.join.fix_home(&mut envs);
        assert!(
            !envs.contains_key("HOME") || envs["HOME"] != "/root",
            "{envs:?}"
        );
        // The env's own HOME stays.
        let mut own = process.clone();
        own.set_env(Some(vec!["HOME=/work".into()]));
        let prepared = prepare(&own, &ns).expect("prepare");
        let mut envs = HashMap::from([("HOME".to_string(), "/work".to_string())]);
        prepared.join.fix_home(&mut envs);
        assert_eq!(envs["HOME"], "/work");
    }
}
