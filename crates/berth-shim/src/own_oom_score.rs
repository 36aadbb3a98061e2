//! The shim's own `oom_score_adj`, kept across libcontainer calls.
//!
//! libcontainer writes the process's `oomScoreAdj` into
//! `/proc/self/oom_score_adj` of its caller before it forks, so that the
//! container inherits it. Left there, every BestEffort pod's shim would run
//! at 1000 and be the kernel's first OOM victim, taking the container's
//! logs and exit status with it. The shim puts its own value back.

use std::path::{Path, PathBuf};

const OWN: &str = "/proc/self/oom_score_adj";

/// The value read before a libcontainer call, restored by [`restore`].
///
/// [`restore`]: SavedOomScore::restore
pub struct SavedOomScore {
    path: PathBuf,
    value: Option<String>,
}

impl SavedOomScore {
    pub fn save() -> Self {
        Self::save_at(Path::new(OWN))
    }

    fn save_at(path: &Path) -> Self {
        let value = std::fs::read_to_string(path)
            .map(|text| text.trim().to_string())
            .map_err(|err| tracing::warn!(%err, "cannot read our own oom_score_adj"))
            .ok();
        Self {
            path: path.to_path_buf(),
            value,
        }
    }

    /// Writes the saved value back if it changed.
    pub fn restore(self) {
        let Some(saved) = self.value else {
            return;
        };
        let now = std::fs::read_to_string(&self.path).unwrap_or_default();
        if now.trim() == saved {
            return;
        }
        if let Err(err) = std::fs::write(&self.path, &saved) {
            tracing::warn!(%err, saved, "cannot restore our own oom_score_adj");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_saved_value_comes_back() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("oom_score_adj");
        std::fs::write(&file, "-500\n").unwrap();
        let saved = SavedOomScore::save_at(&file);
        std::fs::write(&file, "1000").unwrap();
        saved.restore();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "-500");
    }
}
