//! The FUSE side: each kernel request becomes a call on the [`State`], under one lock. One
//! session serves one mount; after a cut the next mount gets a new session, and a request
//! still reaching an old one (a lazily detached mount whose last user had not let go) fails
//! with EIO, as a disk without power would.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::model::{AttrChange, Data, DirData, Fail, FileData, Kind, Node, State};

/// How long the kernel may cache an entry or attributes. Only the kernel changes the
/// filesystem, and it keeps its caches right itself; a cut remounts, which empties them.
const TTL: Duration = Duration::from_secs(1);

/// What every session shares: the state, and which session may still touch it.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) state: State,
    /// The session now mounted; a cut moves it on.
    pub(crate) generation: u64,
}

/// One session's filesystem: a handle on the shared state.
pub(crate) struct Fs {
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) generation: u64,
}

impl Fail {
    fn errno(self) -> Errno {
        match self {
            Self::NoEntry => Errno::ENOENT,
            Self::Exists => Errno::EEXIST,
            Self::NotDir => Errno::ENOTDIR,
            Self::IsDir => Errno::EISDIR,
            Self::NotEmpty => Errno::ENOTEMPTY,
            Self::Invalid => Errno::EINVAL,
        }
    }
}

fn attr(ino: u64, node: &Node) -> FileAttr {
    let size = node.size();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: node.attr.atime,
        mtime: node.attr.mtime,
        ctime: node.attr.ctime,
        crtime: node.attr.crtime,
        kind: kind(node.kind()),
        perm: node.attr.perm,
        nlink: node.nlink,
        uid: node.attr.uid,
        gid: node.attr.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn kind(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
    }
}

fn time(time: TimeOrNow) -> SystemTime {
    match time {
        TimeOrNow::SpecificTime(time) => time,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Fs {
    /// The state, if this session is still the mounted one; else EIO.
    fn state(&self) -> Result<MutexGuard<'_, Shared>, Errno> {
        let shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if shared.generation == self.generation {
            Ok(shared)
        } else {
            Err(Errno::EIO)
        }
    }

    /// Runs `op` on the state; a failure becomes its errno.
    fn with<T>(&self, op: impl FnOnce(&mut State) -> Result<T, Fail>) -> Result<T, Errno> {
        let mut shared = self.state()?;
        op(&mut shared.state).map_err(Fail::errno)
    }

    /// Creates an inode and answers with its entry.
    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        data: Data,
        mode: u32,
        umask: u32,
    ) -> Result<FileAttr, Errno> {
        let perm = (mode & !umask & 0o7777) as u16;
        self.with(|state| {
            let ino = state.create(parent.0, name, data, perm, req.uid(), req.gid())?;
            Ok(attr(ino, state.node(ino)?))
        })
    }

    fn entry_of(&self, ino: u64) -> Result<FileAttr, Errno> {
        self.with(|state| Ok(attr(ino, state.node(ino)?)))
    }
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.with(|state| {
            let ino = state.lookup(parent.0, name)?;
            Ok(attr(ino, state.node(ino)?))
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.entry_of(ino.0) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = AttrChange {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
        };
        match self.with(|state| {
            state.set_attr(ino.0, &change)?;
            Ok(attr(ino.0, state.node(ino.0)?))
        }) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(errno) => reply.error(errno),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.with(|state| match &state.node(ino.0)?.data {
            Data::Symlink(target) => Ok(target.as_os_str().as_encoded_bytes().to_vec()),
            _ => Err(Fail::Invalid),
        }) {
            Ok(target) => reply.data(&target),
            Err(errno) => reply.error(errno),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files only: devices, fifos and sockets are nothing a database keeps here.
        if mode & 0o170000 != 0o100000 && mode & 0o170000 != 0 {
            reply.error(Errno::EPERM);
            return;
        }
        let data = Data::File(FileData::default());
        match self.make(req, parent, name, data, mode, umask) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let data = Data::Dir(DirData::default());
        match self.make(req, parent, name, data, mode, umask) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|state| state.unlink(parent.0, name, false)) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.with(|state| state.unlink(parent.0, name, true)) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let data = Data::Symlink(target.to_owned());
        match self.make(req, parent, link_name, data, 0o777, 0) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self.with(|state| state.rename(parent.0, name, newparent.0, newname, no_replace)) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        match self.with(|state| {
            state.link(ino.0, newparent.0, newname)?;
            Ok(attr(ino.0, state.node(ino.0)?))
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(errno) => reply.error(errno),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Through the page cache (no direct I/O), so that MAP_SHARED works, as SQLite's
        // `-shm` needs; the cache is dropped at each open, as no KEEP_CACHE is asked.
        match self.entry_of(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.with(|state| Ok(state.file_mut(ino.0)?.read(offset, size))) {
            Ok(bytes) => reply.data(&bytes),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.with(|state| {
            state.file_mut(ino.0)?.write(offset, data);
            let node = state.node_mut(ino.0)?;
            let now = SystemTime::now();
            node.attr.mtime = now;
            node.attr.ctime = now;
            Ok(())
        }) {
            Ok(()) => reply.written(data.len() as u32),
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close is no sync: nothing becomes durable.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.with(|state| state.sync(ino.0)) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self.with(|state| {
            let dir = state.dir(ino.0)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, OsStr::new(".").to_owned()),
                (dir.parent, FileType::Directory, OsStr::new("..").to_owned()),
            ];
            for (name, &child) in &dir.entries {
                entries.push((child, kind(state.node(child)?.kind()), name.clone()));
            }
            Ok(entries)
        });
        match listed {
            Ok(entries) => {
                for (at, (child, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(*child), at as u64 + 1, *kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.with(|state| state.sync_dir(ino.0)) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Memory, not a disk: plenty of room, reported as a 4 GiB disk mostly free.
        let files = self.with(|state| Ok(state.nodes.len() as u64)).unwrap_or(0);
        reply.statfs(1 << 20, 1 << 20, 1 << 20, files, 1 << 20, 4096, 255, 4096);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let data = Data::File(FileData::default());
        match self.make(req, parent, name, data, mode, umask) {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
            Err(errno) => reply.error(errno),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Plain allocation only (posix_fallocate): the file grows with zeros, volatile like
        // any growth. Other modes: EOPNOTSUPP, which libc's posix_fallocate works around.
        if mode != 0 {
            reply.error(Errno::EOPNOTSUPP);
            return;
        }
        match self.with(|state| {
            let file = state.file_mut(ino.0)?;
            if offset + length > file.len() {
                file.truncate(offset + length);
            }
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }
}
