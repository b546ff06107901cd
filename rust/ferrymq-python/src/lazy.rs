//! A client connected on first use (or by `start()`), closed once, and the bridge every method
//! of its Python class goes through: the blocking form releases the GIL
//! (`RuntimeRef::block_on`), the asyncio form returns an awaitable (`future_into_py`); both
//! connect first and fail with `ClientClosedError` after `close()`. Held by `JmqProducer`,
//! `JmqConsumer` and `JetStream`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrymq_core::Error;
use pyo3::prelude::*;
use tokio::sync::OnceCell;

use crate::aio::future_into_py;
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
    closed: AtomicBool,
}

impl<C: Connect> Lazy<C> {
    /// The connected client, connecting first if needed (one connection, whoever asks first).
    pub(crate) async fn get(&self) -> Result<C, Error> {
        if self.is_closed() {
            return Err(Error::closed(C::CLOSED));
        }
        self.client
            .get_or_try_init(|| C::open(self.options.clone()))
            .await
            .cloned()
    }

    /// The client if it is connected.
    pub(crate) fn connected(&self) -> Option<&C> {
        self.client.get()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Refuse further calls and close the client if one was connected. Idempotent.
    pub(crate) async fn close(&self) -> Result<(), Error> {
        self.closed.store(true, Ordering::Release);
        match self.client.get() {
            Some(c) => c.shut().await,
            None => Ok(()),
        }
    }
}

/// What a lazily connecting class holds: its client, its runtime and its endpoint(s) as shown.
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
                closed: AtomicBool::new(false),
            }),
            rt,
            endpoint,
        }
    }

    /// `f(client)` with the GIL released.
    pub(crate) fn block<T, F, Fut>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        F: FnOnce(C) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send,
        T: Send + 'static,
    {
        let s = Arc::clone(&self.state);
        self.rt.block_on(py, async move { f(s.get().await?).await })
    }

    /// `f(client)` as an awaitable.
    pub(crate) fn spawn<'py, T, F, Fut>(&self, py: Python<'py>, f: F) -> PyResult<Bound<'py, PyAny>>
    where
        F: FnOnce(C) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        let s = Arc::clone(&self.state);
        future_into_py(py, self.rt, async move { f(s.get().await?).await })
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
