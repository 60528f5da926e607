//! The fenced statements whose code is the same on every backend, once: each backend's
//! `impl Backend` expands [`fenced_statements!`] with its own SQL constants (`RECLAIM`,
//! `COMPLETE`, `RELEASE`, `DISCARD`, `EXTEND`, `FORGET`, `SWEEP`) and its own typed helpers
//! (`scoped`, `held`, `token_of`) in scope.

/// Expands to the `reclaim`, `complete`, `release`, `discard`, `extend`, `forget` and `sweep`
/// methods of an `impl Backend` block.
macro_rules! fenced_statements {
    () => {
        async fn reclaim(
            conn: &mut Self::Connection,
            request: &ClaimRequest,
            seen: &Record,
        ) -> Result<Option<Claim>> {
            let acquired = Instant::now();
            let token = scoped(RECLAIM, &request.scope)
                .bind(seen.record_id.as_bytes().as_slice())
                .bind(seen.token)
                .bind(millis(request.lease))
                .bind(millis(request.retention))
                .fetch_optional(conn)
                .await
                .map_err(store_error)?;
            let token = token_of(token)?;
            Ok(token.map(|token| claim(request, seen.record_id, token, acquired, Some(seen))))
        }

        async fn complete(
            conn: &mut Self::Connection,
            claim: &Claim,
            response: &StoredResponse,
        ) -> Result<()> {
            let done = held(COMPLETE, claim)
                .bind(response.encode())
                .bind(millis(claim.retention))
                .execute(conn)
                .await
                .map_err(store_error)?;
            fenced(done.rows_affected())
        }

        async fn release(conn: &mut Self::Connection, claim: &Claim) -> Result<()> {
            let done = held(RELEASE, claim)
                .bind(millis(claim.retention))
                .execute(conn)
                .await
                .map_err(store_error)?;
            fenced(done.rows_affected())
        }

        async fn discard(conn: &mut Self::Connection, claim: &Claim) -> Result<()> {
            let done = held(DISCARD, claim)
                .execute(conn)
                .await
                .map_err(store_error)?;
            fenced(done.rows_affected())
        }

        async fn extend(conn: &mut Self::Connection, claim: &mut Claim) -> Result<()> {
            let acquired = Instant::now();
            let done = held(EXTEND, claim)
                .bind(millis(claim.lease))
                .bind(millis(claim.retention))
                .execute(conn)
                .await
                .map_err(store_error)?;
            fenced(done.rows_affected())?;
            claim.acquired = acquired;
            Ok(())
        }

        async fn forget(conn: &mut Self::Connection, scope: &Scope) -> Result<bool> {
            let done = scoped(FORGET, scope)
                .execute(conn)
                .await
                .map_err(store_error)?;
            Ok(done.rows_affected() > 0)
        }

        async fn sweep(conn: &mut Self::Connection, batch: u32) -> Result<u64> {
            let done = sqlx::query(SWEEP)
                .bind(i64::from(batch))
                .execute(conn)
                .await
                .map_err(store_error)?;
            Ok(done.rows_affected())
        }
    };
}

pub(crate) use fenced_statements;
