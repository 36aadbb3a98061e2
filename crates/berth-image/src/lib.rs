//! berth's image service library: resolving references through mirrors,
//! pulling from registries, the content store, and unpacking layers into
//! directories that overlayfs stacks as lower dirs.

pub mod hosts;
mod manifest_get;
pub mod platform;
pub mod pull;
pub mod reference;
pub mod store;
mod topdir;
pub mod unpack;

pub use oci_client::secrets::RegistryAuth;
