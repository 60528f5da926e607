//! `idemkey sweep` and `idemkey forget`.

use std::process::ExitCode;

use anyhow::Context;
use idemkey_core::{Key, Operation, Scope, Store};
use idemkey_tower::sweep_all;

use crate::cli::{DatabaseArgs, ForgetArgs};
use crate::database::{Database, open};

/// Deletes every expired record, batch by batch.
pub(crate) async fn sweep(args: DatabaseArgs) -> anyhow::Result<ExitCode> {
    let deleted = match open(&args.database_url, false).await? {
        Database::Sqlite(store) => sweep_all(&store).await,
        Database::Postgres(store) => sweep_all(&store).await,
    }
    .context("sweep failed")?;
    println!("deleted {deleted} expired records");
    Ok(ExitCode::SUCCESS)
}

/// Deletes one record; exits 1 when there was none.
pub(crate) async fn forget(args: ForgetArgs) -> anyhow::Result<ExitCode> {
    let key = Key::parse(args.key.as_bytes())
        .map_err(|error| anyhow::anyhow!("invalid --key: {error}"))?;
    let database = open(&args.database.database_url, false).await?;
    // The name as given first; then without a `:version` suffix.
    let mut names = vec![args.operation.as_str()];
    if let Some((name, _version)) = args.operation.rsplit_once(':') {
        names.push(name);
    }
    for name in names {
        let scope = Scope::new(args.actor.as_str(), &Operation::new(name, ""), key.clone());
        let forgotten = match &database {
            Database::Sqlite(store) => store.forget(&scope).await,
            Database::Postgres(store) => store.forget(&scope).await,
        }
        .context("forget failed")?;
        if forgotten {
            println!(
                "forgot the record of actor {:?}, operation {name:?}",
                args.actor
            );
            return Ok(ExitCode::SUCCESS);
        }
    }
    eprintln!("idemkey: no record for that actor, operation and key");
    Ok(ExitCode::FAILURE)
}
