//! berth's integration tests, one binary: each module starts real berthd
//! processes on their own sockets, roots and networks (see `support/`), and
//! speaks CRI to them. Run as root; `cargo test -p berth-tests -- <module>`
//! runs one module.

#![forbid(unsafe_code)]

mod cdi;
mod chaos;
mod checkpoints;
mod containers;
mod crash_safety;
mod debug_target;
mod envs;
mod failures;
mod fuzz;
mod hostile;
mod image_import;
mod image_pull;
mod image_volumes;
mod isolation;
mod metrics;
mod registry_hosts;
mod runtime_handlers;
mod runtime_info;
mod sandbox;
mod startup;
mod stats;
mod streaming;
mod user_namespaces;
