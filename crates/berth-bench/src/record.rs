//! The records the bench writes: one JSON line per metric and run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Appends records for one runtime to a JSON-lines file.
pub struct Out {
    path: PathBuf,
    runtime: String,
}

impl Out {
    pub fn new(path: &Path, runtime: &str) -> Self {
        Self {
            path: path.to_path_buf(),
            runtime: runtime.to_string(),
        }
    }

    /// Records `samples` (in `unit`) under `metric`.
    pub fn write(&self, metric: &str, unit: &str, samples: &[f64]) -> Result<(), String> {
        self.write_with(metric, unit, samples, &[])
    }

    /// Records `samples` with extra string fields (what the report shows
    /// beside the numbers).
    pub fn write_with(
        &self,
        metric: &str,
        unit: &str,
        samples: &[f64],
        extra: &[(&str, &str)],
    ) -> Result<(), String> {
        let mut line = serde_json::json!({
            "runtime": self.runtime,
            "metric": metric,
            "unit": unit,
            "samples": samples,
        });
        for (key, value) in extra {
            line[*key] = serde_json::Value::from(*value);
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|err| format!("{}: {err}", self.path.display()))?;
        writeln!(file, "{line}").map_err(|err| format!("{}: {err}", self.path.display()))
    }
}

/// A duration in milliseconds, as the records hold it.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
