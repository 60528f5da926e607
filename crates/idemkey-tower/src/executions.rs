//! Waiting at shutdown for the executions that run in tasks of their own (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored)).

use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

/// The executions of idempotency layers that run in tasks of their own: once a handler has
/// begun it finishes even if its client goes away, so a server that stops accepting requests
/// may still have executions running. Wait for them before the runtime ends, or their
/// responses are neither stored nor released (lease mode) and their transactions never commit
/// (atomic mode).
///
/// Every layer has one; layers given the same `Executions` (`with_executions`) are waited for
/// together.
///
/// ```no_run
/// # async fn run(app: axum::Router, listener: tokio::net::TcpListener, executions: idemkey_tower::Executions) {
/// axum::serve(listener, app)
///     .with_graceful_shutdown(async { let _ = tokio::signal::ctrl_c().await; })
///     .await
///     .unwrap();
/// // Connections are closed; handlers whose clients left may still run.
/// executions.wait().await;
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Executions(TaskTracker);

impl Executions {
    /// A new, empty set of executions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `future` in a task of its own, counted until it ends, and in the
    /// `idemkey_executions` gauge: what a graceful shutdown will wait for.
    pub(crate) fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        // Boxed once, here: an execution's future holds the handler's and the store's state
        // machines (about 13 KB for the notes service), and the task tracker and tokio's
        // spawn each move what they are given, which copied it three more times.
        let future = Box::pin(future);
        let gauged = Gauged::start();
        self.0.spawn(async move {
            let _gauged = gauged;
            future.await
        })
    }

    /// How many executions are running.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is running.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Waits until every execution has ended, those running now and any started meanwhile.
    /// Call it once the server has stopped accepting requests.
    pub async fn wait(&self) {
        self.0.close();
        self.0.wait().await;
    }
}

/// One execution in the `idemkey_executions` gauge, until dropped: when its task ends, panics
/// or is aborted.
struct Gauged;

impl Gauged {
    fn start() -> Self {
        metrics::gauge!("idemkey_executions").increment(1.0);
        Self
    }
}

impl Drop for Gauged {
    fn drop(&mut self) {
        metrics::gauge!("idemkey_executions").decrement(1.0);
    }
}
