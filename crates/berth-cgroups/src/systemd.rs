//! The systemd cgroup driver: pod parents are slice units and the sandbox's
//! infra process runs in a scope unit, all transient units created over
//! D-Bus, as runc, crun and youki do.
//!
//! Paths stay cgroup paths (`/kubepods.slice/kubepods-pod1.slice/berth-<id>.scope`),
//! so [`crate::ParentTracker`] and the sandbox code work unchanged: the last
//! component of a path is its unit's name. systemd owns these cgroups, so
//! berth asks systemd to make and remove them and only reads the file
//! system (through [`crate::CgroupfsManager`]) to see what exists and which
//! processes are where.
//!
//! A scope cannot exist without a process (systemd refuses an empty one),
//! so [`CgroupManager::create`] of a scope does nothing and
//! [`CgroupManager::add_process`] starts the scope with its first process.
//! Containers' scopes are made by libcontainer's systemd support in the
//! shim; berth only removes what a dead shim left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zbus::zvariant::{OwnedObjectPath, Value};

use crate::manager::{relative, relative_non_root, CgroupError, CgroupManager, Layout};
use crate::update::ResourceUpdate;

/// How long systemd gets to run a start or stop job before berth gives up.
const JOB_TIMEOUT: Duration = Duration::from_secs(10);
/// First wait between looks at the file system while a job runs.
const POLL_FIRST: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(50);

/// The D-Bus error systemd answers for a unit it does not know.
const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";

/// Errors of the D-Bus conversation with systemd.
#[derive(thiserror::Error, Debug)]
pub enum BusError {
    /// The unit is not loaded (already stopped, or never started).
    #[error("unit {0} is not loaded")]
    NoSuchUnit(String),
    /// systemd refused or the bus failed.
    #[error("systemd D-Bus call {method}({unit}): {message}")]
    Call {
        method: &'static str,
        unit: String,
        message: String,
    },
}

/// A property of a transient unit, as `StartTransientUnit` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitProperty {
    Bool(&'static str, bool),
    Str(&'static str, String),
    U64(&'static str, u64),
    /// A byte array (`ay`), e.g. a CPU bitmask.
    Bytes(&'static str, Vec<u8>),
    Pids(Vec<u32>),
    /// `DeviceAllow` (`a(ss)`): (device, access) pairs; an empty list
    /// clears the unit's.
    DeviceAllow(Vec<(String, String)>),
}

/// The systemd manager calls berth makes; a trait so the driver's rules are
/// unit-tested without a system bus.
pub trait SystemdBus: Send + Sync {
    /// `StartTransientUnit(name, "replace", properties, [])`.
    fn start_transient_unit(&self, name: &str, props: &[UnitProperty]) -> Result<(), BusError>;
    /// `StopUnit(name, "replace")`; an unknown unit is [`BusError::NoSuchUnit`].
    fn stop_unit(&self, name: &str) -> Result<(), BusError>;
    /// `ResetFailedUnit(name)`, so a failed unit's name can be used again.
    fn reset_failed_unit(&self, name: &str) -> Result<(), BusError>;
    /// `SetUnitProperties(name, true, properties)`: runtime properties,
    /// which systemd also writes to the unit's cgroup.
    fn set_unit_properties(&self, name: &str, props: &[UnitProperty]) -> Result<(), BusError>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1",
    gen_async = false,
    blocking_name = "ManagerProxy"
)]
trait Manager {
    fn start_transient_unit(
        &self,
        name: &str,
        mode: &str,
        properties: &[&(&str, &Value<'_>)],
        aux: &[&(&str, &[&(&str, &Value<'_>)])],
    ) -> zbus::Result<OwnedObjectPath>;

    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;

    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;

    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[&(&str, &Value<'_>)],
    ) -> zbus::Result<()>;
}

/// [`SystemdBus`] on the system bus, one connection for the daemon's life.
pub struct DbusSystemd {
    proxy: ManagerProxy<'static>,
}

impl DbusSystemd {
    /// Connects to the system bus (`/run/dbus/system_bus_socket`).
    pub fn connect() -> Result<Self, BusError> {
        let fail = |err: zbus::Error| BusError::Call {
            method: "connect",
            unit: String::new(),
            message: err.to_string(),
        };
        let connection = zbus::blocking::Connection::system().map_err(fail)?;
        let proxy = ManagerProxy::new(&connection).map_err(fail)?;
        Ok(Self { proxy })
    }
}

/// Turns a zbus error into [`BusError`], recognising an unknown unit.
fn bus_error(method: &'static str, unit: &str, err: zbus::Error) -> BusError {
    if let zbus::Error::MethodError(name, _, _) = &err {
        if name.as_str() == NO_SUCH_UNIT {
            return BusError::NoSuchUnit(unit.to_string());
        }
    }
    BusError::Call {
        method,
        unit: unit.to_string(),
        message: err.to_string(),
    }
}

/// Properties as the `a(sv)` D-Bus values systemd takes.
fn dbus_values(props: &[UnitProperty]) -> Vec<(&'static str, Value<'_>)> {
    props
        .iter()
        .map(|prop| match prop {
            UnitProperty::Bool(key, value) => (*key, Value::from(*value)),
            UnitProperty::Str(key, value) => (*key, Value::from(value.as_str())),
            UnitProperty::U64(key, value) => (*key, Value::from(*value)),
            UnitProperty::Bytes(key, value) => (*key, Value::from(value.clone())),
            UnitProperty::Pids(pids) => ("PIDs", Value::from(pids.clone())),
            UnitProperty::DeviceAllow(allow) => ("DeviceAllow", Value::from(allow.clone())),
        })
        .collect()
}

impl SystemdBus for DbusSystemd {
    fn start_transient_unit(&self, name: &str, props: &[UnitProperty]) -> Result<(), BusError> {
        let values = dbus_values(props);
        let pairs: Vec<(&str, &Value<'_>)> = values.iter().map(|(k, v)| (*k, v)).collect();
        let refs: Vec<&(&str, &Value<'_>)> = pairs.iter().collect();
        self.proxy
            .start_transient_unit(name, "replace", &refs, &[])
            .map(|_| ())
            .map_err(|err| bus_error("StartTransientUnit", name, err))
    }

    fn set_unit_properties(&self, name: &str, props: &[UnitProperty]) -> Result<(), BusError> {
        let values = dbus_values(props);
        let pairs: Vec<(&str, &Value<'_>)> = values.iter().map(|(k, v)| (*k, v)).collect();
        let refs: Vec<&(&str, &Value<'_>)> = pairs.iter().collect();
        self.proxy
            .set_unit_properties(name, true, &refs)
            .map_err(|err| bus_error("SetUnitProperties", name, err))
    }

    fn stop_unit(&self, name: &str) -> Result<(), BusError> {
        self.proxy
            .stop_unit(name, "replace")
            .map(|_| ())
            .map_err(|err| bus_error("StopUnit", name, err))
    }

    fn reset_failed_unit(&self, name: &str) -> Result<(), BusError> {
        self.proxy
            .reset_failed_unit(name)
            .map_err(|err| bus_error("ResetFailedUnit", name, err))
    }
}

/// The unit a cgroup path belongs to: its last component, which must be a
/// slice or scope name.
pub fn unit_of(path: &str) -> Result<String, CgroupError> {
    let rel = relative_non_root(path)?;
    let name = rel.rsplit('/').next().unwrap_or_default();
    if name.ends_with(".slice") || name.ends_with(".scope") {
        Ok(name.to_string())
    } else {
        Err(CgroupError::InvalidPath {
            path: path.to_string(),
            reason: "under the systemd driver a cgroup path must end in a .slice or .scope unit",
        })
    }
}

/// The slice a cgroup path's unit sits in: the component before the last,
/// or `-.slice` at the top.
fn parent_slice_of(path: &str) -> Result<String, CgroupError> {
    let rel = relative_non_root(path)?;
    let mut components = rel.rsplit('/');
    components.next();
    Ok(components.next().unwrap_or("-.slice").to_string())
}

/// Properties every unit berth starts carries: accounting on (stats need
/// it), and no default dependencies, so shutting down the pod's units never
/// waits on unrelated ones (runc does the same).
fn common_properties(description: String) -> Vec<UnitProperty> {
    vec![
        UnitProperty::Str("Description", description),
        UnitProperty::Bool("DefaultDependencies", false),
        UnitProperty::Bool("CPUAccounting", true),
        UnitProperty::Bool("MemoryAccounting", true),
        UnitProperty::Bool("TasksAccounting", true),
        UnitProperty::Bool("IOAccounting", true),
    ]
}

/// The properties of a pod parent slice berth starts itself (crictl and
/// critest send slices that do not exist; kubelet makes its own).
pub fn slice_properties(unit: &str) -> Vec<UnitProperty> {
    common_properties(format!("berth pod parent {unit}"))
}

/// The properties of a scope that starts with `pid` in `slice`. Delegate
/// lets the runtime inside manage the scope's subtree, as runc asks.
pub fn scope_properties(unit: &str, slice: &str, pid: u32) -> Vec<UnitProperty> {
    let mut props = common_properties(format!("berth {unit}"));
    props.push(UnitProperty::Str("Slice", slice.to_string()));
    props.push(UnitProperty::Bool("Delegate", true));
    props.push(UnitProperty::Pids(vec![pid]));
    props
}

/// [`CgroupManager`] for the systemd driver: systemd makes and removes the
/// units, the file system says what exists.
pub struct SystemdManager {
    bus: Box<dyn SystemdBus>,
    fs: Arc<dyn CgroupManager>,
}

impl SystemdManager {
    /// `bus` talks to systemd; `fs` (the cgroupfs manager) reads the
    /// hierarchies and removes cgroups systemd does not own.
    pub fn new(bus: Box<dyn SystemdBus>, fs: Arc<dyn CgroupManager>) -> Self {
        Self { bus, fs }
    }

    /// Waits until `done` holds, looking more and more slowly, or gives up
    /// after [`JOB_TIMEOUT`] with an error naming the unit and `what`.
    fn wait_for(
        &self,
        unit: &str,
        what: &'static str,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), CgroupError> {
        let start = Instant::now();
        let mut delay = POLL_FIRST;
        while !done() {
            if start.elapsed() > JOB_TIMEOUT {
                return Err(CgroupError::Systemd {
                    unit: unit.to_string(),
                    message: format!("timed out after {JOB_TIMEOUT:?} waiting for {what}"),
                });
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(POLL_MAX);
        }
        Ok(())
    }

    fn systemd_error(unit: &str, err: BusError) -> CgroupError {
        CgroupError::Systemd {
            unit: unit.to_string(),
            message: err.to_string(),
        }
    }

    /// Stops `unit` and waits for its cgroup to go; a unit systemd does not
    /// know is done already. A cgroup left that systemd did not own (made
    /// through the file system) is removed directly.
    fn stop(&self, path: &str, unit: &str) -> Result<(), CgroupError> {
        match self.bus.stop_unit(unit) {
            Ok(()) => self.wait_for(unit, "its cgroup to be removed", || !self.fs.exists(path))?,
            Err(BusError::NoSuchUnit(_)) => {}
            Err(err) => return Err(Self::systemd_error(unit, err)),
        }
        // A scope whose processes were killed ends "failed"; its name must
        // be usable again.
        match self.bus.reset_failed_unit(unit) {
            Ok(()) | Err(BusError::NoSuchUnit(_)) => {}
            Err(err) => tracing::debug!(unit, error = %err, "reset-failed"),
        }
        if self.fs.exists(path) {
            self.fs.remove(path)?;
        }
        Ok(())
    }
}

impl CgroupManager for SystemdManager {
    // What is read, or written as plain cgroup files, goes to the cgroupfs
    // view of the same hierarchy.
    fn layout(&self) -> crate::Layout {
        self.fs.layout()
    }

    // systemd's moves (StartTransientUnit with a pid) wait on the same
    // kernel lock.
    fn prime_migration(&self) {
        self.fs.prime_migration();
    }

    fn hierarchy_dirs(&self, path: &str) -> Result<Vec<std::path::PathBuf>, CgroupError> {
        self.fs.hierarchy_dirs(path)
    }

    fn stats_dirs(&self, path: &str) -> Result<crate::stats::StatsDirs, CgroupError> {
        self.fs.stats_dirs(path)
    }

    fn ensure_parent(&self, parent: &str) -> Result<bool, CgroupError> {
        if relative(parent)?.is_empty() || self.fs.exists(parent) {
            return Ok(false);
        }
        let unit = unit_of(parent)?;
        if !unit.ends_with(".slice") {
            return Err(CgroupError::InvalidPath {
                path: parent.to_string(),
                reason: "a cgroup parent under the systemd driver must be a slice",
            });
        }
        self.bus
            .start_transient_unit(&unit, &slice_properties(&unit))
            .map_err(|err| Self::systemd_error(&unit, err))?;
        self.wait_for(&unit, "its cgroup to appear", || self.fs.exists(parent))?;
        Ok(true)
    }

    fn create(&self, path: &str) -> Result<(), CgroupError> {
        let unit = unit_of(path)?;
        if unit.ends_with(".slice") {
            self.ensure_parent(path)?;
        }
        // A scope is started with its first process, in add_process.
        Ok(())
    }

    fn add_process(&self, path: &str, pid: i32) -> Result<(), CgroupError> {
        let unit = unit_of(path)?;
        let raw_pid = u32::try_from(pid)
            .ok()
            .filter(|p| *p > 0)
            .ok_or(CgroupError::InvalidPid(pid))?;
        if !unit.ends_with(".scope") {
            return Err(CgroupError::InvalidPath {
                path: path.to_string(),
                reason: "processes go into scopes, never directly into a slice",
            });
        }
        if self.fs.exists(path) {
            return self.fs.add_process(path, pid);
        }
        let slice = parent_slice_of(path)?;
        self.bus
            .start_transient_unit(&unit, &scope_properties(&unit, &slice, raw_pid))
            .map_err(|err| Self::systemd_error(&unit, err))?;
        self.wait_for(&unit, "the process to be in its cgroup", || {
            self.fs.pids(path).is_ok_and(|pids| pids.contains(&pid))
        })
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        let pids = self.fs.subtree_pids(path)?;
        if !pids.is_empty() {
            return Err(CgroupError::Busy {
                path: path.to_string(),
                pids,
            });
        }
        let unit = unit_of(path)?;
        self.stop(path, &unit)
    }

    fn kill(&self, path: &str) -> Result<(), CgroupError> {
        // systemd's KillUnit would also do, but only for a unit it knows:
        // the files reach a scope whose unit is already gone as well.
        self.fs.kill(path)
    }

    fn remove_if_empty(&self, path: &str) -> Result<bool, CgroupError> {
        if !self.fs.exists(path) {
            return Ok(false);
        }
        if !self.fs.subtree_pids(path)?.is_empty() || self.fs.has_children(path)? {
            return Ok(false);
        }
        let unit = unit_of(path)?;
        self.stop(path, &unit)?;
        Ok(true)
    }

    fn exists(&self, path: &str) -> bool {
        self.fs.exists(path)
    }

    fn pids(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        self.fs.pids(path)
    }

    fn subtree_pids(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        self.fs.subtree_pids(path)
    }

    fn has_children(&self, path: &str) -> Result<bool, CgroupError> {
        self.fs.has_children(path)
    }

    /// The unit's properties first, so systemd keeps the new limits across
    /// a daemon-reload; then the files, for what properties cannot say
    /// (v1's memory+swap, in the order the kernel accepts).
    fn update(&self, path: &str, update: &ResourceUpdate) -> Result<(), CgroupError> {
        let unit = unit_of(path)?;
        // cgroup v2's property names differ from v1's.
        let unified = self.fs.layout() == Layout::Unified;
        let props = crate::systemd_resources::unit_properties(update, unified);
        if !props.is_empty() {
            self.bus
                .set_unit_properties(&unit, &props)
                .map_err(|err| Self::systemd_error(&unit, err))?;
        }
        self.fs.update(path, update)
    }

    /// On v2 the container's scope gets `DevicePolicy=`/`DeviceAllow=`, so
    /// systemd's own filter (kept across a daemon-reload) agrees with the
    /// eBPF program the cgroupfs side attaches, which holds the exact
    /// rules. On v1 hosts a container's cgroups are plain dirs in its pod's
    /// slice (libcontainer's systemd support is v2 only): no unit to set.
    fn restrict_devices(
        &self,
        path: &str,
        policy: &crate::devices::DevicePolicy,
    ) -> Result<(), CgroupError> {
        if self.fs.layout() == Layout::Unified {
            let unit = unit_of(path)?;
            if unit.ends_with(".scope") {
                self.bus
                    .set_unit_properties(&unit, &policy.systemd_properties())
                    .map_err(|err| Self::systemd_error(&unit, err))?;
            }
        }
        self.fs.restrict_devices(path, policy)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::fake::FakeManager;
    use crate::naming::expand_slice;

    /// systemd as far as berth sees it: starting a slice makes its cgroup,
    /// starting a scope makes its cgroup in its slice with its process,
    /// stopping removes the unit's cgroup.
    struct FakeBus {
        fs: Arc<FakeManager>,
        calls: Mutex<Vec<String>>,
        started: Mutex<Vec<(String, String)>>,
    }

    impl FakeBus {
        fn new(fs: Arc<FakeManager>) -> Arc<Self> {
            Arc::new(Self {
                fs,
                calls: Mutex::default(),
                started: Mutex::default(),
            })
        }
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    impl SystemdBus for Arc<FakeBus> {
        fn start_transient_unit(&self, name: &str, props: &[UnitProperty]) -> Result<(), BusError> {
            self.calls.lock().unwrap().push(format!("start {name}"));
            let path = if name.ends_with(".slice") {
                expand_slice(name).unwrap()
            } else {
                let slice = props
                    .iter()
                    .find_map(|p| match p {
                        UnitProperty::Str("Slice", s) => Some(s.clone()),
                        _ => None,
                    })
                    .unwrap();
                let base = expand_slice(&slice).unwrap();
                format!("{}/{name}", base.trim_end_matches('/'))
            };
            self.fs.create(&path).unwrap();
            for prop in props {
                if let UnitProperty::Pids(pids) = prop {
                    for pid in pids {
                        self.fs.put_process(&path, *pid as i32);
                    }
                }
            }
            self.started.lock().unwrap().push((name.to_string(), path));
            Ok(())
        }
        fn stop_unit(&self, name: &str) -> Result<(), BusError> {
            self.calls.lock().unwrap().push(format!("stop {name}"));
            let started = self.started.lock().unwrap();
            let Some((_, path)) = started.iter().find(|(unit, _)| unit == name) else {
                return Err(BusError::NoSuchUnit(name.to_string()));
            };
            self.fs.remove(path).unwrap();
            Ok(())
        }
        fn reset_failed_unit(&self, name: &str) -> Result<(), BusError> {
            Err(BusError::NoSuchUnit(name.to_string()))
        }
        fn set_unit_properties(&self, name: &str, props: &[UnitProperty]) -> Result<(), BusError> {
            let names: Vec<&str> = props
                .iter()
                .map(|p| match p {
                    UnitProperty::U64(key, _) | UnitProperty::Bytes(key, _) => *key,
                    _ => "?",
                })
                .collect();
            self.calls
                .lock()
                .unwrap()
                .push(format!("set {name} {}", names.join(",")));
            Ok(())
        }
    }

    fn manager(existing: &[&str]) -> (SystemdManager, Arc<FakeBus>, Arc<FakeManager>) {
        let fs = Arc::new(FakeManager::with_existing(existing));
        let bus = FakeBus::new(fs.clone());
        let manager = SystemdManager::new(Box::new(bus.clone()), fs.clone());
        (manager, bus, fs)
    }

    #[test]
    fn missing_parents_are_started_as_slices_existing_ones_left_alone() {
        let (manager, bus, _) = manager(&["/kubepods.slice"]);
        assert!(!manager.ensure_parent("/kubepods.slice").unwrap());
        assert!(manager.ensure_parent("/test.slice").unwrap());
        assert_eq!(bus.calls(), ["start test.slice"]);
        assert!(manager.exists("/test.slice"));
        assert!(manager.ensure_parent("/berth/x").is_err());
    }

    #[test]
    fn a_scope_starts_with_its_first_process() {
        let (manager, bus, fs) = manager(&["/test.slice"]);
        let scope = "/test.slice/berth-1.scope";
        manager.create(scope).unwrap();
        assert!(bus.calls().is_empty(), "a scope cannot start empty");
        manager.add_process(scope, 42).unwrap();
        assert_eq!(bus.calls(), ["start berth-1.scope"]);
        assert_eq!(fs.pids(scope).unwrap(), [42]);
        assert!(manager.add_process("/test.slice", 43).is_err());
    }

    #[test]
    fn removal_refuses_live_processes_then_stops_the_unit() {
        let (manager, bus, fs) = manager(&["/test.slice"]);
        let scope = "/test.slice/berth-1.scope";
        manager.add_process(scope, 42).unwrap();
        assert!(matches!(
            manager.remove(scope),
            Err(CgroupError::Busy { .. })
        ));
        fs.exit_process(42);
        manager.remove(scope).unwrap();
        assert!(!manager.exists(scope));
        assert_eq!(bus.calls(), ["start berth-1.scope", "stop berth-1.scope"]);
        // Already gone: nothing to do, no error.
        manager.remove(scope).unwrap();
    }

    #[test]
    fn the_tracker_removes_only_the_slices_berth_started() {
        let (manager, bus, _) = manager(&["/kubepods.slice"]);
        let manager: Arc<dyn CgroupManager> = Arc::new(manager);
        let dir = tempfile::tempdir().unwrap();
        let tracker =
            crate::ParentTracker::open(manager.clone(), dir.path().join("p.json")).unwrap();
        let parent = expand_slice("kubepods-burstable-pod1.slice").unwrap();
        tracker.ensure(&parent).unwrap();
        let scope = format!("{parent}/berth-1.scope");
        manager.add_process(&scope, 7).unwrap();
        assert!(tracker.remove_unused_parents().unwrap().is_empty());
        manager.remove(&scope).unwrap_err(); // pid 7 still there
        assert!(manager.exists("/kubepods.slice"));
        assert_eq!(
            bus.calls(),
            [
                "start kubepods-burstable.slice",
                "start kubepods-burstable-pod1.slice",
                "start berth-1.scope"
            ]
        );
    }

    #[test]
    fn updates_set_unit_properties_then_the_files() {
        // The fake's layout is unified.
        let (manager, bus, fs) = manager(&["/test.slice/berth-1.scope"]);
        let scope = "/test.slice/berth-1.scope";
        let update = ResourceUpdate {
            memory_limit: Some(1 << 20),
            cpu_quota: Some(10_000),
            cpu_period: Some(100_000),
            ..Default::default()
        };
        manager.update(scope, &update).unwrap();
        assert_eq!(
            bus.calls(),
            ["set berth-1.scope MemoryMax,CPUQuotaPeriodUSec,CPUQuotaPerSecUSec"]
        );
        assert_eq!(
            fs.calls().last().map(String::as_str),
            Some("update /test.slice/berth-1.scope")
        );
        // Nothing to say to systemd: only the files.
        manager.update(scope, &ResourceUpdate::default()).unwrap();
        assert_eq!(bus.calls().len(), 1);
        assert!(manager
            .update("/test.slice/berth-2.scope", &update)
            .is_err());
    }

    #[test]
    fn units_are_the_last_component() {
        assert_eq!(
            unit_of("/kubepods.slice/kubepods-pod1.slice").unwrap(),
            "kubepods-pod1.slice"
        );
        assert_eq!(
            unit_of("/system.slice/berth-abc.scope").unwrap(),
            "berth-abc.scope"
        );
        assert!(unit_of("/berth/abc").is_err());
        assert!(unit_of("/").is_err());
    }

    #[test]
    fn a_scope_sits_in_the_slice_before_it() {
        assert_eq!(
            parent_slice_of("/a.slice/a-b.slice/berth-1.scope").unwrap(),
            "a-b.slice"
        );
        assert_eq!(parent_slice_of("/berth-1.scope").unwrap(), "-.slice");
    }

    #[test]
    fn scopes_start_with_their_process_delegated_in_their_slice() {
        let props = scope_properties("berth-1.scope", "test.slice", 42);
        assert!(props.contains(&UnitProperty::Pids(vec![42])));
        assert!(props.contains(&UnitProperty::Str("Slice", "test.slice".into())));
        assert!(props.contains(&UnitProperty::Bool("Delegate", true)));
        assert!(props.contains(&UnitProperty::Bool("DefaultDependencies", false)));
        let slice = slice_properties("test.slice");
        assert!(!slice.iter().any(|p| matches!(p, UnitProperty::Pids(_))));
        assert!(slice.contains(&UnitProperty::Bool("MemoryAccounting", true)));
    }
}
