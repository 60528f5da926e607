//! The power-loss filesystem mounted for real (root and `/dev/fuse`: `needs = [fuse]`): what a
//! cut drops and keeps of files, directory entries, a SQLite database in WAL mode and a
//! PostgreSQL cluster (`needs = [fuse, pg_server]`).
#![allow(clippy::unwrap_used)]

mod files;
mod postgres;
mod sqlite;

use std::path::Path;

use idemkey_powerloss::PowerLossFs;

/// A power-loss filesystem on a temporary directory; the directory outlives the mount.
struct Mounted {
    fs: PowerLossFs,
    _dir: tempfile::TempDir,
}

impl Mounted {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let fs = PowerLossFs::mount(dir.path()).unwrap();
        Self { fs, _dir: dir }
    }

    fn path(&self) -> &Path {
        self.fs.path()
    }
}

/// `fsync` of a directory, as a program makes its entries durable.
fn sync_dir(dir: &Path) {
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

fn main() -> std::process::ExitCode {
    idemkey_test_support::runner::trials::main()
}
