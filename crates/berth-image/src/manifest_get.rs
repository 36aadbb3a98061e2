//! Manifest requests of berth's own. oci-client reads a manifest whole
//! into memory before anyone can look at its size, so a hostile registry
//! could send gigabytes; here the size is checked against the cap before
//! the body is read (Content-Length) and while it is read (chunk by
//! chunk). oci-client still does the authentication dance: its token is
//! what these requests carry, and it keeps the token for the blob requests
//! that follow.

use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use reqwest::header::{ACCEPT, AUTHORIZATION};
use reqwest::StatusCode;
use tokio::sync::OnceCell;

use crate::pull::RegistryTimeouts;

/// Fetches manifests from one registry endpoint.
pub struct ManifestGetter {
    http: reqwest::Client,
    scheme: &'static str,
    /// The credentials, worked out once per endpoint.
    authorization: OnceCell<Credentials>,
}

/// A failed manifest request: the message, and whether the registry said
/// the manifest does not exist.
pub type GetError = (String, bool);

impl ManifestGetter {
    pub fn new(plain_http: bool, timeouts: RegistryTimeouts) -> Result<Self, GetError> {
        let http = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            .read_timeout(timeouts.read)
            .build()
            .map_err(|err| (format!("HTTP client: {err}"), false))?;
        Ok(Self {
            http,
            scheme: if plain_http { "http" } else { "https" },
            authorization: OnceCell::new(),
        })
    }

    /// GETs the manifest `remote` names (by digest if it has one, else by
    /// tag), refusing one larger than `cap` bytes without reading it whole.
    pub async fn get(
        &self,
        client: &Client,
        remote: &Reference,
        auth: &RegistryAuth,
        accepted: &[&str],
        cap: u64,
    ) -> Result<Vec<u8>, GetError> {
        let url = manifest_url(self.scheme, remote);
        let authorization = self
            .authorization
            .get_or_try_init(|| async {
                let token = client
                    .auth(remote, auth, RegistryOperation::Pull)
                    .await
                    .map_err(|err| (err.to_string(), false))?;
                Ok::<_, GetError>(authorization(token, auth))
            })
            .await?;
        let mut request = self.http.get(&url).header(ACCEPT, accepted.join(", "));
        match authorization {
            Credentials::Bearer(token) => {
                request = request.header(AUTHORIZATION, format!("Bearer {token}"))
            }
            Credentials::Basic(user, password) => {
                request = request.basic_auth(user, Some(password))
            }
            Credentials::None => {}
        }
        let mut response = request
            .send()
            .await
            .map_err(|err| (format!("GET {url}: {err}"), false))?;
        let status = response.status();
        if !status.is_success() {
            // Error bodies are small JSON; read at most a little of one.
            let body = read_capped(&mut response, 4096).await.unwrap_or_default();
            let text = String::from_utf8_lossy(&body).into_owned();
            let not_found = status == StatusCode::NOT_FOUND;
            return Err((format!("GET {url}: {status}: {}", text.trim()), not_found));
        }
        if let Some(length) = response.content_length() {
            if length > cap {
                return Err((
                    format!("manifest {url} is {length} bytes; the cap is {cap}"),
                    false,
                ));
            }
        }
        read_capped(&mut response, cap)
            .await
            .map_err(|err| (format!("manifest {url}: {err}"), false))
    }
}

/// What a manifest request authenticates with.
#[derive(Debug, PartialEq, Eq)]
enum Credentials {
    Bearer(String),
    Basic(String, String),
    None,
}

/// oci-client's bearer token, or the basic credentials when the registry
/// asked for no token (as oci-client itself falls back).
fn authorization(token: Option<String>, auth: &RegistryAuth) -> Credentials {
    match (token, auth) {
        (Some(token), _) => Credentials::Bearer(token),
        (None, RegistryAuth::Basic(user, password)) => {
            Credentials::Basic(user.clone(), password.clone())
        }
        (None, _) => Credentials::None,
    }
}

/// `<scheme>://<registry>/v2/<repository>/manifests/<digest or tag>`, as
/// the distribution spec names a manifest.
fn manifest_url(scheme: &str, remote: &Reference) -> String {
    let reference = remote.digest().or(remote.tag()).unwrap_or("latest");
    let namespace = remote
        .namespace()
        .map(|ns| format!("?ns={ns}"))
        .unwrap_or_default();
    format!(
        "{scheme}://{}/v2/{}/manifests/{reference}{namespace}",
        remote.resolve_registry(),
        remote.repository()
    )
}

/// Reads the body, failing as soon as it passes `cap` bytes.
async fn read_capped(response: &mut reqwest::Response, cap: u64) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|err| err.to_string())? {
        if (body.len() + chunk.len()) as u64 > cap {
            return Err(format!(
                "the registry sent more than the cap of {cap} bytes"
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_names_the_digest_before_the_tag() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let both =
            Reference::with_digest("r.example:5000".into(), "team/app".into(), digest.clone());
        assert_eq!(
            manifest_url("https", &both),
            format!("https://r.example:5000/v2/team/app/manifests/{digest}")
        );
        let tagged = Reference::with_tag("localhost:5000".into(), "app".into(), "v1".into());
        assert_eq!(
            manifest_url("http", &tagged),
            "http://localhost:5000/v2/app/manifests/v1"
        );
    }

    #[test]
    fn basic_credentials_are_sent_only_without_a_token() {
        let basic = RegistryAuth::Basic("me".into(), "secret".into());
        assert_eq!(
            authorization(None, &basic),
            Credentials::Basic("me".into(), "secret".into())
        );
        assert_eq!(
            authorization(Some("tok".into()), &basic),
            Credentials::Bearer("tok".into())
        );
        assert_eq!(
            authorization(None, &RegistryAuth::Anonymous),
            Credentials::None
        );
    }
}
