//! The accept loop: HTTP/1 connections served by hyper, with the three limits a server on an
//! open port needs and `axum::serve` does not give.
//!
//! - **Header read timeout.** A connection must finish sending a request's head within
//!   [`ConnectionLimits::header_read_timeout`] of its first byte (of being accepted, for its
//!   first request). A client dribbling partial headers is closed, not kept forever.
//! - **Body read timeout.** Once its head is read, a request's body must arrive within
//!   [`ConnectionLimits::body_read_timeout`]; past it the handler reading the body gets an
//!   error (answered as a 400 envelope) and the connection closes. Without it a client could
//!   hold a connection "busy", out of reach of eviction, by dribbling a body.
//! - **Idle timeout.** A keep-alive connection with no request for
//!   [`ConnectionLimits::idle_timeout`] is closed.
//! - **Connection cap.** At most [`ConnectionLimits::connections_max`] connections are open.
//!   When a new one arrives at the cap, the oldest connection with no request in flight (idle, or
//!   still sending its head) is closed to make room, so `/healthz` keeps answering however many
//!   slow clients hold sockets. Only when every connection is serving a request does the loop
//!   wait (new connections queue in the kernel's backlog).
//!
//! Both timers are ours, not hyper's: hyper 1.x's `header_read_timeout` starts whenever the
//! connection is ready to read a head, so it also bounds the idle wait between keep-alive
//! requests (`proto/h1/conn.rs`, `poll_read_head`), and one timer cannot be two settings. It is
//! turned off here.
//!
//! An accept error (the process is out of file descriptors, say) never ends the loop: it closes
//! the oldest connection with no request in flight and waits for it to go, or backs off
//! [`ACCEPT_ERROR_BACKOFF_MS`] when there is none.
//!
//! Graceful shutdown: on the signal the listener closes (a new connection is refused), idle
//! connections and those still waiting for a request's head close at once, event streams
//! (`text/event-stream` answers) end, and requests in flight finish before their connections
//! close; [`run`] returns when all are gone, or when the grace it is given has run out (the
//! connections still open then are cut when the process exits).

use axum::body::Body;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;
use tower::Service;

use crate::metrics::{ConnectionOpen, Metrics};

/// How long a client has to send a request's head, in milliseconds. A head is a few hundred
/// bytes to a few KiB: ten seconds covers a slow mobile link many times over, and a client that
/// opens sockets and never finishes them holds each for no longer than that.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;

/// How long a request's body may take to arrive once its head is read, in milliseconds: the
/// largest body accepted (1 MiB, `JSON_BODY_BYTES_MAX`) at a slow 35 KB/s uplink.
pub const BODY_READ_TIMEOUT_MS_DEFAULT: u64 = 30_000;

/// How long a keep-alive connection may wait for its next request, in milliseconds. Longer than
/// an agent's pause between calls, so its connection pool stays warm; short enough that idle
/// sockets do not pile up. Clients retry a request refused by a connection closed while idle.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 60_000;

/// How many connections may be open at once. Half of the usual 1,024 soft file limit, leaving
/// the rest for the store, the outbound HTTP pool and the log; raise both together.
pub const CONNECTIONS_MAX_DEFAULT: usize = 512;

/// How long the loop waits after an accept error before it tries again, in milliseconds: long
/// enough not to spin on a persistent error (out of file descriptors), short enough that the
/// backlog drains as soon as descriptors come back.
pub const ACCEPT_ERROR_BACKOFF_MS: u64 = 50;

/// The limits of one listener; see the module documentation.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub connections_max: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_millis(HEADER_READ_TIMEOUT_MS_DEFAULT),
            body_read_timeout: Duration::from_millis(BODY_READ_TIMEOUT_MS_DEFAULT),
            idle_timeout: Duration::from_millis(IDLE_TIMEOUT_MS_DEFAULT),
            connections_max: CONNECTIONS_MAX_DEFAULT,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` turns true, then drains for at most `grace`
/// (module docs). Returns how many connections were still open when the grace ran out (0 when
/// every one finished).
pub async fn run(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    grace: Duration,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> usize {
    assert!(
        limits.connections_max > 0,
        "connections_max must be positive"
    );
    let registry = Arc::new(Registry::default());
    // Every connection task holds a sender; when all are dropped, the drain is over.
    let (alive, mut drained) = mpsc::channel::<()>(1);
    while !*shutdown.borrow() {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.changed() => break,
        };
        match accepted {
            Ok((stream, _peer)) => {
                // Room is made when a connection arrives, not ahead of it: at the cap with no
                // one waiting, nothing is closed.
                if !make_room(&registry, limits.connections_max, &mut shutdown).await {
                    break;
                }
                let _ = stream.set_nodelay(true);
                let connection = registry.open();
                let counted = metrics.connection_open();
                tokio::spawn(serve_connection(
                    stream,
                    router.clone(),
                    connection,
                    registry.clone(),
                    limits,
                    shutdown.clone(),
                    (alive.clone(), counted),
                ));
            }
            // The client gave up between its connect and our accept: nothing to do.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => {
                tracing::warn!(error = %e, "accept failed; freeing a connection and retrying");
                metrics.accept_failed();
                let changed = registry.changed.notified();
                let wait = Duration::from_millis(ACCEPT_ERROR_BACKOFF_MS);
                if registry.evict_oldest_waiting() {
                    // Wait for the evicted connection's socket to close, not longer.
                    let _ = tokio::time::timeout(wait, changed).await;
                } else {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        _ = shutdown.changed() => break,
                    }
                }
            }
        }
    }
    drop(listener);
    drop(alive);
    match tokio::time::timeout(grace, drained.recv()).await {
        Ok(_) => 0,
        Err(_) => registry.open_count(),
    }
}

/// Waits until one more connection fits under the cap, closing the oldest connection with no
/// request in flight if need be. False when shutdown came first.
async fn make_room(
    registry: &Registry,
    connections_max: usize,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    loop {
        // Registered before the check, so a change between the two is not missed.
        let changed = registry.changed.notified();
        if registry.open_count() < connections_max || registry.evict_oldest_waiting() {
            return true;
        }
        tokio::select! {
            () = changed => {}
            _ = shutdown.changed() => return false,
        }
    }
}

/// Drives one connection: hyper's state machine, our two timers, eviction and shutdown.
async fn serve_connection(
    stream: TcpStream,
    router: Router,
    connection: Arc<Connection>,
    registry: Arc<Registry>,
    limits: ConnectionLimits,
    mut shutdown: watch::Receiver<bool>,
    // Held until the connection closes: the drain's sender, and the open-connections gauge.
    (_alive, counted): (mpsc::Sender<()>, ConnectionOpen),
) {
    let io = TokioIo::new(Watched {
        inner: stream,
        connection: connection.clone(),
    });
    let in_flight = connection.clone();
    let body_read_timeout = limits.body_read_timeout;
    let stop = shutdown.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let guard = in_flight.begin_request();
        let mut router = router.clone();
        let request = request.map(|body| timed(body, body_read_timeout));
        let stop = stop.clone();
        async move {
            let response = router.call(request).await?;
            let streams = is_event_stream(&response);
            // The request stays in flight until hyper has written (and dropped) the body.
            Ok::<_, std::convert::Infallible>(response.map(|body| {
                let body = if streams {
                    until_shutdown(body, stop)
                } else {
                    body
                };
                Body::new(Guarded {
                    inner: body,
                    _guard: guard,
                })
            }))
        }
    });
    let http = http1::Builder::new()
        // Our own timers below replace hyper's (module docs).
        .header_read_timeout(None)
        .serve_connection(io, service);
    tokio::pin!(http);
    let mut draining = false;
    loop {
        if !draining && *shutdown.borrow() {
            http.as_mut().graceful_shutdown();
            draining = true;
        }
        // Hyper closes an idle connection at once and lets a busy one finish its request; one
        // still waiting for a head (a new connection, a slow client) is closed here, so
        // shutdown does not wait for its header timer.
        if draining && connection.is_awaiting_head() {
            break;
        }
        let deadline = connection.deadline(&limits);
        tokio::select! {
            result = http.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                break;
            }
            _ = shutdown.changed(), if !draining => {
                http.as_mut().graceful_shutdown();
                draining = true;
            }
            () = connection.wake.notified() => {
                if connection.evicted.load(Ordering::SeqCst) {
                    tracing::debug!(connection = connection.id, "closed to make room");
                    counted.metrics().connection_closed("evicted");
                    break;
                }
            }
            () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                if let Some(reason) = connection.expired(&limits, Instant::now()) {
                    tracing::debug!(connection = connection.id, reason, "connection timed out");
                    counted.metrics().connection_closed(reason);
                    break;
                }
            }
        }
    }
    registry.close(connection.id);
}

/// Where a connection is between requests.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a request's head to be complete, since the connection opened or since the
    /// first byte after an idle wait.
    AwaitingHead { since: Instant },
    /// Requests in flight: the head was read and the response is not yet written.
    Busy { requests: usize },
    /// Done with its last response, no byte of the next request yet.
    Idle { since: Instant },
}

/// One open connection, shared by its task, its socket wrapper and the registry.
#[derive(Debug)]
struct Connection {
    /// Accept order: the smallest id is the oldest connection.
    id: u64,
    phase: Mutex<Phase>,
    /// Woken on every change of phase and on eviction.
    wake: Notify,
    evicted: AtomicBool,
    registry_changed: Arc<Notify>,
}

impl Connection {
    fn phase(&self) -> MutexGuard<'_, Phase> {
        // A panic while holding this lock leaves a plain value behind: keep using it.
        self.phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_phase(&self, phase: Phase) {
        *self.phase() = phase;
        self.wake.notify_one();
        self.registry_changed.notify_one();
    }

    /// Bytes arrived: an idle connection starts its next request's head.
    fn on_bytes(&self) {
        let idle = matches!(*self.phase(), Phase::Idle { .. });
        if idle {
            self.set_phase(Phase::AwaitingHead {
                since: Instant::now(),
            });
        }
    }

    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        let requests = match *self.phase() {
            Phase::Busy { requests } => requests + 1,
            Phase::AwaitingHead { .. } | Phase::Idle { .. } => 1,
        };
        self.set_phase(Phase::Busy { requests });
        RequestGuard(self.clone())
    }

    fn end_request(&self) {
        let next = match *self.phase() {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            Phase::Busy { .. } | Phase::AwaitingHead { .. } | Phase::Idle { .. } => Phase::Idle {
                since: Instant::now(),
            },
        };
        self.set_phase(next);
    }

    fn is_awaiting_head(&self) -> bool {
        matches!(*self.phase(), Phase::AwaitingHead { .. })
    }

    fn is_busy(&self) -> bool {
        matches!(*self.phase(), Phase::Busy { .. })
    }

    /// When the current phase's timer runs out; none while a request is in flight.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match *self.phase() {
            Phase::AwaitingHead { since } => Some(since + limits.header_read_timeout),
            Phase::Idle { since } => Some(since + limits.idle_timeout),
            Phase::Busy { .. } => None,
        }
    }

    /// Which timer ran out at `now`, if one did.
    fn expired(&self, limits: &ConnectionLimits, now: Instant) -> Option<&'static str> {
        match *self.phase() {
            Phase::AwaitingHead { since } if now >= since + limits.header_read_timeout => {
                Some("header read timeout")
            }
            Phase::Idle { since } if now >= since + limits.idle_timeout => Some("idle timeout"),
            Phase::AwaitingHead { .. } | Phase::Idle { .. } | Phase::Busy { .. } => None,
        }
    }
}

/// Marks a request in flight until dropped.
struct RequestGuard(Arc<Connection>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.end_request();
    }
}

/// The open connections of one listener, oldest first.
#[derive(Debug, Default)]
struct Registry {
    open: Mutex<BTreeMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    /// Woken when a connection closes or changes phase (room may have appeared).
    changed: Arc<Notify>,
}

impl Registry {
    fn connections(&self) -> MutexGuard<'_, BTreeMap<u64, Arc<Connection>>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn open(&self) -> Arc<Connection> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let connection = Arc::new(Connection {
            id,
            phase: Mutex::new(Phase::AwaitingHead {
                since: Instant::now(),
            }),
            wake: Notify::new(),
            evicted: AtomicBool::new(false),
            registry_changed: self.changed.clone(),
        });
        self.connections().insert(id, connection.clone());
        connection
    }

    fn close(&self, id: u64) {
        self.connections().remove(&id);
        self.changed.notify_one();
    }

    fn open_count(&self) -> usize {
        self.connections().len()
    }

    /// Closes the oldest connection with no request in flight; false if every one is busy.
    /// It leaves the registry at once (its task closes the socket as soon as it runs).
    fn evict_oldest_waiting(&self) -> bool {
        let mut open = self.connections();
        let Some(id) = open
            .values()
            .find(|c| !c.is_busy())
            .map(|connection| connection.id)
        else {
            return false;
        };
        if let Some(connection) = open.remove(&id) {
            connection.evicted.store(true, Ordering::SeqCst);
            connection.wake.notify_one();
        }
        true
    }
}

/// The socket, telling its connection when bytes arrive.
struct Watched {
    inner: TcpStream,
    connection: Arc<Connection>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.connection.on_bytes();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body that keeps its request in flight until hyper is done with it.
struct Guarded {
    inner: Body,
    _guard: RequestGuard,
}

impl hyper::body::Body for Guarded {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `response` is an event stream, which never ends on its own.
fn is_event_stream(response: &axum::response::Response) -> bool {
    response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// An event stream's body, ended at shutdown: it would otherwise hold its connection, and the
/// drain, until the grace ran out. Its client reconnects (to another replica, or to this one
/// restarted) with `Last-Event-ID` and misses nothing.
fn until_shutdown(body: Body, mut shutdown: watch::Receiver<bool>) -> Body {
    let stopped = Box::pin(async move {
        // An error means the sender is gone: the server is stopping either way.
        let _ = shutdown.wait_for(|stop| *stop).await;
    });
    Body::new(UntilShutdown {
        inner: body,
        stopped: Some(stopped),
    })
}

struct UntilShutdown {
    inner: Body,
    /// `None` once shutdown came: the body has ended.
    stopped: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl hyper::body::Body for UntilShutdown {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let Some(stopped) = self.stopped.as_mut() else {
            return Poll::Ready(None);
        };
        if stopped.as_mut().poll(cx).is_ready() {
            self.stopped = None;
            return Poll::Ready(None);
        }
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The request body, cut off at `timeout` from now; one with nothing to read is left as it is.
fn timed(body: Incoming, timeout: Duration) -> Body {
    use hyper::body::Body as _;
    if body.is_end_stream() {
        return Body::new(body);
    }
    Body::new(Timed {
        inner: body,
        until: Instant::now() + timeout,
        timer: None,
        timeout,
    })
}

#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
struct BodyReadTimeout(Duration);

/// A request body that fails once its time is up.
struct Timed {
    inner: Incoming,
    until: Instant,
    /// Armed the first time the body is not ready, so a body already buffered costs no timer.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
}

impl hyper::body::Body for Timed {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let until = self.until;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(until)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyReadTimeout(self.timeout).into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(2),
            body_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(60),
            connections_max: 2,
        }
    }

    #[tokio::test]
    async fn open_connections_and_the_ones_the_server_closes_are_counted() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let metrics = Arc::new(Metrics::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let limits = ConnectionLimits {
            idle_timeout: Duration::from_millis(200),
            ..limits()
        };
        let (stop, stopped) = watch::channel(false);
        let served = tokio::spawn(run(
            listener,
            router,
            limits,
            Duration::from_secs(5),
            metrics.clone(),
            stopped,
        ));
        let gauge = |m: &Metrics| m.render(&[]);
        let mut client = TcpStream::connect(addr).await.unwrap();
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0u8; 512];
        let n = client.read(&mut answer).await.unwrap();
        assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{answer:?}");
        assert!(gauge(&metrics).contains("steward_http_connections_open 1"));
        // Idle past the timeout: the server closes it, and says why.
        let closed = tokio::time::timeout(Duration::from_secs(5), client.read(&mut answer))
            .await
            .expect("the server closed the idle connection");
        assert_eq!(closed.unwrap(), 0);
        let settled = async {
            while !gauge(&metrics).contains("steward_http_connections_open 0") {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), settled)
            .await
            .expect("the gauge fell back to 0");
        let text = gauge(&metrics);
        assert!(
            text.contains("steward_http_connections_closed_total{reason=\"idle timeout\"} 1"),
            "{text}"
        );
        stop.send(true).unwrap();
        assert_eq!(served.await.unwrap(), 0, "nothing left open at shutdown");
    }

    #[tokio::test]
    async fn eviction_takes_the_oldest_connection_with_no_request_in_flight() {
        let registry = Registry::default();
        let busy = registry.open();
        let _request = busy.begin_request();
        let waiting = registry.open();
        let newest = registry.open();
        assert!(registry.evict_oldest_waiting());
        assert!(waiting.evicted.load(Ordering::SeqCst));
        assert!(!busy.evicted.load(Ordering::SeqCst));
        assert!(!newest.evicted.load(Ordering::SeqCst));
        assert_eq!(registry.open_count(), 2);
        assert!(registry.evict_oldest_waiting());
        assert!(newest.evicted.load(Ordering::SeqCst));
        assert!(!registry.evict_oldest_waiting(), "only a busy one is left");
    }

    #[tokio::test]
    async fn the_header_timer_bounds_a_head_and_the_idle_timer_an_idle_wait() {
        let registry = Registry::default();
        let connection = registry.open();
        let limits = limits();
        let opened = Instant::now();
        assert!(connection.expired(&limits, opened).is_none());
        assert_eq!(
            connection.expired(&limits, opened + limits.header_read_timeout),
            Some("header read timeout")
        );
        let request = connection.begin_request();
        assert_eq!(connection.deadline(&limits), None, "no timer while busy");
        drop(request);
        let idle_deadline = connection.deadline(&limits).expect("idle timer");
        assert!(idle_deadline >= opened + limits.idle_timeout);
        connection.on_bytes();
        let head_deadline = connection.deadline(&limits).expect("head timer");
        assert!(
            head_deadline < idle_deadline,
            "a new head has the shorter timer"
        );
    }
}
