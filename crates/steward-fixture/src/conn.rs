//! Connections that a handler can cut without answering.
//!
//! `drop_after_commit` must leave the client with a closed connection and no
//! HTTP response at all. axum gives handlers no way to do that, so the fixture
//! serves through [`KillableListener`]: every accepted socket is wrapped in a
//! [`KillableStream`] sharing a [`ConnKill`] switch with the handler (handed
//! over as axum `ConnectInfo`). Once the switch is flipped, every read, write
//! and flush on the socket fails, so hyper abandons the connection before a
//! single response byte reaches the wire and drops (closes) the socket.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// The per-connection switch; cloned into handlers via `ConnectInfo`.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnKill(Arc<AtomicBool>);

impl ConnKill {
    /// Makes the connection fail from now on; nothing more is written to it.
    pub fn kill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn killed(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A TCP listener whose connections can be killed by handlers.
pub(crate) struct KillableListener(pub TcpListener);

impl Listener for KillableListener {
    type Io = KillableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let io = KillableStream {
                        inner: stream,
                        kill: ConnKill::default(),
                    };
                    return (io, addr);
                }
                Err(e) => {
                    // Like axum: transient accept errors (e.g. EMFILE) must not
                    // end the server.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

impl Connected<IncomingStream<'_, KillableListener>> for ConnKill {
    fn connect_info(stream: IncomingStream<'_, KillableListener>) -> Self {
        stream.io().kill.clone()
    }
}

/// A TCP stream that fails all IO once its [`ConnKill`] is flipped.
pub(crate) struct KillableStream {
    inner: TcpStream,
    kill: ConnKill,
}

fn killed_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "connection dropped by fault injection",
    )
}

impl AsyncRead for KillableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.kill.killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.kill.killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.kill.killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.kill.killed() {
            return Poll::Ready(Err(killed_error()));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
