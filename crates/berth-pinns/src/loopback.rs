//! Bringing up `lo` in the pod's new network namespace, right where it is
//! made: what the CNI `loopback` plugin does (it sets the link up, and the
//! kernel adds 127.0.0.1 and ::1), without exec'ing that plugin on every
//! RunPodSandbox, about 3 ms of a Go binary's start for one ioctl.

use std::os::fd::AsRawFd;

use nix::libc;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use crate::{sys, PinError};

/// Sets `lo` of the calling thread's network namespace up.
pub fn up() -> Result<(), PinError> {
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(sys("socket for lo"))?;
    let mut request = lo_flags(&sock).map_err(sys("reading the flags of lo"))?;
    // SAFETY: after SIOCGIFFLAGS the union holds the flags.
    unsafe { request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads name and flags from `request`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &request) } != 0 {
        return Err(sys("setting lo up")(nix::Error::last()));
    }
    Ok(())
}

/// An interface request naming `lo`, with its flags read (SIOCGIFFLAGS).
fn lo_flags(sock: &impl AsRawFd) -> nix::Result<libc::ifreq> {
    let mut request = lo_request();
    // SAFETY: SIOCGIFFLAGS reads the name from and writes the flags into
    // `request`, which outlives the call; `sock` is an open socket.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut request) } != 0 {
        return Err(nix::Error::last());
    }
    Ok(request)
}

/// An interface request naming `lo`, the rest zero.
fn lo_request() -> libc::ifreq {
    // SAFETY: ifreq is plain old data; all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sched::{unshare, CloneFlags};

    /// Whether `lo` of the calling thread's network namespace is up.
    fn lo_is_up() -> bool {
        let sock = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let request = lo_flags(&sock).unwrap();
        // SAFETY: the union holds the flags.
        unsafe { request.ifr_ifru.ifru_flags & libc::IFF_UP as libc::c_short != 0 }
    }

    #[test]
    fn a_new_network_namespace_gets_its_lo_up() {
        // A network namespace is per thread: this one's is dropped with it.
        std::thread::spawn(|| {
            if unshare(CloneFlags::CLONE_NEWNET).is_err() {
                eprintln!("skipped: cannot make a network namespace here");
                return;
            }
            assert!(!lo_is_up(), "lo starts down in a new namespace");
            up().unwrap();
            assert!(lo_is_up());
        })
        .join()
        .unwrap();
    }
}
