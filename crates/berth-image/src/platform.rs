//! Choosing this machine's image from a multi-platform index.

use oci_client::manifest::ImageIndexEntry;

/// The platform images are pulled for: always linux, this machine's
/// architecture in OCI naming, and the variant where it matters (arm).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    pub os: &'static str,
    pub architecture: &'static str,
    pub variant: Option<&'static str>,
}

impl Platform {
    /// The platform of the machine berth runs on.
    pub fn host() -> Self {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" => ("ppc64le", None),
            "s390x" => ("s390x", None),
            "riscv64" => ("riscv64", None),
            other => (other, None),
        };
        Self {
            os: "linux",
            architecture,
            variant,
        }
    }

    /// Picks the index entry for this platform: an exact variant match wins,
    /// then an entry without a variant. arm64 images often omit `v8`.
    pub fn select<'a>(&self, entries: &'a [ImageIndexEntry]) -> Option<&'a ImageIndexEntry> {
        let candidates = entries.iter().filter(|entry| {
            entry.platform.as_ref().is_some_and(|platform| {
                platform.os.to_string() == self.os
                    && platform.architecture.to_string() == self.architecture
            })
        });
        let mut fallback = None;
        for entry in candidates {
            let variant = entry
                .platform
                .as_ref()
                .and_then(|platform| platform.variant.as_deref());
            match (variant, self.variant) {
                (Some(found), Some(wanted)) if found == wanted => return Some(entry),
                (None, _) | (Some(_), None) if fallback.is_none() => fallback = Some(entry),
                _ => {}
            }
        }
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::manifest::Platform as IndexPlatform;

    fn entry(digest: &str, os: &str, arch: &str, variant: Option<&str>) -> ImageIndexEntry {
        let platform: IndexPlatform = serde_json::from_value(serde_json::json!({
            "os": os, "architecture": arch, "variant": variant,
        }))
        .unwrap();
        ImageIndexEntry {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            digest: digest.into(),
            size: 1,
            platform: Some(platform),
            annotations: None,
            artifact_type: None,
        }
    }

    fn platform(arch: &'static str, variant: Option<&'static str>) -> Platform {
        Platform {
            os: "linux",
            architecture: arch,
            variant,
        }
    }

    #[test]
    fn picks_os_and_architecture() {
        let entries = [
            entry("arm", "linux", "arm64", Some("v8")),
            entry("win", "windows", "amd64", None),
            entry("amd", "linux", "amd64", None),
        ];
        let chosen = platform("amd64", None).select(&entries).unwrap();
        assert_eq!(chosen.digest, "amd");
    }

    #[test]
    fn variant_match_wins_over_no_variant() {
        let entries = [
            entry("plain", "linux", "arm", None),
            entry("v6", "linux", "arm", Some("v6")),
            entry("v7", "linux", "arm", Some("v7")),
        ];
        assert_eq!(
            platform("arm", Some("v7")).select(&entries).unwrap().digest,
            "v7"
        );
        let only_plain = [entry("plain", "linux", "arm64", None)];
        assert_eq!(
            platform("arm64", Some("v8"))
                .select(&only_plain)
                .unwrap()
                .digest,
            "plain"
        );
    }

    #[test]
    fn wrong_variant_is_not_taken() {
        let entries = [entry("v6", "linux", "arm", Some("v6"))];
        assert!(platform("arm", Some("v7")).select(&entries).is_none());
    }

    #[test]
    fn nothing_for_another_os() {
        let entries = [entry("win", "windows", "amd64", None)];
        assert!(platform("amd64", None).select(&entries).is_none());
    }

    #[test]
    fn host_is_linux() {
        assert_eq!(Platform::host().os, "linux");
    }
}
