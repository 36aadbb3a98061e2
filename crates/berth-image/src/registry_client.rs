//! Requests to one registry endpoint: manifests with a size cap, blobs as
//! streams, the distribution auth dance (a 401's `WWW-Authenticate` asks
//! for basic credentials or a bearer token from a token server), and the
//! endpoint's own TLS (extra CAs, a client certificate, skip_verify),
//! headers and API prefix from the host configuration.
//!
//! A manifest's size is checked against the cap before its body is read
//! (Content-Length) and while it is read (chunk by chunk), so a hostile
//! registry cannot fill memory.

use futures_util::Stream;
use oci_client::secrets::RegistryAuth;
use std::ops::Range;

use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_RANGE, RANGE,
    WWW_AUTHENTICATE,
};
use reqwest::{Response, StatusCode, Url};
use tokio::sync::Mutex;

use crate::hosts::Endpoint;
use crate::pull::RegistryTimeouts;
use crate::ranged::{self, ByteStream};

/// The largest token response accepted.
const MAX_TOKEN_BYTES: u64 = 1 << 20;

/// A failed request: the message, and whether the registry said the
/// content does not exist.
pub type GetError = (String, bool);

/// Talks to one endpoint for one repository.
pub struct RegistryClient {
    http: reqwest::Client,
    endpoint: Endpoint,
    repository: String,
    auth: RegistryAuth,
    /// What requests carry, once a 401 said what the registry wants.
    credentials: Mutex<Credentials>,
}

/// What a request authenticates with.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Credentials {
    Bearer(String),
    Basic(String, String),
    None,
}

impl RegistryClient {
    /// A client with the endpoint's TLS settings and headers.
    pub fn new(
        endpoint: &Endpoint,
        repository: &str,
        auth: &RegistryAuth,
        timeouts: RegistryTimeouts,
    ) -> Result<Self, GetError> {
        let http = http_client(endpoint, timeouts).map_err(|err| (err, false))?;
        // A bearer token given by the client is sent from the start.
        let credentials = match auth {
            RegistryAuth::Bearer(token) => Credentials::Bearer(token.clone()),
            _ => Credentials::None,
        };
        Ok(Self {
            http,
            endpoint: endpoint.clone(),
            repository: repository.to_string(),
            auth: auth.clone(),
            credentials: Mutex::new(credentials),
        })
    }

    /// GETs the manifest `reference` (a digest or tag) names, refusing one
    /// larger than `cap` bytes without reading it whole.
    pub async fn manifest(
        &self,
        reference: &str,
        accepted: &[&str],
        cap: u64,
    ) -> Result<Vec<u8>, GetError> {
        let url = self
            .endpoint
            .url(&self.repository, &format!("manifests/{reference}"));
        let mut response = self.get(&url, Some(&accepted.join(", "))).await?;
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

    /// GETs a blob as a stream of chunks (redirects followed; the
    /// Authorization header is not sent to another host).
    pub async fn blob(
        &self,
        digest: &str,
    ) -> Result<impl Stream<Item = Result<bytes::Bytes, String>>, GetError> {
        let url = self
            .endpoint
            .url(&self.repository, &format!("blobs/{digest}"));
        let response = self.get(&url, None).await?;
        let digest = digest.to_string();
        Ok(futures_util::StreamExt::map(
            response.bytes_stream(),
            move |chunk| chunk.map_err(|err| format!("reading blob {digest}: {err}")),
        ))
    }

    /// GETs the first range of a blob of `total` bytes, to learn whether
    /// the registry (or the object store it redirects to) serves ranges:
    /// a 206 for exactly that range says it does. A 200 is the whole blob,
    /// used as it is; any other answer falls back to a plain GET.
    pub async fn blob_ranged(
        &self,
        digest: &str,
        first: Range<u64>,
        total: u64,
    ) -> Result<BlobBody, GetError> {
        let url = self
            .endpoint
            .url(&self.repository, &format!("blobs/{digest}"));
        let header = ranged::range_header(&first);
        match self.get_with(&url, None, Some(&header)).await {
            Ok(response) if response.status() == StatusCode::PARTIAL_CONTENT => {
                if check_content_range(&response, &first, total).is_ok() {
                    // Ranged requests go where the redirect led; credentials
                    // only to the registry's own host (as reqwest does on a
                    // redirect).
                    let target = RangeTarget {
                        authed: same_origin(response.url(), &url),
                        url: response.url().clone(),
                    };
                    return Ok(BlobBody::Ranged {
                        target,
                        first: body_stream(response, digest),
                    });
                }
                tracing::debug!(
                    blob = digest,
                    "range answer does not match the request, fetching whole"
                );
            }
            Ok(response) if response.status() == StatusCode::OK => {
                return Ok(BlobBody::Whole(body_stream(response, digest)));
            }
            Ok(response) => {
                tracing::debug!(blob = digest, status = %response.status(), "range request refused, fetching whole");
            }
            Err((error, _)) => {
                tracing::debug!(blob = digest, %error, "range request failed, fetching whole");
            }
        }
        let stream = self.blob(digest).await?;
        Ok(BlobBody::Whole(Box::pin(stream)))
    }

    /// GETs `range` of a blob from where [`Self::blob_ranged`] found it;
    /// anything but a 206 for exactly that range is an error.
    pub async fn blob_range(
        &self,
        target: &RangeTarget,
        digest: &str,
        range: Range<u64>,
        total: u64,
    ) -> Result<ByteStream, String> {
        let header = ranged::range_header(&range);
        let response = if target.authed {
            self.get_with(target.url.as_str(), None, Some(&header))
                .await
                .map_err(|(error, _)| error)?
        } else {
            let response = self
                .http
                .get(target.url.clone())
                .header(RANGE, &header)
                .send()
                .await
                .map_err(|err| format!("GET {}: {}", target.url, error_chain(&err)))?;
            if !response.status().is_success() {
                return Err(format!("GET {}: {}", target.url, response.status()));
            }
            response
        };
        if response.status() != StatusCode::PARTIAL_CONTENT {
            return Err(format!(
                "GET {} ({header}): {} instead of 206",
                target.url,
                response.status()
            ));
        }
        check_content_range(&response, &range, total)
            .map_err(|error| format!("GET {} ({header}): {error}", target.url))?;
        Ok(body_stream(response, digest))
    }

    /// A GET that answers a 401 once: with a token or basic credentials as
    /// the registry's challenge asks, then the same request again.
    async fn get(&self, url: &str, accept: Option<&str>) -> Result<Response, GetError> {
        self.get_with(url, accept, None).await
    }

    /// [`Self::get`], with a `Range` header if given.
    async fn get_with(
        &self,
        url: &str,
        accept: Option<&str>,
        range: Option<&str>,
    ) -> Result<Response, GetError> {
        let mut retried = false;
        loop {
            let credentials = self.credentials.lock().await.clone();
            let mut request = self.http.get(url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(range) = range {
                request = request.header(RANGE, range);
            }
            request = match &credentials {
                Credentials::Bearer(token) => {
                    request.header(AUTHORIZATION, format!("Bearer {token}"))
                }
                Credentials::Basic(user, password) => request.basic_auth(user, Some(password)),
                Credentials::None => request,
            };
            let mut response = request
                .send()
                .await
                .map_err(|err| (format!("GET {url}: {}", error_chain(&err)), false))?;
            let status = response.status();
            if status == StatusCode::UNAUTHORIZED && !retried {
                retried = true;
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|value| value.to_str().ok())
                    .map(Challenge::parse);
                if let Some(new) = self.answer(url, challenge).await? {
                    if new != credentials {
                        *self.credentials.lock().await = new;
                        continue;
                    }
                }
            }
            if !status.is_success() {
                // Error bodies are small JSON; read at most a little of one.
                let body = read_capped(&mut response, 4096).await.unwrap_or_default();
                let text = String::from_utf8_lossy(&body).into_owned();
                let not_found = status == StatusCode::NOT_FOUND;
                return Err((format!("GET {url}: {status}: {}", text.trim()), not_found));
            }
            return Ok(response);
        }
    }

    /// The credentials a challenge asks for, if the client can give them.
    async fn answer(
        &self,
        url: &str,
        challenge: Option<Challenge>,
    ) -> Result<Option<Credentials>, GetError> {
        match challenge {
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                let token = self
                    .fetch_token(url, &realm, service.as_deref(), &scope)
                    .await?;
                Ok(Some(Credentials::Bearer(token)))
            }
            Some(Challenge::Basic) => match &self.auth {
                RegistryAuth::Basic(user, password) => {
                    Ok(Some(Credentials::Basic(user.clone(), password.clone())))
                }
                _ => Ok(None),
            },
            _ => Ok(None),
        }
    }

    /// GETs a token from the token server, with basic credentials if any.
    async fn fetch_token(
        &self,
        url: &str,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<String, GetError> {
        let fail = |message: String| (format!("GET {url}: token from {realm}: {message}"), false);
        let mut query = format!("scope={}", query_escape(scope));
        if let Some(service) = service {
            query = format!("service={}&{query}", query_escape(service));
        }
        let separator = if realm.contains('?') { '&' } else { '?' };
        let mut request = self.http.get(format!("{realm}{separator}{query}"));
        if let RegistryAuth::Basic(user, password) = &self.auth {
            request = request.basic_auth(user, Some(password));
        }
        let mut response = request
            .send()
            .await
            .map_err(|err| fail(error_chain(&err)))?;
        let status = response.status();
        let body = read_capped(&mut response, MAX_TOKEN_BYTES)
            .await
            .map_err(fail)?;
        if !status.is_success() {
            return Err(fail(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body).trim()
            )));
        }
        #[derive(serde::Deserialize)]
        struct TokenResponse {
            token: Option<String>,
            access_token: Option<String>,
        }
        let parsed: TokenResponse = serde_json::from_slice(&body)
            .map_err(|err| fail(format!("not a token response: {err}")))?;
        parsed
            .token
            .or(parsed.access_token)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| fail("the response has no token".to_string()))
    }
}

/// A blob's body: the whole blob on one connection, or its first range
/// and where to ask for the others.
pub enum BlobBody {
    Whole(ByteStream),
    Ranged {
        target: RangeTarget,
        first: ByteStream,
    },
}

/// Where the ranged requests of one blob go.
#[derive(Debug, Clone)]
pub struct RangeTarget {
    /// The URL that answered the first range (after redirects).
    url: Url,
    /// Whether it is the registry's own host, which gets the credentials.
    authed: bool,
}

fn body_stream(response: Response, digest: &str) -> ByteStream {
    let digest = digest.to_string();
    Box::pin(futures_util::StreamExt::map(
        response.bytes_stream(),
        move |chunk| chunk.map_err(|err| format!("reading blob {digest}: {err}")),
    ))
}

/// A 206 must cover exactly the range asked for, of a blob of `total`
/// bytes (or of an unstated length).
fn check_content_range(response: &Response, asked: &Range<u64>, total: u64) -> Result<(), String> {
    let value = response
        .headers()
        .get(CONTENT_RANGE)
        .and_then(|value| value.to_str().ok())
        .ok_or("the answer has no Content-Range")?;
    match ranged::parse_content_range(value) {
        Some((range, length)) if range == *asked && length.is_none_or(|length| length == total) => {
            Ok(())
        }
        _ => Err(format!(
            "Content-Range {value:?} is not bytes {}-{}/{total}",
            asked.start,
            asked.end.saturating_sub(1)
        )),
    }
}

/// Same scheme, host and port: what reqwest keeps credentials for on a
/// redirect.
fn same_origin(url: &Url, original: &str) -> bool {
    Url::parse(original).is_ok_and(|original| {
        original.scheme() == url.scheme()
            && original.host_str() == url.host_str()
            && original.port_or_known_default() == url.port_or_known_default()
    })
}

/// The reqwest client of an endpoint: extra roots next to the system's,
/// the client certificate, skip_verify, default headers, timeouts.
fn http_client(endpoint: &Endpoint, timeouts: RegistryTimeouts) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(endpoint.connect_timeout.unwrap_or(timeouts.connect))
        .read_timeout(timeouts.read);
    for pem in &endpoint.tls.ca_pems {
        let certs = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|err| format!("CA of {}: {err}", endpoint.name()))?;
        builder = builder.tls_certs_merge(certs);
    }
    if let Some(identity) = &endpoint.tls.client_identity {
        let identity = reqwest::Identity::from_pem(identity)
            .map_err(|err| format!("client certificate of {}: {err}", endpoint.name()))?;
        builder = builder.identity(identity);
    }
    if endpoint.tls.skip_verify {
        builder = builder.tls_danger_accept_invalid_certs(true);
    }
    let mut headers = HeaderMap::new();
    for (name, value) in endpoint.headers.iter() {
        // Checked when the host file was read.
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
    builder
        .default_headers(headers)
        .build()
        .map_err(|err| format!("HTTP client for {}: {}", endpoint.name(), error_chain(&err)))
}

/// A reqwest error with its causes: "error sending request" alone does
/// not say that the certificate was refused.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text = format!("{text}: {cause_text}");
        }
        source = cause.source();
    }
    text
}

/// What a 401's `WWW-Authenticate` asks for.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
    Basic,
    Other,
}

impl Challenge {
    /// `Bearer realm="...",service="...",scope="..."` or `Basic realm="..."`.
    fn parse(header: &str) -> Challenge {
        let header = header.trim();
        let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Challenge::Basic;
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Challenge::Other;
        }
        let params = auth_params(params);
        let get = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.clone())
        };
        match get("realm") {
            Some(realm) => Challenge::Bearer {
                realm,
                service: get("service"),
                scope: get("scope"),
            },
            None => Challenge::Other,
        }
    }
}

/// `key="value", key=value` pairs; quoted values may hold commas.
fn auth_params(text: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key.trim().trim_start_matches(',').trim().to_string();
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = at + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end.min(quoted.len())..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        params.push((key, value));
        rest = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    params
}

/// Percent-encodes a query value.
fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Reads the body, failing as soon as it passes `cap` bytes.
async fn read_capped(response: &mut Response, cap: u64) -> Result<Vec<u8>, String> {
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
    fn bearer_challenges_parse_with_commas_in_scope() {
        let challenge = Challenge::parse(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(
            challenge,
            Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:a/b:pull,push".into()),
            }
        );
        assert_eq!(
            Challenge::parse("bearer realm=https://t.lan/token, service=reg"),
            Challenge::Bearer {
                realm: "https://t.lan/token".into(),
                service: Some("reg".into()),
                scope: None,
            }
        );
        assert_eq!(Challenge::parse("Basic realm=\"x\""), Challenge::Basic);
        assert_eq!(Challenge::parse("Bearer service=x"), Challenge::Other);
        assert_eq!(Challenge::parse("Negotiate"), Challenge::Other);
    }

    #[test]
    fn query_values_are_escaped() {
        assert_eq!(
            query_escape("repository:a/b:pull,push"),
            "repository%3Aa%2Fb%3Apull%2Cpush"
        );
    }
}
