//! Image references as CRI clients send them, normalized the way containerd
//! does (`busybox` → `docker.io/library/busybox:latest`).

use oci_client::Reference;

/// The reference could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("invalid image reference {reference:?}: {reason}")]
pub struct InvalidReference {
    pub reference: String,
    pub reason: String,
}

/// Parses and normalizes a reference: Docker Hub short names gain
/// `docker.io/` and `library/`, and a reference with neither tag nor digest
/// gains `:latest`.
pub fn parse(reference: &str) -> Result<Reference, InvalidReference> {
    let invalid = |reason: String| InvalidReference {
        reference: reference.to_string(),
        reason,
    };
    if reference.is_empty() {
        return Err(invalid("it is empty".to_string()));
    }
    if reference != reference.trim() {
        return Err(invalid("it has surrounding whitespace".to_string()));
    }
    let parsed: Reference = reference.parse().map_err(|err| invalid(format!("{err}")))?;
    if parsed.repository().bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(invalid("repository names must be lowercase".to_string()));
    }
    if let Some(digest) = parsed.digest() {
        if !is_sha256_digest(digest) {
            return Err(invalid(format!("unsupported digest {digest:?}")));
        }
    }
    Ok(parsed)
}

/// `registry/repository`, the name under which tags and digests are kept.
pub fn repository_name(reference: &Reference) -> String {
    format!("{}/{}", reference.registry(), reference.repository())
}

/// The repo tag a pull of `reference` records (`name:tag`), if it has a tag.
pub fn repo_tag(reference: &Reference) -> Option<String> {
    reference
        .tag()
        .map(|tag| format!("{}:{tag}", repository_name(reference)))
}

/// The repo digest (`name@sha256:...`) of a manifest or index in `reference`'s repository.
pub fn repo_digest(reference: &Reference, digest: &str) -> String {
    format!("{}@{digest}", repository_name(reference))
}

/// Whether `text` is `sha256:` and 64 lowercase hex digits.
pub fn is_sha256_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(is_sha256_hex)
}

/// Whether `text` is 64 lowercase hex digits.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf";

    #[test]
    fn short_names_normalize_like_containerd() {
        let reference = parse("busybox").unwrap();
        assert_eq!(reference.whole(), "docker.io/library/busybox:latest");
        assert_eq!(
            repo_tag(&reference).as_deref(),
            Some("docker.io/library/busybox:latest")
        );
        assert_eq!(parse("user/app:1").unwrap().whole(), "docker.io/user/app:1");
    }

    #[test]
    fn every_reference_form_parses() {
        let tagged = parse("gcr.io/a/b:v1").unwrap();
        assert_eq!((tagged.tag(), tagged.digest()), (Some("v1"), None));

        let digested = parse(&format!("gcr.io/a/b@{DIGEST}")).unwrap();
        assert_eq!((digested.tag(), digested.digest()), (None, Some(DIGEST)));
        assert_eq!(repo_tag(&digested), None);
        assert_eq!(
            repo_digest(&digested, DIGEST),
            format!("gcr.io/a/b@{DIGEST}")
        );

        let both = parse(&format!("localhost:5000/a:v2@{DIGEST}")).unwrap();
        assert_eq!((both.tag(), both.digest()), (Some("v2"), Some(DIGEST)));
        assert_eq!(both.registry(), "localhost:5000");
    }

    #[test]
    fn bad_references_are_rejected_with_the_reference_named() {
        for bad in ["", "UPPER/case", "a b", " busybox", "busybox@sha256:short"] {
            let err = parse(bad).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn digest_checks() {
        assert!(is_sha256_digest(DIGEST));
        assert!(!is_sha256_digest("sha256:ABC"));
        assert!(is_sha256_hex(&DIGEST[7..]));
    }
}
