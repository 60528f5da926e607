//! Files and directory entries: unsynced writes and entries go at a cut, synced ones stay.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use crate::{Mounted, sync_dir};

#[idemkey_test_support::test(needs = [fuse])]
fn data_written_without_a_sync_is_gone_after_a_cut() {
    let fs = Mounted::new();
    let path = fs.path().join("f");
    let mut file = File::create(&path).unwrap();
    file.write_all(b"synced").unwrap();
    file.sync_all().unwrap();
    sync_dir(fs.path());
    file.write_all(b" and not synced").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"synced and not synced");
    drop(file);
    let cut = fs.fs.cut().unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"synced");
    assert_eq!(cut.bytes, 21, "the one dirty page, to the file's end");
    assert_eq!(cut.entries, 0);
}

#[idemkey_test_support::test(needs = [fuse])]
fn data_written_then_fdatasynced_is_kept() {
    let fs = Mounted::new();
    let path = fs.path().join("f");
    let mut file = File::create(&path).unwrap();
    sync_dir(fs.path());
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    file.write_all(&bytes).unwrap();
    file.sync_data().unwrap();
    drop(file);
    let cut = fs.fs.cut().unwrap();
    assert_eq!(fs::read(&path).unwrap(), bytes);
    assert_eq!(cut, idemkey_powerloss::Cut::default());
}

#[idemkey_test_support::test(needs = [fuse])]
fn a_new_file_whose_directory_was_not_synced_is_gone_after_a_cut() {
    let fs = Mounted::new();
    let path = fs.path().join("new");
    let mut file = File::create(&path).unwrap();
    file.write_all(b"synced, but not its name").unwrap();
    file.sync_all().unwrap();
    drop(file);
    let cut = fs.fs.cut().unwrap();
    assert!(!path.exists(), "the entry was never synced");
    assert_eq!(cut.entries, 1);
    // With its directory synced it stays.
    let mut file = File::create(&path).unwrap();
    file.write_all(b"kept").unwrap();
    file.sync_all().unwrap();
    sync_dir(fs.path());
    drop(file);
    fs.fs.cut().unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"kept");
}

#[idemkey_test_support::test(needs = [fuse])]
fn a_rename_not_covered_by_a_directory_sync_is_undone() {
    let fs = Mounted::new();
    let (old, new) = (fs.path().join("old"), fs.path().join("new"));
    fs::write(&old, b"content").unwrap();
    File::open(&old).unwrap().sync_all().unwrap();
    sync_dir(fs.path());
    fs::rename(&old, &new).unwrap();
    let cut = fs.fs.cut().unwrap();
    assert_eq!(cut.entries, 2, "one name added, one removed");
    assert_eq!(fs::read(&old).unwrap(), b"content");
    assert!(!new.exists());
    // Synced, it holds; and an unlink not synced is undone too.
    fs::rename(&old, &new).unwrap();
    sync_dir(fs.path());
    fs::remove_file(&new).unwrap();
    fs.fs.cut().unwrap();
    assert!(!old.exists());
    assert_eq!(fs::read(&new).unwrap(), b"content");
}

#[idemkey_test_support::test(needs = [fuse])]
fn directories_modes_owners_and_truncation_are_kept_once_synced() {
    let fs = Mounted::new();
    let dir = fs.path().join("data");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&dir, Some(1), Some(1)).unwrap();
    let path = dir.join("f");
    fs::write(&path, vec![7u8; 10_000]).unwrap();
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(100).unwrap();
    file.sync_all().unwrap();
    sync_dir(&dir);
    sync_dir(fs.path());
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    file.set_len(0).unwrap();
    drop(file);
    fs.fs.cut().unwrap();
    let meta = fs::metadata(&dir).unwrap();
    assert_eq!(
        meta.mode() & 0o7777,
        0o700,
        "the chmod after the sync is undone"
    );
    assert_eq!((meta.uid(), meta.gid()), (1, 1));
    assert_eq!(fs::read(&path).unwrap(), vec![7u8; 100]);
    assert_eq!(meta.nlink(), 2);
}

#[idemkey_test_support::test(needs = [fuse])]
fn a_file_still_open_at_a_cut_fails_from_then_on() {
    let fs = Mounted::new();
    let path = fs.path().join("held");
    let mut file = File::create(&path).unwrap();
    file.write_all(b"before").unwrap();
    file.sync_all().unwrap();
    sync_dir(fs.path());
    fs.fs.cut().unwrap();
    // The old mount went lazily: its holder writes to a disk without power.
    let error = file.write_all(b" after").and_then(|()| file.sync_all());
    assert!(error.is_err(), "a write after the cut failed");
    let mut read = String::new();
    File::open(&path)
        .unwrap()
        .read_to_string(&mut read)
        .unwrap();
    assert_eq!(read, "before");
}

#[idemkey_test_support::test(needs = [fuse])]
fn lying_syncs_keep_nothing() {
    let fs = Mounted::new();
    fs.fs.set_syncs_lie(true);
    let path = fs.path().join("f");
    let mut file = File::create(&path).unwrap();
    file.write_all(b"acknowledged").unwrap();
    file.sync_all().unwrap();
    sync_dir(fs.path());
    drop(file);
    let cut = fs.fs.cut().unwrap();
    assert!(!path.exists());
    assert_eq!((cut.bytes, cut.entries), (12, 1));
}
