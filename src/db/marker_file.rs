//! SQLite's presence markers: a locked file per owner in a folder beside the database
//! file, which the operating system unlocks when the owner's process dies (see
//! `presence.rs` for the servers' markers and what a marker is for).

use std::path::{Path, PathBuf};

use crate::support::error::Error;

/// SQLite's marker: a locked file named for the owner.
#[derive(Debug)]
pub(crate) struct MarkerFile {
    file: std::fs::File,
    path: PathBuf,
}

impl MarkerFile {
    /// Removes and unlocks the file: the marker is freed at once.
    pub(crate) fn close(self) {
        // Removed while locked: nobody can mistake it for a dead owner's marker in
        // between. Whatever fails here, the lock goes with the file.
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}

/// The folder of presence marker files beside the SQLite database of `options`, or
/// `None` for an in-memory database.
pub(crate) fn marker_dir(options: &sqlx::sqlite::SqliteConnectOptions) -> Option<PathBuf> {
    let file = options.get_filename();
    let name = file.to_string_lossy();
    // sqlx names an in-memory database `file:sqlx-in-memory-N`, and says so in its
    // options (not otherwise readable); `mode=memory` keeps the name it was given.
    let in_memory = format!("{options:?}").contains("in_memory: true");
    if in_memory || name.is_empty() || name == ":memory:" || name.starts_with("file:") {
        return None;
    }
    // Every process must find the same folder, whatever its working directory.
    let file = std::fs::canonicalize(file)
        .or_else(|_| std::env::current_dir().map(|d| d.join(file)))
        .ok()?;
    let mut dir = file.into_os_string();
    dir.push("-sqlock-presence");
    Some(PathBuf::from(dir))
}

/// Whether `owner` could be the name of a marker file: what the lock table says is
/// never trusted as a path.
fn plain_owner(owner: &str) -> bool {
    !owner.is_empty()
        && owner.len() <= 64
        && owner.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Creates and locks `owner`'s marker file in `dir`.
pub(crate) fn take_file(dir: &Path, owner: &str) -> Result<MarkerFile, Error> {
    let failed = |e: std::io::Error| Error::PresenceUnavailable {
        reason: format!("the presence marker file in {} failed: {e}", dir.display()),
    };
    if !plain_owner(owner) {
        return Err(Error::PresenceUnavailable {
            reason: "the owner id cannot name a marker file".into(),
        });
    }
    std::fs::create_dir_all(dir).map_err(failed)?;
    let path = dir.join(owner);
    // A sweep removes the file of a gone owner while it holds the file's lock: one
    // that ran between this open and this lock removed the file opened here. The lock
    // counts only on the file that the path names, so it is taken again on a new one.
    for _ in 0..3 {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(failed)?;
        match fs4::fs_std::FileExt::try_lock_exclusive(&file) {
            Ok(true) if same_file(&file, &path) => return Ok(MarkerFile { file, path }),
            Ok(true) => continue,
            Ok(false) => {
                return Err(Error::PresenceUnavailable {
                    reason: format!("the presence marker {} is locked elsewhere", path.display()),
                })
            }
            Err(e) => return Err(failed(e)),
        }
    }
    Err(Error::PresenceUnavailable {
        reason: format!("the presence marker {} kept being removed", path.display()),
    })
}

/// Whether `path` still names the open `file` (a sweep may have removed it).
#[cfg(unix)]
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Elsewhere the file is taken as opened (a sweep's removal of a locked file fails
/// there).
#[cfg(not(unix))]
fn same_file(_: &std::fs::File, path: &Path) -> bool {
    path.exists()
}

/// When `owner` had presence and its process is gone: its marker file, locked by the
/// caller until dropped, so that the owner's leases can be taken meanwhile. `None`
/// when the owner never had presence here (no file), or its marker is held.
pub(crate) fn gone_owner(dir: &Path, owner: &str) -> Option<std::fs::File> {
    if !plain_owner(owner) {
        return None;
    }
    let file = std::fs::File::open(dir.join(owner)).ok()?;
    match fs4::fs_std::FileExt::try_lock_exclusive(&file) {
        Ok(true) => Some(file),
        _ => None,
    }
}
