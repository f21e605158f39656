//! Paths written in a configuration file (modules, certificates, keys, CA
//! files, the access log, a kubeconfig) are relative to that file's
//! directory, not to the directory the process was started in: so a
//! configuration means the same thing whoever runs it, from wherever.
//! Every crate that reads such a path resolves it here.

use std::path::{Path, PathBuf};

/// The directory the relative paths of the configuration file `file` start
/// from: the file's parent (empty for a bare file name, which then resolves
/// against the working directory), or `.` for a path without one (`/`).
pub fn config_dir(file: &Path) -> &Path {
    file.parent().unwrap_or(Path::new("."))
}

/// `path` as written in a configuration whose directory is `config_dir`: an
/// absolute path as it is, a relative one under `config_dir`. Nothing is
/// normalized (`..` stays) and `~` is not expanded: a path means what the
/// operating system makes of it.
pub fn resolve(config_dir: &Path, path: impl AsRef<Path>) -> PathBuf {
    let path = path.as_ref();
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        config_dir.join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absolute_path_is_kept() {
        assert_eq!(
            resolve(Path::new("/etc/wasmgate"), "/var/lib/p.wasm"),
            PathBuf::from("/var/lib/p.wasm")
        );
    }

    #[test]
    fn a_relative_path_starts_at_the_configuration_directory() {
        let dir = Path::new("/etc/wasmgate");
        assert_eq!(
            resolve(dir, "p.wasm"),
            PathBuf::from("/etc/wasmgate/p.wasm")
        );
        assert_eq!(
            resolve(dir, "certs/a.pem"),
            PathBuf::from("/etc/wasmgate/certs/a.pem")
        );
        assert_eq!(
            resolve(Path::new("conf"), "p.wasm"),
            PathBuf::from("conf/p.wasm")
        );
    }

    #[test]
    fn nothing_is_normalized_or_expanded() {
        let dir = Path::new("/etc/wasmgate");
        assert_eq!(
            resolve(dir, "../p.wasm"),
            PathBuf::from("/etc/wasmgate/../p.wasm")
        );
        assert_eq!(
            resolve(dir, "./p.wasm"),
            PathBuf::from("/etc/wasmgate/./p.wasm")
        );
        assert_eq!(
            resolve(dir, "~/p.wasm"),
            PathBuf::from("/etc/wasmgate/~/p.wasm")
        );
    }

    #[test]
    fn the_directory_of_a_configuration_file() {
        assert_eq!(
            config_dir(Path::new("/etc/wasmgate/gw.yaml")),
            Path::new("/etc/wasmgate")
        );
        assert_eq!(config_dir(Path::new("conf/gw.yaml")), Path::new("conf"));
        // A bare name: its paths resolve against the working directory.
        let bare = config_dir(Path::new("gw.yaml"));
        assert_eq!(bare, Path::new(""));
        assert_eq!(resolve(bare, "p.wasm"), PathBuf::from("p.wasm"));
        assert_eq!(config_dir(Path::new("/")), Path::new("."));
    }
}
