//! Image timings: a cold pull, and warm ImageStatus/ListImages over many
//! stored images.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cri_api::v1::{
    Image, ImageSpec, ImageStatusRequest, ListImagesRequest, PullImageRequest, RemoveImageRequest,
};

use crate::client::Cri;
use crate::record::{ms, Out};

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

fn names(file: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(file).map_err(|err| format!("{}: {err}", file.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

async fn pull(cri: &Cri, image: &str) -> Result<(), String> {
    cri.image
        .clone()
        .pull_image(PullImageRequest {
            image: spec(image),
            auth: None,
            sandbox_config: None,
        })
        .await
        .map(|_| ())
        .map_err(|s| format!("PullImage {image}: {s}"))
}

/// Removes `image` if present, then times its pull; `n` times; records the
/// samples as `metric`, and removes the image at the end if asked.
pub async fn cold_pull(
    cri: &Cri,
    out: &Out,
    image: &str,
    n: usize,
    metric: &str,
    remove_after: bool,
) -> Result<(), String> {
    let mut samples = Vec::new();
    for _ in 0..n {
        remove(cri, image).await?;
        let t = Instant::now();
        pull(cri, image).await?;
        samples.push(ms(t.elapsed()));
    }
    if remove_after {
        remove(cri, image).await?;
    }
    out.write(metric, "ms", &samples)
}

/// ImageStatus of `image`: the stored image, if any.
async fn status(cri: &Cri, image: &str) -> Result<Option<Image>, String> {
    Ok(cri
        .image
        .clone()
        .image_status(ImageStatusRequest {
            image: spec(image),
            verbose: false,
        })
        .await
        .map_err(|s| format!("ImageStatus {image}: {s}"))?
        .into_inner()
        .image)
}

/// Removes `image` if it is present.
async fn remove(cri: &Cri, image: &str) -> Result<(), String> {
    if let Some(found) = status(cri, image).await? {
        cri.image
            .clone()
            .remove_image(RemoveImageRequest {
                image: spec(&found.id),
            })
            .await
            .map_err(|s| format!("RemoveImage {image}: {s}"))?;
    }
    Ok(())
}

/// Pulls every image named in `file`, `clients` at a time.
pub async fn pull_all(cri: &Cri, file: &Path, clients: usize) -> Result<(), String> {
    let list = Arc::new(names(file)?);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let (cri, list, next) = (cri.clone(), list.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(image) = list.get(i) else {
                    return Ok::<(), String>(());
                };
                pull(&cri, image).await?;
            }
        }));
    }
    for task in tasks {
        task.await.map_err(|err| err.to_string())??;
    }
    Ok(())
}

/// Times ImageStatus of each image in `file` and `n` ListImages.
pub async fn warm(cri: &Cri, out: &Out, file: &Path, n: usize) -> Result<(), String> {
    let list = names(file)?;
    let mut ic = cri.image.clone();
    let mut timings = Vec::new();
    for image in &list {
        let t = Instant::now();
        let found = status(cri, image).await?;
        timings.push(ms(t.elapsed()));
        if found.is_none() {
            return Err(format!("ImageStatus {image}: not stored"));
        }
    }
    let mut listing = Vec::new();
    let mut count = 0;
    for _ in 0..n {
        let t = Instant::now();
        count = ic
            .list_images(ListImagesRequest { filter: None })
            .await
            .map_err(|s| format!("ListImages: {s}"))?
            .into_inner()
            .images
            .len();
        listing.push(ms(t.elapsed()));
    }
    if count < list.len() {
        return Err(format!(
            "ListImages: {count} images, expected at least {}",
            list.len()
        ));
    }
    out.write("image/ImageStatus warm", "ms", &timings)?;
    out.write("image/ListImages warm", "ms", &listing)
}
