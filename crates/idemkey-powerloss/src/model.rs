//! The filesystem's state, in memory, with what a power cut keeps kept apart from what it
//! drops: this module knows nothing of FUSE, so the rules can be read (and tested) alone.
//!
//! Every inode has its current attributes and its durable ones. A file has its durable
//! content, and over it the pages written since its last sync (whole 4 KiB pages, each a
//! copy of what the file holds there now) and its current length; a sync costs only those
//! pages. A directory has its current entries and its durable ones. A cut puts every inode
//! back to its durable state and drops the inodes that no durable entry reaches from the
//! root.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::SystemTime;

/// The root directory's inode number, as FUSE numbers it.
pub(crate) const ROOT: u64 = 1;

/// The unit of unsynced data: a write dirties the pages it touches.
const PAGE: u64 = 4096;

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
}

/// The attributes a sync makes durable (the size and link count are derived).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attr {
    pub(crate) perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) atime: SystemTime,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    pub(crate) crtime: SystemTime,
}

impl Attr {
    fn new(perm: u16, uid: u32, gid: u32) -> Self {
        let now = SystemTime::now();
        Self {
            perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
        }
    }
}

/// A regular file's bytes.
#[derive(Debug, Default)]
pub(crate) struct FileData {
    /// What survives a cut.
    durable: Vec<u8>,
    /// Pages written (or cut short by a truncation) since the last sync, by index: each holds
    /// the file's current bytes of that page, zeros past the current length.
    dirty: BTreeMap<u64, Box<[u8]>>,
    /// The current length.
    len: u64,
    /// The lowest length the file had since its last sync: durable bytes at and past it were
    /// truncated away, so a clean page there reads as zeros, not as the durable bytes.
    floor: u64,
}

impl FileData {
    /// The current bytes of page `index` (zeros past the length), from the dirty page if
    /// there is one, else from the durable content below the floor.
    fn page(&self, index: u64) -> Box<[u8]> {
        if let Some(page) = self.dirty.get(&index) {
            return page.clone();
        }
        let mut page = vec![0u8; PAGE as usize].into_boxed_slice();
        let start = index * PAGE;
        let end = (start + PAGE)
            .min(self.floor)
            .min(self.durable.len() as u64)
            .min(self.len);
        if end > start {
            let n = (end - start) as usize;
            page[..n].copy_from_slice(&self.durable[start as usize..end as usize]);
        }
        page
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Up to `size` bytes from `offset`, fewer at the end of the file.
    pub(crate) fn read(&self, offset: u64, size: u32) -> Vec<u8> {
        let end = (offset + u64::from(size)).min(self.len);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let within = (at % PAGE) as usize;
            let take = ((PAGE - at % PAGE).min(end - at)) as usize;
            match self.dirty.get(&index) {
                Some(page) => out.extend_from_slice(&page[within..within + take]),
                None => {
                    // A clean page: durable bytes below the floor, zeros above it.
                    let durable_end = self.floor.min(self.durable.len() as u64);
                    let end = at + take as u64;
                    let kept = end.min(durable_end.max(at));
                    out.extend_from_slice(&self.durable[at as usize..kept as usize]);
                    out.resize(out.len() + (end - kept) as usize, 0);
                }
            }
            at += take as u64;
        }
        out
    }

    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        let mut at = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let index = at / PAGE;
            let within = (at % PAGE) as usize;
            let take = (PAGE as usize - within).min(rest.len());
            let mut page = match self.dirty.remove(&index) {
                Some(page) => page,
                None => self.page(index),
            };
            page[within..within + take].copy_from_slice(&rest[..take]);
            self.dirty.insert(index, page);
            rest = &rest[take..];
            at += take as u64;
        }
        self.len = self.len.max(offset + data.len() as u64);
    }

    pub(crate) fn truncate(&mut self, len: u64) {
        if len < self.len {
            // The page holding the new end keeps its head, zeros after it; later pages go.
            let index = len / PAGE;
            if !len.is_multiple_of(PAGE) {
                let mut page = match self.dirty.remove(&index) {
                    Some(page) => page,
                    None => self.page(index),
                };
                page[(len % PAGE) as usize..].fill(0);
                self.dirty.insert(index, page);
                self.dirty.retain(|&i, _| i <= index);
            } else {
                self.dirty.retain(|&i, _| i < index);
            }
            self.floor = self.floor.min(len);
        }
        self.len = len;
    }

    /// Makes the current content durable, at the cost of the dirty pages.
    fn sync(&mut self) {
        let floor = (self.floor as usize).min(self.durable.len());
        self.durable.truncate(floor);
        self.durable.resize(self.len as usize, 0);
        for (&index, page) in &self.dirty {
            let start = (index * PAGE) as usize;
            if start >= self.durable.len() {
                continue;
            }
            let end = (start + PAGE as usize).min(self.durable.len());
            self.durable[start..end].copy_from_slice(&page[..end - start]);
        }
        self.dirty.clear();
        self.floor = self.len;
    }

    /// The bytes a cut drops: those of the dirty pages within the current length.
    fn unsynced(&self) -> u64 {
        self.dirty
            .keys()
            .map(|&index| (self.len.saturating_sub(index * PAGE)).min(PAGE))
            .sum()
    }

    /// Back to the durable content.
    fn cut(&mut self) {
        self.dirty.clear();
        self.len = self.durable.len() as u64;
        self.floor = self.len;
    }
}

/// A directory's entries.
#[derive(Debug, Default)]
pub(crate) struct DirData {
    pub(crate) entries: BTreeMap<OsString, u64>,
    durable: BTreeMap<OsString, u64>,
    /// The current parent (the root's is itself), for `..`.
    pub(crate) parent: u64,
}

/// What an inode holds.
#[derive(Debug)]
pub(crate) enum Data {
    File(FileData),
    Dir(DirData),
    /// A symlink's target is written with the inode, as on a real disk: durable once its
    /// entry is.
    Symlink(PathBuf),
}

/// One inode.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) attr: Attr,
    durable_attr: Attr,
    /// Current names (and `.` and subdirectories' `..` for a directory).
    pub(crate) nlink: u32,
    pub(crate) data: Data,
}

impl Node {
    pub(crate) fn kind(&self) -> Kind {
        match self.data {
            Data::File(_) => Kind::File,
            Data::Dir(_) => Kind::Dir,
            Data::Symlink(_) => Kind::Symlink,
        }
    }

    pub(crate) fn size(&self) -> u64 {
        match &self.data {
            Data::File(file) => file.len,
            Data::Dir(dir) => 4096.max(dir.entries.len() as u64 * 32),
            Data::Symlink(target) => target.as_os_str().len() as u64,
        }
    }
}

/// Why an operation failed, as an errno the FUSE layer sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    NoEntry,
    Exists,
    NotDir,
    IsDir,
    NotEmpty,
    Invalid,
}

/// What one cut dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) bytes: u64,
    pub(crate) entries: u64,
}

/// The whole filesystem.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Syncs succeed and make nothing durable.
    pub(crate) lie: bool,
}

impl State {
    /// An empty filesystem: a root directory, durable, owned by `uid`:`gid`, mode 0755.
    pub(crate) fn new(uid: u32, gid: u32) -> Self {
        let attr = Attr::new(0o755, uid, gid);
        let root = Node {
            attr,
            durable_attr: attr,
            nlink: 2,
            data: Data::Dir(DirData {
                parent: ROOT,
                ..DirData::default()
            }),
        };
        Self {
            nodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            lie: false,
        }
    }

    pub(crate) fn node(&self, ino: u64) -> Result<&Node, Fail> {
        self.nodes.get(&ino).ok_or(Fail::NoEntry)
    }

    pub(crate) fn node_mut(&mut self, ino: u64) -> Result<&mut Node, Fail> {
        self.nodes.get_mut(&ino).ok_or(Fail::NoEntry)
    }

    pub(crate) fn dir(&self, ino: u64) -> Result<&DirData, Fail> {
        match &self.node(ino)?.data {
            Data::Dir(dir) => Ok(dir),
            _ => Err(Fail::NotDir),
        }
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut DirData, Fail> {
        match &mut self.node_mut(ino)?.data {
            Data::Dir(dir) => Ok(dir),
            _ => Err(Fail::NotDir),
        }
    }

    pub(crate) fn file_mut(&mut self, ino: u64) -> Result<&mut FileData, Fail> {
        match &mut self.node_mut(ino)?.data {
            Data::File(file) => Ok(file),
            Data::Dir(_) => Err(Fail::IsDir),
            Data::Symlink(_) => Err(Fail::Invalid),
        }
    }

    pub(crate) fn lookup(&self, parent: u64, name: &OsStr) -> Result<u64, Fail> {
        self.dir(parent)?
            .entries
            .get(name)
            .copied()
            .ok_or(Fail::NoEntry)
    }

    /// Creates an inode named `name` in `parent`: a volatile entry, and an inode whose
    /// durable state is what it was created with (an empty file, an empty directory).
    pub(crate) fn create(
        &mut self,
        parent: u64,
        name: &OsStr,
        data: Data,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<u64, Fail> {
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(Fail::Exists);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let is_dir = matches!(data, Data::Dir(_));
        let data = match data {
            Data::Dir(mut dir) => {
                dir.parent = parent;
                Data::Dir(dir)
            }
            other => other,
        };
        let attr = Attr::new(perm, uid, gid);
        let node = Node {
            attr,
            durable_attr: attr,
            nlink: if is_dir { 2 } else { 1 },
            data,
        };
        self.nodes.insert(ino, node);
        self.dir_mut(parent)?.entries.insert(name.to_owned(), ino);
        if is_dir {
            self.node_mut(parent)?.nlink += 1;
        }
        self.touch(parent);
        Ok(ino)
    }

    /// Another name for the file `ino`.
    pub(crate) fn link(&mut self, ino: u64, parent: u64, name: &OsStr) -> Result<(), Fail> {
        if self.node(ino)?.kind() == Kind::Dir {
            return Err(Fail::IsDir);
        }
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(Fail::Exists);
        }
        self.dir_mut(parent)?.entries.insert(name.to_owned(), ino);
        let node = self.node_mut(ino)?;
        node.nlink += 1;
        node.attr.ctime = SystemTime::now();
        self.touch(parent);
        Ok(())
    }

    /// Removes the entry `name` (a directory's only if `dir`, and empty). The inode stays
    /// while the kernel may still use it (open, or named by a durable entry): inodes are
    /// dropped only by a cut.
    pub(crate) fn unlink(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Fail> {
        let ino = self.lookup(parent, name)?;
        let node = self.node(ino)?;
        match (&node.data, dir) {
            (Data::Dir(d), true) if !d.entries.is_empty() => return Err(Fail::NotEmpty),
            (Data::Dir(_), true) => {}
            (Data::Dir(_), false) => return Err(Fail::IsDir),
            (_, true) => return Err(Fail::NotDir),
            (_, false) => {}
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.unlinked(ino, parent)?;
        self.touch(parent);
        Ok(())
    }

    /// The link counts after the name `ino` had in `parent` went.
    fn unlinked(&mut self, ino: u64, parent: u64) -> Result<(), Fail> {
        let node = self.node_mut(ino)?;
        if node.kind() == Kind::Dir {
            node.nlink = 0;
            self.node_mut(parent)?.nlink -= 1;
        } else {
            node.nlink = node.nlink.saturating_sub(1);
            node.attr.ctime = SystemTime::now();
        }
        Ok(())
    }

    /// Moves `name` of `parent` to `new_name` of `new_parent`, replacing what was there (a
    /// file by a file, an empty directory by a directory). `no_replace`: fails if the target
    /// exists.
    pub(crate) fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        no_replace: bool,
    ) -> Result<(), Fail> {
        let ino = self.lookup(parent, name)?;
        let is_dir = self.node(ino)?.kind() == Kind::Dir;
        self.dir(new_parent)?;
        if let Ok(target) = self.lookup(new_parent, new_name) {
            if target == ino {
                return Ok(());
            }
            if no_replace {
                return Err(Fail::Exists);
            }
            let target_node = self.node(target)?;
            match (&target_node.data, is_dir) {
                (Data::Dir(d), true) if !d.entries.is_empty() => return Err(Fail::NotEmpty),
                (Data::Dir(_), true) => {}
                (Data::Dir(_), false) => return Err(Fail::IsDir),
                (_, true) => return Err(Fail::NotDir),
                (_, false) => {}
            }
            self.dir_mut(new_parent)?.entries.remove(new_name);
            self.unlinked(target, new_parent)?;
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.dir_mut(new_parent)?
            .entries
            .insert(new_name.to_owned(), ino);
        if is_dir && parent != new_parent {
            self.dir_mut(ino)?.parent = new_parent;
            self.node_mut(parent)?.nlink -= 1;
            self.node_mut(new_parent)?.nlink += 1;
        }
        self.node_mut(ino)?.attr.ctime = SystemTime::now();
        self.touch(parent);
        self.touch(new_parent);
        Ok(())
    }

    /// A directory's entries changed: its mtime and ctime.
    fn touch(&mut self, dir: u64) {
        if let Some(node) = self.nodes.get_mut(&dir) {
            let now = SystemTime::now();
            node.attr.mtime = now;
            node.attr.ctime = now;
        }
    }

    /// `fsync`/`fdatasync` of a file: its data, length and attributes become durable (not its
    /// names: those are its directories'). Both calls do the same, which keeps no less than
    /// `fdatasync` promises. Of a directory: as [`State::sync_dir`].
    pub(crate) fn sync(&mut self, ino: u64) -> Result<(), Fail> {
        if self.node(ino)?.kind() == Kind::Dir {
            return self.sync_dir(ino);
        }
        if self.lie {
            return Ok(());
        }
        let node = self.node_mut(ino)?;
        node.durable_attr = node.attr;
        if let Data::File(file) = &mut node.data {
            file.sync();
        }
        Ok(())
    }

    /// `fsync` of a directory: its current entries (and attributes) become durable. A rename
    /// between two directories is made durable whole by a sync of either, as a journal
    /// commits it: the entry it added and the one it removed.
    pub(crate) fn sync_dir(&mut self, ino: u64) -> Result<(), Fail> {
        if self.lie {
            return Ok(());
        }
        let dir = self.dir(ino)?;
        let added: Vec<u64> = dir
            .entries
            .iter()
            .filter(|(name, child)| dir.durable.get(*name) != Some(child))
            .map(|(_, child)| *child)
            .collect();
        let removed: Vec<u64> = dir
            .durable
            .iter()
            .filter(|(name, child)| dir.entries.get(*name) != Some(child))
            .map(|(_, child)| *child)
            .collect();
        let (added, removed): (HashSet<u64>, HashSet<u64>) =
            (added.into_iter().collect(), removed.into_iter().collect());
        for (&other, node) in &mut self.nodes {
            let Data::Dir(other_dir) = &mut node.data else {
                continue;
            };
            if other == ino {
                continue;
            }
            // The other half of a move into this directory: its old name goes.
            let current = &other_dir.entries;
            other_dir
                .durable
                .retain(|name, child| !added.contains(child) || current.get(name) == Some(child));
            // The other half of a move out of this directory: its new name stays.
            for (name, child) in &other_dir.entries {
                if removed.contains(child) && other_dir.durable.get(name) != Some(child) {
                    other_dir.durable.insert(name.clone(), *child);
                }
            }
        }
        let node = self.node_mut(ino)?;
        node.durable_attr = node.attr;
        if let Data::Dir(dir) = &mut node.data {
            dir.durable = dir.entries.clone();
        }
        Ok(())
    }

    /// The power cut: every inode back to its durable state, and those no durable entry
    /// reaches from the root dropped. Returns what was dropped.
    pub(crate) fn cut(&mut self) -> Dropped {
        let mut dropped = Dropped::default();
        for node in self.nodes.values_mut() {
            node.attr = node.durable_attr;
            match &mut node.data {
                Data::File(file) => {
                    dropped.bytes += file.unsynced();
                    file.cut();
                }
                Data::Dir(dir) => {
                    let changed = dir
                        .entries
                        .iter()
                        .filter(|(name, child)| dir.durable.get(*name) != Some(child))
                        .count()
                        + dir
                            .durable
                            .keys()
                            .filter(|name| !dir.entries.contains_key(*name))
                            .count();
                    dropped.entries += changed as u64;
                    dir.entries = dir.durable.clone();
                }
                Data::Symlink(_) => {}
            }
        }
        self.collect();
        dropped
    }

    /// Drops every inode the root does not reach, and counts links and parents again.
    fn collect(&mut self) {
        let mut reached = HashSet::from([ROOT]);
        let mut links: HashMap<u64, u32> = HashMap::new();
        let mut parents: HashMap<u64, u64> = HashMap::from([(ROOT, ROOT)]);
        let mut queue = vec![ROOT];
        while let Some(ino) = queue.pop() {
            let Some(Node {
                data: Data::Dir(dir),
                ..
            }) = self.nodes.get(&ino)
            else {
                continue;
            };
            for &child in dir.entries.values() {
                *links.entry(child).or_default() += 1;
                // A directory reached twice (a partly durable pair of moves) keeps its first
                // parent; its other name is dropped below.
                if reached.insert(child) {
                    parents.insert(child, ino);
                    queue.push(child);
                }
            }
        }
        self.nodes.retain(|ino, _| reached.contains(ino));
        // A directory has one name: an extra one, left by moves half made durable, goes.
        let dirs: HashSet<u64> = self
            .nodes
            .iter()
            .filter(|(_, node)| node.kind() == Kind::Dir)
            .map(|(&ino, _)| ino)
            .collect();
        for (&ino, node) in &mut self.nodes {
            if let Data::Dir(dir) = &mut node.data {
                dir.entries
                    .retain(|_, child| !dirs.contains(child) || parents.get(child) == Some(&ino));
                dir.durable = dir.entries.clone();
            }
        }
        // A directory's links: its name, its `.`, and each subdirectory's `..`.
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        for (child, parent) in &parents {
            if child != parent && dirs.contains(child) {
                *subdirs.entry(*parent).or_default() += 1;
            }
        }
        for (&ino, node) in &mut self.nodes {
            node.nlink = match &mut node.data {
                Data::Dir(dir) => {
                    dir.parent = parents.get(&ino).copied().unwrap_or(ROOT);
                    2 + subdirs.get(&ino).copied().unwrap_or(0)
                }
                _ => links.get(&ino).copied().unwrap_or(1),
            };
        }
    }

    /// Sets the attributes a `setattr` names.
    pub(crate) fn set_attr(&mut self, ino: u64, change: &AttrChange) -> Result<(), Fail> {
        if let Some(len) = change.size {
            self.file_mut(ino)?.truncate(len);
        }
        let node = self.node_mut(ino)?;
        let now = SystemTime::now();
        if let Some(mode) = change.mode {
            node.attr.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = change.uid {
            node.attr.uid = uid;
        }
        if let Some(gid) = change.gid {
            node.attr.gid = gid;
        }
        if let Some(atime) = change.atime {
            node.attr.atime = atime;
        }
        if let Some(mtime) = change.mtime {
            node.attr.mtime = mtime;
        } else if change.size.is_some() {
            node.attr.mtime = now;
        }
        node.attr.ctime = now;
        Ok(())
    }
}

/// What a `setattr` changes.
#[derive(Debug, Default)]
pub(crate) struct AttrChange {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size: Option<u64>,
    pub(crate) atime: Option<SystemTime>,
    pub(crate) mtime: Option<SystemTime>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Data {
        Data::File(FileData::default())
    }

    fn read_all(state: &mut State, ino: u64) -> Vec<u8> {
        let file = state.file_mut(ino).unwrap();
        file.read(0, file.len() as u32)
    }

    #[test]
    fn unsynced_writes_are_dropped_and_synced_ones_kept() {
        let mut state = State::new(0, 0);
        let ino = state
            .create(ROOT, "f".as_ref(), file(), 0o644, 0, 0)
            .unwrap();
        state.sync_dir(ROOT).unwrap();
        state.file_mut(ino).unwrap().write(0, b"hello");
        state.sync(ino).unwrap();
        state.file_mut(ino).unwrap().write(5000, b"lost");
        assert_eq!(state.file_mut(ino).unwrap().len(), 5004);
        let dropped = state.cut();
        assert_eq!(dropped.bytes, 5004 - 4096);
        assert_eq!(read_all(&mut state, ino), b"hello");
    }

    #[test]
    fn a_truncation_then_a_growth_reads_zeros_not_the_old_bytes() {
        let mut state = State::new(0, 0);
        let ino = state
            .create(ROOT, "f".as_ref(), file(), 0o644, 0, 0)
            .unwrap();
        state.sync_dir(ROOT).unwrap();
        let bytes: Vec<u8> = (0..10_000).map(|i| (i % 251) as u8 + 1).collect();
        state.file_mut(ino).unwrap().write(0, &bytes);
        state.sync(ino).unwrap();
        let data = state.file_mut(ino).unwrap();
        data.truncate(10);
        data.truncate(9000);
        let read = data.read(0, 9000);
        assert_eq!(&read[..10], &bytes[..10]);
        assert!(read[10..].iter().all(|&b| b == 0));
        state.sync(ino).unwrap();
        let durable = read_all(&mut state, ino);
        assert_eq!(durable.len(), 9000);
        assert!(durable[10..].iter().all(|&b| b == 0));
        // And a cut after an unsynced truncation brings the durable bytes back.
        state.file_mut(ino).unwrap().truncate(0);
        state.cut();
        assert_eq!(read_all(&mut state, ino).len(), 9000);
    }

    #[test]
    fn a_new_file_whose_directory_was_not_synced_goes_even_if_synced_itself() {
        let mut state = State::new(0, 0);
        let ino = state
            .create(ROOT, "f".as_ref(), file(), 0o644, 0, 0)
            .unwrap();
        state.file_mut(ino).unwrap().write(0, b"data");
        state.sync(ino).unwrap();
        let dropped = state.cut();
        assert_eq!(dropped.entries, 1);
        assert_eq!(state.lookup(ROOT, "f".as_ref()), Err(Fail::NoEntry));
        assert!(!state.nodes.contains_key(&ino));
    }

    #[test]
    fn a_rename_between_directories_is_durable_whole_by_either_sync() {
        for sync_source in [false, true] {
            let mut state = State::new(0, 0);
            let a = state.create(
                ROOT,
                "a".as_ref(),
                Data::Dir(DirData::default()),
                0o755,
                0,
                0,
            );
            let b = state.create(
                ROOT,
                "b".as_ref(),
                Data::Dir(DirData::default()),
                0o755,
                0,
                0,
            );
            let (a, b) = (a.unwrap(), b.unwrap());
            let f = state.create(a, "f".as_ref(), file(), 0o644, 0, 0).unwrap();
            for dir in [ROOT, a, b] {
                state.sync_dir(dir).unwrap();
            }
            state
                .rename(a, "f".as_ref(), b, "g".as_ref(), false)
                .unwrap();
            state.sync_dir(if sync_source { a } else { b }).unwrap();
            state.cut();
            assert_eq!(state.lookup(b, "g".as_ref()), Ok(f));
            assert_eq!(state.lookup(a, "f".as_ref()), Err(Fail::NoEntry));
            assert_eq!(state.node(f).unwrap().nlink, 1);
        }
    }

    #[test]
    fn lying_syncs_keep_nothing() {
        let mut state = State::new(0, 0);
        state.lie = true;
        let ino = state
            .create(ROOT, "f".as_ref(), file(), 0o644, 0, 0)
            .unwrap();
        state.file_mut(ino).unwrap().write(0, b"data");
        state.sync(ino).unwrap();
        state.sync_dir(ROOT).unwrap();
        state.cut();
        assert!(state.dir(ROOT).unwrap().entries.is_empty());
    }
}
