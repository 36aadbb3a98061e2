//! Putting a [`DevicePolicy`] into a container's cgroup: the eBPF program
//! on cgroup v2, the devices controller's files on v1. What to write is
//! decided in [`crate::devices`]; this is only the kernel calls.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use libcgroups::v2::devices::bpf::{prog, BpfError};

use crate::devices::{DevicePolicy, DeviceRuleError};

/// The license the kernel is told the program carries. NUL-terminated:
/// libcgroups hands the pointer to the kernel as a C string.
const LICENSE: &str = "Apache\0";

/// Why a container's cgroup could not be given its device policy.
#[derive(thiserror::Error, Debug)]
pub enum DeviceFilterError {
    #[error(transparent)]
    Rules(#[from] DeviceRuleError),
    #[error("loading the eBPF device program: {0} (BPF_PROG_LOAD needs CAP_BPF or CAP_SYS_ADMIN, and on kernels before 5.11 a large enough RLIMIT_MEMLOCK)")]
    Load(#[source] BpfError),
    #[error("opening {}: {source}", dir.display())]
    Open {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("attaching the eBPF device program to {}: {source}", dir.display())]
    Attach {
        dir: PathBuf,
        #[source]
        source: BpfError,
    },
    #[error("writing {line:?} to {}: {source}", file.display())]
    Write {
        file: PathBuf,
        line: String,
        #[source]
        source: io::Error,
    },
}

/// Attaches `policy`'s program to the cgroup v2 directory `dir`, next to
/// the programs already there (`BPF_F_ALLOW_MULTI`, nothing detached): an
/// access passes only if every program allows it, so whatever libcontainer
/// or systemd attached can only narrow the policy, never widen it.
pub fn attach_program(dir: &Path, policy: &DevicePolicy) -> Result<(), DeviceFilterError> {
    let program = policy.bpf_program()?;
    let cgroup = File::open(dir).map_err(|source| DeviceFilterError::Open {
        dir: dir.to_path_buf(),
        source,
    })?;
    let raw = prog::load(LICENSE, program.bytecodes()).map_err(DeviceFilterError::Load)?;
    // SAFETY: `load` returned a new program fd that nothing else owns; the
    // attachment keeps the program alive after it is closed.
    let program_fd = unsafe { OwnedFd::from_raw_fd(raw) };
    prog::attach(program_fd.as_raw_fd(), cgroup.as_raw_fd()).map_err(|source| {
        DeviceFilterError::Attach {
            dir: dir.to_path_buf(),
            source,
        }
    })
}

/// Rewrites the v1 devices cgroup `dir` to `policy`, starting from its
/// default (`a`), which drops every exception written before.
pub fn write_v1(dir: &Path, policy: &DevicePolicy) -> Result<(), DeviceFilterError> {
    for (name, line) in policy.v1_writes() {
        let file = dir.join(name);
        std::fs::write(&file, &line).map_err(|source| DeviceFilterError::Write {
            file,
            line,
            source,
        })?;
    }
    Ok(())
}
