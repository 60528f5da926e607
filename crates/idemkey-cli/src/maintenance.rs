//! `idemkey sweep` and `idemkey forget`.

use std::future::Future;
use std::process::ExitCode;

use anyhow::Context;
use idemkey_core::{Key, Operation, Scope, Store};
use idemkey_tower::sweep_all;

use crate::cli::{DatabaseArgs, ForgetArgs};
use idemkey_server::{Database, RedisRecords, RedisSetup, open_redis};

/// Deletes every expired record, batch by batch.
pub(crate) async fn sweep(args: DatabaseArgs) -> anyhow::Result<ExitCode> {
    if let Some(url) = &args.records_url {
        // Connecting checks the URL and the server, so a typo is not reported as success.
        open_redis(url, maintenance_setup(&args)).await?;
        println!("nothing to sweep: Redis deletes each record itself when it expires (key TTL)");
        return Ok(ExitCode::SUCCESS);
    }
    let store = Database::open(&args.database_url, false).await?;
    let deleted = sweep_all(&store).await.context("sweep failed")?;
    println!("deleted {deleted} expired records");
    Ok(ExitCode::SUCCESS)
}

/// Redis records for a maintenance command: no waits, no replay cache, the CA if given.
fn maintenance_setup(args: &DatabaseArgs) -> RedisSetup {
    RedisSetup {
        tls_ca: args.records_tls_ca.clone(),
        ..RedisSetup::default()
    }
}

/// Deletes the one record named; exits 1 when there is none.
///
/// `--operation` is tried whole as the operation's name first; if nothing is there and it
/// ends in `:VERSION`, the record of the name before the last colon is deleted only if that
/// version wrote it. No other record is ever deleted in its place.
pub(crate) async fn forget(args: ForgetArgs) -> anyhow::Result<ExitCode> {
    let key = Key::parse(args.key.as_bytes())
        .map_err(|error| anyhow::anyhow!("invalid --key: {error}"))?;
    if let Some(url) = &args.database.records_url {
        let records = open_redis(url, maintenance_setup(&args.database)).await?;
        return forget_in(&records, &args, &key).await;
    }
    let store = Database::open(&args.database.database_url, false).await?;
    forget_in(&store, &args, &key).await
}

/// What `forget` needs of a store besides [`Store::forget`]: deleting a scope's record only
/// if a given operation version wrote it, in one step.
trait ForgetVersion: Store {
    fn forget_version(
        &self,
        scope: &Scope,
        version: &str,
    ) -> impl Future<Output = idemkey_core::Result<bool>> + Send;
}

impl ForgetVersion for Database {
    fn forget_version(
        &self,
        scope: &Scope,
        version: &str,
    ) -> impl Future<Output = idemkey_core::Result<bool>> + Send {
        Database::forget_version(self, scope, version)
    }
}

impl ForgetVersion for RedisRecords {
    fn forget_version(
        &self,
        scope: &Scope,
        version: &str,
    ) -> impl Future<Output = idemkey_core::Result<bool>> + Send {
        RedisRecords::forget_version(self, scope, version)
    }
}

/// [`forget`] on one store.
async fn forget_in(
    store: &impl ForgetVersion,
    args: &ForgetArgs,
    key: &Key,
) -> anyhow::Result<ExitCode> {
    let scope =
        |name: &str| Scope::new(args.actor.as_str(), &Operation::new(name, ""), key.clone());
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
    if let Some((name, version)) = args.operation.rsplit_once(':')
        && ForgetVersion::forget_version(store, &scope(name), version)
            .await
            .context("forget failed")?
    {
        println!(
            "forgot the record of actor {:?}, operation {name:?} version {version:?}",
            args.actor
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("idemkey: no record of that actor, operation (and version) and key");
    Ok(ExitCode::FAILURE)
}
