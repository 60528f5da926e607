//! A raw TCP server that answers every request with the same hostile response, written by hand
//! because a well-behaved HTTP library refuses to send most of them.

use std::{io, net::SocketAddr, time::Duration};

use idemkey_check::CheckConfig;
use idemkey_test_support::net::raw::read_request;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// Bytes written per step of an endless body.
const STEP: usize = 64 * 1024;
/// Pause between two steps. The pacing (at most 64 MiB/s) does not change what the tests
/// assert; it keeps a regression — a checker without a body limit — from filling memory at
/// loopback speed before its request timeout fires.
const PACE: Duration = Duration::from_millis(1);

/// How the server misbehaves.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hostile {
    /// A chunked `201`: a one-byte chunk, then one claiming `ffffffffffffffff` bytes (the byte
    /// before it is what made the old size check overflow).
    HugeChunk,
    /// A `201` without a length whose body never ends: it streams until the client leaves.
    EndlessBody,
    /// A `201` head announcing a body, then silence until the client leaves.
    StalledBody,
    /// A `201` with a `Location` and exactly this body.
    Body(&'static [u8]),
}

/// A running hostile server.
pub(crate) struct HostileServer {
    addr: SocketAddr,
}

impl HostileServer {
    /// Starts a server answering every request as `hostile` says, on an ephemeral port.
    pub(crate) async fn start(hostile: Hostile) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                // A client that gives up mid-answer is the expected end of most connections.
                tokio::spawn(async move { drop(answer(stream, hostile).await) });
            }
        });
        Self { addr }
    }

    /// A configuration for this server's `/v1/notes`, with a burst of 2 and no list endpoint.
    pub(crate) fn config(&self) -> CheckConfig {
        let url = format!("http://{}/v1/notes", self.addr);
        CheckConfig::new(&url, r#"{"title":"a"}"#, r#"{"title":"b"}"#)
            .expect("config")
            .concurrency(2)
    }
}

/// Reads one request, then writes the hostile answer.
async fn answer(mut stream: TcpStream, hostile: Hostile) -> io::Result<()> {
    read_request(&mut stream).await?;
    match hostile {
        Hostile::HugeChunk => {
            let head = "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n";
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(b"1\r\n{\r\nffffffffffffffff\r\nabc").await
        }
        Hostile::EndlessBody => {
            let head = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n\r\n";
            stream.write_all(head.as_bytes()).await?;
            stream_forever(&mut stream).await
        }
        Hostile::StalledBody => {
            let head = "HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n{";
            stream.write_all(head.as_bytes()).await?;
            // Returns only once the client has closed its side.
            while stream.read(&mut [0; 64]).await? > 0 {}
            Ok(())
        }
        Hostile::Body(body) => {
            // `Connection: close`: the connection ends with this answer, and a client that
            // took it for kept alive would send its next request into a reset (seen under load).
            let head = format!(
                "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n\
                 Location: /v1/notes/1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body).await
        }
    }
}

/// Writes body bytes until the client goes away (the write fails).
async fn stream_forever(stream: &mut TcpStream) -> io::Result<()> {
    let step = vec![b' '; STEP];
    loop {
        stream.write_all(&step).await?;
        tokio::time::sleep(PACE).await;
    }
}
