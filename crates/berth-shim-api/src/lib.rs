//! The contract between berthd and berth-shim, without the shim: berthd
//! depends on this crate alone, so it never links libcontainer, and a change
//! inside the shim does not rebuild the daemon.
//!
//! - [`protocol`]: the JSON-lines requests and answers on `<dir>/shim.sock`,
//!   the readiness line and the exit file.
//! - [`client`]: a blocking client for that socket, with fd passing for
//!   interactive exec sessions.
//! - [`attach`]: the frames on `<dir>/attach.sock`.
//! - [`files`]: the paths the shim leaves in its directory.
//! - [`pty`]: resizing a pty master, which both ends do.
//! - [`raw_env`]: env values that are not UTF-8, beside the bundle's spec.

pub mod attach;
pub mod client;
pub mod files;
pub mod protocol;
pub mod pty;
pub mod raw_env;
pub mod timestamp;
