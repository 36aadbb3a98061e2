//! A fake [`HostLookup`] for the unit tests: a host made of maps.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::host::{DeviceKind, HostDevice, HostLookup, HostPropagation};

#[derive(Default)]
pub struct FakeHost {
    /// Existing paths and what they resolve to.
    pub paths: HashMap<PathBuf, PathBuf>,
    /// Mount propagation per resolved path; absent means private.
    pub propagation: HashMap<PathBuf, HostPropagation>,
    pub devices: HashMap<PathBuf, Vec<HostDevice>>,
    pub profiles: HashMap<PathBuf, String>,
    pub hostname: String,
    /// Loaded AppArmor profiles; `None`: the list cannot be read.
    pub apparmor_profiles: Option<Vec<String>>,
}

impl FakeHost {
    pub fn new() -> Self {
        Self {
            hostname: "node-1".into(),
            apparmor_profiles: Some(Vec::new()),
            ..Default::default()
        }
    }

    /// `path` exists and is not a symlink.
    pub fn with_path(mut self, path: &str) -> Self {
        self.paths.insert(path.into(), path.into());
        self
    }

    /// `path` is a symlink to `target`.
    pub fn with_link(mut self, path: &str, target: &str) -> Self {
        self.paths.insert(path.into(), target.into());
        self
    }

    pub fn with_propagation(mut self, path: &str, propagation: HostPropagation) -> Self {
        self.propagation.insert(path.into(), propagation);
        self
    }

    /// A character device node `path` with numbers `major:minor`.
    pub fn with_char_device(mut self, path: &str, major: i64, minor: i64) -> Self {
        let device = char_device(path, major, minor);
        self.devices.insert(path.into(), vec![device]);
        self
    }

    /// A directory `dir` holding the given device nodes.
    pub fn with_device_dir(mut self, dir: &str, devices: Vec<HostDevice>) -> Self {
        self.devices.insert(dir.into(), devices);
        self
    }

    /// The kernel has the AppArmor profile `name` loaded.
    pub fn with_apparmor_profile(mut self, name: &str) -> Self {
        self.apparmor_profiles
            .get_or_insert_with(Vec::new)
            .push(name.into());
        self
    }

    pub fn with_profile(mut self, path: &str, contents: &str) -> Self {
        self.profiles.insert(path.into(), contents.into());
        self
    }
}

pub fn char_device(path: &str, major: i64, minor: i64) -> HostDevice {
    HostDevice {
        path: path.into(),
        kind: DeviceKind::Char,
        major,
        minor,
        file_mode: 0o666,
        uid: 0,
        gid: 0,
    }
}

fn not_found() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "No such file or directory")
}

impl HostLookup for FakeHost {
    fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        self.paths.get(path).cloned().ok_or_else(not_found)
    }

    fn propagation(&self, path: &Path) -> io::Result<HostPropagation> {
        Ok(self
            .propagation
            .get(path)
            .copied()
            .unwrap_or(HostPropagation::Private))
    }

    fn devices(&self, path: &Path) -> io::Result<Vec<HostDevice>> {
        self.devices.get(path).cloned().ok_or_else(not_found)
    }

    fn read_profile(&self, path: &Path) -> io::Result<String> {
        self.profiles.get(path).cloned().ok_or_else(not_found)
    }

    fn hostname(&self) -> io::Result<String> {
        Ok(self.hostname.clone())
    }

    fn apparmor_profile_loaded(&self, name: &str) -> io::Result<bool> {
        match &self.apparmor_profiles {
            Some(loaded) => Ok(loaded.iter().any(|profile| profile == name)),
            None => Err(io::Error::new(io::ErrorKind::PermissionDenied, "denied")),
        }
    }
}
