//! The fenced statements whose code is the same on every backend, once: each backend's
//! `impl Backend` expands [`fenced_statements!`] with its own SQL constants (`INSERT_COMPLETED`, `RECLAIM`,
//! `COMPLETE`, `RELEASE`, `DISCARD`, `EXTEND`, `FORGET`, `FORGET_VERSION`, `FORGET_ACTOR`, `SWEEP`, `ACTOR_USAGE`, `SECRET_INSERT`,
//! `SECRET_SELECT`, `BEAT`, `BEATS_RUN`, `OWNERS_SWEEP`) and its own typed helpers
//! (`scoped`, `held`, `liveness`, `token_of`) in scope; [`claim_with!`] likewise gives each backend the
//! claim's upsert-then-lookup.

/// The first condition of every backend's `owner_lapsed!`: the row's owner is trusted only
/// for the grant it was named for (`owner_record`, `owner_token`, written with it by every
/// claim and takeover). A binary from before these columns takes a claim over without
/// naming itself (or claims an expired row, leaving the old owner in place): the owner left
/// in the row is then not the claim's, and the claim keeps its lease, rather than being
/// taken from a live process because a dead one is named.
macro_rules! owner_named {
    () => {
        concat!(
            "idemkey_records.owner_record = idemkey_records.record_id ",
            "AND idemkey_records.owner_token = idemkey_records.token AND "
        )
    };
}

/// The insert of a record completed with `$response` under a fresh `$record_id`, its values
/// bound in the order of the backend's `INSERT_COMPLETED` (the scope, then `?4`..`?9`).
macro_rules! completed {
    ($sql:expr, $request:expr, $record_id:expr, $response:expr) => {
        scoped($sql, &$request.scope)
            .bind($record_id.as_bytes().as_slice())
            .bind($request.operation.version())
            .bind($request.fingerprint.as_bytes().as_slice())
            .bind(millis($request.retention))
            .bind($request.request_id.as_deref())
            .bind($response.encode())
    };
}

/// Expands to the `insert_completed`, `reclaim`, `complete`, `release`, `discard`, `extend`,
/// `beat`, `forget`, `forget_version`, `forget_actor`, `sweep`, `actor_usage`
/// and `load_secret` methods of an `impl Backend` block.
macro_rules! fenced_statements {
    () => {
        async fn insert_completed(
            conn: &mut Self::Connection,
            request: &ClaimRequest,
            record_id: idemkey_core::RecordId,
            response: &StoredResponse,
        ) -> Result<bool> {
            let inserted =
                crate::statements::completed!(INSERT_COMPLETED, request, record_id, response)
                    .fetch_all(conn)
                    .await
                    .map_err(store_error)?;
            Ok(!inserted.is_empty())
        }

        async fn reclaim(
            conn: &mut Self::Connection,
            request: &ClaimRequest,
            seen: &Record,
        ) -> Result<Option<Claim>> {
            let acquired = Instant::now();
            let reclaim = scoped(RECLAIM, &request.scope)
                .bind(seen.record_id.as_bytes().as_slice())
                .bind(seen.token)
                .bind(millis(request.lease))
                .bind(millis(request.retention))
                .bind(
                    request
                        .owner
                        .as_ref()
                        .map(|owner| owner.as_bytes().as_slice()),
                );
            // All rows, not `fetch_optional`: see `claim_with!`.
            let token = liveness(reclaim)
                .fetch_all(conn)
                .await
                .map_err(store_error)?;
            let token = token_of(token.into_iter().next())?;
            Ok(token.map(|token| request.grant(seen.record_id, token, acquired, Some(seen))))
        }

        async fn complete(
            conn: &mut Self::Connection,
            claim: &Claim,
            response: &StoredResponse,
        ) -> Result<()> {
            let done = held(COMPLETE, claim)
                .bind(response.encode())
                .bind(millis(claim.retention))
                .bind(crate::statements::owned(claim))
                .execute(conn)
                .await
                .map_err(store_error)?;
            fenced(done.rows_affected())
        }

        async fn release(conn: &mut Self::Connection, claim: &Claim) -> Result<()> {
            let done = held(RELEASE, claim)
                .bind(millis(claim.retention))
                .bind(crate::statements::owned(claim))
                .execute(conn)
                .await
                .map_err(store_error)?;
            fenced(done.rows_affected())
        }

        async fn discard(conn: &mut Self::Connection, claim: &Claim) -> Result<()> {
            let done = held(DISCARD, claim)
                .bind(crate::statements::owned(claim))
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
                .bind(crate::statements::owned(claim))
                .execute(conn)
                .await
                .map_err(store_error)?;
            fenced(done.rows_affected())?;
            claim.acquired = acquired;
            Ok(())
        }

        async fn beat(
            conn: &mut Self::Connection,
            owner: idemkey_core::OwnerId,
            grace: std::time::Duration,
            first: bool,
        ) -> Result<()> {
            // One transaction: one commit, one flush, for the two rows.
            let mut tx = sqlx::Connection::begin(&mut *conn)
                .await
                .map_err(store_error)?;
            liveness(
                sqlx::query(BEAT)
                    .bind(owner.as_bytes().as_slice())
                    .bind(millis(grace)),
            )
            .execute(&mut *tx)
            .await
            .map_err(store_error)?;
            liveness(sqlx::query(BEATS_RUN).bind(millis(grace) * 2 / 5))
                .execute(&mut *tx)
                .await
                .map_err(store_error)?;
            tx.commit().await.map_err(store_error)?;
            if first {
                sqlx::query(OWNERS_SWEEP)
                    .execute(conn)
                    .await
                    .map_err(store_error)?;
            }
            Ok(())
        }

        async fn forget(conn: &mut Self::Connection, scope: &Scope) -> Result<bool> {
            let done = scoped(FORGET, scope)
                .execute(conn)
                .await
                .map_err(store_error)?;
            Ok(done.rows_affected() > 0)
        }

        async fn forget_version(
            conn: &mut Self::Connection,
            scope: &Scope,
            version: &str,
        ) -> Result<bool> {
            let done = scoped(FORGET_VERSION, scope)
                .bind(version)
                .execute(conn)
                .await
                .map_err(store_error)?;
            Ok(done.rows_affected() > 0)
        }

        async fn forget_actor(conn: &mut Self::Connection, actor: &str, batch: u32) -> Result<u64> {
            let done = sqlx::query(FORGET_ACTOR)
                .bind(actor)
                .bind(i64::from(batch))
                .execute(conn)
                .await
                .map_err(store_error)?;
            Ok(done.rows_affected())
        }

        async fn sweep(conn: &mut Self::Connection, batch: u32) -> Result<u64> {
            let done = sqlx::query(SWEEP)
                .bind(i64::from(batch))
                .execute(conn)
                .await
                .map_err(store_error)?;
            Ok(done.rows_affected())
        }

        async fn actor_usage(
            conn: &mut Self::Connection,
            actor: &str,
        ) -> Result<idemkey_core::ActorUsage> {
            let (records, bytes, next_ms): (i64, i64, i64) = sqlx::query_as(ACTOR_USAGE)
                .bind(actor)
                .fetch_one(conn)
                .await
                .map_err(store_error)?;
            let count = |n: i64| u64::try_from(n).unwrap_or(0);
            Ok(idemkey_core::ActorUsage {
                records: count(records),
                bytes: count(bytes),
                next_expiry: std::time::Duration::from_millis(count(next_ms)),
            })
        }

        async fn load_secret(conn: &mut Self::Connection, candidate: &[u8]) -> Result<Vec<u8>> {
            sqlx::query(SECRET_INSERT)
                .bind(candidate)
                .execute(&mut *conn)
                .await
                .map_err(store_error)?;
            sqlx::query_scalar(SECRET_SELECT)
                .fetch_one(conn)
                .await
                .map_err(store_error)
        }
    };
}

pub(crate) use completed;
pub(crate) use fenced_statements;
pub(crate) use owner_named;

/// The owner a claim names, as its fence binds it last: the grant is the record id and the
/// token together with the owner ([`idemkey_core::Claim::owner`]).
pub(crate) fn owned(claim: &idemkey_core::Claim) -> Option<&[u8]> {
    claim
        .owner
        .as_ref()
        .map(|owner| owner.as_bytes().as_slice())
}

/// Expands to `claim_with(conn, request, sql)` for a backend: the claim upsert (`sql`, binding
/// the scope, record id, version, fingerprint, lease, retention, request id and owner), then the live
/// record if the upsert claimed nothing. [`idemkey_core::Error::Contention`] when that record
/// is gone by then, which only a claim outside a transaction (lease mode's) can meet.
macro_rules! claim_with {
    ($db:ty) => {
        async fn claim_with(
            conn: &mut <$db as sqlx::Database>::Connection,
            request: &ClaimRequest,
            sql: &'static str,
        ) -> Result<TryClaim> {
            let acquired = Instant::now();
            let record_id = idemkey_core::RecordId::new();
            let claimed = scoped(sql, &request.scope)
                .bind(record_id.as_bytes().as_slice())
                .bind(request.operation.version())
                .bind(request.fingerprint.as_bytes().as_slice())
                .bind(millis(request.lease))
                .bind(millis(request.retention))
                .bind(request.request_id.as_deref())
                .bind(
                    request
                        .owner
                        .as_ref()
                        .map(|owner| owner.as_bytes().as_slice()),
                )
                // Run to completion, not `fetch_optional`: on SQLite, outside a transaction,
                // the statement commits when it completes, and sqlx resets a statement it
                // stops reading early ignoring the result, so a failed commit (a full disk)
                // would pass for a claim.
                .fetch_all(&mut *conn)
                .await
                .map_err(store_error)?;
            if let Some(token) = token_of(claimed.into_iter().next())? {
                return Ok(TryClaim::Claimed(
                    request.grant(record_id, token, acquired, None),
                ));
            }
            // Inside a transaction the upsert locked the live row, so it is still there.
            match <$db as crate::Backend>::lookup(conn, &request.scope).await? {
                Some(record) => Ok(TryClaim::Existing(record)),
                None => Err(Error::Contention),
            }
        }
    };
}

pub(crate) use claim_with;
