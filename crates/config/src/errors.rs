//! Errors with the file and the field they are about.

use std::fmt;
use std::path::{Path, PathBuf};

/// One thing wrong with a configuration, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// `routes[1].upstream`; empty for the file as a whole.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.field.as_str() {
            "" => write!(f, "{}: {}", self.file.display(), self.message),
            field => write!(f, "{}: {field}: {}", self.file.display(), self.message),
        }
    }
}

/// Every error found, one per line.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    /// `problems` ((field, message) pairs) of one file.
    pub(crate) fn in_file(file: &Path, problems: Vec<(String, String)>) -> ConfigErrors {
        ConfigErrors(
            problems
                .into_iter()
                .map(|(field, message)| ConfigError {
                    file: file.to_path_buf(),
                    field,
                    message,
                })
                .collect(),
        )
    }

    pub(crate) fn one(file: &Path, field: String, message: String) -> ConfigErrors {
        ConfigErrors(vec![ConfigError {
            file: file.to_path_buf(),
            field,
            message,
        }])
    }
}

/// Parses YAML into `T`; an error is (field path, message).
pub(crate) fn parse_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
) -> Result<T, (String, String)> {
    let deserializer = serde_yaml_ng::Deserializer::from_str(text);
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        (field, tidy(e.into_inner().to_string()))
    })
}

/// A parse that failed, with everything that could be found out.
pub(crate) struct ParseFailure<T> {
    /// Every unknown field (the first error with its line and column), or
    /// the one error that stopped the parse.
    pub errors: Vec<(String, String)>,
    /// The document parsed without its unknown fields, when only those
    /// were wrong: its other problems can be reported too.
    pub lenient: Option<T>,
}

/// Parses YAML into `T`. When it fails on unknown fields, parses on without
/// them, so that one report names each of them (and the caller can check
/// the rest); any other error ends the report there.
pub(crate) fn parse_yaml_reporting<T: serde::de::DeserializeOwned>(
    text: &str,
) -> Result<T, ParseFailure<T>> {
    let first = match parse_yaml::<T>(text) {
        Ok(parsed) => return Ok(parsed),
        Err(first) => first,
    };
    let mut failure = ParseFailure {
        errors: vec![first],
        lenient: None,
    };
    let Ok(mut value) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) else {
        return Err(failure);
    };
    // Each round removes one unknown field; a bound keeps a document that
    // somehow never converges from looping.
    for _ in 0..64 {
        let error = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(parsed) => {
                failure.lenient = Some(parsed);
                break;
            }
            Err(error) => error,
        };
        let segments: Vec<_> = error.path().iter().cloned().collect();
        let message = error.into_inner().to_string();
        if !message.starts_with("unknown field") {
            break;
        }
        let (indexed, named) = render_path(&segments, &value);
        match failure
            .errors
            .iter_mut()
            .find(|(field, _)| *field == indexed)
        {
            // The text parse's own error: keep its line, name its entry.
            Some(known) => known.0 = named,
            None => failure.errors.push((named, tidy(message))),
        }
        if !remove_at(&mut value, &segments) {
            break;
        }
    }
    Err(failure)
}

/// The YAML error repeats the (shorter) path: keep the message only, and
/// suggest the known name closest to an unknown field or variant.
fn tidy(message: String) -> String {
    let message = match message.split_once(": ") {
        Some((path, rest)) if !path.contains(' ') => rest.to_string(),
        _ => message,
    };
    did_you_mean(message)
}

/// `unknown field `upstrem`, expected one of `name`, ..., `upstream``
/// becomes `unknown field `upstrem` (did you mean `upstream`?), expected ...`.
fn did_you_mean(message: String) -> String {
    let Some(rest) = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))
    else {
        return message;
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message;
    };
    let best = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|known| (strsim::damerau_levenshtein(unknown, known), known))
        .min();
    match best {
        Some((distance, known)) if distance > 0 && distance <= (known.len() / 3).max(2) => {
            let head = message.len() - rest.len() + unknown.len() + 1;
            format!(
                "{} (did you mean `{known}`?){}",
                &message[..head],
                &message[head..]
            )
        }
        _ => message,
    }
}

/// `segments` as a field path, by index (`routes[0].upstrem`, as the
/// parser says it) and with entries of the named sections by their name
/// (`routes[api].upstrem`), as the checks say it.
fn render_path(
    segments: &[serde_path_to_error::Segment],
    value: &serde_yaml_ng::Value,
) -> (String, String) {
    use serde_path_to_error::Segment;
    let mut indexed = String::new();
    let mut named = String::new();
    for (i, segment) in segments.iter().enumerate() {
        match segment {
            Segment::Seq { index } => {
                indexed.push_str(&format!("[{index}]"));
                let section = match segments.first() {
                    Some(Segment::Map { key }) if i == 1 => key.as_str(),
                    _ => "",
                };
                let name = value
                    .get(section)
                    .and_then(|list| list.get(*index))
                    .and_then(|entry| entry.get("name"))
                    .and_then(|name| name.as_str());
                match (section, name) {
                    (
                        "routes" | "upstreams" | "plugins" | "services" | "certificates",
                        Some(name),
                    ) => {
                        named = crate::names::entry(section, *index, name);
                    }
                    _ => named.push_str(&format!("[{index}]")),
                }
            }
            Segment::Map { key } | Segment::Enum { variant: key } => {
                for path in [&mut indexed, &mut named] {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                }
            }
            Segment::Unknown => {
                for path in [&mut indexed, &mut named] {
                    path.push_str(".?");
                }
            }
        }
    }
    (indexed, named)
}

/// Removes the field `segments` ends with; false if the path does not lead
/// to a mapping holding it.
fn remove_at(value: &mut serde_yaml_ng::Value, segments: &[serde_path_to_error::Segment]) -> bool {
    use serde_path_to_error::Segment;
    let Some((Segment::Map { key: last }, parents)) = segments.split_last() else {
        return false;
    };
    let mut at = value;
    for segment in parents {
        let next = match segment {
            Segment::Seq { index } => at.get_mut(*index),
            Segment::Map { key } => at.get_mut(key.as_str()),
            _ => None,
        };
        let Some(next) = next else { return false };
        at = next;
    }
    at.as_mapping_mut()
        .and_then(|map| map.remove(last.as_str()))
        .is_some()
}
