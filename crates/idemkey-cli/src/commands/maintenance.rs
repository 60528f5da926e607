//! `idemkey sweep` and `idemkey forget`.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use idemkey_core::{Key, Operation, Scope, Store};
use idemkey_proxy::{ActorConfig, Credential, ProxyConfig};
use idemkey_server::{Database, RedisSetup, open_redis};
use idemkey_tower::sweep_all;

use crate::args::{DatabaseArgs, parse_secret};

/// `idemkey forget`'s arguments.
#[derive(Debug, Args)]
pub(crate) struct ForgetArgs {
    #[command(flatten)]
    pub(crate) database: DatabaseArgs,
    /// The actor, as stored. With --operation and --key, only that record; without them,
    /// every completed record of the actor, whatever its operation and key (its records
    /// still in flight or released for a retry hold no response and are kept; the count of
    /// each is printed).
    #[arg(long, required_unless_present = "proxy_credential")]
    pub(crate) actor: Option<String>,
    /// The operation's name, or NAME:VERSION (`create-note:v1`): the whole value is tried as
    /// a name first, then the name before the last colon, only if that version wrote its
    /// record.
    #[arg(long, requires = "key")]
    pub(crate) operation: Option<String>,
    /// The idempotency key, bare or quoted.
    #[arg(long, requires = "operation")]
    pub(crate) key: Option<String>,
    /// Instead of --actor: the actor `idemkey proxy` gives this credential, as a client sends
    /// it (`'Authorization: Bearer T'`), or `-` to read that line from stdin. Its digests are
    /// computed as the proxy computes them (and the one of earlier versions); the credential
    /// is never printed.
    #[arg(long, value_name = "'HEADER: VALUE'", conflicts_with = "actor",
        value_parser = |value: &str| Ok::<_, std::convert::Infallible>(Hidden(value.to_owned())))]
    pub(crate) proxy_credential: Option<Hidden>,
    /// With --proxy-credential: the proxy's --config file, for its `[actor]` settings (by
    /// default the actor is the `Authorization` header's).
    #[arg(long, value_name = "FILE", requires = "proxy_credential")]
    pub(crate) config: Option<std::path::PathBuf>,
    /// With --proxy-credential: a file holding the proxy's --secret, if it runs with one (its
    /// final line ending is not part of it). Unset: IDEMKEY_SECRET, else the store's own.
    #[arg(long, value_name = "FILE", requires = "proxy_credential")]
    pub(crate) secret_file: Option<std::path::PathBuf>,
    /// The proxy's --secret, from the environment only (IDEMKEY_SECRET).
    #[arg(long, env = "IDEMKEY_SECRET", hide = true, hide_env_values = true,
        value_parser = |value: &str| parse_secret(value).map(Hidden))]
    pub(crate) secret: Option<Hidden>,
}

/// A value that may be a credential or a secret: never shown by `Debug`.
#[derive(Clone)]
pub(crate) struct Hidden(pub(crate) String);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hidden(..)")
    }
}

/// Deletes every expired record, batch by batch.
pub(crate) async fn sweep(args: DatabaseArgs) -> anyhow::Result<ExitCode> {
    // Redis records are opened too: connecting checks the URL and the server, so a typo is
    // not reported as success. --database-url names a database here, never Redis.
    let store = match &args.records_url {
        Some(url) => Database::Redis(open_redis(url, maintenance_setup(&args)).await?),
        None => Database::open_sql(&args.database_url, false).await?,
    };
    if let Database::Redis(_) = store {
        println!("nothing to sweep: Redis deletes each record itself when it expires (key TTL)");
        return Ok(ExitCode::SUCCESS);
    }
    let deleted = sweep_all(&store).await.context("sweep failed")?;
    println!("deleted {deleted} expired records");
    Ok(ExitCode::SUCCESS)
}

/// The store a maintenance command works on: the Redis records of --records-url if given,
/// else the store of --database-url, a database or Redis records.
async fn open(args: &DatabaseArgs) -> anyhow::Result<Database> {
    let setup = maintenance_setup(args);
    Ok(match &args.records_url {
        Some(url) => Database::Redis(open_redis(url, setup).await?),
        None => Database::open_with(&args.database_url, false, setup).await?,
    })
}

/// Redis records for a maintenance command: no waits, no replay cache, the CA if given.
fn maintenance_setup(args: &DatabaseArgs) -> RedisSetup {
    RedisSetup {
        tls_ca: args.records_tls_ca.clone(),
        ..RedisSetup::default()
    }
}

/// Deletes the one record named, or every completed record of the actor; exits 1 when
/// there is none.
///
/// `--operation` is tried whole as the operation's name first; if nothing is there and it
/// ends in `:VERSION`, the record of the name before the last colon is deleted only if that
/// version wrote it. No other record is ever deleted in its place. Every argument is checked
/// before the store is opened.
pub(crate) async fn forget(args: ForgetArgs) -> anyhow::Result<ExitCode> {
    let key = args
        .key
        .as_deref()
        .map(|key| Key::parse(key.as_bytes()))
        .transpose()
        .map_err(|error| anyhow::anyhow!("invalid --key: {error}"))?;
    let whom = Whom::from_args(&args)?;
    let store = open(&args.database).await?;
    forget_in(&store, &args, &whom, key.as_ref()).await
}

/// [`forget`] on one store.
async fn forget_in(
    store: &impl Store,
    args: &ForgetArgs,
    whom: &Whom,
    key: Option<&Key>,
) -> anyhow::Result<ExitCode> {
    let actors = whom.actors(store).await?;
    let (Some(key), Some(operation)) = (key, &args.operation) else {
        return forget_actors(store, whom, &actors).await;
    };
    for actor in &actors {
        if forget_one(store, actor, operation, key).await? {
            return Ok(ExitCode::SUCCESS);
        }
    }
    eprintln!("idemkey: no record of that actor, operation (and version) and key");
    Ok(ExitCode::FAILURE)
}

/// Deletes the record of `actor`, `operation` (or its NAME:VERSION) and `key`, if any.
async fn forget_one(
    store: &impl Store,
    actor: &str,
    operation: &str,
    key: &Key,
) -> anyhow::Result<bool> {
    let scope = |name: &str| Scope::new(actor, &Operation::new(name, ""), key.clone());
    if store
        .forget(&scope(operation))
        .await
        .context("forget failed")?
    {
        println!("forgot the record of actor {actor:?}, operation {operation:?}");
        return Ok(true);
    }
    if let Some((name, version)) = operation.rsplit_once(':')
        && store
            .forget_version(&scope(name), version)
            .await
            .context("forget failed")?
    {
        println!("forgot the record of actor {actor:?}, operation {name:?} version {version:?}");
        return Ok(true);
    }
    Ok(false)
}

/// Deletes every completed record of each of `actors` (one actor, or the digests of one
/// credential); prints how many were forgotten and kept.
async fn forget_actors(
    store: &impl Store,
    whom: &Whom,
    actors: &[String],
) -> anyhow::Result<ExitCode> {
    let (mut forgotten, mut kept) = (0, 0);
    for actor in actors {
        let done = store.forget_actor(actor).await.context("forget failed")?;
        forgotten += done.forgotten;
        kept += done.kept;
    }
    if forgotten == 0 && kept == 0 {
        eprintln!(
            "idemkey: no records of {}{}",
            whom.label(actors),
            whom.hint()
        );
        return Ok(ExitCode::FAILURE);
    }
    println!(
        "forgot {forgotten} records of {}; kept {kept} without a response (in flight, or released for a retry){}",
        whom.label(actors),
        if kept > 0 {
            ": run again once they are done, as one in flight may still store its answer"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Whose records `forget` deletes: an actor as stored, or the actors `idemkey proxy` gives a
/// credential (its keyed digest, and the plain one of earlier versions).
enum Whom {
    Actor(String),
    Credential {
        credential: Credential,
        config: ActorConfig,
        /// The proxy's --secret; `None`: the store's own, read once the store is open.
        secret: Option<Vec<u8>>,
    },
}

impl Whom {
    /// Reads and checks --actor, or --proxy-credential with --config and the secret.
    fn from_args(args: &ForgetArgs) -> anyhow::Result<Self> {
        if let Some(actor) = &args.actor {
            return Ok(Self::Actor(actor.clone()));
        }
        let Some(line) = &args.proxy_credential else {
            anyhow::bail!("--actor or --proxy-credential is required");
        };
        let credential = if line.0 == "-" {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .context("cannot read --proxy-credential from stdin")?;
            Credential::parse(&line)
        } else {
            Credential::parse(&line.0)
        }
        .context("--proxy-credential")?;
        let config = match &args.config {
            Some(path) => ProxyConfig::load(path)?.actor,
            None => ActorConfig::default(),
        };
        let secret = match (&args.secret_file, &args.secret) {
            (Some(path), _) => Some(secret_in(path)?),
            (None, Some(secret)) => Some(secret.0.clone().into_bytes()),
            (None, None) => None,
        };
        credential.check(&config).context("--proxy-credential")?;
        Ok(Self::Credential {
            credential,
            config,
            secret,
        })
    }

    /// The stored actors named: the proxy's digests need the secret, the store's by default.
    async fn actors(&self, store: &impl Store) -> anyhow::Result<Vec<String>> {
        Ok(match self {
            Self::Actor(actor) => vec![actor.clone()],
            Self::Credential {
                credential,
                config,
                secret,
            } => credential.actors(config, secret.as_deref(), store).await?,
        })
    }

    /// Who, for the lines printed: the digests, never the credential.
    fn label(&self, actors: &[String]) -> String {
        match self {
            Self::Actor(actor) => format!("actor {actor:?}"),
            Self::Credential { .. } => {
                format!("that credential's proxy actor ({})", actors.join(", "))
            }
        }
    }

    /// What to check when no record was found.
    fn hint(&self) -> &'static str {
        match self {
            Self::Credential { secret: None, .. } => {
                " (if the proxy runs with --secret, give forget the same secret: --secret-file or IDEMKEY_SECRET)"
            }
            _ => "",
        }
    }
}

/// The secret in `path`, without its final line ending.
fn secret_in(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let mut secret = std::fs::read(path)
        .with_context(|| format!("cannot read --secret-file {}", path.display()))?;
    if secret.ends_with(b"\n") {
        secret.pop();
        if secret.ends_with(b"\r") {
            secret.pop();
        }
    }
    if secret.is_empty() {
        anyhow::bail!("--secret-file {} is empty", path.display());
    }
    Ok(secret)
}
