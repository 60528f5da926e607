//! Executing a request under its claim: the handler runs with its derived keys while the
//! lease is renewed, and its answer decides how the claim is settled (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored), [§8a](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#8a-external-effects-lease-mode), [§10](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#10-errors)).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use crate::Body;
use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response};
use http_body::Body as HttpBody;
use idemkey_core::{BoxError, Claim, ClaimFlush, DerivedKeys, Store, Verdict};

use crate::Keys;
use tower::Service;

use super::heartbeat::Heartbeat;
use super::local::LocalExecution;
use super::settle::{Settle, settle_in_store, settle_in_tx};
use super::shared::Shared;
use crate::answer::handler_failed;
use crate::policy::judge;
use crate::{Config, problem_response, split_response};

/// What a request holds once its claim is granted: the claim, the secret its derived keys
/// come from, and its execution's registration in this process.
pub(crate) struct Claimed {
    pub(crate) claim: Claim,
    pub(crate) secret: Arc<[u8]>,
    pub(crate) execution: LocalExecution,
}

/// Runs `inner` on `request` under `claim`, with derived keys from `secret`, then stores or
/// releases by the status policy: in the handler's transaction if `transactions` offered
/// one and the handler began it, else in the store.
///
/// Must run in a task of its own: once the handler has begun, it finishes even if the client
/// goes away (behaviour [§6](https://docs.rs/idemkey/latest/idemkey/behaviour/index.html#6-what-is-stored)).
pub(crate) async fn execute<S, St, ResBody>(
    mut inner: S,
    mut request: Request<Body>,
    claimed: Claimed,
    shared: Shared<St>,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<Body>, Response = Response<ResBody>>,
    St: Store,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let Claimed {
        claim,
        secret,
        execution: mut executing,
    } = claimed;
    let Shared {
        store,
        config,
        transactions,
        ..
    } = shared;
    let extensions = request.extensions_mut();
    extensions.insert(keys(&store, &claim, secret, config.claim_flush));
    extensions.insert(claim.clone());
    let offered = transactions.offer(extensions);
    let granted = claim.clone();
    let heartbeat = Heartbeat::start(
        store.clone(),
        claim,
        config.heartbeat_every(),
        executing.lease(),
    );
    let settings = config.clone();
    // Reading the response body is inside too: a panicking body stream must release as well.
    let ran = AssertUnwindSafe(async move {
        let response = inner.call(request).await?;
        Ok(settle_response(response, &settings).await)
    })
    .catch_unwind()
    .await;
    let (result, settle) = match ran {
        Ok(Ok((response, settle))) => (Ok(response), settle),
        Ok(Err(err)) => (Err(err), Settle::Release),
        Err(_) => {
            tracing::error!("the handler panicked; releasing the claim");
            (Ok(problem_response(&handler_failed())), Settle::Release)
        }
    };
    // Stopped before the handler's transaction commits: on SQLite a renewal waits for the
    // writer that transaction holds, so it is awaited only after.
    let stopping = heartbeat.stop();
    executing.settling();
    if let Some(offered) = offered {
        let replaced = settle_in_tx(offered, (&store, &granted), settle, &config).await;
        stopping.await;
        return match replaced {
            Some(problem) => Ok(problem_response(&problem)),
            None => result,
        };
    }
    let claim = stopping.await;
    settle_in_store(&store, &claim, settle).await;
    result
}

/// The execution's derived keys, handed out once `claim` is on disk (`keys.rs`): at once if
/// it was claimed with [`ClaimFlush::OnClaim`].
fn keys<St: Store>(store: &St, claim: &Claim, secret: Arc<[u8]>, mode: ClaimFlush) -> Keys {
    let (store, flushed) = (store.clone(), claim.clone());
    let flush = move || {
        let (store, claim) = (store.clone(), flushed.clone());
        Box::pin(async move {
            if mode == ClaimFlush::Deferred {
                store.flush_claim(&claim).await?;
            }
            Ok(())
        }) as _
    };
    Keys::new(DerivedKeys::new(secret, claim.record_id), Box::new(flush))
}

async fn settle_response<B>(response: Response<B>, config: &Config) -> (Response<Body>, Settle)
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (verdict, response) = judge(config.status_policy.as_ref(), response);
    let settle = match verdict {
        Verdict::Store => None,
        Verdict::Reject => Some(Settle::Discard),
        _ => Some(Settle::Release),
    };
    if let Some(settle) = settle {
        return (response.map(Body::new), settle);
    }
    match split_response(response, config.storage_limit, &config.per_request_headers).await {
        Ok((first, stored)) => (first, Settle::Store(stored)),
        Err(err) => {
            tracing::error!(error = %err, "could not read the handler's response body");
            (problem_response(&handler_failed()), Settle::Release)
        }
    }
}
