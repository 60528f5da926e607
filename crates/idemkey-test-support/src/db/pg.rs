//! PostgreSQL for the tests: a schema of a test's own on the server named by
//! `IDEMKEY_TEST_PG_URL`, and tools to fault the app's connections to it: dropping them
//! mid-request, and holding its business write inside the database (an advisory lock in a
//! trigger) so a test can act meanwhile.

use std::collections::BTreeMap;

use sqlx::{AssertSqlSafe, Connection, PgConnection};

use crate::db::Db;
use crate::wait_until;

/// A fresh schema, dropped with everything in it when this is dropped.
pub struct Schema {
    name: String,
    base: String,
}

impl Schema {
    /// Creates `idemkey_s_<random>` on the server at `base`.
    pub async fn create(base: &str) -> Self {
        let name = format!("idemkey_s_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(base).await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
        Self {
            name,
            base: base.to_owned(),
        }
    }

    /// Creates the schema `name` on the server at `base`, failing with the error instead of
    /// a panic: for a tool (`idemkey-bench`) that names its schema after its run and reports
    /// a server it cannot reach as an error of its own. Dropped like any [`Schema`].
    pub async fn try_create_named(base: &str, name: &str) -> Result<Self, sqlx::Error> {
        let mut conn = PgConnection::connect(base).await?;
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&mut conn)
            .await?;
        let _ = conn.close().await;
        Ok(Self {
            name: name.to_owned(),
            base: base.to_owned(),
        })
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL, without the schema.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The server's URL with this schema first on the search path.
    pub fn url(&self) -> String {
        with_search_path(&self.base, &self.name)
    }

    /// Counts the rows of a table of this schema.
    pub async fn count(&self, table: &str) -> i64 {
        let mut conn = PgConnection::connect(&self.base).await.unwrap();
        let sql = format!("SELECT count(*) FROM {}.{table}", self.name);
        sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }
}

impl Drop for Schema {
    /// Drops the schema on a thread of its own: the test's runtime may be shutting down.
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let Ok(runtime) = runtime else { return };
            runtime.block_on(async {
                if let Ok(mut admin) = PgConnection::connect(&base).await {
                    // Never wait for a connection a failed test left inside a transaction.
                    let drop =
                        format!("SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS {name} CASCADE");
                    let _ = sqlx::raw_sql(AssertSqlSafe(drop)).execute(&mut admin).await;
                }
            });
        });
        let _ = dropped.join();
    }
}

fn schema(db: &Db) -> &Schema {
    match db {
        Db::Postgres(schema) => schema,
        Db::Sqlite(_) | Db::Mysql(_) => panic!("a PostgreSQL tool on another backend"),
    }
}

/// The pids of the app's connections (named after its schema) that match `condition`.
pub async fn pids(db: &Db, condition: &str) -> Vec<i32> {
    let schema = schema(db);
    let sql =
        format!("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND {condition}");
    let mut conn = PgConnection::connect(schema.base()).await.unwrap();
    sqlx::query_scalar(AssertSqlSafe(sql))
        .bind(schema.name())
        .fetch_all(&mut conn)
        .await
        .unwrap()
}

/// Terminates the app's connections that match `condition` (`state = 'idle'`, ...), waits
/// until they are gone, and returns how many there were.
pub async fn terminate(db: &Db, condition: &str) -> usize {
    let base = schema(db).base().to_owned();
    let pids = pids(db, condition).await;
    let mut conn = PgConnection::connect(&base).await.unwrap();
    for pid in &pids {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let gone = pids.clone();
    wait_until("terminated backends to exit", 6000, move || {
        let (base, gone) = (base.clone(), gone.clone());
        async move {
            let mut conn = PgConnection::connect(&base).await.unwrap();
            let sql = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)";
            let left: i64 = sqlx::query_scalar(sql)
                .bind(gone)
                .fetch_one(&mut conn)
                .await
                .unwrap();
            left == 0
        }
    })
    .await;
    pids.len()
}

/// An advisory lock, held by the test, that inserts of notes titled `title` wait for.
pub struct Hold {
    conn: PgConnection,
    lock: i64,
}

impl Hold {
    /// Installs the trigger and takes the lock.
    pub async fn install(db: &Db, title: &str) -> Self {
        let lock = i64::from_be_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into().unwrap());
        db.execute(&format!(
            "CREATE FUNCTION hold_note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF NEW.title = '{title}' THEN PERFORM pg_advisory_xact_lock({lock}); END IF; \
             RETURN NEW; END $$; CREATE TRIGGER hold_note BEFORE INSERT ON notes \
             FOR EACH ROW EXECUTE FUNCTION hold_note()"
        ))
        .await;
        let mut conn = PgConnection::connect(schema(db).base()).await.unwrap();
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(lock)
            .execute(&mut conn)
            .await
            .unwrap();
        Self { conn, lock }
    }

    /// Waits until one of the app's inserts waits for the lock; returns its pid.
    pub async fn waiter(db: &Db) -> i32 {
        let condition = "wait_event_type = 'Lock' AND wait_event = 'advisory'";
        for _ in 0..6000 {
            if let Some(pid) = pids(db, condition).await.first() {
                return *pid;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("no insert ever waited on the lock");
    }

    /// Lets the held inserts go on.
    pub async fn release(mut self) {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(self.lock)
            .execute(&mut self.conn)
            .await
            .unwrap();
    }
}

/// Every note of the PostgreSQL database at `url`, by title (each title's ids): what the
/// fault tests count after the database failed under the service.
pub async fn notes_by_title(url: &str) -> BTreeMap<String, Vec<String>> {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT title, id FROM notes")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    crate::db::by_title(rows)
}

/// `base` with every connection's `search_path` set to `schema` (libpq's `options`).
fn with_search_path(base: &str, schema: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}options=-c%20search_path%3D{schema}")
}

#[cfg(test)]
mod tests {
    use super::with_search_path;

    #[test]
    fn the_search_path_goes_into_the_options() {
        assert_eq!(
            with_search_path("postgres://u@h/db", "s1"),
            "postgres://u@h/db?options=-c%20search_path%3Ds1"
        );
        assert!(with_search_path("postgres://u@h/db?sslmode=disable", "s").contains("&options="));
    }
}
