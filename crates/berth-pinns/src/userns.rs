//! A pod's user namespace, and its other namespaces made inside it.
//!
//! A namespace is owned by the user namespace of the process that makes it,
//! and a container that has joined the pod's user namespace can only join
//! namespaces that namespace owns (and mount sysfs, proc or mqueue for
//! them). So the other namespaces must be made by a process already inside
//! the new user namespace; but pinning them is a bind mount in the host's
//! mount namespace, which only a process outside can do. Hence two
//! processes (berth-pinns is single-threaded, so forking is safe):
//!
//! 1. the child unshares a user namespace and says so;
//! 2. the parent writes its uid and gid maps and tells it to go on;
//! 3. the child unshares the other namespaces, sets the hostname and
//!    sysctls, starts the infra process, and reports its pid (or an error);
//! 4. the parent pins the child's namespaces (and the infra's PID one),
//!    then closes its pipe, on which the child exits.
//!
//! The child keeps host uid 0 (unmapped inside) until the infra process
//! has entered its root under berth's private directories, which only host
//! root can reach; then it becomes root of the new namespace, as the
//! kernel lets only that user write IPC sysctls (net ones need only the
//! capability, which it has inside the namespace throughout).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;

use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, pipe, setresgid, setresuid, ForkResult, Gid, Pid, Uid};

use crate::sysctl::Sysctl;
use crate::{make_namespaces, pin_namespaces, sys, Options, PinError};

/// One mapping, `container host length`, as the kernel's map files take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Map {
    pub container: u32,
    pub host: u32,
    pub length: u32,
}

/// The uid and gid maps of the new user namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maps {
    pub uid: Map,
    pub gid: Map,
}

/// Parses `container:host:length`.
pub fn parse_map(text: &str) -> Result<Map, PinError> {
    let numbers: Vec<u32> = text
        .split(':')
        .map(|part| part.parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| PinError::Invalid(format!("id map {text:?} is not container:host:length")))?;
    match numbers[..] {
        [container, host, length] if length > 0 => Ok(Map {
            container,
            host,
            length,
        }),
        _ => Err(PinError::Invalid(format!(
            "id map {text:?} is not container:host:length with a length above 0"
        ))),
    }
}

/// The child's report: `ok <infra pid>` or `err <exit code> <message>`.
fn report(result: &Result<i32, PinError>) -> String {
    match result {
        Ok(infra) => format!("ok {infra}\n"),
        Err(err) => format!(
            "err {} {}\n",
            err.exit_code(),
            err.to_string().replace('\n', " ")
        ),
    }
}

/// Reads the child's report back into a result.
fn parse_report(line: &str) -> Result<i32, PinError> {
    let line = line.trim_end();
    if let Some(pid) = line.strip_prefix("ok ") {
        return pid.parse().map_err(|_| {
            PinError::Invalid(format!("bad report from the namespace child: {line:?}"))
        });
    }
    if let Some(rest) = line.strip_prefix("err ") {
        let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
        let message = message.to_string();
        return Err(if code == crate::EXIT_REFUSED.to_string() {
            PinError::BadSysctl(message)
        } else {
            PinError::Invalid(message)
        });
    }
    Err(PinError::Invalid(
        "the namespace child ended without a report".into(),
    ))
}

/// Becomes uid and gid 0 of the user namespace the process is in.
pub fn become_root() -> Result<(), PinError> {
    let (uid, gid) = (Uid::from_raw(0), Gid::from_raw(0));
    setresgid(gid, gid, gid).map_err(sys("setresgid 0 in the user namespace"))?;
    setresuid(uid, uid, uid).map_err(sys("setresuid 0 in the user namespace"))
}

/// Makes the user namespace and the others inside it, and pins them all;
/// returns the infra pid, or 0.
pub fn run(options: &Options, sysctls: &[Sysctl], maps: &Maps) -> Result<i32, PinError> {
    let (from_child, child_writes) = pipe().map_err(sys("pipe"))?;
    let (child_reads, to_child) = pipe().map_err(sys("pipe"))?;
    // SAFETY: berth-pinns is single-threaded, so the child cannot inherit a
    // lock held by another thread.
    match unsafe { fork() }.map_err(sys("fork"))? {
        ForkResult::Child => {
            drop(from_child);
            drop(to_child);
            let code = child(options, sysctls, child_writes, child_reads);
            std::process::exit(code)
        }
        ForkResult::Parent { child } => {
            drop(child_writes);
            drop(child_reads);
            let result = parent(options, maps, child, from_child, to_child);
            if result.is_err() {
                let _ = kill(child, Signal::SIGKILL);
            }
            let _ = waitpid(child, None);
            result
        }
    }
}

fn parent(
    options: &Options,
    maps: &Maps,
    child: Pid,
    from_child: OwnedFd,
    to_child: OwnedFd,
) -> Result<i32, PinError> {
    let mut reader = BufReader::new(std::fs::File::from(from_child));
    let mut to_child = std::fs::File::from(to_child);
    let mut line = String::new();
    read_line(&mut reader, &mut line)?;
    if line.trim_end() != "unshared" {
        return parse_report(&line).and(Err(PinError::Invalid(
            "the namespace child did not make a user namespace".into(),
        )));
    }
    for (file, map) in [("uid_map", maps.uid), ("gid_map", maps.gid)] {
        let path = format!("/proc/{child}/{file}");
        let text = format!("{} {} {}\n", map.container, map.host, map.length);
        std::fs::write(&path, text).map_err(|source| PinError::Io {
            what: format!("write {path}"),
            source,
        })?;
    }
    to_child.write_all(b"g").map_err(|source| PinError::Io {
        what: "signal the namespace child".into(),
        source,
    })?;
    line.clear();
    read_line(&mut reader, &mut line)?;
    let infra = parse_report(&line)?;
    if let Err(err) = pin_namespaces(options, &child.to_string(), infra) {
        crate::kill_infra(infra);
        return Err(err);
    }
    // Closing the pipe lets the child exit; the infra process lives on.
    drop(to_child);
    Ok(infra)
}

fn read_line(reader: &mut impl BufRead, line: &mut String) -> Result<(), PinError> {
    reader
        .read_line(line)
        .map(drop)
        .map_err(|source| PinError::Io {
            what: "read from the namespace child".into(),
            source,
        })
}

/// The child's side; returns its exit code.
fn child(options: &Options, sysctls: &[Sysctl], writes: OwnedFd, reads: OwnedFd) -> i32 {
    let mut writes = std::fs::File::from(writes);
    let mut reads = std::fs::File::from(reads);
    let result = (|| {
        unshare(CloneFlags::CLONE_NEWUSER).map_err(sys("unshare user namespace"))?;
        writes
            .write_all(b"unshared\n")
            .map_err(|source| PinError::Io {
                what: "report to berth-pinns".into(),
                source,
            })?;
        let mut go = [0u8; 1];
        match reads.read(&mut go) {
            Ok(1) => {}
            _ => {
                return Err(PinError::Invalid(
                    "berth-pinns did not write the id maps".into(),
                ))
            }
        }
        make_namespaces(options, sysctls)
    })();
    let _ = writes.write_all(report(&result).as_bytes());
    drop(writes);
    if result.is_err() {
        return 1;
    }
    // Stay until the parent has pinned the namespaces: it closes its end.
    let mut rest = Vec::new();
    let _ = reads.read_to_end(&mut rest);
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parse_from_container_host_length() {
        assert_eq!(
            parse_map("0:65536:65536").unwrap(),
            Map {
                container: 0,
                host: 65536,
                length: 65536
            }
        );
        for bad in ["", "0:1", "0:1:0", "0:1:2:3", "a:1:2", "-1:1:2"] {
            assert!(parse_map(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reports_round_trip() {
        assert_eq!(parse_report(&report(&Ok(42))).unwrap(), 42);
        let refused = parse_report(&report(&Err(PinError::BadSysctl("kernel.x".into()))));
        assert!(matches!(refused, Err(PinError::BadSysctl(m)) if m == "kernel.x"));
        let failed = parse_report(&report(&Err(PinError::Invalid("boom".into()))));
        assert!(matches!(failed, Err(PinError::Invalid(m)) if m == "boom"));
        assert!(parse_report("").is_err());
    }
}
