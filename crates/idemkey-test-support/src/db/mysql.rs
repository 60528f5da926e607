//! MySQL and MariaDB for the tests: a database of a test's own on the server named by
//! `IDEMKEY_TEST_MYSQL_URL`, so tests run in parallel on one server.
//!
//! A test's databases are named `idemkey_t_<unix seconds>_<random>`. They are not dropped
//! when the test ends (its pool may still be closing): the next test that creates one drops
//! those old enough that no connection uses any more.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::mysql::MySqlConnectOptions;
use sqlx::{AssertSqlSafe, Connection, MySqlConnection};

use crate::runner::needs::mysql_url;

/// The test databases' prefix.
const PREFIX: &str = "idemkey_t_";

/// A test's database is dropped by the next test that starts once it is this old, so one
/// whose pool is still connecting is never taken for an ended one.
const REAP_AFTER_SECS: u64 = 60;

/// A fresh database on the server of [`mysql_url`]: its name.
pub async fn create_database() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let random = uuid::Uuid::new_v4().simple().to_string();
    let name = format!("{PREFIX}{secs}_{}", &random[..12]);
    let mut admin = MySqlConnection::connect(&mysql_url()).await.unwrap();
    reap(&mut admin, secs).await;
    let create = format!("CREATE DATABASE {name} CHARACTER SET utf8mb4");
    sqlx::raw_sql(AssertSqlSafe(create))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    name
}

/// Connection options for the database `name` on the server of [`mysql_url`].
pub fn options(name: &str) -> MySqlConnectOptions {
    let options: MySqlConnectOptions = mysql_url().parse().unwrap();
    options.database(name)
}

/// The URL of the database `name` on the server of [`mysql_url`].
pub fn url(name: &str) -> String {
    with_database(&mysql_url(), name)
}

/// A database of a caller's own on a server it names (not the test server), made and dropped
/// when the caller says: `idemkey-bench`'s, named after its run.
pub struct Named {
    base: String,
    name: String,
}

impl Named {
    /// Creates the database `name` (utf8mb4) on the server at `base`; the user needs
    /// `CREATE`.
    pub async fn create(base: &str, name: &str) -> Result<Self, sqlx::Error> {
        let mut admin = MySqlConnection::connect(base).await?;
        let create = format!("CREATE DATABASE {name} CHARACTER SET utf8mb4");
        sqlx::raw_sql(AssertSqlSafe(create))
            .execute(&mut admin)
            .await?;
        let _ = admin.close().await;
        Ok(Self {
            base: base.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The URL of the database: `base` naming it.
    pub fn url(&self) -> String {
        with_database(&self.base, &self.name)
    }

    /// Drops the database; the user needs `DROP`.
    pub async fn drop_database(self) -> Result<(), sqlx::Error> {
        let mut admin = MySqlConnection::connect(&self.base).await?;
        let drop = format!("DROP DATABASE {}", self.name);
        sqlx::raw_sql(AssertSqlSafe(drop))
            .execute(&mut admin)
            .await?;
        let _ = admin.close().await;
        Ok(())
    }
}

/// `base` with its path replaced by `name`, its query (if any) kept.
pub fn with_database(base: &str, name: &str) -> String {
    let (base, query) = match base.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (base, String::new()),
    };
    let authority = base.find("://").map_or(0, |at| at + 3);
    let server = match base[authority..].find('/') {
        Some(slash) => &base[..authority + slash],
        None => base,
    };
    format!("{server}/{name}{query}")
}

/// Drops the databases of tests that have ended: old enough, and no connection left in
/// them. Best effort: another test may be dropping the same one.
async fn reap(admin: &mut MySqlConnection, now: u64) {
    let ended: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(SCHEMA_NAME AS CHAR) FROM information_schema.SCHEMATA s \
         WHERE SCHEMA_NAME LIKE 'idemkey\\_t\\_%' AND NOT EXISTS \
         (SELECT 1 FROM information_schema.PROCESSLIST p WHERE p.DB = s.SCHEMA_NAME)",
    )
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for name in ended {
        let created = name[PREFIX.len()..]
            .split('_')
            .next()
            .and_then(|secs| secs.parse::<u64>().ok());
        let plain = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if plain && created.is_some_and(|created| now.saturating_sub(created) >= REAP_AFTER_SECS) {
            let drop = format!("DROP DATABASE IF EXISTS {name}");
            let _ = sqlx::raw_sql(AssertSqlSafe(drop))
                .execute(&mut *admin)
                .await;
        }
    }
}

/// Every note of the MySQL database at `url`, by title (each title's ids): what the fault
/// tests count after the database failed under the service.
pub async fn notes_by_title(url: &str) -> BTreeMap<String, Vec<String>> {
    let mut conn = MySqlConnection::connect(url).await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as("SELECT title, id FROM notes")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    crate::db::by_title(rows)
}

/// How many notes titled `title` the MySQL database at `url` holds.
pub async fn notes_titled(url: &str, title: &str) -> i64 {
    let mut conn = MySqlConnection::connect(url).await.unwrap();
    let count = sqlx::query_scalar("SELECT count(*) FROM notes WHERE title = ?")
        .bind(title)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    count
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_database_url_keeps_the_server_and_the_query() {
        let url = "mysql://root@127.0.0.1:3306/test";
        assert_eq!(with_database(url, "t1"), "mysql://root@127.0.0.1:3306/t1");
        let url = "mysql://u:p@db:3306?ssl-mode=disabled";
        assert_eq!(
            with_database(url, "t1"),
            "mysql://u:p@db:3306/t1?ssl-mode=disabled"
        );
    }

    #[test]
    fn a_database_url_without_a_path_gets_one() {
        assert_eq!(with_database("mysql://h:3306", "b"), "mysql://h:3306/b");
        assert_eq!(
            with_database("mysql://u:p@h/db?ssl-mode=disabled", "b"),
            "mysql://u:p@h/b?ssl-mode=disabled"
        );
    }
}
