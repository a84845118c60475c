//! The operations of file-like storages (`file`: NFS, local disk, EFS, Lustre; `hf3fs`: a 3FS
//! mount) on their directories: deleting a block's file in every spec directory of its
//! instance, and the health probe. Both run on the blocking pool under a timeout, so that a hung
//! mount stalls neither the deleter (for every other instance) nor the health loop nor shutdown:
//! past the timeout the operation fails, and the blocked thread finishes, or stays blocked, on
//! its own. [`FileBackend`] is the [`StorageBackend`] of these storages.
//!
//! A deletion unlinks one file name in the spec directories of the instance's own directory
//! (`<root><path_segment(instance)>/`, which no other instance's directory nests in) and nothing
//! else: it never follows a symbolic link (an instance or spec directory that is one fails with
//! the reason) and never enters another instance's tree. A missing storage root is a failure,
//! not "nothing to delete": an unmounted NFS or 3FS would otherwise release the metadata and
//! leak the files once the mount returns.

use super::{Capacity, StorageBackend, path_segment, push_hex};
use crate::store::record::Location;
use futures::future::BoxFuture;
use rustix::io::Errno;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

/// A directory tree: `file` (NFS, local disk, EFS, Lustre) or `hf3fs` (a 3FS mount, the same
/// layout under `<mountpoint><root_dir>`). URIs are
/// `<scheme>://<storage><root><instance>/<spec>/<hex key>?size=n`, or for packed files
/// `<hex first>_<hash>?blkid=j&size=n` (module docs of [`super`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBackend {
    scheme: &'static str,
    /// Ends with `/`.
    root: String,
    per_file: u16,
}

impl FileBackend {
    pub fn file(root: String, per_file: u16) -> Self {
        FileBackend { scheme: "file", root, per_file }
    }

    pub fn hf3fs(root: String, per_file: u16) -> Self {
        FileBackend { scheme: "hf3fs", root, per_file }
    }
}

impl StorageBackend for FileBackend {
    fn key_count_per_file(&self) -> u16 {
        self.per_file
    }

    fn root(&self) -> Option<&str> {
        Some(&self.root)
    }

    fn uri_prefix(&self, storage: &str, instance: &str, spec: &str) -> Option<String> {
        let (i, s) = (path_segment(instance), path_segment(spec));
        Some(format!("{}://{storage}{}{i}/{s}/", self.scheme, self.root))
    }

    fn push_uri_rest_bytes(&self, out: &mut Vec<u8>, size: i64, key: i64, loc: &Location) {
        let mut num = itoa::Buffer::new();
        match loc.packed {
            Some(p) => {
                push_hex(out, p.file_first as u64, 16);
                out.push(b'_');
                push_hex(out, p.file_hash as u64, 8);
                out.extend_from_slice(b"?blkid=");
                out.extend_from_slice(num.format(p.blkid).as_bytes());
                out.extend_from_slice(b"&size=");
            }
            None => {
                push_hex(out, key as u64, 16);
                out.extend_from_slice(b"?size=");
            }
        }
        out.extend_from_slice(num.format(size).as_bytes());
    }

    /// Deletes the block's file (or, for a packed location, its packed file) in every spec
    /// directory of `instance` ([`unlink`]).
    fn unlink<'a>(
        &'a self,
        instance: &'a str,
        key: i64,
        loc: &'a Location,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<bool, String>> {
        let name = super::Backend::file_name(key, loc);
        Box::pin(async move {
            unlink(self.root.clone(), path_segment(instance).into_owned(), name, timeout).await.map(|()| true)
        })
    }

    /// The filesystem of the root (`statvfs`), under the same timeout and hung-root guard as
    /// the other operations.
    fn capacity<'a>(&'a self, timeout: Duration) -> BoxFuture<'a, Result<Option<Capacity>, String>> {
        Box::pin(async move {
            let root = self.root.clone();
            with_timeout(&self.root, "statvfs", timeout, move || {
                let st = rustix::fs::statvfs(root.as_str()).map_err(|e| format!("statvfs {root}: {e}"))?;
                Ok(Some(Capacity {
                    total_bytes: st.f_blocks.saturating_mul(st.f_frsize),
                    free_bytes: st.f_bavail.saturating_mul(st.f_frsize),
                }))
            })
            .await
        })
    }

    /// [`probe`] with the worker's probe file ([`StorageBackend::health_probe_path`]).
    fn probe<'a>(&'a self, worker_id: &'a str, timeout: Duration) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let Some(file) = self.health_probe_path(worker_id) else { return Ok(()) };
            probe(self.root.clone(), file, timeout).await
        })
    }
}

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

/// Deletes `name` in every spec directory of the instance directory `instance` (a path segment)
/// under `root`. Missing files and directories are success (a redelivered entry finds them gone);
/// a missing root is an error ([`open_root`]).
pub(crate) async fn unlink(root: String, instance: String, name: String, timeout: Duration) -> Result<(), String> {
    let at = root.clone();
    with_timeout(&at, "deleting", timeout, move || {
        crate::faults::global().check_blocking(crate::faults::STORAGE_UNLINK)?;
        unlink_in_spec_dirs(&open_root(&root)?, &root, &instance, &name)
    })
    .await
}

/// The root exists (it is not created: a missing root usually means an unmounted NFS or 3FS,
/// and writing to the local disk underneath would be wrong) and `probe` can be written and
/// removed in it.
pub(crate) async fn probe(root: String, probe: String, timeout: Duration) -> Result<(), String> {
    let at = root.clone();
    with_timeout(&at, "the health probe", timeout, move || {
        crate::faults::global().check_blocking(crate::faults::STORAGE_PROBE)?;
        if !Path::new(&root).is_dir() {
            return Err(format!("root {root} is not a directory (not mounted?)"));
        }
        std::fs::write(&probe, b"kvcm").map_err(|e| format!("cannot write {probe}: {e}"))?;
        std::fs::remove_file(&probe).map_err(|e| format!("cannot remove {probe}: {e}"))
    })
    .await
}

/// Opens a file-like storage's root directory (following a link: a root may well be one) for
/// the operations below, which all work relative to it: once it is open, the root being renamed
/// or unmounted (lazily) mid-deletion cannot make a file look already deleted — a path looked up
/// again would find nothing there, and the deleter would release a block whose file comes back
/// with the mount. An error naming the root when it is missing or not a directory.
pub(crate) fn open_root(root: &str) -> Result<OwnedFd, String> {
    use rustix::fs::{CWD, Mode, OFlags, openat};
    openat(CWD, root, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| match e {
        Errno::NOTDIR => format!("storage root {root} is not a directory; nothing deleted, will retry"),
        e => format!("storage root {root} is missing or unreadable (not mounted?): {e}; nothing deleted, will retry"),
    })
}

/// Unlinks `<instance>/<spec>/<name>` under the open root `root_fd` (named `root` in errors) for
/// every spec directory `<spec>` of the instance's directory, and touches nothing else:
///
/// * `instance` is the instance's own directory (its [`super::path_segment`]); no other
///   instance's directory can be inside it, so every sub-directory is one of this instance's
///   specs.
/// * Only real sub-directories are entered, each opened relative to its parent without following
///   links (`O_NOFOLLOW`): a symbolic link (to a directory elsewhere, perhaps another
///   instance's) is refused, as is the instance directory being one — the entry fails with the
///   reason and, after its retries, goes to the dead-letter stream. Nothing can swap a checked
///   directory for a link: what is checked is the directory opened. Plain files are skipped.
/// * `unlinkat` removes `<name>` itself, never what a symbolic link there points to.
///
/// An instance directory that is missing, not a directory, or whose name is too long for the
/// filesystem holds nothing to delete.
pub(crate) fn unlink_in_spec_dirs(root_fd: &OwnedFd, root: &str, instance: &str, name: &str) -> Result<(), String> {
    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, openat, statat, unlinkat};
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let inst = format!("{root}{instance}");
    let dir = match openat(root_fd, instance, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NAMETOOLONG) => return Ok(()),
        // Linux says NOTDIR for a link opened with O_NOFOLLOW | O_DIRECTORY, as for a file.
        Err(Errno::NOTDIR | Errno::LOOP) => {
            return match statat(root_fd, instance, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                    Err(format!("refusing to delete through {inst}: it is a symbolic link"))
                }
                // A plain file, or gone since: nothing to delete.
                Ok(_) | Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(format!("cannot inspect {inst}: {e}")),
            };
        }
        Err(e) => return Err(format!("cannot open {inst}: {e}")),
    };
    let specs = Dir::read_from(&dir).map_err(|e| format!("cannot list {inst}: {e}"))?;
    let mut names = Vec::new();
    for spec in specs {
        let spec = spec.map_err(|e| format!("cannot list {inst}: {e}"))?;
        let spec_name = spec.file_name().to_owned();
        if matches!(spec_name.to_bytes(), b"." | b"..") {
            continue;
        }
        // The entry's type when the filesystem reports it; asked for without following it when not.
        let kind = match spec.file_type() {
            FileType::Unknown => match statat(&dir, spec_name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(format!("cannot inspect {inst}/{}: {e}", spec_name.to_string_lossy())),
            },
            kind => kind,
        };
        match kind {
            FileType::Symlink => {
                return Err(format!(
                    "refusing to delete through {inst}/{}: it is a symbolic link",
                    spec_name.to_string_lossy()
                ));
            }
            FileType::Directory => names.push(spec_name),
            _ => {}
        }
    }
    for spec_name in names {
        let spec = format!("{inst}/{}", spec_name.to_string_lossy());
        let spec_fd = match openat(&dir, spec_name.as_c_str(), dir_flags, Mode::empty()) {
            Ok(d) => d,
            Err(Errno::NOENT) => continue,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(format!("refusing to delete through {spec}: it is no longer a directory"));
            }
            Err(e) => return Err(format!("cannot open {spec}: {e}")),
        };
        match unlinkat(&spec_fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(format!("cannot delete {spec}/{name}: {e}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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

    /// Deletes `name` in `instance`'s spec directories under `root`, opened now.
    fn unlink_in_spec_dirs(root: &std::path::Path, instance: &str, name: &str) -> Result<(), String> {
        let root = format!("{}/", root.display());
        super::unlink_in_spec_dirs(&super::open_root(&root)?, &root, instance, name)
    }

    #[tokio::test]
    async fn capacity_is_the_roots_filesystem_and_a_missing_root_is_an_error() {
        use crate::backend::StorageBackend;
        let root = scratch("capacity");
        let backend = super::FileBackend::file(format!("{}/", root.display()), 1);
        let c = backend.capacity(std::time::Duration::from_secs(5)).await.unwrap().unwrap();
        let st = rustix::fs::statvfs(&root).unwrap();
        assert_eq!(c.total_bytes, st.f_blocks * st.f_frsize);
        assert!(c.total_bytes > 0 && c.free_bytes <= c.total_bytes, "{c:?}");
        fs::remove_dir_all(&root).unwrap();
        let err = backend.capacity(std::time::Duration::from_secs(5)).await.unwrap_err();
        assert!(err.contains("statvfs"), "{err}");
        let mooncake = crate::backend::mooncake::MooncakeBackend;
        assert_eq!(mooncake.capacity(std::time::Duration::from_secs(5)).await, Ok(None));
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
        unlink_in_spec_dirs(&root, "a", "00ff").unwrap();
        assert!(own.iter().all(|p| !p.exists()), "the instance's copies are gone");
        assert!(kept.exists() && other.exists() && loose.exists(), "nothing else is touched");
        // Idempotent; a missing instance directory, or one too long to exist, is nothing to do.
        unlink_in_spec_dirs(&root, "a", "00ff").unwrap();
        unlink_in_spec_dirs(&root, "gone", "00ff").unwrap();
        unlink_in_spec_dirs(&root, &"~2F".repeat(100), "00ff").unwrap();
        // A plain file where the instance directory would be holds nothing either.
        fs::write(root.join("f"), b"x").unwrap();
        unlink_in_spec_dirs(&root, "f", "00ff").unwrap();
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_missing_storage_root_is_an_error_not_nothing_to_delete() {
        let root = scratch("unmounted");
        assert!(super::open_root(&format!("{}/", root.display())).is_ok());
        let gone = format!("{}/not-mounted/", root.display());
        let e = super::open_root(&gone).unwrap_err();
        assert!(e.contains("not mounted") && e.contains(&gone), "{e}");
        fs::write(root.join("file"), b"x").unwrap();
        assert!(super::open_root(&format!("{}/file", root.display())).unwrap_err().contains("not a directory"));
        fs::remove_dir_all(&root).unwrap();
    }

    /// The chaos suite's lost file (a storage root renamed away between the check that it is
    /// there and the unlink, which then found nothing and released the block): once the root is
    /// open, the deletion lands in that directory wherever it has gone.
    #[test]
    fn a_root_that_moves_mid_deletion_still_loses_the_file() {
        let root = scratch("moving");
        let file = root.join("a/tp0/00ff");
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, b"kv").unwrap();
        let path = format!("{}/", root.display());
        let fd = super::open_root(&path).unwrap();
        let away = root.with_extension("unmounted");
        fs::rename(&root, &away).unwrap();
        super::unlink_in_spec_dirs(&fd, &path, "a", "00ff").unwrap();
        fs::rename(&away, &root).unwrap();
        assert!(!file.exists(), "the file came back with its root");
        assert!(root.join("a/tp0").is_dir(), "only the file is deleted");
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
        let e = unlink_in_spec_dirs(&root, "a", "00ff").unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        // An instance "directory" that links elsewhere.
        std::os::unix::fs::symlink(root.join("elsewhere/.."), root.join("b")).unwrap();
        fs::create_dir_all(root.join("tp0")).unwrap();
        fs::write(root.join("tp0/00ff"), b"not kvcm's either").unwrap();
        let e = unlink_in_spec_dirs(&root, "b", "00ff").unwrap_err();
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
