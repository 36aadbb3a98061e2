//! The filters the List* and Stream* RPCs share.

use std::collections::HashMap;

/// Label selector match: every selector pair must be among the labels.
pub(super) fn labels_match(
    labels: &HashMap<String, String>,
    selector: &HashMap<String, String>,
) -> bool {
    selector
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_need_every_pair() {
        let labels: HashMap<_, _> =
            [("a".to_string(), "1".to_string()), ("b".into(), "2".into())].into();
        assert!(labels_match(&labels, &HashMap::new()));
        assert!(labels_match(
            &labels,
            &[("a".to_string(), "1".to_string())].into()
        ));
        assert!(!labels_match(
            &labels,
            &[("a".to_string(), "2".to_string())].into()
        ));
        assert!(!labels_match(
            &labels,
            &[("c".to_string(), "1".to_string())].into()
        ));
    }
}
