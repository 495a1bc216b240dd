//! The fault proxy: a small TCP relay between one Steward replica and one database port that
//! can be cut, so a partition between that replica and the database is real TCP behaviour.
//!
//! [`Proxy::partition`] holds traffic both ways: bytes already in flight stay where they are,
//! nothing new is relayed, and new connections are accepted but never answered (a blackhole, as
//! a dropped route looks to the client: no refusal, no reset, only silence). [`Proxy::heal`]
//! first resets every connection that lived through the partition (TCP RST: the database may
//! have timed them out, and a held statement must not land late), then relays again. The
//! replica's driver sees what it would see on a real network: calls that hang until its own
//! deadline, then broken connections, then a working route.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// One relay buffer, in bytes: a PostgreSQL message of this size or less moves in one read.
const RELAY_BUFFER_BYTES: usize = 16 * 1024;
/// How long connecting to the database may take before the client's connection is dropped, in
/// milliseconds (the database is on loopback: a slow connect means it is down).
const UPSTREAM_CONNECT_MS: u64 = 5_000;

/// The proxy's state: open, or partitioned; `generation` grows at each heal, so a connection
/// knows whether it lived through a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    partitioned: bool,
    generation: u64,
}

/// A relay from a loopback port to `upstream`, switchable to a partition.
pub(crate) struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a fresh loopback port and relays every connection to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, watcher) = watch::channel(Mode {
            partitioned: false,
            generation: 0,
        });
        let task = tokio::spawn(accept(listener, upstream, Arc::new(watcher)));
        Ok(Proxy { addr, mode, task })
    }

    /// Where the replica connects.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds all traffic both ways and blackholes new connections, until [`Proxy::heal`].
    pub(crate) fn partition(&self) {
        self.mode.send_modify(|m| m.partitioned = true);
    }

    /// Resets the connections that lived through the partition, then relays again.
    pub(crate) fn heal(&self) {
        self.mode.send_modify(|m| {
            if m.partitioned {
                m.partitioned = false;
                m.generation += 1;
            }
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, mode: Arc<watch::Receiver<Mode>>) {
    while let Ok((client, _)) = listener.accept().await {
        let watcher = (*mode).clone();
        tokio::spawn(relay(client, upstream, watcher));
    }
}

/// Waits until the proxy is open; `false` when the connection must be reset instead (it lived
/// through a partition that has since healed, or the proxy is gone).
async fn open(mode: &mut watch::Receiver<Mode>, born: u64) -> bool {
    loop {
        let now = *mode.borrow_and_update();
        if now.generation != born {
            return false;
        }
        if !now.partitioned {
            return true;
        }
        if mode.changed().await.is_err() {
            return false;
        }
    }
}

/// Ends a connection with a TCP reset rather than an orderly close.
fn reset(stream: TcpStream) {
    abortive(&stream);
    drop(stream);
}

/// Makes the socket's close a reset. tokio deprecates `set_linger` because a *positive* linger
/// blocks the thread that drops the socket; a zero linger never waits: close sends RST at once.
#[allow(deprecated)]
fn abortive(stream: &TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
}

async fn relay(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let born = mode.borrow().generation;
    // A connection made during a partition is held unanswered, then reset at the heal.
    if !open(&mut mode, born).await {
        return reset(client);
    }
    let connect = tokio::time::timeout(
        Duration::from_millis(UPSTREAM_CONNECT_MS),
        TcpStream::connect(upstream),
    );
    let server = match connect.await {
        Ok(Ok(server)) => server,
        _ => return reset(client),
    };
    for stream in [&client, &server] {
        let _ = stream.set_nodelay(true);
        // Every end is a reset: the heal must cut held connections, and an orderly close
        // buys a database relay nothing.
        abortive(stream);
    }
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Either direction ending ends both.
    tokio::select! {
        () = pump(client_read, server_write, mode.clone(), born) => {}
        () = pump(server_read, client_write, mode, born) => {}
    }
}

/// Copies one direction while the proxy is open; returns when the copy ends (end of stream, an
/// error, or a heal after a partition this connection lived through).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    born: u64,
) {
    let mut buffer = vec![0u8; RELAY_BUFFER_BYTES];
    loop {
        if !open(&mut mode, born).await {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            // A partition starting while this side waits: stop reading at once.
            _ = mode.changed() => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just as a partition began are held, not delivered, until the heal (which
        // resets this connection instead).
        if !open(&mut mode, born).await {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(stream: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(text).await?;
        let mut buf = vec![0u8; text.len()];
        stream.read_exact(&mut buf).await?;
        Ok(buf)
    }

    #[tokio::test]
    async fn a_partition_holds_traffic_and_the_heal_resets_what_lived_through_it() {
        let proxy = Proxy::start(echo().await).await.unwrap();
        let mut before = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut before, b"ping").await.unwrap(), b"ping");

        proxy.partition();
        // Held: neither an answer nor an error while the partition lasts.
        let held =
            tokio::time::timeout(Duration::from_millis(300), round_trip(&mut before, b"held"))
                .await;
        assert!(held.is_err(), "traffic crossed a partition: {held:?}");
        // A new connection is accepted (the kernel does that) but nothing is relayed.
        let mut during = TcpStream::connect(proxy.addr()).await.unwrap();
        let blackholed =
            tokio::time::timeout(Duration::from_millis(300), round_trip(&mut during, b"new")).await;
        assert!(
            blackholed.is_err(),
            "a connection crossed a partition: {blackholed:?}"
        );

        proxy.heal();
        // Both lived through the partition: reset, never answered late.
        let mut buf = [0u8; 16];
        let late = tokio::time::timeout(Duration::from_secs(5), before.read(&mut buf))
            .await
            .expect("the held connection must end at the heal");
        assert!(
            matches!(late, Ok(0) | Err(_)),
            "held bytes were delivered after the heal: {late:?}"
        );
        let late = tokio::time::timeout(Duration::from_secs(5), during.read(&mut buf))
            .await
            .expect("the blackholed connection must end at the heal");
        assert!(matches!(late, Ok(0) | Err(_)), "{late:?}");
        // A fresh connection works again.
        let mut after = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut after, b"back").await.unwrap(), b"back");
    }
}
