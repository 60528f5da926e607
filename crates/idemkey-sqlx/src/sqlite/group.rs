//! Group commit on SQLite: a write that may share its sync commits without waiting for the
//! disk (`synchronous = NORMAL`, which the writer's connection keeps until a write that is not
//! grouped), gives the writer back at once, and then waits for one `fdatasync` of the WAL that
//! it shares with every write committed before that sync began. Grouped: the store's claims,
//! takeovers and releases, its completions, and the handler's transaction of lease mode's
//! transactional layer (whose last statement completes the record).
//!
//! Why this keeps each write durable when it returns. In WAL mode a commit appends its frames
//! to the `-wal` file; `synchronous = NORMAL` only skips the sync that `FULL` makes before the
//! commit returns. The frames are in the file (the kernel's cache) as soon as the commit
//! returns, so a sync of that file which begins afterwards puts them on disk, whoever makes
//! it; the WAL is only appended to, so every earlier commit is covered too. If a checkpoint
//! moved the frames into the database file and the WAL started over, that checkpoint synced
//! both files first (it does under `NORMAL`). A WAL file that is new since the last sync also
//! gets its directory synced, as SQLite does for a new WAL under `FULL`.
//!
//! What others read before it is on disk. A claim read by a duplicate only answers
//! `request-in-flight`, which promises nothing. A completed record promises that its answer
//! stands, so whoever reads one ([`GroupFlush::seen_synced`]: a replay, the replay cache, a
//! duplicate) first makes sure that every commit it could have seen is on disk: a sync that
//! began after its read, unless the last finished sync began with the WAL exactly as it is
//! now. The WAL's state is its index's header in the `-shm` file, which every connection of
//! every process updates with each commit (sqlite.org/walformat.html, "The WAL-Index
//! Header"), so a record another process committed and has not synced yet is synced by the
//! reader itself. Heartbeats and lease renewals are not grouped: each is on a deadline, and a
//! grouped write may first wait for a sync already under way.
//!
//! A sync that fails is never tried again for the same writes: it stops the store's writes
//! until the process restarts (`sync_failure.rs`).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use idemkey_core::{Error, Result};

/// A store's group commit: off until [`Grouping::enable`] (the store opened the file itself,
/// in WAL mode with `synchronous` at `FULL` or above), shared by the store's clones.
#[derive(Debug, Default)]
pub(crate) struct Grouping {
    flush: OnceLock<GroupFlush>,
    /// Whether the writer's connection may be at `synchronous = NORMAL`. It changes only
    /// while the writer's one connection is held: a grouped write relaxes the connection
    /// unless it is relaxed already, and any other write puts the configured level back
    /// before it begins (`Backend::restore_sync`). Grouped writes in a row so cost no `PRAGMA`.
    relaxed: AtomicBool,
}

impl Grouping {
    /// Turns group commit on for the database whose main file is `db`, restoring
    /// `synchronous` to `level` (2 `FULL`, 3 `EXTRA`) after each grouped write.
    pub(crate) fn enable(&self, db: &Path, level: i64) {
        let _ = self.flush.set(GroupFlush::new(db, level));
    }

    /// The flush, if group commit is on.
    pub(crate) fn flush(&self) -> Option<&GroupFlush> {
        self.flush.get()
    }

    /// Notes that the writer's connection is about to be at `synchronous = NORMAL`: the
    /// statement that relaxes it, if it may still be at the configured level. Marked before
    /// the statement runs, so that whatever becomes of it the next write that is not grouped
    /// puts the level back.
    pub(crate) fn take_relax(&self) -> Option<&'static str> {
        self.flush()?;
        (!self.relaxed.swap(true, Ordering::SeqCst)).then_some("PRAGMA synchronous = NORMAL")
    }

    /// Notes that the writer's connection may still be relaxed: putting the level back
    /// failed.
    pub(crate) fn relaxed(&self) {
        self.relaxed.store(true, Ordering::SeqCst);
    }

    /// The statement that puts the configured level back, if a grouped write left the
    /// connection relaxed; clears the mark.
    pub(crate) fn take_restore(&self) -> Option<&'static str> {
        if !self.relaxed.swap(false, Ordering::SeqCst) {
            return None;
        }
        self.flush().map(GroupFlush::restore)
    }
}

/// One sync of the WAL at a time, each covering every ticket taken before it began.
#[derive(Debug)]
pub(crate) struct GroupFlush {
    wal: PathBuf,
    db: PathBuf,
    shm: PathBuf,
    restore: &'static str,
    /// Tickets handed out, one per grouped commit, each taken after its commit returned.
    taken: AtomicU64,
    /// The highest ticket a finished sync covered, and the WAL file it synced; held while a
    /// sync runs, so that commits arriving meanwhile wait for the next one together.
    done: tokio::sync::Mutex<Synced>,
    /// The WAL's index as the last finished sync found it before it began: a read that finds
    /// the same header saw nothing that sync did not cover. `None` when it could not be read
    /// whole.
    synced_index: Mutex<Option<Arc<Index>>>,
    /// How many syncs ran.
    #[cfg(test)]
    syncs: AtomicU64,
    /// Whether the syncs fail, as a disk's writeback error makes them.
    #[cfg(test)]
    failing: AtomicBool,
}

#[derive(Debug, Default)]
struct Synced {
    ticket: u64,
    wal: Option<FileId>,
}

/// Which file a path named when it was synced: a WAL deleted and made again is another.
type FileId = (u64, u64);

/// The first copy of the WAL index's header: its change counter, frame count, salts and
/// checksums, which every commit changes.
type Header = [u8; HEADER_LEN];

const HEADER_LEN: usize = 48;

impl GroupFlush {
    fn new(db: &Path, level: i64) -> Self {
        let beside = |suffix: &str| {
            let mut path = db.as_os_str().to_owned();
            path.push(suffix);
            PathBuf::from(path)
        };
        Self {
            wal: beside("-wal"),
            db: db.to_owned(),
            shm: beside("-shm"),
            restore: if level >= 3 {
                "PRAGMA synchronous = EXTRA"
            } else {
                "PRAGMA synchronous = FULL"
            },
            taken: AtomicU64::new(0),
            done: tokio::sync::Mutex::default(),
            synced_index: Mutex::new(None),
            #[cfg(test)]
            syncs: AtomicU64::new(0),
            #[cfg(test)]
            failing: AtomicBool::new(false),
        }
    }

    fn restore(&self) -> &'static str {
        self.restore
    }

    /// Holds off every sync until the guard drops, as a sync under way does.
    #[cfg(test)]
    pub(crate) async fn hold(&self) -> tokio::sync::MutexGuard<'_, impl Sized> {
        self.done.lock().await
    }

    /// Makes every later sync fail (or succeed again).
    #[cfg(test)]
    pub(crate) fn fail_syncs(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    #[cfg(test)]
    fn failing(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }

    #[cfg(not(test))]
    fn failing(&self) -> bool {
        false
    }

    /// How many syncs ran, and how many tickets are taken.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.syncs.load(Ordering::SeqCst),
            self.taken.load(Ordering::SeqCst),
        )
    }

    /// Returns once everything committed before the call is on disk: a sync that began after
    /// the call, made by this caller or by another one waiting at the same time.
    pub(crate) async fn flush(&self) -> Result<()> {
        let ticket = self.taken.fetch_add(1, Ordering::SeqCst) + 1;
        let mut done = self.done.lock().await;
        if done.ticket >= ticket {
            return Ok(());
        }
        // Every ticket up to here was taken after its commit returned and before this sync.
        let covers = self.taken.load(Ordering::SeqCst);
        let (wal, db, last) = (self.wal.clone(), self.db.clone(), done.wal);
        let (failing, shm) = (self.failing(), self.shm.clone());
        let (synced, header) = tokio::task::spawn_blocking(move || {
            // Read before the sync begins: every frame it counts is in the file by then.
            let header = Index::open(&shm);
            match failing {
                true => Err(io::Error::other("injected failure of fdatasync")),
                false => sync(&wal, &db, last).map(|synced| (synced, header)),
            }
        })
        .await
        .map_err(|e| Error::Backend(Box::new(e)))?
        .map_err(|e| Error::Backend(Box::new(e)))?;
        *done = Synced {
            ticket: covers,
            wal: synced,
        };
        *self.index_lock() = header.map(Arc::new);
        #[cfg(test)]
        self.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Whether every commit that a read which has just ended could have seen is on disk
    /// already: the WAL is as the last finished sync found it before it began (module docs).
    /// If not, a [`Self::flush`] called now covers them.
    pub(crate) fn seen_synced(&self) -> bool {
        let synced = self.index_lock().clone();
        synced.is_some_and(|index| index.unchanged())
    }

    fn index_lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Index>>> {
        // Only whole values are stored under the lock, so a poisoned one is still sound.
        self.synced_index
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The WAL index's file (`-shm`) as a sync found it: its descriptor, and its header as it read
/// then.
#[derive(Debug)]
struct Index {
    file: Arc<File>,
    header: Header,
}

impl Index {
    /// The index at `shm` and its header, if both of the header's copies read alike (a
    /// writer updating it writes one, then the other); `None` if it cannot be read or is
    /// being written.
    fn open(shm: &Path) -> Option<Self> {
        let file = index_file(shm)?;
        let header = read_header(&file)?;
        Some(Self { file, header })
    }

    /// Whether the header still reads as it did, in the file that is still the index. Kept
    /// open (a read of a few bytes of a file SQLite maps, cheaper than handing it to a
    /// blocking thread): an index deleted since (SQLite deletes it when the database's last
    /// connection closes) reads as it was for good, so it counts as changed.
    fn unchanged(&self) -> bool {
        read_header(&self.file) == Some(self.header) && linked(&self.file)
    }
}

/// The WAL index files this process has open, one descriptor per file, each kept until its
/// file is deleted. SQLite locks byte ranges of the index with POSIX locks, which belong to
/// the process, and closing any descriptor of a file drops every one of them: closing ours
/// while SQLite's connections use the file would let another process reset the index under
/// them. A deleted index has no connection left (SQLite deletes it as the last one closes).
#[cfg(unix)]
static INDEX_FILES: Mutex<Vec<Arc<File>>> = Mutex::new(Vec::new());

/// The process's descriptor of the index at `shm`, opened if it has none.
#[cfg(unix)]
fn index_file(shm: &Path) -> Option<Arc<File>> {
    let found = std::fs::metadata(shm).ok()?;
    let mut open = INDEX_FILES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    open.retain(|file| linked(file));
    if let Some(file) = open.iter().find(|file| same_file(file, &found)) {
        return Some(file.clone());
    }
    let file = Arc::new(File::open(shm).ok()?);
    open.push(file.clone());
    Some(file)
}

fn read_header(file: &File) -> Option<Header> {
    let mut both = [0u8; 2 * HEADER_LEN];
    read_start(file, &mut both).ok()?;
    let (first, second) = both.split_at(HEADER_LEN);
    (first == second).then(|| first.try_into().ok()).flatten()
}

#[cfg(unix)]
fn read_start(file: &File, buf: &mut [u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, 0)
}

#[cfg(unix)]
fn linked(file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    file.metadata().is_ok_and(|meta| meta.nlink() > 0)
}

#[cfg(unix)]
fn same_file(file: &File, found: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    file.metadata()
        .is_ok_and(|meta| (meta.dev(), meta.ino()) == (found.dev(), found.ino()))
}

/// Elsewhere the index is not read: every read of a completed record syncs.
#[cfg(not(unix))]
fn index_file(_shm: &Path) -> Option<Arc<File>> {
    None
}

#[cfg(not(unix))]
fn read_start(_file: &File, _buf: &mut [u8]) -> io::Result<()> {
    Err(io::Error::other("the index is read on Unix only"))
}

#[cfg(not(unix))]
fn linked(_file: &File) -> bool {
    false
}

/// Syncs the WAL's data (and its directory when it is not the file `last` synced); with no
/// WAL file, the database file, into which a checkpoint moved every frame before removing it.
fn sync(wal: &Path, db: &Path, last: Option<FileId>) -> io::Result<Option<FileId>> {
    let file = match File::open(wal) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            File::open(db)?.sync_data()?;
            return Ok(None);
        }
        Err(error) => return Err(error),
    };
    file.sync_data()?;
    let id = file_id(&file)?;
    if last != Some(id)
        && let Some(dir) = wal.parent()
    {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        File::open(dir)?.sync_all()?;
    }
    Ok(Some(id))
}

#[cfg(unix)]
fn file_id(file: &File) -> io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn file_id(_file: &File) -> io::Result<FileId> {
    Ok((0, 0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn flush_in(dir: &tempfile::TempDir) -> Arc<GroupFlush> {
        let db = dir.path().join("g.db");
        std::fs::write(&db, b"").unwrap();
        std::fs::write(dir.path().join("g.db-wal"), b"frames").unwrap();
        Arc::new(GroupFlush::new(&db, 2))
    }

    /// A caller that arrives while a sync runs is not covered by it (its commit may have
    /// come after the sync began): it waits for the next sync, which it shares with every
    /// caller that arrived meanwhile.
    #[tokio::test]
    async fn a_sync_under_way_does_not_cover_a_later_caller() {
        let dir = tempfile::tempdir().unwrap();
        let flush = flush_in(&dir);
        // A sync under way: it took ticket 1 and holds the lock, covering ticket 1 only.
        let running = flush.done.lock().await;
        flush.taken.fetch_add(1, Ordering::SeqCst);
        let later = tokio::spawn({
            let flush = flush.clone();
            async move { flush.flush().await }
        });
        tokio::task::yield_now().await;
        let alongside = tokio::spawn({
            let flush = flush.clone();
            async move { flush.flush().await }
        });
        tokio::task::yield_now().await;
        let mut running = running;
        running.ticket = 1;
        drop(running);
        later.await.unwrap().unwrap();
        alongside.await.unwrap().unwrap();
        let done = flush.done.lock().await;
        assert_eq!(done.ticket, 3, "one more sync covered both later callers");
        assert!(done.wal.is_some(), "the WAL was synced");
    }

    /// A caller that finds a sync covering its ticket already done returns without another.
    #[tokio::test]
    async fn a_finished_sync_covers_the_tickets_taken_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let flush = flush_in(&dir);
        flush.flush().await.unwrap();
        assert_eq!(flush.done.lock().await.ticket, 1);
        flush.flush().await.unwrap();
        assert_eq!(
            flush.done.lock().await.ticket,
            2,
            "a new ticket, a new sync"
        );
    }

    /// Without a WAL file (checkpointed and removed), the database file is synced instead.
    #[tokio::test]
    async fn without_a_wal_the_database_file_is_synced() {
        let dir = tempfile::tempdir().unwrap();
        let flush = flush_in(&dir);
        std::fs::remove_file(dir.path().join("g.db-wal")).unwrap();
        flush.flush().await.unwrap();
        assert!(flush.done.lock().await.wal.is_none());
    }

    /// The index's header as SQLite writes it: two equal copies.
    fn write_index(path: &Path, change: u8) {
        let mut header = [0u8; 2 * HEADER_LEN];
        header[8] = change;
        header[HEADER_LEN + 8] = change;
        std::fs::write(path, header).unwrap();
    }

    /// One descriptor per index file in the process, never closed while the file is there
    /// (closing one would drop SQLite's locks on it); a file deleted and made again gets a
    /// new one. A header changed since, or half written, reads as changed.
    #[cfg(unix)]
    #[test]
    fn an_index_is_opened_once_and_read_as_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let shm = dir.path().join("i.db-shm");
        write_index(&shm, 1);
        let (first, again) = (Index::open(&shm).unwrap(), Index::open(&shm).unwrap());
        assert!(Arc::ptr_eq(&first.file, &again.file), "one descriptor");
        assert!(first.unchanged());
        write_index(&shm, 2);
        assert!(!first.unchanged(), "a commit since");
        let mut torn = std::fs::read(&shm).unwrap();
        torn[8] = 3;
        std::fs::write(&shm, torn).unwrap();
        assert!(
            Index::open(&shm).is_none(),
            "copies that differ are being written"
        );

        std::fs::remove_file(&shm).unwrap();
        write_index(&shm, 2);
        assert!(!first.unchanged(), "the deleted file counts as changed");
        let renewed = Index::open(&shm).unwrap();
        assert!(
            !Arc::ptr_eq(&first.file, &renewed.file),
            "the new file's own"
        );
    }

    #[test]
    fn the_level_put_back_is_the_configured_one() {
        let grouping = Grouping::default();
        assert_eq!(grouping.take_restore(), None, "off: nothing to restore");
        grouping.enable(Path::new("/tmp/x.db"), 3);
        assert_eq!(grouping.take_restore(), None, "not relaxed yet");
        grouping.relaxed();
        assert_eq!(grouping.take_restore(), Some("PRAGMA synchronous = EXTRA"));
        assert_eq!(grouping.take_restore(), None, "once");
    }

    #[test]
    fn grouped_writes_in_a_row_relax_once() {
        let grouping = Grouping::default();
        assert_eq!(grouping.take_relax(), None, "off: never relaxed");
        grouping.enable(Path::new("/tmp/x.db"), 2);
        assert_eq!(grouping.take_relax(), Some("PRAGMA synchronous = NORMAL"));
        assert_eq!(grouping.take_relax(), None, "relaxed already");
        assert_eq!(grouping.take_restore(), Some("PRAGMA synchronous = FULL"));
        assert_eq!(grouping.take_relax(), Some("PRAGMA synchronous = NORMAL"));
    }
}
