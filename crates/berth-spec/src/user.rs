//! Who the container's process runs as: uid, gid and supplementary groups.
//!
//! The rules are containerd's (`WithUser`, `WithAdditionalGIDs`,
//! `WithSupplementalGroups`), which critest checks:
//! - the CRI user wins over the image's USER: `run_as_username`, else
//!   `run_as_user`, with `:run_as_group` appended; `run_as_group` alone is
//!   an error;
//! - a name is looked up in the image's `/etc/passwd` (unknown: error); a
//!   bare uid takes its primary gid from there when listed, else gid 0;
//! - the supplementary groups always hold the primary gid and the requested
//!   `supplemental_groups`; with policy Merge (the default) also every group
//!   of the image's `/etc/group` that lists the user as a member.

use cri_api::v1::{LinuxContainerSecurityContext, SupplementalGroupsPolicy};
use oci_spec::runtime::User;

use crate::error::SpecError;
use crate::image::ImageConfigView;
use crate::passwd::{parse_group, parse_passwd, GroupEntry, PasswdEntry};

/// The user string to resolve, in the image's USER syntax (`user`, `uid`,
/// `user:group`, `uid:gid`); empty means root.
pub fn user_string(
    security: Option<&LinuxContainerSecurityContext>,
    image: &ImageConfigView,
) -> Result<String, SpecError> {
    let Some(security) = security else {
        return Ok(image.user.clone());
    };
    let group = security
        .run_as_group
        .map(|gid| id_in_range("run_as_group", gid.value))
        .transpose()?;
    let user = if !security.run_as_username.is_empty() {
        Some(security.run_as_username.clone())
    } else {
        security
            .run_as_user
            .map(|uid| id_in_range("run_as_user", uid.value).map(|uid| uid.to_string()))
            .transpose()?
    };
    match (user, group) {
        (Some(user), Some(gid)) => Ok(format!("{user}:{gid}")),
        (Some(user), None) => Ok(user),
        (None, Some(_)) => Err(SpecError::GroupWithoutUser(
            security.run_as_group.map_or(0, |gid| gid.value),
        )),
        (None, None) => Ok(image.user.clone()),
    }
}

/// Resolves a user string against the image's passwd and group entries to
/// `(uid, gid)`. Empty means root.
pub fn resolve_user(
    user: &str,
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
) -> Result<(u32, u32), SpecError> {
    if user.is_empty() {
        return Ok((0, 0));
    }
    let (user_part, group_part) = match user.split_once(':') {
        Some((u, g)) if u.is_empty() || g.is_empty() || g.contains(':') => {
            return Err(SpecError::InvalidUser(user.to_string()));
        }
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let (uid, primary_gid) = match parse_id("uid", user_part)? {
        Some(uid) => {
            let gid = passwd.iter().find(|e| e.uid == uid).map_or(0, |e| e.gid);
            (uid, gid)
        }
        None => passwd
            .iter()
            .find(|e| e.name == user_part)
            .map(|e| (e.uid, e.gid))
            .ok_or_else(|| SpecError::UserNotFound(user_part.to_string()))?,
    };
    let gid = match group_part {
        None => primary_gid,
        Some(group) => match parse_id("gid", group)? {
            Some(gid) => gid,
            None => groups
                .iter()
                .find(|g| g.name == group)
                .map(|g| g.gid)
                .ok_or_else(|| SpecError::GroupNotFound(group.to_string()))?,
        },
    };
    Ok((uid, gid))
}

/// The groups of the image's `/etc/group` that list `user` as a member,
/// except a group named like the user (its personal group is its primary
/// group, not a supplementary one). `user` is a name or a uid; a uid not in
/// `/etc/passwd` has no name and so no memberships.
pub fn image_groups(user: &str, passwd: &[PasswdEntry], groups: &[GroupEntry]) -> Vec<u32> {
    let name = match user.parse::<u32>() {
        Ok(uid) => match passwd.iter().find(|e| e.uid == uid) {
            Some(entry) => entry.name.as_str(),
            None => return Vec::new(),
        },
        Err(_) => user,
    };
    groups
        .iter()
        .filter(|g| g.name != name && g.members.iter().any(|m| m == name))
        .map(|g| g.gid)
        .collect()
}

/// The OCI user of the container's process, from the security context, the
/// image's USER and the image's `/etc/passwd` and `/etc/group` contents.
pub fn process_user(
    security: Option<&LinuxContainerSecurityContext>,
    image: &ImageConfigView,
    etc_passwd: Option<&str>,
    etc_group: Option<&str>,
) -> Result<User, SpecError> {
    let passwd = etc_passwd.map(parse_passwd).unwrap_or_default();
    let groups = etc_group.map(parse_group).unwrap_or_default();
    let user = user_string(security, image)?;
    let (uid, gid) = resolve_user(&user, &passwd, &groups)?;

    let mut additional = vec![gid];
    for group in security
        .map(|s| s.supplemental_groups.as_slice())
        .unwrap_or_default()
    {
        additional.push(id_in_range("supplemental group", *group)?);
    }
    let policy = security.map_or(SupplementalGroupsPolicy::Merge, |s| {
        s.supplemental_groups_policy()
    });
    if policy == SupplementalGroupsPolicy::Merge {
        // The user part only: "www-data:1004" is a member of www-data's groups.
        let name = user
            .split(':')
            .next()
            .filter(|u| !u.is_empty())
            .unwrap_or("0");
        additional.extend(image_groups(name, &passwd, &groups));
    }
    additional.sort_unstable();
    additional.dedup();

    let mut oci = User::default();
    oci.set_uid(uid)
        .set_gid(gid)
        .set_additional_gids(Some(additional));
    Ok(oci)
}

/// A numeric id of the user string, `None` for a name; a number that is not
/// a valid id (negative, too large) is an error rather than a "name".
fn parse_id(what: &'static str, text: &str) -> Result<Option<u32>, SpecError> {
    let numeric = text.strip_prefix('-').unwrap_or(text);
    if numeric.is_empty() || !numeric.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(None);
    }
    text.parse::<u32>()
        .map(Some)
        .map_err(|_| SpecError::IdOutOfRange {
            what,
            value: text.parse().unwrap_or(i64::MAX),
        })
}

fn id_in_range(what: &'static str, value: i64) -> Result<u32, SpecError> {
    u32::try_from(value).map_err(|_| SpecError::IdOutOfRange { what, value })
}

#[cfg(test)]
#[path = "user_tests.rs"]
mod tests;
