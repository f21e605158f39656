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
        let message = e.into_inner().to_string();
        // The YAML error repeats the (shorter) path: keep the message only.
        let message = match message.split_once(": ") {
            Some((path, rest)) if !path.contains(' ') => rest.to_string(),
            _ => message,
        };
        (field, message)
    })
}
