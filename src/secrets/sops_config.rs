//! The age recipients a repository's `.sops.yaml` gives a sealed file, so that `secrets
//! rekey` can say when sops would later encrypt it to another set than `spec.recipients`.
//!
//! As sops picks a creation rule (getsops/sops v3 `config/config.go`,
//! `parseCreationRuleForFile`): the file's path relative to the directory of `.sops.yaml`;
//! the first rule whose `path_regex` matches it (an unanchored search, Go `regexp`, whose
//! syntax the `regex` crate shares for what these rules use), or the first rule without a
//! `path_regex`. A rule's age recipients are its `age` (one string, recipients separated by
//! commas, whitespace around them ignored) and the `age` lists of its `key_groups`.

use serde_json::Value;

/// What `.sops.yaml` says of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// No creation rule matches: sops refuses to encrypt it ("no matching creation rules").
    NoMatch,
    /// `creation_rules[index]` matches, with these age recipients (sorted, unique).
    Age {
        /// Its index in `creation_rules`.
        index: usize,
        /// Its age recipients.
        recipients: Vec<String>,
    },
}

/// Why `.sops.yaml` could not be read as sops reads it.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {field}: {message}")]
pub struct SopsConfigError {
    /// The file.
    pub file: String,
    /// The field path.
    pub field: String,
    /// What was expected.
    pub message: String,
}

/// The creation rule of `.sops.yaml` (`config`, read from `file`) for `rel`, a path relative
/// to the directory holding it; `None` when it has no `creation_rules` (sops then uses the
/// command line's keys).
pub fn rule_for(config: &Value, file: &str, rel: &str) -> Result<Option<Rule>, SopsConfigError> {
    // The file's own text (a regular expression the regex crate quotes back) is escaped.
    let err = |field: String, message: &str| SopsConfigError {
        file: file.to_string(),
        field,
        message: crate::printable::line(message).into_owned(),
    };
    let Some(rules) = config.get("creation_rules") else {
        return Ok(None);
    };
    let rules = rules
        .as_array()
        .ok_or_else(|| err("creation_rules".into(), "expected a list of rules"))?;
    for (index, r) in rules.iter().enumerate() {
        let at = |f: &str| format!("creation_rules[{index}].{f}");
        let matches = match r.get("path_regex").and_then(Value::as_str) {
            None | Some("") => true,
            Some(re) => regex::Regex::new(re)
                .map_err(|e| err(at("path_regex"), &format!("not a regular expression ({e})")))?
                .is_match(rel),
        };
        if !matches {
            continue;
        }
        let mut recipients: Vec<String> = Vec::new();
        match r.get("age") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => recipients.extend(split(s)),
            Some(_) => {
                return Err(err(
                    at("age"),
                    "expected a string of comma-separated recipients",
                ))
            }
        }
        for (g, group) in r
            .get("key_groups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            match group.get("age") {
                None | Some(Value::Null) => {}
                Some(Value::Array(a)) => {
                    for (i, x) in a.iter().enumerate() {
                        let s = x.as_str().ok_or_else(|| {
                            err(
                                format!("creation_rules[{index}].key_groups[{g}].age[{i}]"),
                                "expected a recipient",
                            )
                        })?;
                        recipients.extend(split(s));
                    }
                }
                Some(_) => {
                    return Err(err(
                        format!("creation_rules[{index}].key_groups[{g}].age"),
                        "expected a list of recipients",
                    ))
                }
            }
        }
        recipients.sort();
        recipients.dedup();
        return Ok(Some(Rule::Age { index, recipients }));
    }
    Ok(Some(Rule::NoMatch))
}

fn split(s: &str) -> impl Iterator<Item = String> + '_ {
    s.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_matching_rule_gives_the_recipients_as_sops_reads_them() {
        let config = json!({"creation_rules": [
            {"path_regex": "clusters/lab-g/.*\\.yaml$", "age": "age1b"},
            {"path_regex": "secrets/", "age": " age1a ,\n age1c,age1a "},
            {"age": "age1z", "key_groups": [{"age": ["age1y"]}]},
        ]});
        let rule = |p: &str| rule_for(&config, ".sops.yaml", p).unwrap().unwrap();
        assert_eq!(
            rule("clusters/lab-f/secrets/lab-f-ca.yaml"),
            Rule::Age {
                index: 1,
                recipients: vec!["age1a".into(), "age1c".into()]
            }
        );
        assert_eq!(
            rule("clusters/lab-g/secrets/lab-g-ca.yaml"),
            Rule::Age {
                index: 0,
                recipients: vec!["age1b".into()]
            }
        );
        // Without path_regex: every file; key groups' age lists count.
        assert_eq!(
            rule("other.yaml"),
            Rule::Age {
                index: 2,
                recipients: vec!["age1y".into(), "age1z".into()]
            }
        );
        let narrow = json!({"creation_rules": [{"path_regex": "^x/", "age": "age1a"}]});
        assert_eq!(
            rule_for(&narrow, "f", "y/z.yaml").unwrap(),
            Some(Rule::NoMatch)
        );
        assert_eq!(rule_for(&json!({}), "f", "y").unwrap(), None);
        let bad = json!({"creation_rules": [{"path_regex": "(", "age": "a"}]});
        let e = rule_for(&bad, ".sops.yaml", "y").unwrap_err().to_string();
        assert!(
            e.starts_with(".sops.yaml: creation_rules[0].path_regex: not a regular expression"),
            "{e}"
        );
    }
}
