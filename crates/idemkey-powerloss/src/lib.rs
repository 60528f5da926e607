//! A filesystem for tests that loses, on command, what a power cut loses, as Jepsen's LazyFS
//! does: a test runs a database on it, cuts the power at a moment of its choosing, and sees
//! what the database kept of what it acknowledged.
//!
//! [`PowerLossFs::mount`] mounts an empty filesystem, held in memory, through FUSE (mount(2)
//! on `/dev/fuse` as root: no libfuse, no `fusermount3`). What is volatile there:
//!
//! - every byte written to a file since the last `fsync` or `fdatasync` of that file (by any
//!   descriptor, or through a shared mapping the kernel wrote back), and a change of its
//!   length or attributes;
//! - every directory entry created, removed or renamed (`create`, `mkdir`, `unlink`, `rmdir`,
//!   `rename`, `link`, `symlink`) since the last sync of that directory (`fsync` of a
//!   descriptor of the directory). A rename between two directories becomes durable whole
//!   at a sync of either, as a journal commits it.
//!
//! [`PowerLossFs::cut`] drops it all: each file is back to its synced bytes, length and
//! attributes, each directory to its synced entries, and an inode that no synced entry
//! reaches from the root any more is gone.
//!
//! The syncs are those of a careful disk, no more: an `fsync` of a file makes its data and
//! attributes durable but **not its name**. A new file whose directory was never synced is
//! gone after a cut, even if the file itself was synced, as on ext4 without a sync of the
//! directory (where it may survive by luck of the journal: a program may not count on it).
//! A new file whose directory was synced but which was not itself is there, empty.
//! `fdatasync` does what `fsync` does.
//!
//! Why a cut remounts. The kernel caches pages, attributes and entries of a FUSE filesystem;
//! after a cut those would show what the cut dropped. Rather than invalidating every inode
//! through the notifier (and racing the cache as it refills), a cut unmounts the filesystem
//! and mounts a new session over the surviving state, which starts with empty caches. So a
//! cut needs every process that uses the files to be gone first: kill them, then cut. A
//! process that still holds a file makes the unmount lazy, and any later request of it fails
//! with EIO, as it would on a machine without power.
//!
//! POSIX locks are left to the kernel (no `getlk`/`setlk`): SQLite's locks between the
//! processes of one machine work as on any local filesystem. Extended attributes are not
//! supported. The mount lets every user in (`allow_other`), and the kernel checks the
//! permissions (`default_permissions`), so a server running as another user works as on a
//! disk.
//!
//! [`PowerLossFs::set_syncs_lie`] makes a disk that lies about its flushes: every sync
//! succeeds and nothing becomes durable, which a test uses to show that its checks can fail.
//!
//! Only for tests: everything lives in memory, under one lock.

mod fuse;
mod model;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use crate::fuse::{Fs, Shared};
use crate::model::State;

/// A power-loss filesystem mounted on a directory, unmounted when dropped.
pub struct PowerLossFs {
    mountpoint: PathBuf,
    shared: Arc<Mutex<Shared>>,
    /// The session serving the mount now.
    session: Mutex<Option<BackgroundSession>>,
}

/// What one cut dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Bytes written and not synced: those of each page (4 KiB) that held an unsynced
    /// write, within the file's length.
    pub bytes: u64,
    /// Directory entries created, removed or renamed and not synced.
    pub entries: u64,
}

impl PowerLossFs {
    /// Mounts an empty power-loss filesystem at `mountpoint` (an existing empty directory).
    /// Its root directory is durable, and has the mountpoint's owner and mode 0755.
    pub fn mount(mountpoint: &Path) -> io::Result<Self> {
        let mountpoint = mountpoint.canonicalize()?;
        let (uid, gid) = owner(&mountpoint)?;
        let shared = Arc::new(Mutex::new(Shared {
            state: State::new(uid, gid),
            generation: 0,
        }));
        let session = start(&mountpoint, &shared, 0)?;
        Ok(Self {
            mountpoint,
            shared,
            session: Mutex::new(Some(session)),
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// Drops every unsynced byte and entry and remounts. Call only when no process uses the
    /// files (kill them first): a file still open makes the old mount go lazily, and its
    /// holder gets EIO from then on.
    pub fn cut(&self) -> io::Result<Cut> {
        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = {
            let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            // From here on the old session answers EIO: whatever the kernel still sends it
            // (pages written back as it unmounts) comes after the power went.
            shared.generation += 1;
            let dropped = shared.state.cut();
            (shared.generation, dropped)
        };
        if let Some(old) = session.take() {
            unmount(&self.mountpoint, old);
        }
        *session = Some(start(&self.mountpoint, &self.shared, generation.0)?);
        Ok(Cut {
            bytes: generation.1.bytes,
            entries: generation.1.entries,
        })
    }

    /// Syncs succeed but make nothing durable from now on (a disk that lies about its
    /// flushes); `false` makes them honest again.
    pub fn set_syncs_lie(&self, lie: bool) {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.state.lie = lie;
    }
}

impl Drop for PowerLossFs {
    fn drop(&mut self) {
        let session = self
            .session
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(session) = session.take() {
            unmount(&self.mountpoint, session);
        }
    }
}

/// The owner of `path`, which the root directory takes.
fn owner(path: &Path) -> io::Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok((meta.uid(), meta.gid()))
}

/// Mounts a session of `generation` over the shared state.
fn start(
    mountpoint: &Path,
    shared: &Arc<Mutex<Shared>>,
    generation: u64,
) -> io::Result<BackgroundSession> {
    let fs = Fs {
        shared: Arc::clone(shared),
        generation,
    };
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("idemkey-powerloss".to_owned()),
        MountOption::Subtype("powerloss".to_owned()),
        MountOption::DefaultPermissions,
    ];
    config.acl = SessionACL::All;
    fuser::spawn_mount(fs, mountpoint, &config)
}

/// Unmounts and waits for the session to end; if the mount is busy, detaches it instead and
/// leaves its session to end when its last user lets go.
fn unmount(mountpoint: &Path, session: BackgroundSession) {
    if session.umount_and_join().is_err() {
        let _ = nix::mount::umount2(mountpoint, nix::mount::MntFlags::MNT_DETACH);
    }
}
