//! The database behind a test's servers: a SQLite file, a PostgreSQL schema of its own on the
//! server named by `IDEMKEY_TEST_PG_URL`, or a MySQL/MariaDB database of its own on the server
//! named by `IDEMKEY_TEST_MYSQL_URL`; and what the tests read back from it.

pub mod mysql;
pub mod pg;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sqlx::mysql::MySqlRow;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection, PgConnection, Row};

use crate::db::pg::Schema;
use crate::runner::needs::postgres_url;

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in the test's directory.
    Sqlite,
    /// A schema of its own on the test server.
    Postgres,
    /// A database of its own on the MySQL or MariaDB test server.
    Mysql,
}

/// A database of a test's own.
pub enum Db {
    /// The SQLite file.
    Sqlite(PathBuf),
    /// The PostgreSQL schema.
    Postgres(Schema),
    /// The name of the MySQL database (left for a later test to drop, see [`mysql`]).
    Mysql(String),
}

impl Db {
    /// A fresh database for `backend` in `dir` (a test on PostgreSQL needs `postgres`, one
    /// on MySQL `mysql`).
    pub async fn create(backend: Backend, dir: &Path) -> Self {
        match backend {
            Backend::Sqlite => Self::Sqlite(dir.join("notes.db")),
            Backend::Postgres => Self::Postgres(Schema::create(&postgres_url()).await),
            Backend::Mysql => Self::Mysql(mysql::create_database().await),
        }
    }

    /// A fresh database on the test server of `backend`, PostgreSQL or MySQL (a test on
    /// PostgreSQL needs `postgres`, one on MySQL `mysql`).
    pub async fn on_server(backend: Backend) -> Self {
        assert_ne!(backend, Backend::Sqlite, "SQLite has no server");
        // A server's database has no file: no directory for it.
        Self::create(backend, Path::new("")).await
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::Postgres(_) => Backend::Postgres,
            Self::Mysql(_) => Backend::Mysql,
        }
    }

    /// The URL servers are started with: PostgreSQL's carries the schema as `search_path`
    /// and as `application_name`, which tells the servers' connections from the test's;
    /// MySQL's names the test's database.
    pub fn url(&self) -> String {
        match self {
            Self::Sqlite(_) | Self::Mysql(_) => self.query_url(),
            Self::Postgres(schema) => {
                format!("{}&application_name={}", schema.url(), schema.name())
            }
        }
    }

    /// The URL of the test's own connections (PostgreSQL's without the servers'
    /// `application_name`).
    pub fn query_url(&self) -> String {
        match self {
            Self::Sqlite(path) => format!("sqlite://{}", path.display()),
            Self::Postgres(schema) => schema.url(),
            Self::Mysql(name) => mysql::url(name),
        }
    }

    /// Every note: (id, title).
    pub async fn notes(&self) -> Vec<(String, String)> {
        self.rows("SELECT id, title FROM notes ORDER BY title, id")
            .await
    }

    /// The type a number is cast to for [`Db::rows`]: MySQL has no `CAST(... AS TEXT)`, and
    /// PostgreSQL's `CHAR` is one character.
    fn text_type(&self) -> &'static str {
        match self {
            Self::Mysql(_) => "CHAR",
            Self::Sqlite(_) | Self::Postgres(_) => "TEXT",
        }
    }

    /// How many rows `table` has.
    pub async fn count(&self, table: &str) -> i64 {
        let text = self.text_type();
        let sql = format!("SELECT 'rows', CAST(count(*) AS {text}) FROM {table}");
        let rows = self.rows(&sql).await;
        rows[0].1.parse().unwrap()
    }

    /// Every record: (key, state), state 0 in flight, 1 released, 2 completed.
    pub async fn records(&self) -> Vec<(String, i64)> {
        let text = self.text_type();
        let sql = format!(
            "SELECT idem_key, CAST(state AS {text}) FROM idemkey_records ORDER BY idem_key"
        );
        let rows = self.rows(&sql).await;
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
            Self::Postgres(_) => {
                let mut conn = PgConnection::connect(&self.query_url()).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
            Self::Mysql(_) => {
                let mut conn = MySqlConnection::connect(&self.query_url()).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
        }
    }

    /// Two text columns of every row of `sql` (on MySQL, binary and integer columns are read
    /// as text too: scopes are `VARBINARY` there).
    pub async fn rows(&self, sql: &str) -> Vec<(String, String)> {
        let sql = AssertSqlSafe(sql.to_owned());
        match self {
            Self::Sqlite(_) => {
                let mut conn = sqlx::SqliteConnection::connect(&self.query_url())
                    .await
                    .unwrap();
                sqlx::query_as(sql).fetch_all(&mut conn).await.unwrap()
            }
            Self::Postgres(_) => {
                let mut conn = PgConnection::connect(&self.query_url()).await.unwrap();
                sqlx::query_as(sql).fetch_all(&mut conn).await.unwrap()
            }
            Self::Mysql(_) => {
                let mut conn = MySqlConnection::connect(&self.query_url()).await.unwrap();
                let rows = sqlx::query(sql).fetch_all(&mut conn).await.unwrap();
                rows.iter()
                    .map(|row| (mysql_text(row, 0), mysql_text(row, 1)))
                    .collect()
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
            Self::Postgres(_) => format!(
                "CREATE FUNCTION fail_note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 IF NEW.title = '{title}' THEN RAISE EXCEPTION 'injected'; END IF; \
                 RETURN NEW; END $$; CREATE TRIGGER fail_note BEFORE INSERT ON notes \
                 FOR EACH ROW EXECUTE FUNCTION fail_note()"
            ),
            Self::Mysql(_) => format!(
                "CREATE TRIGGER fail_note BEFORE INSERT ON notes FOR EACH ROW BEGIN \
                 IF NEW.title = '{title}' THEN \
                 SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected'; END IF; END"
            ),
        };
        self.execute(&sql).await;
    }

    /// Undoes [`Db::fail_inserts_titled`].
    pub async fn allow_inserts(&self) {
        self.execute(match self {
            Self::Sqlite(_) | Self::Mysql(_) => "DROP TRIGGER fail_note",
            Self::Postgres(_) => "DROP TRIGGER fail_note ON notes; DROP FUNCTION fail_note()",
        })
        .await;
    }

    /// Whether `key`'s record is in flight with a lease that has not run out, by the
    /// database's clock.
    pub async fn lease_alive(&self, key: &str) -> bool {
        let now = match self {
            Self::Sqlite(_) => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
            Self::Postgres(_) => "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            // The store's own clock: milliseconds of the statement's UTC time.
            Self::Mysql(_) => {
                "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"
            }
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

/// Column `at` of a MySQL row as text, whatever its type: text, bytes (read as UTF-8) or an
/// integer.
fn mysql_text(row: &MySqlRow, at: usize) -> String {
    if let Ok(text) = row.try_get::<String, _>(at) {
        return text;
    }
    if let Ok(bytes) = row.try_get::<Vec<u8>, _>(at) {
        return String::from_utf8(bytes).unwrap();
    }
    row.try_get::<i64, _>(at).unwrap().to_string()
}

/// Counts the rows of a table of a server's SQLite database.
pub async fn count_rows(db: &Path, table: &str) -> i64 {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let count = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    count
}

/// The notes of a server's SQLite database, by title: each key's note ids.
pub async fn notes_by_title(db: &Path) -> BTreeMap<String, Vec<String>> {
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT title, id FROM notes")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    by_title(rows)
}

/// `(title, id)` rows of the notes table, grouped: each key's note ids.
pub fn by_title(rows: Vec<(String, String)>) -> BTreeMap<String, Vec<String>> {
    let mut by_title = BTreeMap::<String, Vec<String>>::new();
    for (title, id) in rows {
        by_title.entry(title).or_default().push(id);
    }
    by_title
}
