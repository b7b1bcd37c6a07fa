//! One engine per directory. A running engine holds an exclusive `flock` on `keel.lock` in its
//! journal directory and in its IPC directory; a second engine pointed at either is refused
//! with the holder's pid. The lock belongs to the open file, so the kernel drops it when the
//! holder dies in any way (kill -9 included): a restart takes over without manual cleanup,
//! and a stale pid left in the file by a dead holder means nothing.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name inside a locked directory.
pub const LOCK_FILE: &str = "keel.lock";

/// A held directory lock; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    path: PathBuf,
}

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another engine holds it.
    #[error(
        "{what} directory {dir} is in use by another keel engine (pid {holder}, lock {lock}): \
         one engine per {what} directory; stop that engine or point this one elsewhere"
    )]
    Held {
        /// "journal" or "ipc".
        what: &'static str,
        /// The directory.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The pid the holder wrote (or "unknown" if it wrote none yet).
        holder: String,
    },
    /// The directory or its lock file cannot be used.
    #[error("{what} directory {dir}: cannot lock {lock}: {source}")]
    Io {
        /// "journal" or "ipc".
        what: &'static str,
        /// The directory.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl DirLock {
    /// Takes the lock of `dir` (created if missing) for this process and writes its pid in
    /// the lock file. `what` names the directory's role in errors.
    pub fn take(dir: &Path, what: &'static str) -> Result<Self, LockError> {
        let lock = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            what,
            dir: dir.to_path_buf(),
            lock: lock.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(io)?;
        match try_lock(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = text.trim();
                return Err(LockError::Held {
                    what,
                    dir: dir.to_path_buf(),
                    lock: lock.clone(),
                    holder: if holder.is_empty() {
                        "unknown".to_string()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(e) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Self {
            _file: file,
            path: lock,
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// An exclusive, non-blocking `flock` on `file` (`WouldBlock` when another open file holds
/// it). The lock lives as long as the open file.
fn try_lock(file: &File) -> std::io::Result<()> {
    // SAFETY: `flock` on a descriptor this `File` owns and keeps open for the call; it touches
    // no memory.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Locks the journal and IPC directories (once if they are the same directory).
pub(super) fn lock_dirs(
    journal: Option<&Path>,
    ipc: Option<&Path>,
) -> Result<Vec<DirLock>, LockError> {
    let mut locks = Vec::new();
    if let Some(dir) = journal {
        locks.push(DirLock::take(dir, "journal")?);
    }
    if let Some(dir) = ipc {
        let same = journal.is_some_and(|j| same_dir(j, dir));
        if !same {
            locks.push(DirLock::take(dir, "ipc")?);
        }
    }
    Ok(locks)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_pid_and_a_drop_releases() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::take(dir.path(), "journal").unwrap();
        let again = DirLock::take(dir.path(), "journal").unwrap_err();
        let text = again.to_string();
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        assert!(matches!(
            again,
            LockError::Held {
                what: "journal",
                ..
            }
        ));
        drop(first);
        let second = DirLock::take(dir.path(), "journal").unwrap();
        assert_eq!(second.path(), dir.path().join(LOCK_FILE));
    }

    #[test]
    fn one_lock_when_journal_and_ipc_share_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let locks = lock_dirs(Some(dir.path()), Some(dir.path())).unwrap();
        assert_eq!(locks.len(), 1);
        let other = tempfile::tempdir().unwrap();
        let err = lock_dirs(Some(other.path()), Some(dir.path())).unwrap_err();
        assert!(matches!(err, LockError::Held { what: "ipc", .. }), "{err}");
    }

    #[test]
    fn an_unusable_directory_is_an_error_naming_it() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let err = DirLock::take(file.path(), "journal").unwrap_err();
        assert!(matches!(err, LockError::Io { .. }), "{err}");
        assert!(err.to_string().contains("journal directory"), "{err}");
    }
}
