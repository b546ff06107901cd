//! A blocking method and its `_async` twin, stated once.
//!
//! Most methods of the clients come in pairs: `poll` blocks on the runtime
//! ([`crate::runtime::RuntimeRef::block_on`], GIL released), `poll_async` returns an asyncio
//! future ([`crate::aio::future_into_py`]); both check the same arguments and run the same Rust
//! future. [`pymethods_with_async!`] writes a class's `#[pymethods]` block from its ordinary
//! methods and, for each pair, one body that checks the arguments and evaluates to that future:
//!
//! ```ignore
//! pymethods_with_async! {
//!     impl PyThing {
//!         // ordinary #[pymethods] items
//!     }
//!     /// Docs and attributes (e.g. `#[pyo3(signature = …)]`) apply to both methods.
//!     fn position / position_async(&self, py, queue: QueueTuple) -> i64 {
//!         let q = tq(queue)?;
//!         let c = self.inner.clone();
//!         async move { c.position(&q).await }
//!     }
//! }
//! ```
//!
//! The class has a field `rt: RuntimeRef`. A `?` in the body raises before anything runs, the
//! same in both methods.

/// See the module docs.
macro_rules! pymethods_with_async {
    (
        impl $ty:ty { $($plain:tt)* }
        $(
            $(#[$attr:meta])*
            fn $name:ident / $name_async:ident (
                &$self:ident, $py:ident $(, $(#[$arg_attr:meta])* $arg:ident : $arg_ty:ty)* $(,)?
            ) -> $out:ty $body:block
        )*
    ) => {
        #[pyo3::pymethods]
        impl $ty {
            $($plain)*
            $(
                $(#[$attr])*
                fn $name(
                    &$self,
                    $py: pyo3::Python<'_>,
                    $($(#[$arg_attr])* $arg: $arg_ty),*
                ) -> pyo3::PyResult<$out> {
                    let fut = $body;
                    $self.rt.block_on($py, fut)
                }

                $(#[$attr])*
                fn $name_async<'py>(
                    &$self,
                    $py: pyo3::Python<'py>,
                    $($(#[$arg_attr])* $arg: $arg_ty),*
                ) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::PyAny>> {
                    let fut = $body;
                    crate::aio::future_into_py($py, $self.rt, fut)
                }
            )*
        }
    };
}
