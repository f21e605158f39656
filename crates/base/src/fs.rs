//! Files that readers (a watcher, a restarting node) must never see half
//! written.

use std::path::Path;

/// Writes `bytes` beside `file` and renames it over `file`: a reader sees
/// the old content or the new, never part of it; synced before the rename,
/// so a crash does not leave an empty file either.
pub fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut staged = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut staged, bytes)?;
    staged.as_file().sync_data()?;
    staged.persist(file).map_err(|e| e.error)?;
    Ok(())
}
