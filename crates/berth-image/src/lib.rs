//! berth's image service library: resolving references through mirrors,
//! pulling from registries, the content store, and unpacking layers into
//! directories that overlayfs stacks as lower dirs.

pub mod hosts;
pub mod hosts_toml;
pub mod import;
pub mod platform;
pub mod pull;
pub mod ranged;
pub mod reference;
mod registry_client;
pub mod store;
mod topdir;
pub mod unpack;

pub use oci_client::secrets::RegistryAuth;
