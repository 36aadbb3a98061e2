use super::*;
use cri_api::v1::Int64Value;

const PASSWD: &str = "\
root:x:0:0:root:/root:/bin/sh
www-data:x:33:33:www-data:/var/www:/bin/false
default-user:x:1000:1000::/home/default-user:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
";

const GROUP: &str = "\
root:x:0:
www-data:x:33:www-data
default-user:x:1000:
group-defined-in-image:x:50000:default-user
audio:x:29:www-data,default-user
nogroup:x:65534:
";

fn image(user: &str) -> ImageConfigView {
    ImageConfigView {
        user: user.to_string(),
        ..Default::default()
    }
}

fn context() -> LinuxContainerSecurityContext {
    LinuxContainerSecurityContext::default()
}

fn run(
    security: Option<&LinuxContainerSecurityContext>,
    image_user: &str,
) -> Result<User, SpecError> {
    process_user(security, &image(image_user), Some(PASSWD), Some(GROUP))
}

fn ids(user: &User) -> (u32, u32, Vec<u32>) {
    (
        user.uid(),
        user.gid(),
        user.additional_gids().clone().unwrap_or_default(),
    )
}

#[test]
fn no_user_anywhere_is_root() {
    let user = run(None, "").unwrap();
    assert_eq!(ids(&user), (0, 0, vec![0]));
}

#[test]
fn image_user_forms_resolve() {
    // The four critest images: uid, name, uid:gid, name:gid.
    assert_eq!(ids(&run(None, "1002").unwrap()), (1002, 0, vec![0]));
    assert_eq!(ids(&run(None, "www-data").unwrap()), (33, 33, vec![29, 33]));
    assert_eq!(
        ids(&run(None, "1003:1004").unwrap()),
        (1003, 1004, vec![1004])
    );
    assert_eq!(
        ids(&run(None, "www-data:1004").unwrap()),
        (33, 1004, vec![29, 1004])
    );
}

#[test]
fn group_names_resolve_against_etc_group() {
    let user = run(None, "default-user:audio").unwrap();
    assert_eq!((user.uid(), user.gid()), (1000, 29));
}

#[test]
fn unknown_names_are_errors_naming_them() {
    let err = run(None, "ghost").unwrap_err();
    assert!(matches!(&err, SpecError::UserNotFound(name) if name == "ghost"));
    let err = run(None, "root:ghosts").unwrap_err();
    assert!(matches!(&err, SpecError::GroupNotFound(name) if name == "ghosts"));
}

#[test]
fn names_without_passwd_file_are_not_found() {
    let err = process_user(None, &image("www-data"), None, None).unwrap_err();
    assert!(matches!(err, SpecError::UserNotFound(_)));
    // A uid needs no passwd file.
    let user = process_user(None, &image("42"), None, None).unwrap();
    assert_eq!(ids(&user), (42, 0, vec![0]));
}

#[test]
fn malformed_user_strings_are_errors() {
    for bad in ["a:b:c", ":1", "1:"] {
        assert!(
            matches!(run(None, bad), Err(SpecError::InvalidUser(_))),
            "{bad}"
        );
    }
    assert!(matches!(
        run(None, "-1"),
        Err(SpecError::IdOutOfRange { .. })
    ));
    assert!(matches!(
        run(None, "4294967296"),
        Err(SpecError::IdOutOfRange { .. })
    ));
}

#[test]
fn run_as_user_overrides_the_image() {
    let mut sc = context();
    sc.run_as_user = Some(Int64Value { value: 1001 });
    assert_eq!(
        ids(&run(Some(&sc), "www-data").unwrap()),
        (1001, 0, vec![0])
    );
}

#[test]
fn run_as_user_and_group() {
    let mut sc = context();
    sc.run_as_user = Some(Int64Value { value: 1001 });
    sc.run_as_group = Some(Int64Value { value: 1002 });
    assert_eq!(ids(&run(Some(&sc), "").unwrap()), (1001, 1002, vec![1002]));
}

#[test]
fn run_as_username_wins_over_run_as_user() {
    let mut sc = context();
    sc.run_as_user = Some(Int64Value { value: 1001 });
    sc.run_as_username = "www-data".into();
    assert_eq!(ids(&run(Some(&sc), "").unwrap()).0, 33);
}

#[test]
fn run_as_group_without_user_is_an_error() {
    let mut sc = context();
    sc.run_as_group = Some(Int64Value { value: 1002 });
    // Even when the image has a USER: critest expects the refusal.
    let err = run(Some(&sc), "www-data").unwrap_err();
    assert!(matches!(err, SpecError::GroupWithoutUser(1002)));
}

#[test]
fn negative_run_as_user_is_an_error() {
    let mut sc = context();
    sc.run_as_user = Some(Int64Value { value: -5 });
    let err = run(Some(&sc), "").unwrap_err();
    assert!(matches!(
        err,
        SpecError::IdOutOfRange {
            what: "run_as_user",
            value: -5
        }
    ));
}

#[test]
fn merge_adds_image_groups_to_supplemental_groups() {
    // critest "SupplementalGroupsPolicy=Merge": id -G is 1000 1234 50000.
    let mut sc = context();
    sc.run_as_user = Some(Int64Value { value: 1000 });
    sc.supplemental_groups = vec![1234];
    let user = run(Some(&sc), "1000").unwrap();
    assert_eq!(ids(&user), (1000, 1000, vec![29, 1000, 1234, 50000]));
}

#[test]
fn strict_uses_only_the_listed_groups() {
    let mut sc = context();
    sc.run_as_user = Some(Int64Value { value: 1000 });
    sc.supplemental_groups = vec![1234];
    sc.supplemental_groups_policy = SupplementalGroupsPolicy::Strict as i32;
    let user = run(Some(&sc), "1000").unwrap();
    assert_eq!(ids(&user), (1000, 1000, vec![1000, 1234]));
}

#[test]
fn supplemental_groups_without_user_keep_root() {
    let mut sc = context();
    sc.supplemental_groups = vec![5678, 1234, 1234];
    assert_eq!(
        ids(&run(Some(&sc), "").unwrap()),
        (0, 0, vec![0, 1234, 5678])
    );
}

#[test]
fn out_of_range_supplemental_group_is_an_error() {
    let mut sc = context();
    sc.supplemental_groups = vec![-1];
    assert!(matches!(
        run(Some(&sc), ""),
        Err(SpecError::IdOutOfRange { .. })
    ));
}

#[test]
fn image_groups_skip_the_personal_group_and_unknown_uids() {
    let passwd = parse_passwd(PASSWD);
    let groups = parse_group(GROUP);
    // www-data is listed in its own group www-data: that one is primary.
    assert_eq!(image_groups("www-data", &passwd, &groups), vec![29]);
    assert_eq!(image_groups("1000", &passwd, &groups), vec![50000, 29]);
    assert!(image_groups("4242", &passwd, &groups).is_empty());
}
