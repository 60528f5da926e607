//! PostgreSQL tools: dropping the app's connections mid-request, and holding its business
//! write inside the database (an advisory lock in a trigger) so a test can act meanwhile.

use sqlx::{Connection, PgConnection};

use super::db::Db;
use super::wait_until;

fn parts(db: &Db) -> (&str, &str) {
    match db {
        Db::Postgres { base, schema } => (base, schema),
        Db::Sqlite(_) => panic!("a PostgreSQL tool on SQLite"),
    }
}

/// The pids of the app's connections (named after its schema) that match `condition`.
pub async fn pids(db: &Db, condition: &str) -> Vec<i32> {
    let (base, schema) = parts(db);
    let sql =
        format!("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND {condition}");
    let mut conn = PgConnection::connect(base).await.unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(schema)
        .fetch_all(&mut conn)
        .await
        .unwrap()
}

/// Terminates the app's connections that match `condition` (`state = 'idle'`, ...), waits
/// until they are gone, and returns how many there were.
pub async fn terminate(db: &Db, condition: &str) -> usize {
    let (base, _) = parts(db);
    let pids = pids(db, condition).await;
    let mut conn = PgConnection::connect(base).await.unwrap();
    for pid in &pids {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let base = base.to_owned();
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
        let (base, _) = parts(db);
        let mut conn = PgConnection::connect(base).await.unwrap();
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
