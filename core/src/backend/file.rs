//! The operations of file-like storages (`file`: NFS, local disk, EFS, Lustre; `hf3fs`: a 3FS
//! mount) on their directories: deleting a block's file in every spec directory of its
//! instance, and the health probe. Both run on the blocking pool under a timeout, so that a hung
//! mount stalls neither the deleter (for every other instance) nor the health loop nor shutdown:
//! past the timeout the operation fails, and the blocked thread finishes, or stays blocked, on
//! its own. Reached through [`super::Backend::unlink`] and [`super::Backend::probe`].
//!
//! A deletion unlinks one file name in the spec directories of the instance's own directory
//! ([`super::Backend::instance_dir`], which no other instance's directory nests in) and nothing
//! else: it never follows a symbolic link (an instance or spec directory that is one fails with
//! the reason) and never enters another instance's tree. A missing storage root is a failure,
//! not "nothing to delete": an unmounted NFS or 3FS would otherwise release the metadata and
//! leak the files once the mount returns.

use std::path::Path;
use std::time::Duration;

/// How a timed-out operation's error starts (the deleter keeps a key held after one: the unlink
/// may still run).
pub const TIMED_OUT: &str = "storage operation timed out";

/// Storage roots with an operation that timed out and has not returned yet (a hung mount).
static HUNG: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn hung() -> std::sync::MutexGuard<'static, Vec<String>> {
    HUNG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `op` on the blocking pool; its result, or an error once `timeout` has passed. While an
/// operation on `root` is still blocked past its timeout, further ones on that root fail at once
/// with the same error (not counted as another hung thread): a hung mount then holds one thread,
/// not one per entry or probe, costs the deleter no further timeouts, and no later operation on
/// the root can run — and succeed — while an earlier unlink may still land.
pub(crate) async fn with_timeout<T: Send + 'static>(
    root: &str,
    what: &str,
    timeout: Duration,
    op: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    if hung().iter().any(|r| r == root) {
        return Err(format!("{TIMED_OUT}: an earlier operation on {root} has not returned (a hung mount?)"));
    }
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    // Both flags change only under the HUNG lock, so a thread returning just as its timeout
    // fires either unmarks the root or is never marked.
    let (done, marked) = (std::sync::Arc::new(AtomicBool::new(false)), std::sync::Arc::new(AtomicBool::new(false)));
    let (done2, marked2, owned_root) = (done.clone(), marked.clone(), root.to_string());
    /// Marks the operation returned when dropped — also when it panicked.
    struct Returned(std::sync::Arc<AtomicBool>, std::sync::Arc<AtomicBool>, String);
    impl Drop for Returned {
        fn drop(&mut self) {
            let mut h = hung();
            self.0.store(true, SeqCst);
            if self.1.load(SeqCst)
                && let Some(i) = h.iter().position(|r| *r == self.2)
            {
                h.remove(i); // returned at last: the root takes operations again
            }
        }
    }
    let task = tokio::task::spawn_blocking(move || {
        let _returned = Returned(done2, marked2, owned_root);
        op()
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(joined) => joined.map_err(|e| e.to_string())?,
        Err(_) => {
            let mut h = hung();
            if !done.load(SeqCst) {
                h.push(root.to_string());
                marked.store(true, SeqCst);
            }
            Err(format!("{TIMED_OUT}: {what} took over {} ms (a hung mount?)", timeout.as_millis()))
        }
    }
}

/// Deletes `name` in every spec directory of `dir` (an instance directory under `root`).
/// Missing files and directories are success (a redelivered entry finds them gone).
pub(crate) async fn unlink(root: String, dir: String, name: String, timeout: Duration) -> Result<(), String> {
    let at = root.clone();
    with_timeout(&at, "deleting", timeout, move || {
        root_present(&root)?;
        unlink_in_spec_dirs(&dir, &name)
    })
    .await
}

/// The root exists (it is not created: a missing root usually means an unmounted NFS or 3FS,
/// and writing to the local disk underneath would be wrong) and `probe` can be written and
/// removed in it.
pub(crate) async fn probe(root: String, probe: String, timeout: Duration) -> Result<(), String> {
    let at = root.clone();
    with_timeout(&at, "the health probe", timeout, move || {
        if !Path::new(&root).is_dir() {
            return Err(format!("root {root} is not a directory (not mounted?)"));
        }
        std::fs::write(&probe, b"kvcm").map_err(|e| format!("cannot write {probe}: {e}"))?;
        std::fs::remove_file(&probe).map_err(|e| format!("cannot remove {probe}: {e}"))
    })
    .await
}

/// Ok when a file-like storage's root is an existing directory (following a link: a root may
/// well be one); an error naming it otherwise.
pub(crate) fn root_present(root: &str) -> Result<(), String> {
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("storage root {root} is not a directory; nothing deleted, will retry")),
        Err(e) => Err(format!(
            "storage root {root} is missing or unreadable (not mounted?): {e}; nothing deleted, will retry"
        )),
    }
}

/// Unlinks `<dir>/<spec>/<name>` for every spec directory `<spec>` of an instance directory, and
/// touches nothing else:
///
/// * `dir` is the instance's own directory ([`Backend::instance_dir`]); no other instance's
///   directory can be inside it, so every sub-directory is one of this instance's specs.
/// * Only real sub-directories are entered: a symbolic link (to a directory elsewhere, perhaps
///   another instance's) is refused, as is `dir` itself being one — the entry fails with the
///   reason and, after its retries, goes to the dead-letter stream. Plain files are skipped.
/// * `unlink` removes `<name>` itself, never what a symbolic link there points to.
///
/// A `dir` that is missing, not a directory, or whose name is too long for the filesystem
/// holds nothing to delete. What remains: whoever can write inside `dir` can swap a checked
/// directory for a link between the check and the unlink (std has no `unlinkat`); such a writer
/// can already delete these files itself.
pub(crate) fn unlink_in_spec_dirs(dir: &str, name: &str) -> Result<(), String> {
    use std::io::ErrorKind::{InvalidFilename, NotFound};
    // Without its trailing '/': `lstat("link/")` would follow the link.
    let dir = Path::new(dir.trim_end_matches('/'));
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(format!("refusing to delete through {}: it is a symbolic link", dir.display()));
        }
        Ok(m) if !m.is_dir() => return Ok(()),
        Ok(_) => {}
        Err(e) if matches!(e.kind(), NotFound | InvalidFilename) => return Ok(()),
        Err(e) => return Err(format!("cannot inspect {}: {e}", dir.display())),
    }
    let specs = match std::fs::read_dir(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot list {}: {e}", dir.display())),
    };
    for spec in specs {
        let spec = spec.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        // `DirEntry::file_type` does not follow symbolic links.
        let kind = spec.file_type().map_err(|e| format!("cannot inspect {}: {e}", spec.path().display()))?;
        if kind.is_symlink() {
            return Err(format!("refusing to delete through {}: it is a symbolic link", spec.path().display()));
        }
        if !kind.is_dir() {
            continue;
        }
        let path = spec.path().join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == NotFound => {}
            Err(e) => return Err(format!("cannot delete {}: {e}", path.display())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unlink_in_spec_dirs;
    use std::fs;
    use std::path::PathBuf;

    /// A fresh directory under the repository's `.kvcm/test-data` (removed at the end).
    fn scratch(name: &str) -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.kvcm/test-data").join(format!(
            "{name}-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn only_the_instances_own_spec_directories_are_touched() {
        let root = scratch("unlink");
        let write = |p: PathBuf| {
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, b"kv").unwrap();
            p
        };
        let own = [write(root.join("a/tp0/00ff")), write(root.join("a/tp1/00ff"))];
        let kept = write(root.join("a/tp0/0100"));
        // Another instance's tree and a file outside any spec directory.
        let other = write(root.join("a~2Fb/tp0/00ff"));
        let loose = write(root.join("a/00ff"));
        let dir = |name: &str| format!("{}/{name}/", root.display());
        unlink_in_spec_dirs(&dir("a"), "00ff").unwrap();
        assert!(own.iter().all(|p| !p.exists()), "the instance's copies are gone");
        assert!(kept.exists() && other.exists() && loose.exists(), "nothing else is touched");
        // Idempotent; a missing instance directory, or one too long to exist, is nothing to do.
        unlink_in_spec_dirs(&dir("a"), "00ff").unwrap();
        unlink_in_spec_dirs(&dir("gone"), "00ff").unwrap();
        unlink_in_spec_dirs(&dir(&"~2F".repeat(100)), "00ff").unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_missing_storage_root_is_an_error_not_nothing_to_delete() {
        let root = scratch("unmounted");
        assert!(super::root_present(&format!("{}/", root.display())).is_ok());
        let gone = format!("{}/not-mounted/", root.display());
        let e = super::root_present(&gone).unwrap_err();
        assert!(e.contains("not mounted") && e.contains(&gone), "{e}");
        fs::write(root.join("file"), b"x").unwrap();
        assert!(super::root_present(&format!("{}/file", root.display())).unwrap_err().contains("not a directory"));
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn symbolic_links_are_never_followed() {
        let root = scratch("unlink-links");
        let victim = root.join("elsewhere/00ff");
        fs::create_dir_all(victim.parent().unwrap()).unwrap();
        fs::write(&victim, b"not kvcm's").unwrap();
        // A spec "directory" that links elsewhere.
        fs::create_dir_all(root.join("a")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("a/tp0")).unwrap();
        let dir = |name: &str| format!("{}/{name}/", root.display());
        let e = unlink_in_spec_dirs(&dir("a"), "00ff").unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        // An instance "directory" that links elsewhere (named with the trailing '/', as the
        // deleter names it).
        std::os::unix::fs::symlink(root.join("elsewhere/.."), root.join("b")).unwrap();
        fs::create_dir_all(root.join("tp0")).unwrap();
        fs::write(root.join("tp0/00ff"), b"not kvcm's either").unwrap();
        let e = unlink_in_spec_dirs(&dir("b"), "00ff").unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(victim.exists() && root.join("tp0/00ff").exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[tokio::test]
    async fn a_hung_operation_fails_at_its_timeout() {
        let root = scratch("hung");
        // Opening a FIFO for writing blocks until a reader comes: a real blocking file operation.
        let fifo = root.join("~kvcm-health-w");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let t = std::time::Instant::now();
        let e =
            super::probe(root.display().to_string(), fifo.display().to_string(), std::time::Duration::from_millis(300))
                .await
                .unwrap_err();
        assert!(e.starts_with(super::TIMED_OUT) && e.contains("health probe"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
        // While it is still blocked, the root's next operation fails at once, spawning nothing.
        let (r, p) = (root.display().to_string(), fifo.display().to_string());
        let t = std::time::Instant::now();
        let e = super::probe(r.clone(), p.clone(), std::time::Duration::from_secs(10)).await.unwrap_err();
        assert!(e.contains("has not returned"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_millis(500), "{:?}", t.elapsed());
        // Unblock the thread (a reader opens the FIFO): the root takes operations again.
        let _ = fs::File::open(&fifo);
        let again = async {
            loop {
                let other = root.join("~kvcm-health-other").display().to_string();
                match super::probe(r.clone(), other, std::time::Duration::from_secs(5)).await {
                    Ok(()) => return,
                    Err(e) => assert!(e.contains("has not returned"), "{e}"),
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), again).await.expect("the root never recovered");
        fs::remove_dir_all(&root).unwrap();
    }
}
