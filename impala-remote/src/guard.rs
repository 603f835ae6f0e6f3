//! What a peer that has not shown the token can cost the driver: a small bounded amount.
//!
//! A connection is *unauthenticated* until one of its sessions says hello with the token.
//! Until then ([`GuardedIo`], under TLS and HTTP/2):
//! - the driver reads at most [`UNAUTHENTICATED_READ_BYTES`] from it (then stops reading, so
//!   whatever the peer sends waits in its own socket), so neither HTTP/2 nor tonic can buffer
//!   more of it whatever windows and message sizes it announces;
//! - it is closed when it has not shown the token within the hello timeout;
//! - at most [`ServerSettings::max_unauthenticated_connections`] are open: a new one closes
//!   the oldest (a runner says hello within a round trip of connecting).
//!
//! And every session's first message, the hello, may announce at most [`MAX_HELLO_BYTES`]
//! ([`HelloLimit`]): its length prefix is checked before tonic reserves room for the message.
//! Authenticated connections (a runner's) are not limited by any of this: their messages may
//! be as large as [`ServerSettings::max_message_bytes`].
//!
//! [`ServerSettings::max_unauthenticated_connections`]: crate::ServerSettings::max_unauthenticated_connections
//! [`ServerSettings::max_message_bytes`]: crate::ServerSettings::max_message_bytes

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{ready, Context, Poll, Waker};
use std::time::Duration;

use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::body::Body;
use tonic::codegen::{http, Bytes, Service};
use tonic::server::NamedService;
use tonic::transport::server::Connected;
use tonic::Status;

use crate::{MAX_HELLO_BYTES, UNAUTHENTICATED_READ_BYTES};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The unauthenticated connections open now, oldest first, at most `cap`.
pub(crate) struct Admission {
    cap: usize,
    hello_timeout: Duration,
    waiting: Mutex<VecDeque<Arc<Gate>>>,
}

impl Admission {
    pub(crate) fn new(cap: usize, hello_timeout: Duration) -> Arc<Self> {
        Arc::new(Admission { cap: cap.max(1), hello_timeout, waiting: Mutex::new(VecDeque::new()) })
    }

    /// Admits a new connection, unauthenticated; closes the oldest unauthenticated one when
    /// `cap` are open.
    pub(crate) fn admit(self: &Arc<Self>, io: TcpStream) -> GuardedIo {
        let gate = Arc::new(Gate {
            admission: Arc::clone(self),
            authenticated: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let oldest = {
            let mut waiting = lock(&self.waiting);
            waiting.push_back(Arc::clone(&gate));
            if waiting.len() > self.cap {
                waiting.pop_front()
            } else {
                None
            }
        };
        if let Some(oldest) = oldest {
            oldest.evicted.store(true, SeqCst);
            oldest.wake();
        }
        let peer = io.peer_addr().ok();
        GuardedIo {
            io,
            gate,
            peer,
            read: 0,
            deadline: Box::pin(tokio::time::sleep(self.hello_timeout)),
            closed: false,
        }
    }

    fn forget(&self, gate: &Gate) {
        lock(&self.waiting).retain(|g| !std::ptr::eq(Arc::as_ptr(g), gate));
    }
}

/// One connection's standing, shared by its IO and its sessions.
pub(crate) struct Gate {
    admission: Arc<Admission>,
    authenticated: AtomicBool,
    /// Closed to make room for a newer unauthenticated connection.
    evicted: AtomicBool,
    /// The connection's reader, waiting while it may read no more.
    waker: Mutex<Option<Waker>>,
}

impl Gate {
    /// One of the connection's sessions showed the token: it is no longer limited.
    pub(crate) fn authenticate(&self) {
        if !self.authenticated.swap(true, SeqCst) {
            self.admission.forget(self);
            self.wake();
        }
    }

    fn is_authenticated(&self) -> bool {
        self.authenticated.load(SeqCst)
    }

    fn wake(&self) {
        if let Some(waker) = lock(&self.waker).take() {
            waker.wake();
        }
    }
}

/// What the driver knows of a connection: the request extension its sessions read.
#[derive(Clone)]
pub(crate) struct ConnInfo {
    /// The peer's address.
    pub(crate) remote: Option<SocketAddr>,
    /// Its standing.
    pub(crate) gate: Arc<Gate>,
}

/// A connection that reads at most [`UNAUTHENTICATED_READ_BYTES`] until it is authenticated,
/// and is closed when that takes longer than the hello timeout or it is evicted.
pub(crate) struct GuardedIo {
    io: TcpStream,
    gate: Arc<Gate>,
    peer: Option<SocketAddr>,
    /// Bytes read while unauthenticated.
    read: usize,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Whether it was closed (and said why, once).
    closed: bool,
}

impl GuardedIo {
    fn close(&mut self, kind: io::ErrorKind, reason: String) -> Poll<io::Result<()>> {
        if !self.closed {
            self.closed = true;
            let peer = self.peer.map_or_else(|| "unknown".to_string(), |p| p.to_string());
            tracing::warn!(%peer, read_bytes = self.read, "closed a connection: {reason}");
        }
        Poll::Ready(Err(io::Error::new(kind, reason)))
    }
}

impl Drop for GuardedIo {
    fn drop(&mut self) {
        if !self.gate.is_authenticated() {
            self.gate.admission.forget(&self.gate);
        }
    }
}

impl Connected for GuardedIo {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        ConnInfo { remote: self.peer, gate: Arc::clone(&self.gate) }
    }
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.gate.is_authenticated() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        // Registered before the checks, so an authentication or eviction meanwhile wakes it.
        *lock(&this.gate.waker) = Some(cx.waker().clone());
        if this.gate.is_authenticated() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        if this.gate.evicted.load(SeqCst) {
            let reason = format!(
                "it had not shown the token and {} such connections were open (the oldest makes \
                 room for a new one)",
                this.gate.admission.cap
            );
            return this.close(io::ErrorKind::ConnectionAborted, reason);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            let reason = format!(
                "no session showed the token within {:.0} s of connecting; an env runner says \
                 hello with the driver's token first",
                this.gate.admission.hello_timeout.as_secs_f64()
            );
            return this.close(io::ErrorKind::TimedOut, reason);
        }
        let room = UNAUTHENTICATED_READ_BYTES.saturating_sub(this.read).min(buf.remaining());
        if room == 0 {
            // Read nothing more until a session shows the token or the deadline passes.
            return Poll::Pending;
        }
        let n = {
            let mut limited = ReadBuf::new(buf.initialize_unfilled_to(room));
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut limited))?;
            limited.filled().len()
        };
        buf.advance(n);
        this.read += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// The gRPC service with each session's first message (its hello) limited to
/// [`MAX_HELLO_BYTES`], checked on the message's length prefix before tonic buffers it.
#[derive(Clone)]
pub(crate) struct HelloLimit<S> {
    inner: S,
}

impl<S> HelloLimit<S> {
    pub(crate) fn new(inner: S) -> Self {
        HelloLimit { inner }
    }
}

impl<S: NamedService> NamedService for HelloLimit<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for HelloLimit<S>
where
    S: Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        self.inner.call(request.map(|body| Body::new(FirstMessage::new(body))))
    }
}

/// A request body whose first gRPC message may announce at most [`MAX_HELLO_BYTES`].
struct FirstMessage {
    inner: Body,
    /// The first message's prefix: a compression flag and a big-endian length.
    prefix: [u8; 5],
    seen: usize,
    refused: bool,
}

impl FirstMessage {
    fn new(inner: Body) -> Self {
        FirstMessage { inner, prefix: [0; 5], seen: 0, refused: false }
    }

    /// Reads the prefix from the start of the body; an error when it announces too much.
    fn check(&mut self, data: &[u8]) -> Result<(), Status> {
        let take = (self.prefix.len() - self.seen).min(data.len());
        self.prefix[self.seen..self.seen + take].copy_from_slice(&data[..take]);
        self.seen += take;
        if self.seen < self.prefix.len() {
            return Ok(());
        }
        let [_, a, b, c, d] = self.prefix;
        let bytes = u32::from_be_bytes([a, b, c, d]);
        if usize::try_from(bytes).map_or(true, |n| n > MAX_HELLO_BYTES) {
            return Err(Status::resource_exhausted(format!(
                "a message of {bytes} bytes before the hello is too large: a session must start \
                 with its hello (at most {MAX_HELLO_BYTES} bytes) carrying the driver's token, \
                 and may send larger messages only once the token was accepted; connect with \
                 `impala env-runner --connect` and the driver's --token-file"
            )));
        }
        Ok(())
    }
}

impl http_body::Body for FirstMessage {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.refused {
            return Poll::Ready(None);
        }
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if this.seen < this.prefix.len() {
            if let Some(data) = frame.as_ref().and_then(|f| f.as_ref().ok()?.data_ref()) {
                if let Err(status) = this.check(data) {
                    this.refused = true;
                    return Poll::Ready(Some(Err(status)));
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.refused || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
