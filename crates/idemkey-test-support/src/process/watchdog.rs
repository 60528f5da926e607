//! A server of a test's own run under a `sh` watchdog that holds a pipe from this process:
//! when the pipe closes (the watchdog stopped or dropped, or this process ended, however,
//! even by SIGKILL), the script's end runs: it kills the server and removes its directory,
//! unless a file `.keep` is in it. The script is the caller's: it starts the server in the
//! background, then `read _eof`, then does that.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

/// A running watchdog, and the directory its script removes.
pub(crate) struct Watchdog {
    child: Child,
    stdin: ChildStdin,
    dir: PathBuf,
}

impl Watchdog {
    /// Runs `script` with `sh -c`, given `args` (`$1`, ... in the script), the environment of
    /// `envs`, and a pipe on its standard input; `dir` is the server's directory.
    pub(crate) fn spawn(
        script: &str,
        args: &[&std::ffi::OsStr],
        dir: &Path,
        envs: &[(&str, String)],
    ) -> Self {
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).arg("sh").args(args);
        for (name, value) in envs {
            command.env(name, value);
        }
        let mut child = command
            .stdin(Stdio::piped())
            // The shell's own report of the SIGKILL ("Killed"): servers log to files.
            .stderr(Stdio::null())
            .spawn()
            .expect("sh on the PATH");
        let stdin = child.stdin.take().expect("a piped stdin");
        Self {
            child,
            stdin,
            dir: dir.to_owned(),
        }
    }

    /// Whether the script, hence the server, has ended (say, its port was taken).
    pub(crate) fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// Closes the pipe and waits for the script to end, the directory kept.
    pub(crate) fn stop_keeping_dir(self) {
        let keep = self.dir.join(".keep");
        std::fs::write(&keep, b"").expect("the server's directory");
        self.stop();
        let _ = std::fs::remove_file(keep);
    }

    /// Closes the pipe and waits for the script to end (the directory removed).
    pub(crate) fn stop(self) {
        let Self {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let _ = child.wait();
    }
}

/// A port free now on 127.0.0.1.
pub(crate) fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
    listener.local_addr().expect("its address").port()
}
