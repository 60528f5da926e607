//! `idemkey sweep` and `idemkey forget`.

use std::process::ExitCode;

use anyhow::Context;
use idemkey_core::{Key, Operation, Scope, Store};
use idemkey_tower::sweep_all;

use crate::cli::{DatabaseArgs, ForgetArgs};
use crate::database::{Database, RedisRecords, open, open_redis};

/// Deletes every expired record, batch by batch.
pub(crate) async fn sweep(args: DatabaseArgs) -> anyhow::Result<ExitCode> {
    if let Some(url) = &args.records_url {
        // Connecting checks the URL and the server, so a typo is not reported as success.
        open_redis(url, None).await?;
        println!("nothing to sweep: Redis deletes each record itself when it expires (key TTL)");
        return Ok(ExitCode::SUCCESS);
    }
    let deleted = match open(&args.database_url, false).await? {
        Database::Sqlite(store) => sweep_all(&store).await,
        Database::Postgres(store) => sweep_all(&store).await,
    }
    .context("sweep failed")?;
    println!("deleted {deleted} expired records");
    Ok(ExitCode::SUCCESS)
}

/// Deletes the one record named; exits 1 when there is none.
///
/// `--operation` is tried whole as the operation's name first; if nothing is there and it
/// ends in `:VERSION`, the record of the name before the last colon is deleted only if that
/// version wrote it. No other record is ever deleted in its place.
pub(crate) async fn forget(args: ForgetArgs) -> anyhow::Result<ExitCode> {
    let key = Key::parse(args.key.as_bytes())
        .map_err(|error| anyhow::anyhow!("invalid --key: {error}"))?;
    let scope =
        |name: &str| Scope::new(args.actor.as_str(), &Operation::new(name, ""), key.clone());
    if let Some(url) = &args.database.records_url {
        return forget_in_redis(&open_redis(url, None).await?, &args, &scope).await;
    }
    let database = open(&args.database.database_url, false).await?;
    let whole = scope(&args.operation);
    let forgotten = match &database {
        Database::Sqlite(store) => store.forget(&whole).await,
        Database::Postgres(store) => store.forget(&whole).await,
    }
    .context("forget failed")?;
    if forgotten {
        println!(
            "forgot the record of actor {:?}, operation {:?}",
            args.actor, args.operation
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let Some((name, version)) = args.operation.rsplit_once(':') {
        let named = scope(name);
        let forgotten = match &database {
            Database::Sqlite(store) => store.forget_version(&named, version).await,
            Database::Postgres(store) => store.forget_version(&named, version).await,
        }
        .context("forget failed")?;
        if forgotten {
            println!(
                "forgot the record of actor {:?}, operation {name:?} version {version:?}",
                args.actor
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    Ok(none_found())
}

fn none_found() -> ExitCode {
    eprintln!("idemkey: no record of that actor, operation (and version) and key");
    ExitCode::FAILURE
}

/// [`forget`] on Redis records: the whole `--operation` as a name, then `NAME:VERSION` only if
/// that version wrote the record. The version is read, then the record deleted: an operator's
/// command racing a new request of the same scope could delete that request's record, which
/// then executes again, as after any `forget`.
async fn forget_in_redis(
    store: &RedisRecords,
    args: &ForgetArgs,
    scope: &impl Fn(&str) -> Scope,
) -> anyhow::Result<ExitCode> {
    if store
        .forget(&scope(&args.operation))
        .await
        .context("forget failed")?
    {
        println!(
            "forgot the record of actor {:?}, operation {:?}",
            args.actor, args.operation
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some((name, version)) = args.operation.rsplit_once(':') else {
        return Ok(none_found());
    };
    let named = scope(name);
    let record = store.lookup(&named).await.context("forget failed")?;
    if record.is_some_and(|record| record.version == version)
        && store.forget(&named).await.context("forget failed")?
    {
        println!(
            "forgot the record of actor {:?}, operation {name:?} version {version:?}",
            args.actor
        );
        return Ok(ExitCode::SUCCESS);
    }
    Ok(none_found())
}
