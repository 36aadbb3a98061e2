//! Privileged cgroup operations behind one trait, and its cgroupfs
//! implementation.
//!
//! [`CgroupManager`] is the only way berth touches cgroups, so the logic on
//! top of it ([`crate::ParentTracker`], pod teardown) is unit-tested with
//! [`crate::fake::FakeManager`] and needs no root.
//!
//! [`CgroupfsManager`] drives the cgroup file system directly. It handles the
//! three layouts a host can have:
//!
//! - [`Layout::Legacy`]: cgroup v1 controllers under `/sys/fs/cgroup/<controller>`;
//! - [`Layout::Hybrid`]: the same, plus cgroup v2 at `/sys/fs/cgroup/unified`
//!   (systemd's "hybrid" mode); a cgroup is then also created in the unified
//!   hierarchy and processes are added to it there, as runc does, so the
//!   unified hierarchy tracks them too (no controllers are enabled there);
//! - [`Layout::Unified`]: cgroup v2 only, at `/sys/fs/cgroup`.
//!
//! Paths are cgroup paths relative to every hierarchy root and start with
//! `/`, e.g. `/kubepods/burstable/pod<uid>/<id>`.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cgroups_rs::fs::cgroup::Cgroup;
use cgroups_rs::fs::cpuset::CpuSetController;
use cgroups_rs::fs::hierarchies::{V1, V2};
use cgroups_rs::fs::{Controller, Hierarchy};
use cgroups_rs::CgroupPid;
use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC};

use crate::prime::MigrationPrimer;

/// Where cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Where systemd mounts cgroup v2 in hybrid mode.
const HYBRID_UNIFIED_ROOT: &str = "/sys/fs/cgroup/unified";
/// The file listing the processes of a cgroup, in v1 and v2 alike.
const CGROUP_PROCS: &str = "cgroup.procs";
/// How often `rmdir` is tried when the kernel still reports the cgroup busy
/// (a process that just exited may take a moment to leave it); runc retries
/// the same way.
const RMDIR_ATTEMPTS: u32 = 5;
const RMDIR_FIRST_DELAY: Duration = Duration::from_millis(10);

/// Errors from cgroup operations. Each names the cgroup or file involved.
#[derive(thiserror::Error, Debug)]
pub enum CgroupError {
    /// The path is not an absolute, normalized cgroup path berth may touch.
    #[error("invalid cgroup path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    /// A process can only be added to a cgroup that exists in every hierarchy.
    #[error("cgroup {path} does not exist in {}; create it first", dir.display())]
    NotFound { path: String, dir: PathBuf },
    /// Removing a cgroup kills nothing: it is refused while processes remain.
    #[error("cgroup {path} still has processes {pids:?}; kill them before removing it")]
    Busy { path: String, pids: Vec<i32> },
    /// A pid that cannot be a process.
    #[error("invalid pid {0}")]
    InvalidPid(i32),
    /// A cpuset cgroup without CPUs or memory nodes cannot take processes.
    #[error("{} is empty and no ancestor has a value to copy into it", file.display())]
    CpusetUnset { file: PathBuf },
    /// No cgroup file system is mounted where berth looks.
    #[error("no cgroup hierarchy is mounted under {CGROUP_ROOT}")]
    NoHierarchy,
    /// An operation done through cgroups-rs failed.
    #[error("{op} cgroup {path}: {source}")]
    Cgroups {
        op: &'static str,
        path: String,
        #[source]
        source: cgroups_rs::fs::error::Error,
    },
    /// A file system operation done by berth itself failed.
    #[error("{op} {}: {source}", file.display())]
    Io {
        op: &'static str,
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A cgroup file did not hold what the kernel writes there.
    #[error("unexpected line {line:?} in {}", file.display())]
    Parse { file: PathBuf, line: String },
    /// The container's device policy could not be put into its cgroup.
    #[error("device filter of cgroup {path}: {source}")]
    DeviceFilter {
        path: String,
        #[source]
        source: crate::device_filter::DeviceFilterError,
    },
    /// systemd refused, failed or was too slow to start or stop a unit.
    #[error("systemd unit {unit}: {message}")]
    Systemd { unit: String, message: String },
    /// The parent tracker's state file could not be read or written.
    #[error("cgroup parent state {}: {source}", file.display())]
    State {
        file: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// The privileged cgroup operations berth needs, on absolute cgroup paths.
pub trait CgroupManager: Send + Sync {
    /// Makes sure `parent` exists (creating missing ancestors too) and says
    /// whether this call created it: `true` only if it existed in no
    /// hierarchy before. The root `/` always exists.
    fn ensure_parent(&self, parent: &str) -> Result<bool, CgroupError>;

    /// Creates the cgroup `path` (and missing ancestors) in every hierarchy.
    /// Creating an existing cgroup is not an error.
    fn create(&self, path: &str) -> Result<(), CgroupError>;

    /// Moves process `pid` (all its threads) into `path` in every hierarchy.
    fn add_process(&self, path: &str, pid: i32) -> Result<(), CgroupError>;

    /// Removes `path` and its descendant cgroups, deepest first, in every
    /// hierarchy. Kills nothing: fails with [`CgroupError::Busy`] before
    /// removing anything if any process is left in the subtree. A cgroup that
    /// does not exist (in some or all hierarchies) is not an error.
    fn remove(&self, path: &str) -> Result<(), CgroupError>;

    /// Kills every process in `path` and its descendants and waits until
    /// none is left: how a container whose shim is gone is stopped, and
    /// what recovery does to the cgroups of half-made pods and containers.
    /// A missing cgroup has nothing to kill. Fails with
    /// [`CgroupError::Busy`] if processes remain after several seconds.
    fn kill(&self, path: &str) -> Result<(), CgroupError>;

    /// Removes `path` only if it exists and has neither processes nor child
    /// cgroups in any hierarchy; returns whether it was removed. Never touches
    /// other cgroups, so it is safe on parents shared with others.
    fn remove_if_empty(&self, path: &str) -> Result<bool, CgroupError>;

    /// Whether `path` exists in at least one hierarchy.
    fn exists(&self, path: &str) -> bool;

    /// The processes directly in `path` (its `cgroup.procs`, all hierarchies
    /// together), sorted. A missing cgroup has none.
    fn pids(&self, path: &str) -> Result<Vec<i32>, CgroupError>;

    /// The processes in `path` and all its descendants, sorted: what must be
    /// killed before [`CgroupManager::remove`] can succeed.
    fn subtree_pids(&self, path: &str) -> Result<Vec<i32>, CgroupError>;

    /// Whether `path` has child cgroups in any hierarchy.
    fn has_children(&self, path: &str) -> Result<bool, CgroupError>;

    /// The hierarchies this host mounts.
    fn layout(&self) -> Layout;

    /// The directory of cgroup `path` in each hierarchy, whether it exists
    /// or not (what a container's view of `/sys/fs/cgroup` is made from).
    fn hierarchy_dirs(&self, path: &str) -> Result<Vec<PathBuf>, CgroupError>;

    /// Where the stats files of cgroup `path` are.
    fn stats_dirs(&self, path: &str) -> Result<crate::stats::StatsDirs, CgroupError>;

    /// Applies `update` to the existing cgroup `path` (a running
    /// container's: UpdateContainerResources).
    fn update(&self, path: &str, update: &crate::ResourceUpdate) -> Result<(), CgroupError>;

    /// Puts `policy` into the existing cgroup `path` of a created container,
    /// after libcontainer applied its own device rules and before the
    /// container starts. Never widens what is there: on v2 it adds an eBPF
    /// program next to the others; on v1 it rewrites the devices files, so
    /// libcontainer's wider defaults (`/dev/console`) go.
    fn restrict_devices(
        &self,
        path: &str,
        policy: &crate::devices::DevicePolicy,
    ) -> Result<(), CgroupError>;

    /// Starts the grace period the next move of a process between cgroups
    /// waits for ([`crate::prime`]). Blocks for up to that grace period;
    /// best effort. Does nothing unless the manager works on the host.
    fn prime_migration(&self) {}
}

/// How the cgroup file systems are laid out on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v1 only.
    Legacy,
    /// cgroup v1 controllers plus cgroup v2 at `/sys/fs/cgroup/unified`.
    Hybrid,
    /// cgroup v2 only, at `/sys/fs/cgroup`.
    Unified,
}

impl Layout {
    /// Detects the layout from the file system types at `/sys/fs/cgroup` and
    /// `/sys/fs/cgroup/unified`.
    pub fn detect() -> Layout {
        let is_cgroup2 =
            |path: &str| statfs(path).is_ok_and(|fs| fs.filesystem_type() == CGROUP2_SUPER_MAGIC);
        Layout::from_mounts(is_cgroup2(CGROUP_ROOT), is_cgroup2(HYBRID_UNIFIED_ROOT))
    }

    /// The layout given whether `/sys/fs/cgroup` and `/sys/fs/cgroup/unified`
    /// are cgroup2 file systems.
    pub fn from_mounts(root_is_cgroup2: bool, unified_is_cgroup2: bool) -> Layout {
        match (root_is_cgroup2, unified_is_cgroup2) {
            (true, _) => Layout::Unified,
            (false, true) => Layout::Hybrid,
            (false, false) => Layout::Legacy,
        }
    }
}

/// [`CgroupManager`] on the host's cgroup file systems, through cgroups-rs.
///
/// cgroups-rs finds the v1 mounts (from `/proc/self/mountinfo`), creates
/// cgroups (including copying `cpuset.cpus`/`cpuset.mems` down from the
/// nearest ancestor that has them) and writes pids; berth adds the hybrid
/// unified hierarchy and does removal itself, because cgroups-rs's delete
/// also removes child cgroups, which must never happen to a shared parent.
#[derive(Debug, Clone)]
pub struct CgroupfsManager {
    layout: Layout,
    /// The v1 mounts, read once (unused in the unified layout).
    v1: V1,
    primer: Arc<MigrationPrimer>,
}

impl CgroupfsManager {
    /// Detects the host's layout and v1 mounts.
    pub fn new() -> Result<Self, CgroupError> {
        let layout = Layout::detect();
        let v1 = V1::new();
        if layout != Layout::Unified && v1.subsystems().is_empty() {
            return Err(CgroupError::NoHierarchy);
        }
        tracing::debug!(?layout, "cgroupfs manager ready");
        let primer = Arc::new(MigrationPrimer::for_this_process(
            Path::new(CGROUP_ROOT),
            layout,
        ));
        Ok(Self { layout, v1, primer })
    }

    /// The layout found at start-up.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The directory of cgroup `path` in each hierarchy, whether it exists or
    /// not: one per mounted v1 hierarchy (co-mounted controllers share one),
    /// plus the unified one in the hybrid and unified layouts.
    pub fn hierarchy_dirs(&self, path: &str) -> Result<Vec<PathBuf>, CgroupError> {
        let rel = relative(path)?;
        Ok(self.dirs(&rel))
    }

    /// Where the stats files of cgroup `path` are: the cpuacct, cpu, memory,
    /// pids and blkio controllers' dirs on v1 (hybrid included: its unified hierarchy
    /// has no controllers), the one dir on v2.
    pub fn stats_dirs(&self, path: &str) -> Result<crate::stats::StatsDirs, CgroupError> {
        let rel = relative(path)?;
        if self.layout == Layout::Unified {
            return Ok(crate::stats::StatsDirs::V2 {
                dir: Path::new(CGROUP_ROOT).join(rel),
            });
        }
        let cgroup = self.load(&rel);
        let dir_of = |name: &str| {
            cgroup
                .subsystems()
                .iter()
                .find(|sub| sub.controller_name() == name)
                .map(|sub| sub.to_controller().path().to_path_buf())
        };
        Ok(crate::stats::StatsDirs::V1 {
            cpuacct: dir_of("cpuacct"),
            cpu: dir_of("cpu"),
            memory: dir_of("memory"),
            pids: dir_of("pids"),
            blkio: dir_of("blkio"),
        })
    }

    fn dirs(&self, rel: &str) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        if self.layout == Layout::Unified {
            dirs.push(Path::new(CGROUP_ROOT).join(rel));
            return dirs;
        }
        for sub in self.load(rel).subsystems() {
            let dir = sub.to_controller().path().to_path_buf();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        if self.layout == Layout::Hybrid {
            dirs.push(Path::new(HYBRID_UNIFIED_ROOT).join(rel));
        }
        dirs
    }

    /// A cgroups-rs handle on an existing cgroup `path`.
    pub(crate) fn load_existing(&self, path: &str) -> Result<Cgroup, CgroupError> {
        let rel = relative_non_root(path)?;
        // libcontainer's v1 manager makes no dir in the hybrid unified
        // hierarchy, so one existing hierarchy is enough.
        let dirs = self.dirs(&rel);
        if !dirs.iter().any(|dir| dir.is_dir()) {
            return Err(CgroupError::NotFound {
                path: path.to_string(),
                dir: dirs.into_iter().next().unwrap_or_default(),
            });
        }
        Ok(self.load(&rel))
    }

    /// A cgroups-rs handle on `rel` in the layout's hierarchy (v1 handles
    /// cover only the v1 mounts, even in the hybrid layout).
    fn load(&self, rel: &str) -> Cgroup {
        let hier: Box<dyn Hierarchy> = match self.layout {
            Layout::Unified => Box::new(V2::new()),
            Layout::Legacy | Layout::Hybrid => Box::new(self.v1.clone()),
        };
        Cgroup::load(hier, rel)
    }

    fn create_rel(&self, path: &str, rel: &str) -> Result<(), CgroupError> {
        self.load(rel)
            .create()
            .map_err(|source| CgroupError::Cgroups {
                op: "create",
                path: path.to_string(),
                source,
            })?;
        if self.layout == Layout::Hybrid {
            let dir = Path::new(HYBRID_UNIFIED_ROOT).join(rel);
            std::fs::create_dir_all(&dir).map_err(|source| CgroupError::Io {
                op: "create cgroup",
                file: dir,
                source,
            })?;
        }
        tracing::debug!(path, "created cgroup");
        Ok(())
    }

    /// Makes sure the cpuset cgroup of `cg` has CPUs and memory nodes, which
    /// v1 requires before it accepts a process. cgroups-rs copies them from
    /// the nearest ancestor that has them when it creates a cpuset cgroup;
    /// running its (idempotent) create again covers cgroups made by others.
    fn ensure_cpuset(cg: &Cgroup) -> Result<(), CgroupError> {
        let Some(cpuset) = cg.controller_of::<CpuSetController>() else {
            return Ok(());
        };
        Controller::create(cpuset).map_err(|source| CgroupError::Cgroups {
            op: "initialize cpuset of",
            path: cpuset.path().display().to_string(),
            source,
        })?;
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let file = cpuset.path().join(file);
            let value = std::fs::read_to_string(&file).map_err(|source| CgroupError::Io {
                op: "read",
                file: file.clone(),
                source,
            })?;
            if value.trim().is_empty() {
                return Err(CgroupError::CpusetUnset { file });
            }
        }
        Ok(())
    }
}

impl CgroupManager for CgroupfsManager {
    fn layout(&self) -> Layout {
        CgroupfsManager::layout(self)
    }

    fn prime_migration(&self) {
        self.primer.prime();
    }

    fn hierarchy_dirs(&self, path: &str) -> Result<Vec<PathBuf>, CgroupError> {
        CgroupfsManager::hierarchy_dirs(self, path)
    }

    fn stats_dirs(&self, path: &str) -> Result<crate::stats::StatsDirs, CgroupError> {
        CgroupfsManager::stats_dirs(self, path)
    }

    fn ensure_parent(&self, parent: &str) -> Result<bool, CgroupError> {
        let rel = relative(parent)?;
        if rel.is_empty() {
            return Ok(false);
        }
        let existed = self.dirs(&rel).iter().any(|d| d.is_dir());
        self.create_rel(parent, &rel)?;
        Ok(!existed)
    }

    fn create(&self, path: &str) -> Result<(), CgroupError> {
        let rel = relative_non_root(path)?;
        self.create_rel(path, &rel)
    }

    fn add_process(&self, path: &str, pid: i32) -> Result<(), CgroupError> {
        if pid <= 0 {
            return Err(CgroupError::InvalidPid(pid));
        }
        let rel = relative_non_root(path)?;
        let dirs = self.dirs(&rel);
        if let Some(dir) = dirs.iter().find(|d| !d.is_dir()) {
            return Err(CgroupError::NotFound {
                path: path.to_string(),
                dir: dir.clone(),
            });
        }
        let cg = self.load(&rel);
        if self.layout != Layout::Unified {
            Self::ensure_cpuset(&cg)?;
        }
        // The pid is positive, so the conversion is lossless.
        cg.add_task_by_tgid(CgroupPid::from(pid.unsigned_abs() as u64))
            .map_err(|source| CgroupError::Cgroups {
                op: "add process to",
                path: path.to_string(),
                source,
            })?;
        if self.layout == Layout::Hybrid {
            let file = Path::new(HYBRID_UNIFIED_ROOT).join(&rel).join(CGROUP_PROCS);
            std::fs::write(&file, pid.to_string()).map_err(|source| CgroupError::Io {
                op: "add process to",
                file,
                source,
            })?;
        }
        tracing::debug!(path, pid, "added process to cgroup");
        Ok(())
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        let rel = relative_non_root(path)?;
        let pids = self.subtree_pids(path)?;
        if !pids.is_empty() {
            return Err(CgroupError::Busy {
                path: path.to_string(),
                pids,
            });
        }
        for dir in self.dirs(&rel) {
            for cgroup in subtree_deepest_first(&dir)? {
                rmdir(path, &cgroup)?;
            }
        }
        tracing::debug!(path, "removed cgroup");
        Ok(())
    }

    fn kill(&self, path: &str) -> Result<(), CgroupError> {
        let rel = relative_non_root(path)?;
        let mut pids = self.subtree_pids(path)?;
        for _ in 0..KILL_ROUNDS {
            if pids.is_empty() {
                return Ok(());
            }
            let dirs: Vec<PathBuf> = self.dirs(&rel).into_iter().filter(|d| d.is_dir()).collect();
            kill_round(&dirs, &pids);
            std::thread::sleep(KILL_POLL);
            pids = self.subtree_pids(path)?;
        }
        if pids.is_empty() {
            return Ok(());
        }
        Err(CgroupError::Busy {
            path: path.to_string(),
            pids,
        })
    }

    fn remove_if_empty(&self, path: &str) -> Result<bool, CgroupError> {
        let rel = relative(path)?;
        if rel.is_empty() {
            return Ok(false);
        }
        let existing: Vec<PathBuf> = self.dirs(&rel).into_iter().filter(|d| d.is_dir()).collect();
        if existing.is_empty() {
            return Ok(false);
        }
        for dir in &existing {
            if has_child_cgroups(dir)? || !read_procs(dir)?.is_empty() {
                tracing::debug!(path, dir = %dir.display(), "cgroup in use, kept");
                return Ok(false);
            }
        }
        for dir in &existing {
            rmdir(path, dir)?;
        }
        tracing::debug!(path, "removed empty cgroup");
        Ok(true)
    }

    fn exists(&self, path: &str) -> bool {
        relative(path).is_ok_and(|rel| self.dirs(&rel).iter().any(|d| d.is_dir()))
    }

    fn pids(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        let rel = relative(path)?;
        let mut pids = BTreeSet::new();
        for dir in self.dirs(&rel) {
            pids.extend(read_procs(&dir)?);
        }
        Ok(pids.into_iter().collect())
    }

    fn subtree_pids(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        let rel = relative(path)?;
        let mut pids = BTreeSet::new();
        for dir in self.dirs(&rel) {
            for cgroup in subtree_deepest_first(&dir)? {
                pids.extend(read_procs(&cgroup)?);
            }
        }
        Ok(pids.into_iter().collect())
    }

    fn has_children(&self, path: &str) -> Result<bool, CgroupError> {
        let rel = relative(path)?;
        for dir in self.dirs(&rel).into_iter().filter(|d| d.is_dir()) {
            if has_child_cgroups(&dir)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn update(&self, path: &str, update: &crate::ResourceUpdate) -> Result<(), CgroupError> {
        self.update_files(path, update)
    }

    fn restrict_devices(
        &self,
        path: &str,
        policy: &crate::devices::DevicePolicy,
    ) -> Result<(), CgroupError> {
        let rel = relative_non_root(path)?;
        let failed = |source| CgroupError::DeviceFilter {
            path: path.to_string(),
            source,
        };
        if self.layout == Layout::Unified {
            let dir = Path::new(CGROUP_ROOT).join(&rel);
            return crate::device_filter::attach_program(&dir, policy).map_err(failed);
        }
        // v1 and hybrid: containers' devices controller is a v1 one (the
        // hybrid unified hierarchy has no container dir).
        let dir = self
            .load(&rel)
            .subsystems()
            .iter()
            .find(|sub| sub.controller_name() == "devices")
            .map(|sub| sub.to_controller().path().to_path_buf())
            .filter(|dir| dir.is_dir())
            .ok_or_else(|| CgroupError::NotFound {
                path: path.to_string(),
                dir: Path::new(CGROUP_ROOT).join("devices").join(&rel),
            })?;
        crate::device_filter::write_v1(&dir, policy).map_err(failed)
    }
}

/// How often [`CgroupManager::kill`] looks again, and how many times
/// (5 s in all): SIGKILL takes effect at once, but a process in
/// uninterruptible sleep (a hung NFS read) leaves only when it wakes.
const KILL_POLL: Duration = Duration::from_millis(10);
const KILL_ROUNDS: u32 = 500;

/// One round of killing what is in `dirs` (every hierarchy's dir of one
/// cgroup): `cgroup.kill` where the kernel has it (v2, 5.14+) kills the
/// whole subtree, forks included; elsewhere the cgroup is frozen so that
/// nothing forks between reading `pids` and killing them, then thawed so
/// the kills take effect.
fn kill_round(dirs: &[PathBuf], pids: &[i32]) {
    for dir in dirs {
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    }
    set_frozen(dirs, true);
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    set_frozen(dirs, false);
}

/// Freezes or thaws a cgroup through one freezer: v1's where any of its dirs
/// has `freezer.state` (the hybrid layout's unified dir has `cgroup.freeze`
/// too, but v2 never freezes a task v1's freezer holds; runc's v1 manager
/// uses v1's alone), else v2's `cgroup.freeze`.
fn set_frozen(dirs: &[PathBuf], frozen: bool) {
    let v1: Vec<PathBuf> = dirs
        .iter()
        .map(|dir| dir.join("freezer.state"))
        .filter(|state| state.exists())
        .collect();
    if !v1.is_empty() {
        for state in &v1 {
            let _ = std::fs::write(state, if frozen { "FROZEN" } else { "THAWED" });
        }
        return;
    }
    for dir in dirs {
        let _ = std::fs::write(dir.join("cgroup.freeze"), if frozen { "1" } else { "0" });
    }
}

/// Checks an absolute cgroup path and returns it relative to a hierarchy
/// root, normalized (`""` for the root itself).
pub(crate) fn relative(path: &str) -> Result<String, CgroupError> {
    let invalid = |reason| CgroupError::InvalidPath {
        path: path.to_string(),
        reason,
    };
    if !path.starts_with('/') {
        return Err(invalid("it must be absolute"));
    }
    if path.chars().any(char::is_control) {
        return Err(invalid("it must not contain control characters"));
    }
    let mut components = Vec::new();
    for component in path.split('/') {
        match component {
            "" => {}
            "." | ".." => return Err(invalid("it must not contain \".\" or \"..\"")),
            c => components.push(c),
        }
    }
    Ok(components.join("/"))
}

/// [`relative`], refusing the root cgroup.
pub(crate) fn relative_non_root(path: &str) -> Result<String, CgroupError> {
    let rel = relative(path)?;
    if rel.is_empty() {
        return Err(CgroupError::InvalidPath {
            path: path.to_string(),
            reason: "berth never creates, joins or removes the root cgroup",
        });
    }
    Ok(rel)
}

/// Parses `cgroup.procs` content.
fn parse_procs(file: &Path, content: &str) -> Result<Vec<i32>, CgroupError> {
    content
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| match l.parse::<i32>() {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => Err(CgroupError::Parse {
                file: file.to_path_buf(),
                line: l.to_string(),
            }),
        })
        .collect()
}

/// The processes in cgroup directory `dir`; none if it does not exist.
fn read_procs(dir: &Path) -> Result<Vec<i32>, CgroupError> {
    let file = dir.join(CGROUP_PROCS);
    match std::fs::read_to_string(&file) {
        Ok(content) => parse_procs(&file, &content),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(CgroupError::Io {
            op: "read",
            file,
            source,
        }),
    }
}

/// `dir` and every cgroup directory below it, children before their parent;
/// empty if `dir` does not exist.
fn subtree_deepest_first(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let mut out = Vec::new();
    collect_post_order(dir, &mut out)?;
    Ok(out)
}

fn collect_post_order(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Io {
                op: "list cgroup",
                file: dir.to_path_buf(),
                source,
            })
        }
    };
    for entry in entries {
        let entry = entry.map_err(|source| CgroupError::Io {
            op: "list cgroup",
            file: dir.to_path_buf(),
            source,
        })?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_post_order(&entry.path(), out)?;
        }
    }
    out.push(dir.to_path_buf());
    Ok(())
}

fn has_child_cgroups(dir: &Path) -> Result<bool, CgroupError> {
    let entries = std::fs::read_dir(dir).map_err(|source| CgroupError::Io {
        op: "list cgroup",
        file: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| CgroupError::Io {
            op: "list cgroup",
            file: dir.to_path_buf(),
            source,
        })?;
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `rmdir` one cgroup directory, retrying while the kernel reports it busy.
/// A directory that is already gone is fine. `path` is the cgroup the caller
/// asked for, for error messages.
fn rmdir(path: &str, dir: &Path) -> Result<(), CgroupError> {
    let mut delay = RMDIR_FIRST_DELAY;
    for attempt in 1..=RMDIR_ATTEMPTS {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) && attempt < RMDIR_ATTEMPTS => {
                std::thread::sleep(delay);
                delay *= 2;
            }
            Err(source) => {
                // A process that moved in meanwhile is the likely cause;
                // say so rather than "resource busy".
                let pids = read_procs(dir).unwrap_or_default();
                if !pids.is_empty() {
                    return Err(CgroupError::Busy {
                        path: path.to_string(),
                        pids,
                    });
                }
                return Err(CgroupError::Io {
                    op: "remove cgroup",
                    file: dir.to_path_buf(),
                    source,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_normalizes_absolute_paths() {
        assert_eq!(relative("/").unwrap(), "");
        assert_eq!(relative("/a/b").unwrap(), "a/b");
        assert_eq!(relative("//a//b/").unwrap(), "a/b");
        assert_eq!(relative("/a..b").unwrap(), "a..b");
    }

    #[test]
    fn relative_rejects_unsafe_paths() {
        for bad in ["", "a/b", "/a/../b", "/..", "/a/./b", "/a\nb"] {
            assert!(
                matches!(relative(bad), Err(CgroupError::InvalidPath { .. })),
                "{bad:?}"
            );
        }
        assert!(relative_non_root("/").is_err());
        assert!(relative_non_root("//").is_err());
        assert_eq!(relative_non_root("/x").unwrap(), "x");
    }

    #[test]
    fn layout_from_mounts() {
        assert_eq!(Layout::from_mounts(true, false), Layout::Unified);
        assert_eq!(Layout::from_mounts(false, true), Layout::Hybrid);
        assert_eq!(Layout::from_mounts(false, false), Layout::Legacy);
    }

    #[test]
    fn the_v1_freezer_alone_freezes_where_there_is_one() {
        let tmp = tempfile::tempdir().unwrap();
        let freezer = tmp.path().join("freezer");
        let unified = tmp.path().join("unified");
        std::fs::create_dir_all(&freezer).unwrap();
        std::fs::create_dir_all(&unified).unwrap();
        std::fs::write(freezer.join("freezer.state"), "THAWED").unwrap();
        std::fs::write(unified.join("cgroup.freeze"), "0").unwrap();
        let read = |path: &Path| std::fs::read_to_string(path).unwrap();
        let both = [unified.clone(), freezer.clone()];

        set_frozen(&both, true);
        assert_eq!(read(&freezer.join("freezer.state")), "FROZEN");
        assert_eq!(read(&unified.join("cgroup.freeze")), "0", "hybrid: v1 only");
        set_frozen(&both, false);
        assert_eq!(read(&freezer.join("freezer.state")), "THAWED");

        set_frozen(std::slice::from_ref(&unified), true);
        assert_eq!(read(&unified.join("cgroup.freeze")), "1", "v2 alone");
        set_frozen(std::slice::from_ref(&unified), false);
        assert_eq!(read(&unified.join("cgroup.freeze")), "0");
    }

    #[test]
    fn parse_procs_reads_pids() {
        let f = Path::new("/x/cgroup.procs");
        assert_eq!(parse_procs(f, "").unwrap(), Vec::<i32>::new());
        assert_eq!(parse_procs(f, "12\n7\n").unwrap(), vec![12, 7]);
        let err = parse_procs(f, "12\nabc\n").unwrap_err();
        assert!(err.to_string().contains("\"abc\""), "{err}");
        assert!(parse_procs(f, "0\n").is_err());
    }

    #[test]
    fn subtree_is_listed_deepest_first_and_skips_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cg");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("c")).unwrap();
        std::fs::write(root.join("a/cgroup.procs"), "").unwrap();
        let list = subtree_deepest_first(&root).unwrap();
        assert_eq!(list.len(), 4);
        let pos = |p: &Path| list.iter().position(|x| x == p).unwrap();
        assert!(pos(&root.join("a/b")) < pos(&root.join("a")));
        assert!(pos(&root.join("a")) < pos(&root));
        assert!(pos(&root.join("c")) < pos(&root));
        assert_eq!(list.last().unwrap(), &root);
        assert!(subtree_deepest_first(&tmp.path().join("missing"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn read_procs_of_missing_cgroup_is_empty() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_procs(&tmp.path().join("nope")).unwrap().is_empty());
        std::fs::write(tmp.path().join(CGROUP_PROCS), "5\n3\n").unwrap();
        assert_eq!(read_procs(tmp.path()).unwrap(), vec![5, 3]);
    }

    #[test]
    fn rmdir_is_idempotent_and_reports_non_empty_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        rmdir("/d", &dir).unwrap();
        assert!(!dir.exists());
        rmdir("/d", &dir).unwrap();
        // On a regular file system a non-empty directory stands in for a
        // cgroup the kernel refuses to remove.
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("f"), "").unwrap();
        let err = rmdir("/d", &dir).unwrap_err();
        assert!(matches!(err, CgroupError::Io { .. }), "{err}");
    }
}
