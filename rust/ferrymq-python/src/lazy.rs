//! A client connected on first use (or by `start()`), closed once, and the bridge every method
//! of its Python class goes through: the blocking form releases the GIL
//! (`RuntimeRef::block_on`), the asyncio form returns an awaitable (`future_into_py`); both
//! connect first and fail with `ClientClosedError` after `close()`. Held by the JMQ4, NATS
//! and remoting producers (`_native.Producer`) and `JetStream`, which extend `LazyClient`:
//! their lifecycle methods (`start`, `close`, the context managers, `endpoints`, `started`,
//! `closed`) are stated once there.

use std::future::Future;
use std::sync::Arc;

use ferrymq_core::produce::ProduceBackend;
use ferrymq_core::{Error, Message};
use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use pyo3::prelude::*;
use tokio::sync::OnceCell;

use crate::aio::future_into_py;
use crate::produce::Produce;
use crate::runtime::RuntimeRef;

/// A core client the binding connects lazily.
pub(crate) trait Connect: Clone + Send + Sync + 'static {
    /// What it connects with.
    type Options: Clone + Send + Sync + 'static;
    /// The message of the error a call raises after `close()`.
    const CLOSED: &'static str;
    fn open(options: Self::Options) -> impl Future<Output = Result<Self, Error>> + Send;
    fn shut(&self) -> impl Future<Output = Result<(), Error>> + Send;
}

/// The options, the client once connected, and whether `close()` was called.
pub(crate) struct Lazy<C: Connect> {
    pub(crate) options: C::Options,
    client: OnceCell<C>,
    /// Locked by `close()` while it looks for a client to shut, and by `get()` once its connect
    /// finished, so one of the two always sees the other: a connection that completes after
    /// `close()` is shut by `get()`, never left open, and a client is shut once.
    closing: Mutex<Closing>,
}

#[derive(Default)]
struct Closing {
    /// `close()` was called.
    closed: bool,
    /// The connected client was (or is being) shut.
    shut: bool,
}

impl<C: Connect> Lazy<C> {
    /// The connected client, connecting first if needed (one connection, whoever asks first).
    pub(crate) async fn get(&self) -> Result<C, Error> {
        if self.is_closed() {
            return Err(Error::closed(C::CLOSED));
        }
        let client = self
            .client
            .get_or_try_init(|| C::open(self.options.clone()))
            .await?
            .clone();
        {
            let mut st = self.closing.lock();
            if !st.closed {
                return Ok(client);
            }
            if st.shut {
                return Err(Error::closed(C::CLOSED));
            }
            // `close()` ran while this connected and found no client: shut the new one here.
            st.shut = true;
        }
        // The caller gets the closed error either way (it asked after `close()` began).
        let _ = client.shut().await;
        Err(Error::closed(C::CLOSED))
    }

    /// The client if it is connected.
    pub(crate) fn connected(&self) -> Option<&C> {
        self.client.get()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closing.lock().closed
    }

    /// Refuse further calls and close the client if one was connected. Idempotent.
    pub(crate) async fn close(&self) -> Result<(), Error> {
        let client = {
            let mut st = self.closing.lock();
            if std::mem::replace(&mut st.closed, true) {
                return Ok(()); // closed before (the first close shuts the client)
            }
            let client = self.client.get().cloned();
            st.shut = client.is_some();
            client
        };
        match client {
            Some(c) => c.shut().await,
            None => Ok(()),
        }
    }
}

/// What a lazily connecting class holds: its client, its runtime and its endpoint(s) as shown.
#[derive(Clone)]
pub(crate) struct Handle<C: Connect> {
    pub(crate) state: Arc<Lazy<C>>,
    pub(crate) rt: RuntimeRef,
    pub(crate) endpoint: String,
}

impl<C: Connect> Handle<C> {
    pub(crate) fn new(endpoint: String, options: C::Options, rt: RuntimeRef) -> Self {
        Self {
            state: Arc::new(Lazy {
                options,
                client: OnceCell::new(),
                closing: Mutex::new(Closing::default()),
            }),
            rt,
            endpoint,
        }
    }

    /// `f(client)` once connected, as a future that owns what it needs.
    pub(crate) fn run<T, F, Fut>(&self, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        F: FnOnce(C) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send,
        T: Send + 'static,
    {
        let s = Arc::clone(&self.state);
        async move { f(s.get().await?).await }.boxed()
    }

    /// `f(client)` with the GIL released.
    pub(crate) fn block<T, F, Fut>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        F: FnOnce(C) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send,
        T: Send + 'static,
    {
        self.rt.block_on(py, self.run(f))
    }

    /// `f(client)` as an awaitable.
    pub(crate) fn spawn<'py, T, F, Fut>(&self, py: Python<'py>, f: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: FnOnce(C) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        future_into_py(py, self.rt, self.run(f))
    }

    /// The connected client, connecting now if needed.
    pub(crate) fn connect(&self, py: Python<'_>) -> PyResult<C> {
        self.block(py, |c| async move { Ok(c) })
    }

    /// Connect as an awaitable that gives `me` (the Python client) back.
    pub(crate) fn start_async<'py, T>(&self, py: Python<'py>, me: T) -> PyResult<Bound<'py, PyAny>>
    where
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        self.spawn(py, move |_| async move { Ok(me) })
    }

    /// Close with the GIL released.
    pub(crate) fn close(&self, py: Python<'_>) -> PyResult<()> {
        let s = Arc::clone(&self.state);
        self.rt.block_on(py, async move { s.close().await })
    }

    /// Close as an awaitable: waits for `before` first (produced messages), then gives `result`.
    pub(crate) fn close_async<'py, T>(
        &self,
        py: Python<'py>,
        before: impl Future<Output = ()> + Send + 'static,
        result: T,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        let s = Arc::clone(&self.state);
        future_into_py(py, self.rt, async move {
            before.await;
            s.close().await?;
            Ok(result)
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.state.is_closed()
    }
}

/// A producer's produce path sends through its lazily connected client: the first chunk
/// connects (one connection, shared with the other calls).
impl<C: Connect + ProduceBackend> ProduceBackend for Handle<C> {
    type Receipt = C::Receipt;
    fn send_chunk(
        &self,
        messages: Vec<Message>,
    ) -> BoxFuture<'static, Result<Vec<Result<C::Receipt, Error>>, Error>> {
        self.run(move |c| async move { c.send_chunk(messages).await })
    }
}

/// The lifecycle of a lazily connecting class, whatever its client (and produce path).
trait Lifecycle: Send + Sync {
    fn endpoint(&self) -> &str;
    /// Connected (by `start()` or a call), whether closed since or not.
    fn started(&self) -> bool;
    fn closed(&self) -> bool;
    fn connect(&self, py: Python<'_>) -> PyResult<()>;
    fn connect_async<'py>(&self, py: Python<'py>, me: Py<PyAny>) -> PyResult<Bound<'py, PyAny>>;
    fn close(&self, py: Python<'_>) -> PyResult<()>;
    fn close_async<'py>(&self, py: Python<'py>, result: Py<PyAny>) -> PyResult<Bound<'py, PyAny>>;
}

/// A client without a produce path.
impl<C: Connect> Lifecycle for Handle<C> {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }
    fn started(&self) -> bool {
        self.state.connected().is_some()
    }
    fn closed(&self) -> bool {
        self.is_closed()
    }
    fn connect(&self, py: Python<'_>) -> PyResult<()> {
        Handle::connect(self, py).map(|_| ())
    }
    fn connect_async<'py>(&self, py: Python<'py>, me: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.start_async(py, me)
    }
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        Handle::close(self, py)
    }
    fn close_async<'py>(&self, py: Python<'py>, result: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        Handle::close_async(self, py, async {}, result)
    }
}

/// A producer: closing flushes what was produced first.
impl<C: Connect, B: ProduceBackend> Lifecycle for (Handle<C>, Arc<Produce<B>>) {
    fn endpoint(&self) -> &str {
        &self.0.endpoint
    }
    fn started(&self) -> bool {
        self.0.started()
    }
    fn closed(&self) -> bool {
        self.0.is_closed()
    }
    fn connect(&self, py: Python<'_>) -> PyResult<()> {
        Lifecycle::connect(&self.0, py)
    }
    fn connect_async<'py>(&self, py: Python<'py>, me: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.0.start_async(py, me)
    }
    /// Flush produced messages (running their callbacks), then close the client.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.1.close();
        let flushed = self.1.flush_for(py, None);
        self.0.close(py)?;
        flushed.map(|_| ())
    }
    /// Wait for produced messages (their callbacks run in the next `poll()`), then close.
    fn close_async<'py>(&self, py: Python<'py>, result: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        self.1.close();
        self.0.close_async(py, self.1.drained(), result)
    }
}

/// The base class of `_native.Producer` (JMQ4, NATS, remoting) and `JetStream`: a client that
/// connects on `start()` (or on the first call that needs it) and is closed once.
#[pyclass(name = "LazyClient", module = "ferrymq._native", subclass, frozen)]
pub struct LazyClient {
    life: Box<dyn Lifecycle>,
}

impl LazyClient {
    /// The base of a client without a produce path.
    pub(crate) fn of<C: Connect>(h: &Handle<C>) -> Self {
        Self {
            life: Box::new(h.clone()),
        }
    }

    /// Whether `close()` was called (for the subclasses' Rust code).
    pub(crate) fn is_closed(&self) -> bool {
        self.life.closed()
    }

    /// The base of a producer.
    pub(crate) fn producer<C: Connect, B: ProduceBackend>(
        h: &Handle<C>,
        produce: &Arc<Produce<B>>,
    ) -> Self {
        Self {
            life: Box::new((h.clone(), Arc::clone(produce))),
        }
    }
}

#[pymethods]
impl LazyClient {
    /// The endpoint(s) it connects to (credentials removed).
    #[getter]
    fn endpoints(&self) -> &str {
        self.life.endpoint()
    }

    /// Whether it connected (by `start()` or a call that needed it).
    #[getter]
    fn started(&self) -> bool {
        self.life.started()
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.life.closed()
    }

    /// Connect now (blocking, GIL released), failing fast on a wrong address or credentials;
    /// returns the client. Idempotent.
    fn start(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().life.connect(slf.py())?;
        Ok(slf)
    }

    /// Async form of `start`; the awaitable gives the client back.
    fn start_async<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.clone().into_any().unbind();
        slf.get().life.connect_async(slf.py(), me)
    }

    /// Close (idempotent): a producer first flushes what was produced, running the callbacks;
    /// then the client leaves the server and closes its sockets.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.life.close(py)
    }

    /// Async form of `close` (a producer's callbacks run in the next `poll()`).
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.life.close_async(py, py.None())
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        Self::start(slf)
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::start_async(slf)
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let result = false.into_pyobject(py)?.to_owned().into_any().unbind();
        self.life.close_async(py, result)
    }
}
