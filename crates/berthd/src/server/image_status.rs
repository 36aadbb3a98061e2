//! `ImageStatus`, and a store record in CRI terms (`ListImages` shares it).

use std::collections::{HashMap, HashSet};

use berth_image::store::ImageRecord;
use cri_api::v1::{Image, ImageSpec, ImageStatusRequest, ImageStatusResponse, Int64Value};
use tonic::Status;

use super::CriService;

impl CriService {
    pub(super) async fn serve_image_status(
        &self,
        request: ImageStatusRequest,
    ) -> Result<ImageStatusResponse, Status> {
        let name = request.image.map(|spec| spec.image).unwrap_or_default();
        if name.is_empty() {
            return Err(Status::invalid_argument("image.image must name an image"));
        }
        let store = self.context().images.store().clone();
        let Some(record) = store.resolve(&name) else {
            // An absent image is an empty answer, not an error (CRI).
            return Ok(ImageStatusResponse::default());
        };
        let mut info = HashMap::new();
        if request.verbose {
            let config = store
                .blob_path(&record.id)
                .ok()
                .and_then(|path| std::fs::read(path).ok())
                .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
                .unwrap_or(serde_json::Value::Null);
            let verbose = serde_json::json!({
                "id": record.id,
                "manifestDigest": record.manifest_digest,
                "layers": record.layers,
                "imageSpec": config,
            });
            info.insert("info".to_string(), verbose.to_string());
        }
        let pinned = self.pinned_image_ids().contains(&record.id);
        Ok(ImageStatusResponse {
            image: Some(to_cri_image(&record, pinned)),
            info,
        })
    }
}

impl CriService {
    /// The ids of the images the config's `pinned_images` name now (a tag
    /// moved to another image moves the pin with it).
    pub(super) fn pinned_image_ids(&self) -> HashSet<String> {
        let context = self.context();
        let store = context.images.store();
        context
            .config
            .pinned_images
            .iter()
            .filter_map(|name| store.resolve(name))
            .map(|record| record.id)
            .collect()
    }
}

/// A store record as a CRI `Image`; `pinned` by the config.
pub(super) fn to_cri_image(record: &ImageRecord, pinned: bool) -> Image {
    let (uid, username) = image_user(&record.user);
    Image {
        id: record.id.clone(),
        repo_tags: record.repo_tags.clone(),
        repo_digests: record.repo_digests.clone(),
        size: record.size,
        uid: uid.map(|value| Int64Value { value }),
        username,
        spec: Some(ImageSpec {
            image: record.id.clone(),
            ..Default::default()
        }),
        pinned: record.pinned || pinned,
    }
}

/// The user an image config names, split the way kubelet expects: a
/// numeric user becomes `uid`, a name becomes `username`; any `:group`
/// part is dropped. kubelet uses these to enforce `runAsNonRoot`.
pub(super) fn image_user(user: &str) -> (Option<i64>, String) {
    let user = user.split(':').next().unwrap_or_default();
    if user.is_empty() {
        return (None, String::new());
    }
    match user.parse::<i64>() {
        Ok(uid) => (Some(uid), String::new()),
        Err(_) => (None, user.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_user_forms() {
        assert_eq!(image_user(""), (None, String::new()));
        assert_eq!(image_user("1002"), (Some(1002), String::new()));
        assert_eq!(image_user("1003:1004"), (Some(1003), String::new()));
        assert_eq!(image_user("www-data"), (None, "www-data".to_string()));
        assert_eq!(image_user("www-data:1004"), (None, "www-data".to_string()));
    }
}
