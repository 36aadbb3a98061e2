//! Pod networking for berth.
//!
//! - [`cni`]: a CNI client (the libcni equivalent) that loads the pod
//!   network configuration and runs its plugins for ADD and DEL.
//! - [`dns`]: the per-pod `resolv.conf`, `hosts` and `hostname` files,
//!   built by pure functions and written atomically.

#![forbid(unsafe_code)]

pub mod cni;
pub mod dns;
