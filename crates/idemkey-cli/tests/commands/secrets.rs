//! Secrets stay out of the command's output: passwords in database URLs, token
//! secrets from the environment in `--help`, malformed tokens in errors; and two actors
//! cannot share one token secret.

use std::process::{Command, Output};

use crate::IDEMKEY;

fn idemkey(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(IDEMKEY);
    command
        .args(args)
        .env_remove("IDEMKEY_TOKENS")
        .env_remove("IDEMKEY_DATABASE_URL");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[idemkey_test_support::test]
fn a_password_in_the_query_string_is_not_printed() {
    // An unknown `sslmode` fails before connecting, and the error names the URL.
    let url = "postgres://app@127.0.0.1:1/db?sslmode=bogus&password=hunter2";
    let output = idemkey(&["sweep", "--database-url", url], &[]);
    assert!(!output.status.success());
    let printed = text(&output);
    assert!(
        printed.contains("127.0.0.1:1/db?sslmode=bogus&password=***"),
        "{printed}"
    );
    assert!(!printed.contains("hunter2"), "{printed}");
}

#[idemkey_test_support::test]
fn help_does_not_print_secrets_from_the_environment() {
    let env = [
        ("IDEMKEY_TOKENS", "alice=tok3n-in-env"),
        ("IDEMKEY_DATABASE_URL", "postgres://app:pa55word@db/app"),
    ];
    let output = idemkey(&["serve", "--help"], &env);
    assert!(output.status.success());
    let printed = text(&output);
    assert!(!printed.contains("tok3n-in-env"), "{printed}");
    assert!(!printed.contains("pa55word"), "{printed}");
}

#[idemkey_test_support::test]
fn a_malformed_token_is_not_echoed() {
    let output = idemkey(&["serve", "--token", "s3cret-without-an-actor"], &[]);
    assert!(!output.status.success());
    let printed = text(&output);
    assert!(printed.contains("ACTOR=SECRET"), "{printed}");
    assert!(!printed.contains("s3cret-without-an-actor"), "{printed}");
}

#[idemkey_test_support::test]
fn two_actors_with_one_secret_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &url,
        "--token",
        "alice=shared-s3cret",
        "--token",
        "bob=shared-s3cret",
    ];
    let output = idemkey(&args, &[]);
    assert!(!output.status.success(), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("alice") && stderr.contains("bob"),
        "{stderr}"
    );
    assert!(!stderr.contains("shared-s3cret"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}
