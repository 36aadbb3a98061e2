use std::collections::HashMap;

use cri_api::v1::CdiDevice as CriCdiDevice;
use oci_spec::runtime::{Process, Spec};

use super::*;
use crate::testing::FakeHost;

const YAML: &str = r#"
cdiVersion: "0.6.0"
kind: "vendor.com/gpu"
containerEdits:
  env: ["VENDOR_SPEC=1"]
devices:
  - name: "gpu0"
    containerEdits:
      env: ["GPU=0"]
      deviceNodes:
        - path: "/dev/vendor-gpu0"
          hostPath: "/dev/null"
          permissions: "rw"
      mounts:
        - hostPath: "/opt/vendor/lib"
          containerPath: "/usr/lib/vendor"
          options: ["ro", "nosuid"]
      hooks:
        - hookName: "createContainer"
          path: "/opt/vendor/hook"
          args: ["hook", "--gpu=0"]
      additionalGIDs: [44]
  - name: "gpu1"
    containerEdits:
      deviceNodes:
        - path: "/dev/vendor-gpu1"
          type: "c"
          major: 195
          minor: 1
"#;

fn yaml_spec() -> CdiSpec {
    parse_spec(YAML.as_bytes(), false).expect("yaml spec")
}

fn names(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn qualified_names_follow_the_cdi_rules() {
    assert_eq!(
        parse_qualified("vendor.com/gpu=gpu0").unwrap(),
        ("vendor.com/gpu", "gpu0")
    );
    assert!(parse_qualified("nvidia.com/gpu=GPU-1a:2.b_c").is_ok());
    for bad in [
        "gpu0",
        "vendor.com=gpu0",
        "vendor.com/gpu=",
        "vendor.com/g.pu=x",
        "-vendor/gpu=x",
        "vendor/gpu=-x",
        "vendor/gpu=a b",
    ] {
        let err = parse_qualified(bad).unwrap_err().to_string();
        assert!(err.contains(bad), "{bad}: {err}");
    }
}

#[test]
fn json_and_yaml_specs_parse_alike() {
    let json = r#"{"cdiVersion": "0.6.0", "kind": "vendor.com/gpu",
        "devices": [{"name": "gpu1", "containerEdits": {"deviceNodes": [
            {"path": "/dev/vendor-gpu1", "type": "c", "major": 195, "minor": 1}]}}],
        "annotations": {"ignored": "yes"}}"#;
    let spec = parse_spec(json.as_bytes(), true).expect("json");
    assert_eq!(spec.devices[0], yaml_spec().devices[1]);
    let err = parse_spec(br#"{"cdiVersion": "0.6.0", "kind": "nokind"}"#, true).unwrap_err();
    assert!(err.contains("nokind"), "{err}");
}

#[test]
fn requests_come_from_the_field_and_the_annotations_once_each() {
    let config = ContainerConfig {
        cdi_devices: vec![CriCdiDevice {
            name: "vendor.com/gpu=gpu0".into(),
        }],
        annotations: HashMap::from([
            (
                "cdi.k8s.io/plugin".to_string(),
                "vendor.com/gpu=gpu1, vendor.com/gpu=gpu0".to_string(),
            ),
            ("other".to_string(), "vendor.com/gpu=gpu9".to_string()),
        ]),
        ..Default::default()
    };
    assert_eq!(
        requested_devices(&config).unwrap(),
        names(&["vendor.com/gpu=gpu0", "vendor.com/gpu=gpu1"])
    );
    let bad = ContainerConfig {
        cdi_devices: vec![CriCdiDevice {
            name: "gpu0".into(),
        }],
        ..Default::default()
    };
    assert!(matches!(
        requested_devices(&bad),
        Err(CdiError::BadName { .. })
    ));
}

#[test]
fn spec_edits_come_once_before_the_devices_and_later_specs_win() {
    let mut newer = yaml_spec();
    newer.devices[1].container_edits.env = vec!["NEWER=1".into()];
    let specs = vec![yaml_spec(), newer];
    let edits = resolve(
        &specs,
        &names(&["vendor.com/gpu=gpu1", "vendor.com/gpu=gpu0"]),
        &[],
    )
    .unwrap();
    let who: Vec<&str> = edits.iter().map(|(who, _)| *who).collect();
    assert_eq!(who, ["vendor.com/gpu", "gpu1", "gpu0"]);
    assert_eq!(edits[1].1.env, ["NEWER=1"]);

    let err = resolve(
        &specs,
        &names(&["vendor.com/gpu=gpu7"]),
        &["/etc/cdi/x.json: bad".into()],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("vendor.com/gpu=gpu7") && err.contains("x.json"),
        "{err}"
    );
}

#[test]
fn edits_reach_the_oci_spec() {
    let specs = vec![yaml_spec()];
    let edits = resolve(
        &specs,
        &names(&["vendor.com/gpu=gpu0", "vendor.com/gpu=gpu1"]),
        &[],
    )
    .unwrap();
    let host = FakeHost::new().with_char_device("/dev/null", 1, 3);
    let mut spec = Spec::default();
    let mut process = Process::default();
    process.set_env(Some(vec!["PATH=/bin".into(), "GPU=old".into()]));
    spec.set_process(Some(process));
    apply(&mut spec, &edits, &host).unwrap();

    let process = spec.process().as_ref().unwrap();
    assert_eq!(
        process.env().as_deref().unwrap(),
        ["PATH=/bin", "GPU=0", "VENDOR_SPEC=1"]
    );
    assert_eq!(process.user().additional_gids().as_deref(), Some(&[44][..]));

    let linux = spec.linux().as_ref().unwrap();
    let devices = linux.devices().as_ref().unwrap();
    let gpu0 = devices
        .iter()
        .find(|d| d.path() == Path::new("/dev/vendor-gpu0"))
        .expect("gpu0 node");
    assert_eq!(
        (gpu0.typ(), gpu0.major(), gpu0.minor()),
        (LinuxDeviceType::C, 1, 3)
    );
    let gpu1 = devices
        .iter()
        .find(|d| d.path() == Path::new("/dev/vendor-gpu1"))
        .expect("gpu1 node");
    assert_eq!((gpu1.major(), gpu1.minor()), (195, 1));
    let rules = linux
        .resources()
        .as_ref()
        .unwrap()
        .devices()
        .as_ref()
        .unwrap();
    assert!(rules.iter().any(|r| r.allow()
        && r.major() == Some(1)
        && r.minor() == Some(3)
        && r.access().as_deref() == Some("rw")));

    let mount = spec
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.destination() == Path::new("/usr/lib/vendor"))
        .expect("mount");
    assert_eq!(mount.typ().as_deref(), Some("bind"));
    assert_eq!(
        mount.options().as_deref().unwrap(),
        ["ro", "nosuid", "rbind"]
    );
    let hooks = spec
        .hooks()
        .as_ref()
        .unwrap()
        .create_container()
        .as_ref()
        .unwrap();
    assert_eq!(hooks[0].path(), Path::new("/opt/vendor/hook"));
}

#[test]
fn a_node_that_is_not_on_the_host_is_an_error_naming_it() {
    let specs = vec![yaml_spec()];
    let edits = resolve(&specs, &names(&["vendor.com/gpu=gpu0"]), &[]).unwrap();
    let mut spec = Spec::default();
    let err = apply(&mut spec, &edits, &FakeHost::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("gpu0") && err.contains("/dev/null"), "{err}");
}
