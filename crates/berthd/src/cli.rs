//! Command-line interface.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Overrides;

/// berthd's version and the git commit it was built from.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BERTH_GIT_COMMIT"),
    ")"
);

/// berth: a Kubernetes CRI v1 container runtime.
#[derive(Debug, Parser)]
#[command(name = "berthd", version = VERSION, about)]
pub struct Cli {
    /// Config file [default: /etc/berth/runtime-config.toml; built-in
    /// defaults when that file is absent]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Unix socket to serve CRI on (overrides `listen`)
    #[arg(long, global = true, value_name = "PATH")]
    pub listen: Option<PathBuf>,

    /// Directory for persistent data (overrides `root_dir`)
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Directory for runtime state (overrides `state_dir`)
    #[arg(long, global = true, value_name = "DIR")]
    pub state: Option<PathBuf>,

    /// Log filter, e.g. `debug` or `berthd=trace` (overrides RUST_LOG and `log_level`)
    #[arg(long, global = true, value_name = "FILTER")]
    pub log_level: Option<String>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the effective configuration as TOML and exit
    Config {
        #[command(subcommand)]
        what: Option<ConfigCommand>,
    },
    /// Manage the image store
    Images {
        #[command(subcommand)]
        command: ImagesCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// Import the images of a docker-archive (`docker save`) or OCI archive
    /// tarball into the store of the root directory (berthd must not be
    /// running on it)
    Import {
        /// The tarball
        file: PathBuf,
        /// Reference to record for an archive holding a single image
        /// (e.g. `registry.example/app:v1`), in place of the archive's names
        #[arg(long, value_name = "REFERENCE")]
        name: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the commented default configuration (every key, set to its
    /// default), e.g. to start /etc/berth/runtime-config.toml from
    Default,
}

impl Cli {
    /// The config values the flags replace.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            root_dir: self.root.clone(),
            state_dir: self.state.clone(),
        }
    }
}
