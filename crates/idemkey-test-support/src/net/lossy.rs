//! A test-only lossy TCP relay for HTTP/1.1 between a retrying client and `idemkey serve` or
//! `idemkey proxy`: it loses answers after the server acted, cuts them off, resets or refuses
//! connections, and survives a server that was killed, so that a test can show the client's
//! retries never make the server act twice.
//!
//! # What it does, exactly
//!
//! - **Connections.** Each accepted connection gets a number, 1, 2, … in accept order. With
//!   probability [`Faults::reset_on_accept`] it is reset at once (`RST`, never forwarded).
//!   Otherwise the relay connects to the upstream; if nothing listens there (the server was
//!   killed), the client's connection is closed without an answer ([`Counts::upstream_down`]).
//! - **Requests.** Client bytes that arrive on a fresh connection, or after the server has
//!   sent bytes since the previous request began, begin a new request: HTTP/1.1 clients,
//!   reqwest and hyper among them, send a request only once the previous answer is complete
//!   and never pipeline. Each request gets a fate. With probability [`Faults::lose_answer`]
//!   its answer is lost, with [`Faults::cut_answer`] it is cut, otherwise it is relayed. So a
//!   request on a kept-alive, reused connection can lose its answer too.
//! - **Lost answer.** The request's bytes all reach the server. When the server's first bytes
//!   of the answer arrive, the server has acted. The relay then closes both connections
//!   without forwarding a byte ([`Counts::answers_lost`]).
//! - **Cut answer.** The same, except that the first half (rounded down) of the first chunk
//!   the server sent is forwarded before both connections close ([`Counts::answers_cut`]).
//!   The client sees the start of an answer that never completes.
//! - **Refusal.** [`LossyRelay::refuse`] and [`LossyRelay::refuse_for`] close the listener,
//!   so that connecting fails with `ECONNREFUSED`, then bind the same address again
//!   (`SO_REUSEADDR`), when asked ([`LossyRelay::reopen`]) or when the time is up.
//!   Connections already accepted are left alone; those the kernel had completed but the
//!   relay not yet accepted are reset with the listener.
//! - **Server side.** When the server closes or resets a connection, the relay closes the
//!   client's. When the client half-closes after its request, the relay half-closes towards
//!   the server and still relays the answer.
//!
//! A fault whose answer never starts (the server died first) is not counted as lost: the
//! server did not answer. The interim `100 Continue` is an answer's first bytes too, so a
//! request sent with `Expect: 100-continue` loses its answer before the server acted;
//! reqwest does not send it.
//!
//! # Reproducible campaigns
//!
//! Each fate is a pure function of [`Faults::seed`], the connection's number and the
//! request's number on it (SplitMix64 mixing). So a campaign with the same seed and the
//! same traffic meets the same faults, however the tasks are scheduled, and rand's `StdRng`
//! (whose algorithm may change between rand's versions) is not needed.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// How often each fault happens, as probabilities from 0 to 1, and the seed that picks them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Faults {
    /// A request's answer is lost after the server acted.
    pub lose_answer: f64,
    /// A request's answer is cut after its first bytes. With `lose_answer`, at most 1.
    pub cut_answer: f64,
    /// A connection is reset as soon as it is accepted.
    pub reset_on_accept: f64,
    /// Picks which connections and requests meet the faults.
    pub seed: u64,
}

impl Faults {
    /// No faults: every connection and answer is relayed.
    pub const fn none() -> Self {
        Self {
            lose_answer: 0.0,
            cut_answer: 0.0,
            reset_on_accept: 0.0,
            seed: 0,
        }
    }

    /// Panics unless every probability is between 0 and 1, and losing plus cutting is too.
    fn check(&self) {
        let probabilities = [
            self.lose_answer,
            self.cut_answer,
            self.reset_on_accept,
            self.lose_answer + self.cut_answer,
        ];
        assert!(
            probabilities.iter().all(|p| (0.0..=1.0).contains(p)),
            "fault probabilities must lie in 0..=1, lose_answer + cut_answer too: {self:?}"
        );
    }

    /// Whether connection number `connection` is reset when accepted.
    fn resets(&self, connection: u64) -> bool {
        draw(self.seed, connection, 0) < self.reset_on_accept
    }

    /// The fate of request number `request` (from 1) on connection number `connection`.
    fn fate(&self, connection: u64, request: u64) -> Fate {
        let x = draw(self.seed, connection, request);
        if x < self.lose_answer {
            Fate::Lose
        } else if x < self.lose_answer + self.cut_answer {
            Fate::Cut
        } else {
            Fate::Relay
        }
    }
}

/// A number in `0..1`, the same for the same arguments.
fn draw(seed: u64, connection: u64, request: u64) -> f64 {
    let bits = mix(mix(mix(seed) ^ connection) ^ request);
    // The top 53 bits fit f64's mantissa exactly, so every value is below 1.
    (bits >> 11) as f64 / (1_u64 << 53) as f64
}

/// SplitMix64's finalizer: every input bit moves about half the output bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What happens to one request's answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Fate {
    #[default]
    Relay,
    Lose,
    Cut,
}

/// What the relay did so far, for a test's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Connections accepted, reset ones included.
    pub connections: u64,
    /// Requests begun on relayed connections.
    pub requests: u64,
    /// Answers the server began and the client never saw a byte of.
    pub answers_lost: u64,
    /// Answers the client saw only the start of.
    pub answers_cut: u64,
    /// Connections reset as soon as they were accepted.
    pub resets: u64,
    /// Connections closed unanswered because the upstream refused to connect.
    pub upstream_down: u64,
    /// Times the listener was closed so that connecting was refused.
    pub refusals: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connections, {} requests, {} answers lost, {} answers cut, {} resets, \
             {} upstream down, {} refusals",
            self.connections,
            self.requests,
            self.answers_lost,
            self.answers_cut,
            self.resets,
            self.upstream_down,
            self.refusals
        )
    }
}

/// What the relay's tasks share with its handle.
struct Shared {
    upstream: Mutex<SocketAddr>,
    faults: Mutex<Faults>,
    counts: Mutex<Counts>,
}

impl Shared {
    fn faults(&self) -> Faults {
        *self.faults.lock().unwrap()
    }

    fn count(&self, what: impl FnOnce(&mut Counts)) {
        what(&mut self.counts.lock().unwrap());
    }
}

/// What the handle asks of the accepting task; each is answered once done.
enum Command {
    /// Close the listener, until reopened or for this long.
    Refuse(Option<Duration>, oneshot::Sender<()>),
    /// Listen again now.
    Reopen(oneshot::Sender<()>),
}

/// A running relay. Dropping it closes the listener and every connection.
pub struct LossyRelay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

impl LossyRelay {
    /// Listens on a free port of 127.0.0.1 and relays each connection to `upstream`, with
    /// `faults`.
    ///
    /// # Panics
    ///
    /// If a probability of `faults` is out of range, or no port is free.
    pub async fn start(upstream: SocketAddr, faults: Faults) -> Self {
        faults.check();
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            faults: Mutex::new(faults),
            counts: Mutex::default(),
        });
        let (commands, orders) = mpsc::unbounded_channel();
        tokio::spawn(accept(addr, listener, shared.clone(), orders));
        Self {
            addr,
            shared,
            commands,
        }
    }

    /// Where clients connect: the same address through refusals.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the relay did so far.
    pub fn counts(&self) -> Counts {
        *self.shared.counts.lock().unwrap()
    }

    /// Uses `faults` from the next decision on: the next connection accepted, the next
    /// request begun. A fate already given to a request stands.
    ///
    /// # Panics
    ///
    /// If a probability is out of range.
    pub fn set_faults(&self, faults: Faults) {
        faults.check();
        *self.shared.faults.lock().unwrap() = faults;
    }

    /// Relays the connections accepted from now on to `upstream` (a server restarted on
    /// another port).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *self.shared.upstream.lock().unwrap() = upstream;
    }

    /// Refuses connections until [`LossyRelay::reopen`]; returns once the port refuses.
    pub async fn refuse(&self) {
        self.ask(|done| Command::Refuse(None, done)).await;
    }

    /// Refuses connections for `period`, or until [`LossyRelay::reopen`]; returns once the
    /// port refuses, without waiting for the period to end.
    pub async fn refuse_for(&self, period: Duration) {
        self.ask(|done| Command::Refuse(Some(period), done)).await;
    }

    /// Accepts connections again; returns once the port listens.
    pub async fn reopen(&self) {
        self.ask(Command::Reopen).await;
    }

    async fn ask(&self, command: impl FnOnce(oneshot::Sender<()>) -> Command) {
        let (done, doing) = oneshot::channel();
        // The accepting task ends only when this handle is dropped.
        let _ = self.commands.send(command(done));
        let _ = doing.await;
    }
}

/// A listener on `addr` that may take the address again at once after the last one closed.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The accepting task: numbers and serves connections, and obeys the handle's commands.
async fn accept(
    addr: SocketAddr,
    mut listener: TcpListener,
    shared: Arc<Shared>,
    mut orders: mpsc::UnboundedReceiver<Command>,
) {
    // Owns every connection's task, so that dropping the relay closes them all.
    let mut connections = JoinSet::new();
    loop {
        let order = tokio::select! {
            accepted = listener.accept() => {
                if let Ok((client, _)) = accepted {
                    connections.spawn(open(client, shared.clone()));
                }
                while connections.try_join_next().is_some() {}
                continue;
            }
            order = orders.recv() => order,
        };
        match order {
            None => return,
            Some(Command::Reopen(done)) => {
                let _ = done.send(());
            }
            Some(Command::Refuse(period, done)) => {
                drop(listener);
                shared.count(|counts| counts.refusals += 1);
                let _ = done.send(());
                let reopened = match refusing(period, &mut orders).await {
                    Reopen::Dropped => return,
                    Reopen::TimeUp => None,
                    Reopen::Asked(done) => Some(done),
                };
                let Some(again) = rebind(addr, &orders).await else {
                    return;
                };
                listener = again;
                if let Some(done) = reopened {
                    let _ = done.send(());
                }
            }
        }
    }
}

/// Why a refusal ends.
enum Reopen {
    TimeUp,
    Asked(oneshot::Sender<()>),
    Dropped,
}

/// Waits while the port refuses; a new refusal starts its period from now.
async fn refusing(
    mut period: Option<Duration>,
    orders: &mut mpsc::UnboundedReceiver<Command>,
) -> Reopen {
    loop {
        let order = tokio::select! {
            () = sleep(period) => return Reopen::TimeUp,
            order = orders.recv() => order,
        };
        match order {
            None => return Reopen::Dropped,
            Some(Command::Reopen(done)) => return Reopen::Asked(done),
            Some(Command::Refuse(longer, done)) => {
                period = longer;
                let _ = done.send(());
            }
        }
    }
}

/// Sleeps for `period`, or for ever.
async fn sleep(period: Option<Duration>) {
    match period {
        Some(period) => tokio::time::sleep(period).await,
        None => std::future::pending().await,
    }
}

/// Binds `addr` again, retrying while another socket holds it; `None` once the relay is
/// dropped.
async fn rebind(
    addr: SocketAddr,
    orders: &mpsc::UnboundedReceiver<Command>,
) -> Option<TcpListener> {
    loop {
        if orders.is_closed() {
            return None;
        }
        if let Ok(listener) = bind(addr) {
            return Some(listener);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Numbers a new connection, then resets it, closes it (upstream down) or relays it.
async fn open(client: TcpStream, shared: Arc<Shared>) {
    let mut number = 0;
    shared.count(|counts| {
        counts.connections += 1;
        number = counts.connections;
    });
    if shared.faults().resets(number) {
        // Linger zero: the close sends RST, not FIN.
        let _ = client.set_zero_linger();
        shared.count(|counts| counts.resets += 1);
        return;
    }
    let upstream = *shared.upstream.lock().unwrap();
    let Ok(server) = TcpStream::connect(upstream).await else {
        shared.count(|counts| counts.upstream_down += 1);
        return;
    };
    // Each chunk goes on as it came: Nagle's delay would only slow the tests down.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    relay(client, server, number, &shared).await;
}

/// The request under way on one connection.
#[derive(Default)]
struct Exchange {
    /// Its number on the connection, from 1; 0 before the first.
    request: u64,
    /// Whether the server has sent bytes since it began.
    answering: bool,
    fate: Fate,
}

/// Relays one connection until the server's side ends or an answer is lost or cut.
async fn relay(client: TcpStream, server: TcpStream, connection: u64, shared: &Shared) {
    let (client_rx, client_tx) = client.into_split();
    let (server_rx, server_tx) = server.into_split();
    let exchange = Mutex::new(Exchange::default());
    let requests = forward_requests(client_rx, server_tx, connection, &exchange, shared);
    let answers = forward_answers(server_rx, client_tx, &exchange, shared);
    // Returning drops all four halves, which closes both connections. A client that
    // half-closed (`Ok`) still waits for its answer.
    tokio::select! {
        () = answers => {}
        Err(_) = requests => {}
    }
}

/// Client to server: gives each request its fate as it begins; half-closes on the
/// client's end of stream.
async fn forward_requests(
    mut client: OwnedReadHalf,
    mut server: OwnedWriteHalf,
    connection: u64,
    exchange: &Mutex<Exchange>,
    shared: &Shared,
) -> io::Result<()> {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = client.read(&mut buf).await?;
        if n == 0 {
            return server.shutdown().await;
        }
        begin_request(exchange, connection, shared);
        server.write_all(&buf[..n]).await?;
    }
}

/// Starts a new request if these client bytes begin one.
fn begin_request(exchange: &Mutex<Exchange>, connection: u64, shared: &Shared) {
    let mut exchange = exchange.lock().unwrap();
    if exchange.request > 0 && !exchange.answering {
        return;
    }
    exchange.request += 1;
    exchange.answering = false;
    exchange.fate = shared.faults().fate(connection, exchange.request);
    shared.count(|counts| counts.requests += 1);
}

/// Server to client: relays answers, or loses or cuts the one whose fate says so.
async fn forward_answers(
    mut server: OwnedReadHalf,
    mut client: OwnedWriteHalf,
    exchange: &Mutex<Exchange>,
    shared: &Shared,
) {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = match server.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let fate = {
            let mut exchange = exchange.lock().unwrap();
            exchange.answering = true;
            exchange.fate
        };
        match fate {
            Fate::Relay => {}
            Fate::Lose => return shared.count(|counts| counts.answers_lost += 1),
            Fate::Cut => {
                shared.count(|counts| counts.answers_cut += 1);
                let _ = client.write_all(&buf[..n / 2]).await;
                return;
            }
        }
        if client.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
    let _ = client.shutdown().await;
}
