//! What the server writes on the error stream when a session ends: a JSON
//! `metav1.Status` for v4 and later, plain text for the older protocols.

use serde::Serialize;

/// How an exec or attach session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// The command exited non-zero; `cmd` is what was run.
    ExitCode {
        code: i32,
        cmd: Vec<String>,
    },
    /// The session could not run (no such container, runtime failure).
    Error(String),
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct Cause<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    message: String,
}

#[derive(Serialize)]
struct Details<'a> {
    causes: Vec<Cause<'a>>,
}

/// metav1.Status with Go's field order and omitempty rules, so the bytes
/// match what kubelet's streaming server sends.
#[derive(Serialize)]
struct Status<'a> {
    metadata: Empty,
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
}

impl Outcome {
    /// The message of a failed session, as kubelet words it.
    fn message(&self) -> Option<String> {
        match self {
            Outcome::Success => None,
            Outcome::ExitCode { code, cmd } => Some(format!(
                "command terminated with non-zero exit code: error executing command {}, exit code {code}",
                go_slice(cmd)
            )),
            Outcome::Error(e) => Some(format!("Internal error occurred: {e}")),
        }
    }

    /// The v4 error-stream payload (`v4.channel.k8s.io` and later).
    pub fn v4_json(&self) -> String {
        let status = match self {
            Outcome::Success => Status {
                metadata: Empty {},
                status: "Success",
                message: None,
                reason: None,
                details: None,
                code: None,
            },
            Outcome::ExitCode { code, .. } => Status {
                metadata: Empty {},
                status: "Failure",
                message: self.message(),
                reason: Some("NonZeroExitCode"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: Some("ExitCode"),
                        message: code.to_string(),
                    }],
                }),
                code: None,
            },
            Outcome::Error(e) => Status {
                metadata: Empty {},
                status: "Failure",
                message: self.message(),
                reason: Some("InternalError"),
                details: Some(Details {
                    causes: vec![Cause {
                        reason: None,
                        message: e.clone(),
                    }],
                }),
                code: Some(500),
            },
        };
        serde_json::to_string(&status).unwrap_or_default()
    }

    /// The pre-v4 error-stream payload: nothing on success, else the message.
    pub fn v1_text(&self) -> Option<String> {
        self.message()
    }
}

/// Formats like Go's `%v` of a `[]string`: `[sh -c exit 3]`.
fn go_slice(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_a_bare_status() {
        assert_eq!(
            Outcome::Success.v4_json(),
            r#"{"metadata":{},"status":"Success"}"#
        );
        assert_eq!(Outcome::Success.v1_text(), None);
    }

    #[test]
    fn non_zero_exit_carries_the_code_as_a_cause() {
        let outcome = Outcome::ExitCode {
            code: 3,
            cmd: vec!["sh".into(), "-c".into(), "exit 3".into()],
        };
        assert_eq!(
            outcome.v4_json(),
            r#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
    }

    #[test]
    fn runtime_errors_are_internal_errors() {
        let json = Outcome::Error("container \"x\" not found".into()).v4_json();
        assert_eq!(
            json,
            r#"{"metadata":{},"status":"Failure","message":"Internal error occurred: container \"x\" not found","reason":"InternalError","details":{"causes":[{"message":"container \"x\" not found"}]},"code":500}"#
        );
    }
}
