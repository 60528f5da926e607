//! `idemkey-bench` on PostgreSQL works in a schema of its own, which it drops at the end, and
//! leaves `public` alone: seen in a database of the test's own, whose event triggers record
//! every object created and dropped.

use sqlx::{AssertSqlSafe, Connection, PgConnection};

use crate::runs::bench;

/// A table of what was created and dropped, filled by event triggers (database-wide: a
/// database of its own keeps other tests out of it).
const AUDIT: &str = r"
CREATE SCHEMA audit;
CREATE TABLE audit.ddl (happened text, kind text, name text, schema_name text);
CREATE FUNCTION audit.created() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
  FOR c IN SELECT * FROM pg_event_trigger_ddl_commands() LOOP
    INSERT INTO audit.ddl VALUES ('created', c.object_type, c.object_identity, c.schema_name);
  END LOOP;
END $$;
CREATE FUNCTION audit.dropped() RETURNS event_trigger LANGUAGE plpgsql AS $$
DECLARE d record;
BEGIN
  FOR d IN SELECT * FROM pg_event_trigger_dropped_objects() LOOP
    INSERT INTO audit.ddl VALUES ('dropped', d.object_type, d.object_identity, d.schema_name);
  END LOOP;
END $$;
CREATE EVENT TRIGGER audit_created ON ddl_command_end EXECUTE FUNCTION audit.created();
CREATE EVENT TRIGGER audit_dropped ON sql_drop EXECUTE FUNCTION audit.dropped();
";

/// One row of the audit: created or dropped, the object's kind, its name and its schema.
type Event = (String, String, String, Option<String>);

/// `url` with its database replaced by `database`.
fn on_database(url: &str, database: &str) -> String {
    let (url, query) = url
        .split_once('?')
        .map_or((url, None), |(u, q)| (u, Some(q)));
    let (server, _) = url.rsplit_once('/').expect("a database in the URL");
    match query {
        Some(query) => format!("{server}/{database}?{query}"),
        None => format!("{server}/{database}"),
    }
}

/// Runs a small bench against a new database with the audit, and returns what the audit
/// recorded and the tables left in `public`; the database is dropped before returning.
async fn audited_run(url: &str) -> (Vec<Event>, i64) {
    let database = format!("idemkey_audit_{}", uuid::Uuid::new_v4().simple());
    let mut admin = PgConnection::connect(url).await.unwrap();
    let create = format!("CREATE DATABASE {database}");
    sqlx::raw_sql(AssertSqlSafe(create))
        .execute(&mut admin)
        .await
        .unwrap();
    let audited = on_database(url, &database);
    let mut conn = PgConnection::connect(&audited).await.unwrap();
    sqlx::raw_sql(AUDIT).execute(&mut conn).await.unwrap();
    let run = audited.clone();
    let output = tokio::task::spawn_blocking(move || {
        bench(&[
            "create",
            "storm",
            "--requests",
            "20",
            "--concurrency",
            "2",
            "--storm-clients",
            "4",
            "--rounds",
            "2",
            "--database-url",
            &run,
        ])
    })
    .await
    .unwrap();
    let events: Vec<Event> = sqlx::query_as("SELECT * FROM audit.ddl")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let public: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let drop = format!("DROP DATABASE {database} WITH (FORCE)");
    sqlx::raw_sql(AssertSqlSafe(drop))
        .execute(&mut admin)
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("storm: keys with exactly one note"),
        "{stdout}"
    );
    (events, public)
}

#[idemkey_test_support::test(flavor = "multi_thread", worker_threads = 2, needs = [postgres])]
async fn postgres_gets_a_schema_of_its_own() {
    let url = idemkey_test_support::runner::needs::postgres_url();
    let (events, public) = audited_run(&url).await;
    let schemas: Vec<&str> = events
        .iter()
        .filter(|(happened, kind, ..)| happened == "created" && kind == "schema")
        .map(|(_, _, name, _)| name.as_str())
        .collect();
    let [schema] = schemas[..] else {
        panic!("one schema created: {events:?}");
    };
    assert!(schema.starts_with("idemkey_bench_"), "{schema}");
    let inside = |(happened, kind, _, of): &&Event| {
        happened == "created" && kind == "table" && of.as_deref() == Some(schema)
    };
    assert!(
        events.iter().any(|e| inside(&e)),
        "tables made in {schema}: {events:?}"
    );
    let dropped = (
        "dropped".to_owned(),
        "schema".to_owned(),
        schema.to_owned(),
        None,
    );
    assert!(events.contains(&dropped), "{schema} dropped: {events:?}");
    let in_public = |(.., of): &&Event| of.as_deref() == Some("public");
    assert!(
        !events.iter().any(|e| in_public(&e)),
        "public left alone: {events:?}"
    );
    assert_eq!(public, 0, "nothing left in public");
}
