//! Containers: their root filesystems, and (as the container RPCs land)
//! their records and shims.

pub mod rootfs;
