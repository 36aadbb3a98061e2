//! `PullImage`: fetch an image through the configured mirrors into the store.

use base64::Engine;
use berth_image::pull::PullError;
use berth_image::RegistryAuth;
use cri_api::v1::{AuthConfig, PullImageRequest, PullImageResponse};
use tonic::Status;

use super::CriService;

impl CriService {
    pub(super) async fn serve_pull_image(
        &self,
        request: PullImageRequest,
    ) -> Result<PullImageResponse, Status> {
        let image = request
            .image
            .as_ref()
            .map(|spec| spec.image.clone())
            .unwrap_or_default();
        if image.is_empty() {
            return Err(Status::invalid_argument(
                "image.image must name the image to pull",
            ));
        }
        let auth = registry_auth(request.auth.as_ref())?;
        // A client that gives up cancels the pull, as with containerd: a
        // pull finishing after the client moved on would resurrect an image
        // it may already have removed. Layers finished so far are kept.
        let started = std::time::Instant::now();
        let _in_progress = self.context().metrics.pull_in_progress();
        let pulled = self.context().images.pull(&image, &auth).await;
        self.context().metrics.observe_pull(
            pulled.as_ref().ok().map(|record| record.size),
            started.elapsed().as_secs_f64(),
        );
        let record = pulled.map_err(pull_status)?;
        Ok(PullImageResponse {
            image_ref: record.id,
        })
    }
}

/// CRI credentials as registry auth: `username`/`password` first, then
/// `auth` (base64 of `username:password`), then `registry_token` (sent as a
/// bearer token). No credentials means an anonymous pull.
fn registry_auth(auth: Option<&AuthConfig>) -> Result<RegistryAuth, Status> {
    let Some(auth) = auth else {
        return Ok(RegistryAuth::Anonymous);
    };
    if !auth.username.is_empty() || !auth.password.is_empty() {
        return Ok(RegistryAuth::Basic(
            auth.username.clone(),
            auth.password.clone(),
        ));
    }
    if !auth.auth.is_empty() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.auth.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                Status::invalid_argument("auth.auth is not base64 of \"username:password\"")
            })?;
        let (username, password) = decoded.split_once(':').ok_or_else(|| {
            Status::invalid_argument("auth.auth must decode to \"username:password\"")
        })?;
        return Ok(RegistryAuth::Basic(
            username.to_string(),
            password.to_string(),
        ));
    }
    if !auth.registry_token.is_empty() {
        // It goes into an `Authorization: Bearer` header, which the client
        // library builds with an unwrap: a newline or non-ASCII would panic.
        if !auth.registry_token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Status::invalid_argument(
                "auth.registry_token must be printable ASCII without spaces",
            ));
        }
        return Ok(RegistryAuth::Bearer(auth.registry_token.clone()));
    }
    if !auth.identity_token.is_empty() {
        return Err(Status::invalid_argument(
            "auth.identity_token (an OAuth refresh token) is not supported; send username/password or registry_token",
        ));
    }
    Ok(RegistryAuth::Anonymous)
}

/// The gRPC status for a failed pull.
fn pull_status(err: PullError) -> Status {
    let message = err.to_string();
    match err {
        PullError::InvalidReference(_) => {
            Status::invalid_argument(format!("image.image: {message}"))
        }
        PullError::Resolve {
            not_found: true, ..
        } => Status::not_found(message),
        // No registry answered (refused, unreachable, timed out), or one
        // failed mid-transfer: worth retrying, as UNAVAILABLE says.
        PullError::Resolve { .. } | PullError::Fetch { .. } => Status::unavailable(message),
        PullError::NoMatchingPlatform { .. } => Status::not_found(message),
        // The registry served something that is not a valid image.
        PullError::BadContent { .. } => Status::failed_precondition(message),
        PullError::Unpack { .. } | PullError::Store(_) => Status::internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(f: impl FnOnce(&mut AuthConfig)) -> AuthConfig {
        let mut auth = AuthConfig::default();
        f(&mut auth);
        auth
    }

    fn basic(auth: RegistryAuth) -> (String, String) {
        match auth {
            RegistryAuth::Basic(user, password) => (user, password),
            other => panic!("not basic: {other:?}"),
        }
    }

    #[test]
    fn no_auth_is_anonymous() {
        assert!(matches!(
            registry_auth(None).unwrap(),
            RegistryAuth::Anonymous
        ));
        assert!(matches!(
            registry_auth(Some(&AuthConfig::default())).unwrap(),
            RegistryAuth::Anonymous
        ));
    }

    #[test]
    fn username_and_password() {
        let auth = config(|a| {
            a.username = "u".into();
            a.password = "p:w".into();
        });
        assert_eq!(
            basic(registry_auth(Some(&auth)).unwrap()),
            ("u".into(), "p:w".into())
        );
    }

    #[test]
    fn base64_auth_field() {
        let auth = config(|a| a.auth = "dXNlcjpwYTpzcw==".into()); // user:pa:ss
        assert_eq!(
            basic(registry_auth(Some(&auth)).unwrap()),
            ("user".into(), "pa:ss".into())
        );
        let bad = config(|a| a.auth = "!!!".into());
        let err = registry_auth(Some(&bad)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("auth.auth"));
    }

    #[test]
    fn registry_token_is_bearer_and_identity_token_is_refused() {
        let auth = config(|a| a.registry_token = "tok".into());
        assert!(
            matches!(registry_auth(Some(&auth)).unwrap(), RegistryAuth::Bearer(t) if t == "tok")
        );
        let auth = config(|a| a.registry_token = "tok\nen".into());
        let err = registry_auth(Some(&auth)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("registry_token"));
        let auth = config(|a| a.identity_token = "refresh".into());
        let err = registry_auth(Some(&auth)).unwrap_err();
        assert!(err.message().contains("identity_token"));
    }

    #[test]
    fn not_found_maps_to_not_found() {
        let err = PullError::Resolve {
            reference: "x".into(),
            failures: vec![("x".into(), "manifest unknown".into())],
            not_found: true,
        };
        assert_eq!(pull_status(err).code(), tonic::Code::NotFound);
    }

    #[test]
    fn an_unreachable_registry_is_unavailable_not_unknown() {
        let err = PullError::Resolve {
            reference: "127.0.0.1:1/x:latest".into(),
            failures: vec![("127.0.0.1:1".into(), "connection refused".into())],
            not_found: false,
        };
        assert_eq!(pull_status(err).code(), tonic::Code::Unavailable);
    }
}
