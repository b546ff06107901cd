//! Fault injection, per endpoint: make an endpoint unavailable (refuse connections, or accept
//! them and hang), answer a status code for some calls, add latency, drop telemetry streams, and
//! restart (handled by the endpoint: forget client settings, cut connections, keep messages).
//!
//! The hot path costs one atomic load per RPC ([`Faults::active`]) and one per socket read or
//! write ([`FaultIo`]).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::cursor::Liveness;
use crate::error::{Error, Result};

/// Declares [`Rpc`] with one variant per RPC, its [`Rpc::ALL`] list and [`Rpc::name`], each RPC
/// named once.
macro_rules! rpcs {
    ($($rpc:ident),+ $(,)?) => {
        /// The RPCs of `MessagingService`, for per-RPC faults and call counters.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum Rpc {
            $($rpc),+
        }

        impl Rpc {
            /// Every RPC, in service order.
            pub const ALL: [Rpc; [$(Rpc::$rpc),+].len()] = [$(Rpc::$rpc),+];

            /// The RPC's name as in `service.proto` (e.g. `"SendMessage"`).
            pub fn name(self) -> &'static str {
                match self {
                    $(Rpc::$rpc => stringify!($rpc)),+
                }
            }
        }
    };
}

rpcs!(
    QueryRoute,
    Heartbeat,
    SendMessage,
    QueryAssignment,
    ReceiveMessage,
    AckMessage,
    ForwardMessageToDeadLetterQueue,
    PullMessage,
    UpdateOffset,
    GetOffset,
    QueryOffset,
    EndTransaction,
    Telemetry,
    NotifyClientTermination,
    ChangeInvisibleDuration,
    RecallMessage,
    SyncLiteSubscription,
);

impl Rpc {
    /// Parse a name as given by [`Rpc::name`] (case-insensitive).
    pub fn parse(s: &str) -> Result<Rpc> {
        Rpc::ALL
            .into_iter()
            .find(|r| r.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::invalid("rpc", format!("{s:?} is not a MessagingService RPC")))
    }

    /// Index into per-RPC arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// How an unavailable endpoint behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// Close the port (connections are refused) and cut open connections.
    Refuse,
    /// Keep the port open but never read or write: calls hang until their deadline.
    Hang,
}

/// Answer `code` instead of serving the call.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusFault {
    /// RocketMQ status code to answer (e.g. 42900 `TOO_MANY_REQUESTS`).
    pub code: i32,
    /// Status message.
    pub message: String,
    /// Only this RPC (all when `None`).
    pub rpc: Option<Rpc>,
    /// Only the next `count` matching calls (forever when `None`).
    pub count: Option<u64>,
    /// Only this fraction of matching calls (0..=1).
    pub fraction: f64,
}

impl StatusFault {
    /// Answer `code` to every call.
    pub fn new(code: i32) -> Self {
        Self {
            code,
            message: format!("injected fault: {}", crate::status::name(code)),
            rpc: None,
            count: None,
            fraction: 1.0,
        }
    }
}

#[derive(Debug, Default)]
struct FaultState {
    statuses: Vec<StatusFault>,
    latency: Vec<(Option<Rpc>, Duration)>,
}

/// The faults of one endpoint.
#[derive(Debug, Default)]
pub struct Faults {
    active: AtomicBool,
    state: Mutex<FaultState>,
    /// Socket-level control (hang / cut connections).
    pub io: Arc<IoControl>,
    /// Status answers injected so far.
    pub injected: AtomicU64,
}

impl Faults {
    /// Whether any RPC-level fault is set (one atomic load).
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    fn refresh(&self, st: &FaultState) {
        self.active.store(
            !st.statuses.is_empty() || !st.latency.is_empty(),
            Ordering::Release,
        );
    }

    /// Add a status fault.
    pub fn add_status(&self, f: StatusFault) -> Result<()> {
        if !(0.0..=1.0).contains(&f.fraction) || f.fraction.is_nan() {
            return Err(Error::invalid("fraction", "must be between 0 and 1"));
        }
        if f.count == Some(0) {
            return Err(Error::invalid("count", "must be at least 1"));
        }
        let mut st = self.state.lock();
        st.statuses.push(f);
        self.refresh(&st);
        Ok(())
    }

    /// Add latency to every call (or to one RPC). Zero removes it.
    pub fn set_latency(&self, rpc: Option<Rpc>, d: Duration) {
        let mut st = self.state.lock();
        st.latency.retain(|(r, _)| *r != rpc);
        if !d.is_zero() {
            st.latency.push((rpc, d));
        }
        self.refresh(&st);
    }

    /// Remove status faults and latency.
    pub fn clear(&self) {
        let mut st = self.state.lock();
        st.statuses.clear();
        st.latency.clear();
        self.refresh(&st);
    }

    /// The latency to add to a call, and the status to answer instead of serving it.
    pub fn check(&self, rpc: Rpc) -> (Option<Duration>, Option<(i32, String)>) {
        let mut st = self.state.lock();
        let latency = st
            .latency
            .iter()
            .filter(|(r, _)| r.is_none_or(|r| r == rpc))
            .map(|(_, d)| *d)
            .max();
        let mut hit = None;
        let mut exhausted = None;
        for (i, f) in st.statuses.iter_mut().enumerate() {
            if f.rpc.is_some_and(|r| r != rpc) {
                continue;
            }
            if f.fraction < 1.0 && fastrand::f64() >= f.fraction {
                continue;
            }
            if let Some(n) = f.count.as_mut() {
                *n -= 1;
                if *n == 0 {
                    exhausted = Some(i);
                }
            }
            hit = Some((f.code, f.message.clone()));
            break;
        }
        if let Some(i) = exhausted {
            st.statuses.remove(i);
            self.refresh(&st);
        }
        if hit.is_some() {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        (latency, hit)
    }
}

const IO_NORMAL: u8 = 0;
const IO_FROZEN: u8 = 1;

/// The wakers of one connection, so a cut or a thaw reaches it at once.
#[derive(Debug, Default)]
struct ConnWakers {
    read: AtomicWaker,
    write: AtomicWaker,
}

/// Socket-level switches shared by every connection of an endpoint.
#[derive(Debug, Default)]
pub struct IoControl {
    mode: AtomicU8,
    generation: AtomicU64,
    conns: Mutex<Vec<Weak<ConnWakers>>>,
    /// The open connections by peer address, each with a marker killed when it closes.
    open: Mutex<HashMap<SocketAddr, Arc<Liveness>>>,
}

impl IoControl {
    /// Freeze (hang) or thaw every connection.
    pub fn set_frozen(&self, frozen: bool) {
        self.mode
            .store(if frozen { IO_FROZEN } else { IO_NORMAL }, Ordering::SeqCst);
        self.wake_all();
    }

    /// Cut every open connection: they fail at once (their tasks are woken).
    pub fn cut_all(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.wake_all();
    }

    /// The current connection generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Connections of the endpoint still open (accepted and not yet closed by either side).
    pub fn open_connections(&self) -> usize {
        self.conns
            .lock()
            .iter()
            .filter(|c| c.strong_count() > 0)
            .count()
    }

    /// The marker of the open connection from `peer` (killed when that connection closes).
    pub fn connection(&self, peer: SocketAddr) -> Option<Arc<Liveness>> {
        self.open.lock().get(&peer).cloned()
    }

    fn register(&self) -> Arc<ConnWakers> {
        let w = Arc::new(ConnWakers::default());
        let mut conns = self.conns.lock();
        conns.retain(|c| c.strong_count() > 0);
        conns.push(Arc::downgrade(&w));
        w
    }

    fn wake_all(&self) {
        for c in self.conns.lock().iter().filter_map(Weak::upgrade) {
            c.read.wake();
            c.write.wake();
        }
    }

    fn gate(&self, generation: u64, waker: &AtomicWaker, cx: &Context<'_>) -> Poll<io::Result<()>> {
        waker.register(cx.waker());
        if self.generation.load(Ordering::SeqCst) != generation {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection cut by fault injection",
            )));
        }
        if self.mode.load(Ordering::SeqCst) == IO_NORMAL {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

/// A server-side connection that obeys its endpoint's [`IoControl`].
#[derive(Debug)]
pub struct FaultIo {
    inner: TcpStream,
    ctl: Arc<IoControl>,
    wakers: Arc<ConnWakers>,
    generation: u64,
    peer: Option<(SocketAddr, Arc<Liveness>)>,
}

impl FaultIo {
    /// Wrap an accepted connection.
    pub fn new(inner: TcpStream, ctl: Arc<IoControl>) -> Self {
        let generation = ctl.generation();
        let wakers = ctl.register();
        let peer = inner.peer_addr().ok().map(|a| {
            let alive = Liveness::new();
            ctl.open.lock().insert(a, alive.clone());
            (a, alive)
        });
        Self {
            inner,
            ctl,
            wakers,
            generation,
            peer,
        }
    }

    fn gate_read(&self, cx: &Context<'_>) -> Poll<io::Result<()>> {
        self.ctl.gate(self.generation, &self.wakers.read, cx)
    }

    fn gate_write(&self, cx: &Context<'_>) -> Poll<io::Result<()>> {
        self.ctl.gate(self.generation, &self.wakers.write, cx)
    }
}

impl AsyncRead for FaultIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.gate_read(cx))?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for FaultIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.gate_write(cx))?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.gate_write(cx))?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.gate_write(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Drop for FaultIo {
    fn drop(&mut self) {
        if let Some((addr, alive)) = self.peer.take() {
            alive.kill();
            let mut open = self.ctl.open.lock();
            if open.get(&addr).is_some_and(|a| Arc::ptr_eq(a, &alive)) {
                open.remove(&addr);
            }
        }
    }
}

impl tonic::transport::server::Connected for FaultIo {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_and_rpc_filters() {
        let f = Faults::default();
        assert!(!f.active());
        f.add_status(StatusFault {
            rpc: Some(Rpc::SendMessage),
            count: Some(2),
            ..StatusFault::new(42900)
        })
        .unwrap();
        assert!(f.active());
        assert!(f.check(Rpc::QueryRoute).1.is_none());
        assert_eq!(f.check(Rpc::SendMessage).1.unwrap().0, 42900);
        assert_eq!(f.check(Rpc::SendMessage).1.unwrap().0, 42900);
        assert!(f.check(Rpc::SendMessage).1.is_none());
        assert!(!f.active());
        f.set_latency(Some(Rpc::Heartbeat), Duration::from_millis(5));
        assert_eq!(f.check(Rpc::Heartbeat).0, Some(Duration::from_millis(5)));
        assert_eq!(f.check(Rpc::SendMessage).0, None);
        assert!(f
            .add_status(StatusFault {
                fraction: 2.0,
                ..StatusFault::new(1)
            })
            .is_err());
        assert_eq!(Rpc::parse("sendmessage").unwrap(), Rpc::SendMessage);
    }

    #[test]
    fn fraction_is_sampled() {
        let f = Faults::default();
        f.add_status(StatusFault {
            fraction: 0.5,
            ..StatusFault::new(50001)
        })
        .unwrap();
        let hits = (0..2000)
            .filter(|_| f.check(Rpc::AckMessage).1.is_some())
            .count();
        assert!((600..1400).contains(&hits), "{hits}");
    }
}
