//! What the kernel tells of a server's TCP sockets (Linux, `/proc/net/tcp`): how many
//! connections it has accepted, so that a test can order its clients by what the server did
//! rather than by sleeping.

use std::net::SocketAddr;

/// The connections to `addr` that its server has accepted and not closed. A connection the
/// kernel completed but the server has not accepted yet (still in the listen queue) belongs
/// to no file: its inode reads 0.
pub fn accepted(addr: SocketAddr) -> usize {
    let table = if addr.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let text = std::fs::read_to_string(table).unwrap();
    text.lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = fields[1].rsplit_once(':').map(|(_, port)| port);
            let port = port.and_then(|port| u16::from_str_radix(port, 16).ok());
            // State 01 is ESTABLISHED; field 9 the socket's inode.
            port == Some(addr.port()) && fields[3] == "01" && fields[9] != "0"
        })
        .count()
}

/// Waits until `addr`'s server has accepted `count` connections; panics after 60 s.
pub async fn until_accepted(addr: SocketAddr, count: usize) {
    let what = format!("{count} connections accepted on {addr}");
    crate::wait_until(&what, 6000, || async { accepted(addr) >= count }).await;
}
