//! Database and Redis URLs without their passwords, for messages and logs.

/// Query parameters that carry a secret (libpq's `password` and `sslpassword`).
const SECRET_PARAMETERS: [&str; 2] = ["password", "sslpassword"];

/// The URL without its passwords, for messages: the one in the user info and any in the
/// query string.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut redacted = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => match base[scheme + 3..at].split_once(':') {
            Some((user, _password)) => {
                format!("{}{user}:***{}", &base[..scheme + 3], &base[at..])
            }
            None => base.to_owned(),
        },
        _ => base.to_owned(),
    };
    if let Some(query) = query {
        redacted.push('?');
        redacted.push_str(&redact_query(query));
    }
    redacted
}

fn redact_query(query: &str) -> String {
    let pairs = query.split('&').map(|pair| match pair.split_once('=') {
        Some((name, _)) if SECRET_PARAMETERS.contains(&name.to_ascii_lowercase().as_str()) => {
            format!("{name}=***")
        }
        _ => pair.to_owned(),
    });
    pairs.collect::<Vec<_>>().join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("sqlite://x.db"), "sqlite://x.db");
        assert_eq!(
            redact("postgres://u@h/db?sslmode=require&password=hunter2&PassWord=x"),
            "postgres://u@h/db?sslmode=require&password=***&PassWord=***"
        );
        assert_eq!(
            redact("postgres://u:pw@h/db?application_name=a"),
            "postgres://u:***@h/db?application_name=a"
        );
    }
}
