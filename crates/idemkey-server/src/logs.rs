//! Logs on stderr, as every idemkey server writes them.

/// Sends `tracing` events to stderr, filtered by `RUST_LOG` (default `info`).
///
/// Colours only on a terminal, and not with `NO_COLOR` (no-color.org): a log file or a
/// collector would get escape codes. A second call (tests starting two servers in one
/// process) leaves the first set-up in place.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}
