//! Container and sandbox ids.

use std::io::{self, Read};

/// A random 64-hex-digit id, like containerd's. A failed read of the
/// kernel's randomness is an error, never an id of zeros.
pub fn new_id() -> io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_64_hex_and_differ() {
        let id = new_id().expect("id");
        assert_eq!(id.len(), 64);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(id, new_id().expect("id"));
    }
}
