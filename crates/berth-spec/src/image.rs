//! The parts of an OCI image config that shape a container.
//!
//! berth's image store hands out `oci_spec::image::ImageConfiguration`;
//! spec generation only needs the runtime defaults inside its `config`, so
//! it takes this small view. Tests build it directly instead of a whole
//! image configuration.

use oci_spec::image::ImageConfiguration;

/// The image's defaults for running it (the `config` object of the image
/// configuration). Empty fields mean the image sets nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageConfigView {
    /// ENTRYPOINT.
    pub entrypoint: Vec<String>,
    /// CMD.
    pub cmd: Vec<String>,
    /// ENV, as `KEY=value` strings.
    pub env: Vec<String>,
    /// WORKDIR.
    pub working_dir: String,
    /// USER: `user`, `uid`, `user:group` or `uid:gid`.
    pub user: String,
    /// STOPSIGNAL, as the image wrote it (`SIGTERM`, `TERM` or `15`).
    pub stop_signal: String,
}

impl From<&ImageConfiguration> for ImageConfigView {
    fn from(image: &ImageConfiguration) -> Self {
        let Some(config) = image.config() else {
            return Self::default();
        };
        let list = |value: &Option<Vec<String>>| value.clone().unwrap_or_default();
        let text = |value: &Option<String>| value.clone().unwrap_or_default();
        Self {
            entrypoint: list(config.entrypoint()),
            cmd: list(config.cmd()),
            env: list(config.env()),
            working_dir: text(config.working_dir()),
            user: text(config.user()),
            stop_signal: text(config.stop_signal()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_copies_the_runtime_defaults() {
        let image: ImageConfiguration = serde_json::from_str(
            r#"{
                "architecture": "amd64", "os": "linux",
                "config": {
                    "User": "www-data:1004", "Env": ["PATH=/bin", "A=1"],
                    "Entrypoint": ["/entry"], "Cmd": ["sh"],
                    "WorkingDir": "/srv", "StopSignal": "SIGQUIT"
                },
                "rootfs": {"type": "layers", "diff_ids": []}
            }"#,
        )
        .unwrap();
        let view = ImageConfigView::from(&image);
        assert_eq!(view.user, "www-data:1004");
        assert_eq!(view.env, ["PATH=/bin", "A=1"]);
        assert_eq!(view.entrypoint, ["/entry"]);
        assert_eq!(view.cmd, ["sh"]);
        assert_eq!(view.working_dir, "/srv");
        assert_eq!(view.stop_signal, "SIGQUIT");
    }

    #[test]
    fn image_without_config_gives_an_empty_view() {
        let image: ImageConfiguration = serde_json::from_str(
            r#"{"architecture": "amd64", "os": "linux",
                "rootfs": {"type": "layers", "diff_ids": []}}"#,
        )
        .unwrap();
        assert_eq!(ImageConfigView::from(&image), ImageConfigView::default());
    }
}
