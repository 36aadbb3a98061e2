//! Parsers for the image's `/etc/passwd` and `/etc/group`.
//!
//! Usernames are resolved against the image, never the host: the host's
//! `www-data` may have another uid than the image's. Lines that do not
//! parse are skipped, as glibc and runc's `user` package skip them: one odd
//! line must not make every user of the image unknown.

/// One line of `/etc/passwd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// One line of `/etc/group`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupEntry {
    pub name: String,
    pub gid: u32,
    /// User names listed as members (the fourth field).
    pub members: Vec<String>,
}

/// The entries of an `/etc/passwd` file (`name:password:uid:gid:gecos:home:shell`).
pub fn parse_passwd(contents: &str) -> Vec<PasswdEntry> {
    records(contents)
        .filter_map(|fields| {
            let name = non_empty(fields.first())?;
            Some(PasswdEntry {
                name,
                uid: fields.get(2)?.parse().ok()?,
                gid: fields.get(3)?.parse().ok()?,
                home: fields.get(5).map(|s| s.to_string()).unwrap_or_default(),
            })
        })
        .collect()
}

/// The entries of an `/etc/group` file (`name:password:gid:member,member`).
pub fn parse_group(contents: &str) -> Vec<GroupEntry> {
    records(contents)
        .filter_map(|fields| {
            let name = non_empty(fields.first())?;
            let members = fields
                .get(3)
                .map(|list| {
                    list.split(',')
                        .map(str::trim)
                        .filter(|member| !member.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            Some(GroupEntry {
                name,
                gid: fields.get(2)?.parse().ok()?,
                members,
            })
        })
        .collect()
}

/// Non-blank, non-comment lines split at ':'.
fn records(contents: &str) -> impl Iterator<Item = Vec<&str>> {
    contents
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split(':').collect())
}

fn non_empty(field: Option<&&str>) -> Option<String> {
    field.filter(|s| !s.is_empty()).map(|s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_parse_and_bad_lines_are_skipped() {
        let passwd = "\
root:x:0:0:root:/root:/bin/sh
# a comment

www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
broken:x:notanumber:1::/:
short:x:5
nobody:x:65534:65534::/nonexistent:
";
        let entries = parse_passwd(passwd);
        let names: Vec<_> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.uid, e.gid))
            .collect();
        assert_eq!(
            names,
            [
                ("root", 0, 0),
                ("www-data", 33, 33),
                ("nobody", 65534, 65534)
            ]
        );
        assert_eq!(entries[1].home, "/var/www");
    }

    #[test]
    fn group_lines_parse_members() {
        let group = "\
root:x:0:
group-defined-in-image:x:50000:default-user, other
empty::7
bad:x:-1:a
";
        let entries = parse_group(group);
        assert_eq!(entries.len(), 3);
        assert!(entries[0].members.is_empty());
        assert_eq!(entries[1].gid, 50000);
        assert_eq!(entries[1].members, ["default-user", "other"]);
        assert_eq!((entries[2].name.as_str(), entries[2].gid), ("empty", 7));
    }
}
