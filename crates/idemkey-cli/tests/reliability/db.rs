//! The database behind a test's servers: a SQLite file, or a PostgreSQL schema of its own on
//! the server named by `IDEMKEY_TEST_PG_URL`.

use std::path::{Path, PathBuf};

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A database of a test's own.
pub enum Db {
    Sqlite(PathBuf),
    Postgres { base: String, schema: String },
}

/// The PostgreSQL server's URL (`IDEMKEY_TEST_PG_URL`); `None`, after a loud notice, when it
/// is not set outside CI. With `CI` set and no URL the test fails: it must run there.
pub fn pg_url() -> Option<String> {
    idemkey_core::testkit::pg_url()
}

impl Db {
    /// A fresh database for `backend` in `dir`; `None` when PostgreSQL is not available.
    pub async fn create(backend: Backend, dir: &Path) -> Option<Self> {
        match backend {
            Backend::Sqlite => Some(Self::Sqlite(dir.join("notes.db"))),
            Backend::Postgres => {
                let base = pg_url()?;
                let schema = format!("idemkey_rel_{}", uuid::Uuid::new_v4().simple());
                let mut admin = PgConnection::connect(&base).await.unwrap();
                let create = format!("CREATE SCHEMA {schema}");
                sqlx::raw_sql(AssertSqlSafe(create))
                    .execute(&mut admin)
                    .await
                    .unwrap();
                admin.close().await.unwrap();
                Some(Self::Postgres { base, schema })
            }
        }
    }

    /// The URL servers are started with: PostgreSQL's carries the schema as `search_path`
    /// and as `application_name`, which tells the servers' connections from the test's.
    pub fn url(&self) -> String {
        match self {
            Self::Sqlite(_) => self.query_url(),
            Self::Postgres { schema, .. } => {
                format!("{}&application_name={schema}", self.query_url())
            }
        }
    }

    /// The URL of the test's own connections.
    fn query_url(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres { base, schema } => {
                let separator = if base.contains('?') { '&' } else { '?' };
                format!("{base}{separator}options=-c%20search_path%3D{schema}")
            }
        }
    }

    /// Every note: (id, title).
    pub async fn notes(&self) -> Vec<(String, String)> {
        self.rows("SELECT id, title FROM notes ORDER BY title, id")
            .await
    }

    /// Every record: (key, state), state 0 in flight, 1 released, 2 completed.
    pub async fn records(&self) -> Vec<(String, i64)> {
        let sql = "SELECT idem_key, CAST(state AS TEXT) FROM idemkey_records ORDER BY idem_key";
        let rows = self.rows(sql).await;
        rows.into_iter()
            .map(|(key, state)| (key, state.parse().unwrap()))
            .collect()
    }

    /// Runs `sql` (statements the test controls) on the database.
    pub async fn execute(&self, sql: &str) {
        let sql = AssertSqlSafe(sql.to_owned());
        match self {
            Self::Sqlite(_) => {
                let mut conn = sqlx::SqliteConnection::connect(&self.query_url())
                    .await
                    .unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
            Self::Postgres { .. } => {
                let mut conn = PgConnection::connect(&self.query_url()).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
        }
    }

    /// Two text columns of every row of `sql`.
    pub async fn rows(&self, sql: &str) -> Vec<(String, String)> {
        let sql = AssertSqlSafe(sql.to_owned());
        match self {
            Self::Sqlite(_) => {
                let mut conn = sqlx::SqliteConnection::connect(&self.query_url())
                    .await
                    .unwrap();
                sqlx::query_as(sql).fetch_all(&mut conn).await.unwrap()
            }
            Self::Postgres { .. } => {
                let mut conn = PgConnection::connect(&self.query_url()).await.unwrap();
                sqlx::query_as(sql).fetch_all(&mut conn).await.unwrap()
            }
        }
    }

    /// Makes every insert of a note titled `title` fail, as a broken business write.
    pub async fn fail_inserts_titled(&self, title: &str) {
        let sql = match self {
            Self::Sqlite(_) => format!(
                "CREATE TRIGGER fail_note BEFORE INSERT ON notes WHEN NEW.title = '{title}' \
                 BEGIN SELECT RAISE(ABORT, 'injected'); END"
            ),
            Self::Postgres { .. } => format!(
                "CREATE FUNCTION fail_note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 IF NEW.title = '{title}' THEN RAISE EXCEPTION 'injected'; END IF; \
                 RETURN NEW; END $$; CREATE TRIGGER fail_note BEFORE INSERT ON notes \
                 FOR EACH ROW EXECUTE FUNCTION fail_note()"
            ),
        };
        self.execute(&sql).await;
    }

    /// Undoes [`Db::fail_inserts_titled`].
    pub async fn allow_inserts(&self) {
        self.execute(match self {
            Self::Sqlite(_) => "DROP TRIGGER fail_note",
            Self::Postgres { .. } => "DROP TRIGGER fail_note ON notes; DROP FUNCTION fail_note()",
        })
        .await;
    }

    /// Whether `key`'s record is in flight with a lease that has not run out, by the
    /// database's clock.
    pub async fn lease_alive(&self, key: &str) -> bool {
        let now = match self {
            Self::Sqlite(_) => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
            Self::Postgres { .. } => "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
        };
        let sql = format!(
            "SELECT idem_key, CASE WHEN state = 0 AND lease_until > {now} THEN 'alive' \
             ELSE 'no' END FROM idemkey_records WHERE idem_key = '{key}'"
        );
        self.rows(&sql)
            .await
            .iter()
            .any(|(_, alive)| alive == "alive")
    }
}

impl Drop for Db {
    /// Drops a PostgreSQL schema with everything in it (a SQLite file goes with its test's
    /// directory), on a thread of its own: the test's runtime may be shutting down.
    fn drop(&mut self) {
        let Self::Postgres { base, schema } = self else {
            return;
        };
        let (base, schema) = (base.clone(), schema.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&base).await {
                    // Never wait for a connection a failed test left inside a transaction.
                    let drop =
                        format!("SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS {schema} CASCADE");
                    let _ = sqlx::raw_sql(AssertSqlSafe(drop)).execute(&mut admin).await;
                }
            });
        });
        let _ = dropped.join();
    }
}
