//! When a component loaded from a file is loaded again: the file changed, or `SIGHUP` asked for it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// Bumped on every SIGHUP (see [`request_reload`]); each watcher reloads when it sees a new value.
static RELOAD_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Asks every hook loaded from a file to load it again before its next use.
pub fn request_reload() {
    RELOAD_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The modification time of `path`, if it can be read.
pub(crate) fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Watches one component file for a replacement or a reload request.
pub(crate) struct ReloadWatch {
    /// The component's file.
    pub path: PathBuf,
    modified: Option<SystemTime>,
    generation: u64,
}

impl ReloadWatch {
    /// Starts watching `path` as it is now.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            modified: modified(path),
            generation: RELOAD_GENERATION.load(Ordering::Relaxed),
        }
    }

    /// Whether the file changed or a reload was requested since the last call (one stat).
    pub fn changed(&mut self) -> bool {
        let generation = RELOAD_GENERATION.load(Ordering::Relaxed);
        let now = modified(&self.path);
        if generation == self.generation && now == self.modified {
            return false;
        }
        self.generation = generation;
        self.modified = now;
        true
    }
}
