//! A TCP proxy between supervisors and the gateway that partitions the network on command.
//!
//! Each connection a supervisor opens to the proxy is forwarded to the gateway's port. A
//! partition stops forwarding bytes in one direction or both while both sockets stay open, so
//! neither side sees a close or a reset: what a cable pulled between two hosts looks like, and
//! what only heartbeats (or HTTP/2 keepalive) can notice.
//!
//! The model of a heal: a direction of a connection that lost bytes while partitioned stays
//! broken for good (its bytes keep being discarded, its close is not passed on), because a
//! stream with a hole in it can never be read right again. A connection that carried nothing
//! in the partitioned direction meanwhile lost nothing and keeps working, and new connections
//! pass once the proxy is back to [`Partition::Pass`]. So after a partition both ends have to
//! find out by themselves that their connection is dead, which is exactly what is tested.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// What the proxy does with the bytes of its connections, old and new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partition {
    /// Forwards both directions.
    Pass,
    /// Discards both directions.
    Blackhole,
    /// Discards what supervisors send; the gateway's frames still arrive.
    DropToGateway,
    /// Discards what the gateway sends; the supervisors' frames still arrive.
    DropToSupervisor,
}

/// One direction of a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToGateway,
    ToSupervisor,
}

impl Partition {
    fn drops(self, direction: Direction) -> bool {
        match self {
            Self::Pass => false,
            Self::Blackhole => true,
            Self::DropToGateway => direction == Direction::ToGateway,
            Self::DropToSupervisor => direction == Direction::ToSupervisor,
        }
    }
}

/// Bytes the proxy discarded, per direction: a partition that discarded nothing tested
/// nothing.
#[derive(Debug, Default)]
pub struct Dropped {
    pub to_gateway: AtomicU64,
    pub to_supervisor: AtomicU64,
}

impl Dropped {
    fn count(&self, direction: Direction, bytes: usize) {
        let counter = match direction {
            Direction::ToGateway => &self.to_gateway,
            Direction::ToSupervisor => &self.to_supervisor,
        };
        counter.fetch_add(u64::try_from(bytes).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// (to the gateway, to the supervisors) so far.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.to_gateway.load(Ordering::Relaxed),
            self.to_supervisor.load(Ordering::Relaxed),
        )
    }
}

/// The running proxy; dropping it closes its listener and every connection.
pub struct FaultProxy {
    pub port: u16,
    mode: watch::Sender<Partition>,
    dropped: Arc<Dropped>,
    accept: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream_port` there. Call it
    /// inside a Tokio runtime.
    pub fn start(upstream_port: u16) -> Self {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let listener = TcpListener::from_std(listener).unwrap();
        let (mode, watching) = watch::channel(Partition::Pass);
        let dropped = Arc::new(Dropped::default());
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let accept = tokio::spawn(accept_loop(listener, upstream, watching, dropped.clone()));
        Self {
            port,
            mode,
            dropped,
            accept,
        }
    }

    /// Where supervisors connect to reach the gateway through the proxy.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Partitions (or heals, with [`Partition::Pass`]) from now on, on every connection.
    pub fn set(&self, partition: Partition) {
        self.mode.send_replace(partition);
    }

    pub fn dropped(&self) -> &Dropped {
        &self.dropped
    }
}

/// Owns every connection's tasks: aborted together when the proxy goes.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Partition>,
    dropped: Arc<Dropped>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((supervisor, _)) = accepted else { continue };
                connections.spawn(proxy(supervisor, upstream, mode.clone(), dropped.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn proxy(
    supervisor: TcpStream,
    upstream: SocketAddr,
    mode: watch::Receiver<Partition>,
    dropped: Arc<Dropped>,
) {
    // The gateway down (or restarting): the supervisor sees its connection close, as it
    // would connecting to the gateway itself.
    let Ok(gateway) = TcpStream::connect(upstream).await else {
        return;
    };
    supervisor.set_nodelay(true).ok();
    gateway.set_nodelay(true).ok();
    let (from_supervisor, to_supervisor) = supervisor.into_split();
    let (from_gateway, to_gateway) = gateway.into_split();
    tokio::join!(
        pump(
            from_supervisor,
            to_gateway,
            Direction::ToGateway,
            mode.clone(),
            dropped.clone()
        ),
        pump(
            from_gateway,
            to_supervisor,
            Direction::ToSupervisor,
            mode,
            dropped
        ),
    );
}

/// Forwards one direction until its source closes. Once it discarded bytes, it discards for
/// good and keeps the destination open without passing the close on.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    mode: watch::Receiver<Partition>,
    dropped: Arc<Dropped>,
) {
    let mut broken = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !broken && mode.borrow().drops(direction) {
            broken = true;
        }
        if broken {
            dropped.count(direction, n);
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
    if broken {
        // The close is lost with the rest: the other end keeps a socket that never speaks
        // again, until it gives up on it (or the proxy goes).
        let _kept_open = to;
        std::future::pending::<()>().await;
    } else {
        to.shutdown().await.ok();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server standing in for the gateway.
    async fn echo_server() -> u16 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = socket.split();
                    tokio::io::copy(&mut r, &mut w).await.ok();
                });
            }
        });
        port
    }

    async fn round_trip(stream: &mut TcpStream, bytes: &[u8]) -> Option<Vec<u8>> {
        stream.write_all(bytes).await.unwrap();
        let mut back = vec![0u8; bytes.len()];
        tokio::time::timeout(Duration::from_millis(300), stream.read_exact(&mut back))
            .await
            .ok()?
            .ok()?;
        Some(back)
    }

    #[tokio::test]
    async fn a_partition_discards_without_closing_and_only_new_connections_heal() {
        let proxy = FaultProxy::start(echo_server().await);
        let mut old = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert_eq!(
            round_trip(&mut old, b"ping").await.as_deref(),
            Some(&b"ping"[..])
        );

        proxy.set(Partition::Blackhole);
        assert_eq!(round_trip(&mut old, b"lost").await, None, "partitioned");
        assert!(proxy.dropped().snapshot().0 >= 4);

        proxy.set(Partition::Pass);
        assert_eq!(
            round_trip(&mut old, b"late").await,
            None,
            "a connection that lost bytes stays broken"
        );
        let mut new = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        assert_eq!(
            round_trip(&mut new, b"pong").await.as_deref(),
            Some(&b"pong"[..])
        );
    }

    #[tokio::test]
    async fn a_one_way_partition_drops_one_direction_only() {
        let proxy = FaultProxy::start(echo_server().await);
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        proxy.set(Partition::DropToSupervisor);
        // The request reaches the echo server; its answer is what is lost.
        assert_eq!(round_trip(&mut stream, b"abcd").await, None);
        let (to_gateway, to_supervisor) = proxy.dropped().snapshot();
        assert_eq!(to_gateway, 0);
        assert_eq!(to_supervisor, 4);
    }
}
