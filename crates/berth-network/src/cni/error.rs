//! Errors of the CNI client.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// The CNI operation a plugin is asked to perform (`CNI_COMMAND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CniCommand {
    /// Attach the container to the network.
    Add,
    /// Detach the container and release what ADD took. Must be idempotent.
    Del,
}

impl CniCommand {
    /// The value of `CNI_COMMAND`.
    pub fn as_str(self) -> &'static str {
        match self {
            CniCommand::Add => "ADD",
            CniCommand::Del => "DEL",
        }
    }
}

impl fmt::Display for CniCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a plugin reported when it exited with a non-zero status.
///
/// The CNI spec has a failing plugin print `{"code": .., "msg": .., "details": ..}`
/// on stdout. When it printed something else, `code` is `None` and `msg` holds
/// that output instead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginFailure {
    /// The process exit status (`None` when killed by a signal).
    pub exit_code: Option<i32>,
    /// The CNI error code (1-99 are reserved by the spec; 100+ are plugin-specific).
    pub code: Option<u64>,
    /// The error message.
    pub msg: String,
    /// Extra detail the plugin gave, if any.
    pub details: String,
    /// What the plugin wrote to stderr (trimmed).
    pub stderr: String,
}

impl fmt::Display for PluginFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(f, "CNI error code {code}")?,
            None => match self.exit_code {
                Some(status) => write!(f, "exit status {status}")?,
                None => f.write_str("killed by a signal")?,
            },
        }
        if !self.msg.is_empty() {
            write!(f, ": {}", self.msg)?;
        }
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        if !self.stderr.is_empty() {
            write!(f, "; stderr: {}", self.stderr)?;
        }
        Ok(())
    }
}

/// Everything that can go wrong loading CNI configuration or running plugins.
#[derive(Debug, Error)]
pub enum CniError {
    /// The configuration directory could not be listed.
    #[error("failed to read CNI config directory {dir}: {source}")]
    ReadConfDir {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A configuration file could not be read.
    #[error("failed to read CNI config {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A configuration file is not valid JSON.
    #[error("failed to parse CNI config {path}: {source}")]
    ParseConfig {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A configuration file is JSON but not a usable network configuration.
    #[error("invalid CNI config {path}: {reason}")]
    InvalidConfig { path: PathBuf, reason: String },
    /// No executable named after the plugin's `type` is in any bin directory.
    #[error("CNI plugin {plugin:?} not found in {dirs}")]
    PluginNotFound { plugin: String, dirs: String },
    /// The plugin binary exists but could not be started.
    #[error("failed to start CNI plugin {path}: {source}")]
    Spawn {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Writing the plugin's stdin, reading its output or waiting for it failed.
    #[error("failed to run CNI plugin {plugin} {command}: {source}")]
    PluginIo {
        plugin: String,
        command: CniCommand,
        #[source]
        source: io::Error,
    },
    /// The plugin did not finish in time; it and its process group were killed.
    #[error("CNI plugin {plugin} {command} timed out after {timeout:?} and was killed")]
    Timeout {
        plugin: String,
        command: CniCommand,
        timeout: Duration,
    },
    /// The plugin exited with a non-zero status.
    #[error("CNI plugin {plugin} {command} failed: {failure}")]
    PluginFailed {
        plugin: String,
        command: CniCommand,
        failure: PluginFailure,
    },
    /// The plugin succeeded but its result is not a CNI result.
    #[error("CNI plugin {plugin} {command} returned an invalid result: {reason}")]
    InvalidResult {
        plugin: String,
        command: CniCommand,
        reason: String,
    },
}
