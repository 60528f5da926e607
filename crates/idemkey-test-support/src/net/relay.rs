//! A test-only TCP relay between `idemkey serve` and PostgreSQL or MySQL that can lose one
//! reply after the server has acted on the request: the fault a network partition or a proxy
//! restart causes at the worst moment, which `pg_terminate_backend` or `KILL` cannot (they
//! drop the connection *before* the server acts). The triggers match bytes of the wire
//! protocol, which must be plain: no TLS between the relay's ends.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The reply to lose next.
#[derive(Clone, Debug)]
pub enum Trigger {
    /// The server's reply to the first client message containing these bytes (PostgreSQL
    /// and MySQL send it only once they have acted: for `COMMIT`, once the commit is
    /// durable). [`simple_query`] and [`com_query`] make the message of a statement.
    ReplyTo(Vec<u8>),
    /// The `nth` (from 1) server reply containing these bytes.
    NthReplyWith(Vec<u8>, usize),
}

/// A running relay; connections made to [`Relay::addr`] reach `upstream`.
#[derive(Clone)]
pub struct Relay {
    /// Where the relay listens.
    pub addr: SocketAddr,
    armed: Arc<Mutex<Option<Trigger>>>,
    lost: Arc<Mutex<usize>>,
}

impl Relay {
    /// Listens on a free local port and relays every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Self {
            addr: listener.local_addr().unwrap(),
            armed: Arc::default(),
            lost: Arc::default(),
        };
        let accepting = relay.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                tokio::spawn(accepting.clone().pump(client, server));
            }
        });
        relay
    }

    /// Loses the next reply that `trigger` names.
    pub fn arm(&self, trigger: Trigger) {
        *self.armed.lock().unwrap() = Some(trigger);
    }

    /// How many replies were lost so far.
    pub fn lost(&self) -> usize {
        *self.lost.lock().unwrap()
    }

    /// Relays one connection until either side closes, or a reply is lost (then both close).
    async fn pump(self, client: TcpStream, server: TcpStream) {
        let (mut client_rx, mut client_tx) = client.into_split();
        let (mut server_rx, mut server_tx) = server.into_split();
        // Set when this connection sent the message whose reply is to be lost.
        let doomed = Arc::new(Mutex::new(false));
        let upstream = {
            let (relay, doomed) = (self.clone(), doomed.clone());
            async move {
                let mut buf = vec![0; 64 * 1024];
                while let Ok(n) = client_rx.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if relay.sent_trigger(&buf[..n]) {
                        *doomed.lock().unwrap() = true;
                    }
                    if server_tx.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        };
        let downstream = async move {
            let mut buf = vec![0; 64 * 1024];
            while let Ok(n) = server_rx.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let lose = std::mem::take(&mut *doomed.lock().unwrap()) || self.replied(&buf[..n]);
                if lose {
                    *self.lost.lock().unwrap() += 1;
                    return;
                }
                if client_tx.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        };
        // The first side to end ends the connection: dropping both halves closes both sockets.
        tokio::select! {
            () = upstream => {}
            () = downstream => {}
        }
    }

    /// Whether a client message carries the armed [`Trigger::ReplyTo`] (then disarmed).
    fn sent_trigger(&self, bytes: &[u8]) -> bool {
        let mut armed = self.armed.lock().unwrap();
        let hit = matches!(&*armed, Some(Trigger::ReplyTo(needle)) if contains(bytes, needle));
        if hit {
            *armed = None;
        }
        hit
    }

    /// Whether a server reply is the armed [`Trigger::NthReplyWith`] (then disarmed).
    fn replied(&self, bytes: &[u8]) -> bool {
        let mut armed = self.armed.lock().unwrap();
        let Some(Trigger::NthReplyWith(needle, nth)) = &mut *armed else {
            return false;
        };
        if !contains(bytes, needle) {
            return false;
        }
        if *nth > 1 {
            *nth -= 1;
            return false;
        }
        *armed = None;
        true
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// A PostgreSQL simple-query message for `sql`, as sqlx sends `COMMIT`.
pub fn simple_query(sql: &str) -> Vec<u8> {
    let len = u32::try_from(4 + sql.len() + 1).unwrap();
    let mut message = vec![b'Q'];
    message.extend_from_slice(&len.to_be_bytes());
    message.extend_from_slice(sql.as_bytes());
    message.push(0);
    message
}

/// A MySQL `COM_QUERY` packet for `sql`, as sqlx sends `COMMIT`: three bytes of length
/// (little-endian), the sequence number 0 that begins a command, the command byte 0x03, then
/// the text.
pub fn com_query(sql: &str) -> Vec<u8> {
    let len = u32::try_from(1 + sql.len()).unwrap();
    assert!(len < 1 << 24, "one packet holds less than 16 MiB");
    let mut packet = len.to_le_bytes()[..3].to_vec();
    packet.extend_from_slice(&[0, 0x03]);
    packet.extend_from_slice(sql.as_bytes());
    packet
}

/// `url` (`scheme://[user@]host[:port][/path][?query]`) with its host and port replaced by
/// `relay`'s: the same database, reached through the relay.
pub fn through(url: &str, relay: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"));
    format!("{scheme}://{}{relay}{path}", user.unwrap_or_default())
}

/// The server `url` names, at `default_port` when it names none: where a relay leads.
pub fn upstream(url: &str, default_port: u16) -> SocketAddr {
    let rest = url.split_once("://").unwrap().1;
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    };
    std::net::ToSocketAddrs::to_socket_addrs(&host)
        .unwrap()
        .next()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mysql_commit_is_one_com_query_packet() {
        assert_eq!(com_query("COMMIT"), b"\x07\0\0\0\x03COMMIT");
    }

    #[test]
    fn a_url_through_the_relay_keeps_its_user_database_and_options() {
        let relay = SocketAddr::from(([127, 0, 0, 1], 4000));
        let url = "mysql://root@127.0.0.1:3306/t1?ssl-mode=disabled";
        assert_eq!(
            through(url, relay),
            "mysql://root@127.0.0.1:4000/t1?ssl-mode=disabled"
        );
        assert_eq!(upstream(url, 3306).port(), 3306);
        assert_eq!(upstream("mysql://db@127.0.0.1/t1", 3306).port(), 3306);
    }
}
