//! What a plugin tells the runtime: its ADD result and, on failure, its
//! error object.

use std::net::IpAddr;

use serde_json::Value;

use super::error::PluginFailure;

/// The outcome of a successful ADD of a whole list.
#[derive(Debug, Clone, PartialEq)]
pub struct AddResult {
    /// The last plugin's result. Keep it: DEL passes it as `prevResult`.
    pub raw: Value,
    /// The pod's addresses, in result order (see [`result_ips`]).
    pub ips: Vec<IpAddr>,
}

/// The pod's IP addresses in a CNI result, in order, without prefix length.
///
/// Reads `ips[].address` (results 0.3.0 to 1.x; 0.3.x/0.4.0 also carry a
/// `version` field, which is ignored) and falls back to `ip4.ip`/`ip6.ip`
/// (results 0.1.0/0.2.0). Like containerd, an address whose `interface`
/// index points at an interface without a `sandbox` (a host-side interface)
/// is skipped.
pub fn result_ips(result: &Value) -> Result<Vec<IpAddr>, String> {
    let Some(object) = result.as_object() else {
        return Err("result is not a JSON object".to_string());
    };
    if let Some(ips) = object.get("ips") {
        let Some(ips) = ips.as_array() else {
            return Err("\"ips\" is not a list".to_string());
        };
        let interfaces = object.get("interfaces").and_then(Value::as_array);
        let mut out = Vec::with_capacity(ips.len());
        for (index, ip) in ips.iter().enumerate() {
            let address = ip
                .get("address")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("ips[{index}] has no \"address\""))?;
            if is_host_side(ip, interfaces) {
                continue;
            }
            out.push(parse_cidr_ip(address).map_err(|e| format!("ips[{index}]: {e}"))?);
        }
        return Ok(out);
    }
    // Results 0.1.0 and 0.2.0.
    let mut out = Vec::new();
    for key in ["ip4", "ip6"] {
        if let Some(address) = object
            .get(key)
            .and_then(|v| v.get("ip"))
            .and_then(Value::as_str)
        {
            out.push(parse_cidr_ip(address).map_err(|e| format!("{key}.ip: {e}"))?);
        }
    }
    Ok(out)
}

/// Whether an `ips[]` entry names a host-side interface of the result.
fn is_host_side(ip: &Value, interfaces: Option<&Vec<Value>>) -> bool {
    let (Some(index), Some(interfaces)) = (ip.get("interface").and_then(Value::as_u64), interfaces)
    else {
        return false;
    };
    let Some(interface) = usize::try_from(index).ok().and_then(|i| interfaces.get(i)) else {
        return false;
    };
    interface
        .get("sandbox")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
}

/// `10.1.2.3/24` → `10.1.2.3`. A bare address is accepted too.
fn parse_cidr_ip(address: &str) -> Result<IpAddr, String> {
    let ip = address.split_once('/').map_or(address, |(ip, _)| ip);
    ip.parse()
        .map_err(|_| format!("invalid address {address:?}"))
}

/// Builds the failure report of a plugin that exited non-zero.
///
/// The spec has the plugin print `{"cniVersion", "code", "msg", "details"}`
/// on stdout. When stdout is something else, its text (or, when empty,
/// stderr) becomes the message.
pub fn plugin_failure(exit_code: Option<i32>, stdout: &[u8], stderr: &[u8]) -> PluginFailure {
    let stderr = String::from_utf8_lossy(stderr).trim().to_string();
    if let Ok(Value::Object(error)) = serde_json::from_slice::<Value>(stdout) {
        let code = error.get("code").and_then(Value::as_u64);
        let msg = error.get("msg").and_then(Value::as_str).unwrap_or_default();
        if code.is_some() || !msg.is_empty() {
            return PluginFailure {
                exit_code,
                code,
                msg: msg.to_string(),
                details: error
                    .get("details")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                stderr,
            };
        }
    }
    let stdout = String::from_utf8_lossy(stdout).trim().to_string();
    if stdout.is_empty() {
        PluginFailure {
            exit_code,
            msg: stderr,
            ..PluginFailure::default()
        }
    } else {
        PluginFailure {
            exit_code,
            msg: stdout,
            stderr,
            ..PluginFailure::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ips(v: Value) -> Vec<String> {
        result_ips(&v)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn result_1_0_0_ips_in_order() {
        let result = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "cni0", "mac": "aa:bb:cc:dd:ee:01"},
                {"name": "veth1", "mac": "aa:bb:cc:dd:ee:02"},
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:03", "sandbox": "/run/netns/x"}
            ],
            "ips": [
                {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 2},
                {"address": "fd00::5/64", "interface": 2}
            ],
            "routes": [{"dst": "0.0.0.0/0"}]
        });
        assert_eq!(ips(result), ["10.1.0.5", "fd00::5"]);
    }

    #[test]
    fn result_0_4_0_ips_ignore_version_field() {
        let result = json!({
            "cniVersion": "0.4.0",
            "ips": [
                {"version": "6", "address": "2001:db8::2/64"},
                {"version": "4", "address": "192.168.1.7/16", "gateway": "192.168.0.1"}
            ]
        });
        assert_eq!(ips(result), ["2001:db8::2", "192.168.1.7"]);
    }

    #[test]
    fn result_skips_host_side_interfaces() {
        let result = json!({
            "interfaces": [{"name": "cni0"}, {"name": "eth0", "sandbox": "/ns"}],
            "ips": [
                {"address": "10.0.0.1/24", "interface": 0},
                {"address": "10.0.0.2/24", "interface": 1},
                {"address": "10.0.0.3/24"}
            ]
        });
        assert_eq!(ips(result), ["10.0.0.2", "10.0.0.3"]);
    }

    #[test]
    fn result_0_2_0_ip4_ip6() {
        let result = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.2.0.9/16"}, "ip6": {"ip": "fd00::9/64"}});
        assert_eq!(ips(result), ["10.2.0.9", "fd00::9"]);
    }

    #[test]
    fn result_without_ips_is_empty_and_garbage_is_an_error() {
        assert!(result_ips(&json!({"cniVersion": "1.0.0"}))
            .unwrap()
            .is_empty());
        assert!(result_ips(&json!([])).is_err());
        assert!(result_ips(&json!({"ips": [{"address": "nope/24"}]}))
            .unwrap_err()
            .contains("nope"));
        assert!(result_ips(&json!({"ips": [{"gateway": "10.0.0.1"}]})).is_err());
    }

    #[test]
    fn failure_from_cni_error_json() {
        let f = plugin_failure(
            Some(1),
            br#"{"cniVersion":"1.0.0","code":11,"msg":"failed to allocate","details":"range full"}"#,
            b"some log\n",
        );
        assert_eq!(f.code, Some(11));
        assert_eq!(f.msg, "failed to allocate");
        assert_eq!(f.details, "range full");
        assert_eq!(f.stderr, "some log");
        assert_eq!(
            f.to_string(),
            "CNI error code 11: failed to allocate (range full); stderr: some log"
        );
    }

    #[test]
    fn failure_without_json_uses_output() {
        let f = plugin_failure(Some(2), b"", b"panic: boom\n");
        assert_eq!(f.code, None);
        assert_eq!(f.to_string(), "exit status 2: panic: boom");
        let f = plugin_failure(None, b"plain text", b"");
        assert_eq!(f.to_string(), "killed by a signal: plain text");
    }
}
