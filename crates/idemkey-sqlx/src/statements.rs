//! The statements written once for every backend. The fenced ones, SQL and all:
//! [`fenced_statements!`] renders each with the backend's `dialect!` (its clock, its null-safe
//! equality, its placeholders). The others' code: [`plain_statements!`] and, for the backends
//! whose upserts return what they did, [`upsert_statements!`] and [`claim_with!`], each with the
//! backend's SQL constants named in the invocation.
//!
//! A backend's `dialect!` answers `(now)` (the database clock in milliseconds), `(from_clock)`
//! (what an `UPDATE` adds before `WHERE` to read it, if anything), `(same)` (null-safe
//! equality), `(param N)` (the `N`th parameter: `?N`, `$N`, or MySQL's plain `?`) and
//! `(owner_lapsed N)` (its `owner_lapsed!`, whose clock is parameter `N` where it binds one).
//! Parameters are numbered in the order they appear and none is used twice, so binding them in
//! that order serves numbered and ordered placeholders alike.

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

/// The condition on a claim's record, parameters `$a` to `$o`: its scope, record id and token
/// (the grant), still in flight, under the owner the grant named ([`held!`] binds them).
macro_rules! fence {
    ($d:ident, $a:literal, $b:literal, $c:literal, $r:literal, $t:literal, $o:literal) => {
        concat!(
            " WHERE actor = ",
            $d!(param $a),
            " AND operation = ",
            $d!(param $b),
            " AND idem_key = ",
            $d!(param $c),
            " AND record_id = ",
            $d!(param $r),
            " AND token = ",
            $d!(param $t),
            " AND state = 0 AND owner ",
            $d!(same),
            " ",
            $d!(param $o)
        )
    };
}

/// Takes over a released or stale claim: the lease, the expiry (lease and retention summed),
/// the new owner and the next token, then the grant seen. The owner's grant is bound (not
/// `token + 1`): MySQL assigns left to right, each assignment seeing the ones before.
macro_rules! reclaim_sql {
    ($d:ident) => {
        concat!(
            "UPDATE idemkey_records SET token = token + 1, state = 0, lease_until = ",
            $d!(now),
            " + ",
            $d!(param 1),
            ", expires_at = ",
            $d!(now),
            " + ",
            $d!(param 2),
            ", owner = ",
            $d!(param 3),
            ", owner_record = record_id, owner_token = ",
            $d!(param 4),
            $d!(from_clock),
            " WHERE actor = ",
            $d!(param 5),
            " AND operation = ",
            $d!(param 6),
            " AND idem_key = ",
            $d!(param 7),
            " AND record_id = ",
            $d!(param 8),
            " AND token = ",
            $d!(param 9),
            " AND (state = 1 OR (state = 0 AND (lease_until <= ",
            $d!(now),
            " OR ",
            $d!(owner_lapsed 10),
            "))) AND expires_at > ",
            $d!(now)
        )
    };
}

/// Stores the response of a claim that still holds.
macro_rules! complete_sql {
    ($d:ident) => {
        concat!(
            "UPDATE idemkey_records SET state = 2, response = ",
            $d!(param 1),
            ", lease_until = NULL, expires_at = ",
            $d!(now),
            " + ",
            $d!(param 2),
            $d!(from_clock),
            $crate::statements::fence!($d, 3, 4, 5, 6, 7, 8)
        )
    };
}

/// Releases a claim that still holds, for a retry to take over.
macro_rules! release_sql {
    ($d:ident) => {
        concat!(
            "UPDATE idemkey_records SET state = 1, lease_until = NULL, expires_at = ",
            $d!(now),
            " + ",
            $d!(param 1),
            $d!(from_clock),
            $crate::statements::fence!($d, 2, 3, 4, 5, 6, 7)
        )
    };
}

/// Deletes the record of a claim that still holds.
macro_rules! discard_sql {
    ($d:ident) => {
        concat!(
            "DELETE FROM idemkey_records",
            $crate::statements::fence!($d, 1, 2, 3, 4, 5, 6)
        )
    };
}

/// Extends a claim that still holds: its lease, and its expiry (lease and retention summed).
macro_rules! extend_sql {
    ($d:ident) => {
        concat!(
            "UPDATE idemkey_records SET lease_until = ",
            $d!(now),
            " + ",
            $d!(param 1),
            ", expires_at = ",
            $d!(now),
            " + ",
            $d!(param 2),
            $d!(from_clock),
            $crate::statements::fence!($d, 3, 4, 5, 6, 7, 8)
        )
    };
}

/// `$query` with a scope bound as its next three parameters: actor, operation, key.
macro_rules! scoped {
    ($query:expr, $scope:expr) => {
        $query
            .bind($scope.actor.as_str())
            .bind($scope.operation.as_str())
            .bind($scope.key.as_str())
    };
}

/// `$query` with a claim's [`fence!`] bound: scope, record id, token, owner.
macro_rules! held {
    ($query:expr, $claim:expr) => {
        $crate::statements::scoped!($query, $claim.scope)
            .bind($claim.record_id.as_bytes().as_slice())
            .bind($claim.token)
            .bind($crate::statements::owned(&$claim))
    };
}

/// The insert of a record completed with `$response` under a fresh `$record_id`, its values
/// bound in the order of the backend's `INSERT_COMPLETED` (the scope, then `?4`..`?9`).
macro_rules! completed {
    ($sql:expr, $request:expr, $record_id:expr, $response:expr) => {
        $crate::statements::scoped!(::sqlx::query($sql), $request.scope)
            .bind($record_id.as_bytes().as_slice())
            .bind($request.operation.version())
            .bind($request.fingerprint.as_bytes().as_slice())
            .bind($crate::error::millis($request.retention))
            .bind($request.request_id.as_deref())
            .bind($response.encode())
    };
}

/// Expands to the `reclaim`, `complete`, `release`, `discard` and `extend` methods of
/// `impl Backend for $db`, their SQL rendered by `$dialect!` (see the module's documentation),
/// each query passed through `$liveness` where it judges owners' heartbeats.
///
/// An update counts the rows its condition matched (on MySQL too: sqlx connects with
/// `CLIENT_FOUND_ROWS`, so an extension in the same millisecond counts), and `fenced` sees 1
/// exactly when the claim still holds. A takeover's condition holds the token to what was
/// seen, so the new one is the next, and no backend needs `RETURNING`.
macro_rules! fenced_statements {
    (database: $db:ty, dialect: $dialect:ident, liveness: $liveness:expr $(,)?) => {
        async fn reclaim(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            request: &::idemkey_core::ClaimRequest,
            seen: &::idemkey_core::Record,
        ) -> ::idemkey_core::Result<Option<::idemkey_core::Claim>> {
            use $crate::error::millis;
            let acquired = ::std::time::Instant::now();
            let token = seen.token + 1;
            let reclaim = ::sqlx::query($crate::statements::reclaim_sql!($dialect))
                .bind(millis(request.lease))
                .bind(millis(request.lease) + millis(request.retention))
                .bind(
                    request
                        .owner
                        .as_ref()
                        .map(|owner| owner.as_bytes().as_slice()),
                )
                .bind(token);
            let reclaim = $crate::statements::scoped!(reclaim, request.scope)
                .bind(seen.record_id.as_bytes().as_slice())
                .bind(seen.token);
            let done = $liveness(reclaim)
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            Ok((done.rows_affected() == 1)
                .then(|| request.grant(seen.record_id, token, acquired, Some(seen))))
        }

        async fn complete(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            claim: &::idemkey_core::Claim,
            response: &::idemkey_core::StoredResponse,
        ) -> ::idemkey_core::Result<()> {
            let done = ::sqlx::query($crate::statements::complete_sql!($dialect))
                .bind(response.encode())
                .bind($crate::error::millis(claim.retention));
            let done = $crate::statements::held!(done, claim)
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            $crate::row::fenced(done.rows_affected())
        }

        async fn release(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            claim: &::idemkey_core::Claim,
        ) -> ::idemkey_core::Result<()> {
            let done = ::sqlx::query($crate::statements::release_sql!($dialect))
                .bind($crate::error::millis(claim.retention));
            let done = $crate::statements::held!(done, claim)
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            $crate::row::fenced(done.rows_affected())
        }

        async fn discard(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            claim: &::idemkey_core::Claim,
        ) -> ::idemkey_core::Result<()> {
            let done = ::sqlx::query($crate::statements::discard_sql!($dialect));
            let done = $crate::statements::held!(done, claim)
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            $crate::row::fenced(done.rows_affected())
        }

        async fn extend(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            claim: &mut ::idemkey_core::Claim,
        ) -> ::idemkey_core::Result<()> {
            use $crate::error::millis;
            let acquired = ::std::time::Instant::now();
            let done = ::sqlx::query($crate::statements::extend_sql!($dialect))
                .bind(millis(claim.lease))
                .bind(millis(claim.lease) + millis(claim.retention));
            let done = $crate::statements::held!(done, claim)
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            $crate::row::fenced(done.rows_affected())?;
            claim.acquired = acquired;
            Ok(())
        }
    };
}

/// Expands to the `forget`, `forget_version`, `forget_actor`, `sweep`, `actor_usage` and
/// `load_secret` methods of `impl Backend for $db`, over the backend's SQL named here. Each
/// binds its values in the order they appear: the scope first where it has one.
macro_rules! plain_statements {
    (
        database: $db:ty,
        forget: $forget:expr,
        forget_version: $forget_version:expr,
        forget_actor: $forget_actor:expr,
        sweep: $sweep:expr,
        actor_usage: $actor_usage:expr,
        secret: ($secret_insert:expr, $secret_select:expr) $(,)?
    ) => {
        async fn forget(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            scope: &::idemkey_core::Scope,
        ) -> ::idemkey_core::Result<bool> {
            let done = $crate::statements::scoped!(::sqlx::query($forget), scope)
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            Ok(done.rows_affected() > 0)
        }

        async fn forget_version(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            scope: &::idemkey_core::Scope,
            version: &str,
        ) -> ::idemkey_core::Result<bool> {
            let done = $crate::statements::scoped!(::sqlx::query($forget_version), scope)
                .bind(version)
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            Ok(done.rows_affected() > 0)
        }

        async fn forget_actor(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            actor: &str,
            batch: u32,
        ) -> ::idemkey_core::Result<u64> {
            let done = ::sqlx::query($forget_actor)
                .bind(actor)
                .bind(i64::from(batch))
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            Ok(done.rows_affected())
        }

        async fn sweep(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            batch: u32,
        ) -> ::idemkey_core::Result<u64> {
            let done = ::sqlx::query($sweep)
                .bind(i64::from(batch))
                .execute(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            Ok(done.rows_affected())
        }

        async fn actor_usage(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            actor: &str,
        ) -> ::idemkey_core::Result<::idemkey_core::ActorUsage> {
            let (records, bytes, next_ms): (i64, i64, i64) = ::sqlx::query_as($actor_usage)
                .bind(actor)
                .fetch_one(conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            let count = |n: i64| u64::try_from(n).unwrap_or(0);
            Ok(::idemkey_core::ActorUsage {
                records: count(records),
                bytes: count(bytes),
                next_expiry: ::std::time::Duration::from_millis(count(next_ms)),
            })
        }

        async fn load_secret(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            candidate: &[u8],
        ) -> ::idemkey_core::Result<Vec<u8>> {
            ::sqlx::query($secret_insert)
                .bind(candidate)
                .execute(&mut *conn)
                .await
                .map_err($crate::error::store_error::<$db>)?;
            ::sqlx::query_scalar($secret_select)
                .fetch_one(conn)
                .await
                .map_err($crate::error::store_error::<$db>)
        }
    };
}

/// Expands to the `insert_completed` and `beat` methods of `impl Backend for $db`, for a
/// backend whose upserts return what they did (`ON CONFLICT … RETURNING`): SQLite and
/// PostgreSQL. MySQL writes its own (a plain insert whose duplicate key is the arbiter).
macro_rules! upsert_statements {
    (
        database: $db:ty,
        insert_completed: $insert_completed:expr,
        beat: ($beat:expr, $beats_run:expr, $owners_sweep:expr),
        liveness: $liveness:expr $(,)?
    ) => {
        async fn insert_completed(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            request: &::idemkey_core::ClaimRequest,
            record_id: ::idemkey_core::RecordId,
            response: &::idemkey_core::StoredResponse,
        ) -> ::idemkey_core::Result<bool> {
            let inserted =
                $crate::statements::completed!($insert_completed, request, record_id, response)
                    .fetch_all(conn)
                    .await
                    .map_err($crate::error::store_error::<$db>)?;
            Ok(!inserted.is_empty())
        }

        async fn beat(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            owner: ::idemkey_core::OwnerId,
            grace: ::std::time::Duration,
            first: bool,
        ) -> ::idemkey_core::Result<()> {
            use $crate::error::{millis, store_error};
            // One transaction: one commit, one flush, for the two rows.
            let mut tx = ::sqlx::Connection::begin(&mut *conn)
                .await
                .map_err(store_error::<$db>)?;
            $liveness(
                ::sqlx::query($beat)
                    .bind(owner.as_bytes().as_slice())
                    .bind(millis(grace)),
            )
            .execute(&mut *tx)
            .await
            .map_err(store_error::<$db>)?;
            $liveness(::sqlx::query($beats_run).bind(millis(grace) * 2 / 5))
                .execute(&mut *tx)
                .await
                .map_err(store_error::<$db>)?;
            tx.commit().await.map_err(store_error::<$db>)?;
            if first {
                ::sqlx::query($owners_sweep)
                    .execute(conn)
                    .await
                    .map_err(store_error::<$db>)?;
            }
            Ok(())
        }
    };
}

pub(crate) use {
    complete_sql, completed, discard_sql, extend_sql, fence, fenced_statements, held, owner_named,
    plain_statements, reclaim_sql, release_sql, scoped, upsert_statements,
};

/// The owner a claim names, as its fence binds it last: the grant is the record id and the
/// token together with the owner ([`idemkey_core::Claim::owner`]).
pub(crate) fn owned(claim: &idemkey_core::Claim) -> Option<&[u8]> {
    claim
        .owner
        .as_ref()
        .map(|owner| owner.as_bytes().as_slice())
}

/// Expands to `claim_with(conn, request, sql)` for a backend whose claim is an upsert that
/// returns the token it wrote: the claim upsert (`sql`, binding the scope, record id, version,
/// fingerprint, lease, retention, request id and owner), then the live record if the upsert
/// claimed nothing. [`idemkey_core::Error::Contention`] when that record is gone by then,
/// which only a claim outside a transaction (lease mode's) can meet.
macro_rules! claim_with {
    ($db:ty) => {
        async fn claim_with(
            conn: &mut <$db as ::sqlx::Database>::Connection,
            request: &::idemkey_core::ClaimRequest,
            sql: &'static str,
        ) -> ::idemkey_core::Result<::idemkey_core::TryClaim> {
            use $crate::error::{millis, store_error};
            let acquired = ::std::time::Instant::now();
            let record_id = ::idemkey_core::RecordId::new();
            let claimed = $crate::statements::scoped!(::sqlx::query(sql), request.scope)
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
                .map_err(store_error::<$db>)?;
            let token = claimed
                .first()
                .map(|row| ::sqlx::Row::try_get::<i64, _>(row, 0))
                .transpose()
                .map_err(store_error::<$db>)?;
            if let Some(token) = token {
                return Ok(::idemkey_core::TryClaim::Claimed(
                    request.grant(record_id, token, acquired, None),
                ));
            }
            // Inside a transaction the upsert locked the live row, so it is still there.
            match <$db as $crate::Backend>::lookup(conn, &request.scope).await? {
                Some(record) => Ok(::idemkey_core::TryClaim::Existing(record)),
                None => Err(::idemkey_core::Error::Contention),
            }
        }
    };
}

pub(crate) use claim_with;
