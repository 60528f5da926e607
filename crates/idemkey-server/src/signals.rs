//! The signals that stop a server: SIGINT (Ctrl-C) and, on Unix, SIGTERM (what service
//! managers and container runtimes send).

/// Completes on the first SIGINT or SIGTERM, logging that the server is shutting down.
pub async fn shutdown() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
