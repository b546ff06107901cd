//! Options shared by every RocketMQ client class: `ferrymq.Credentials`, `ferrymq.TlsConfig`,
//! and the conversion of keyword arguments into `ferrymq_core::rocketmq::ClientOptions`.

use std::path::PathBuf;

use ferrymq_core::rocketmq::{ClientOptions, Credentials, TlsOptions};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::errors::{invalid, to_pyerr};

/// Access key / secret key for request signing. The secret never appears in `repr`.
#[pyclass(name = "Credentials", module = "ferrymq", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyCredentials {
    pub inner: Credentials,
}

#[pymethods]
impl PyCredentials {
    #[new]
    #[pyo3(signature = (access_key, secret_key, security_token=None))]
    fn new(
        access_key: String,
        secret_key: String,
        security_token: Option<String>,
    ) -> PyResult<Self> {
        Ok(Self {
            inner: Credentials::new(access_key, secret_key, security_token).map_err(to_pyerr)?,
        })
    }
    #[getter]
    fn access_key(&self) -> &str {
        self.inner.access_key()
    }
    fn __repr__(&self) -> String {
        format!(
            "Credentials(access_key={:?}, secret_key=<redacted>)",
            self.inner.access_key()
        )
    }
}

/// TLS settings: system roots by default, or a CA file, or (tests only) no verification.
#[pyclass(name = "TlsConfig", module = "ferrymq", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyTlsConfig {
    pub inner: TlsOptions,
}

#[pymethods]
impl PyTlsConfig {
    #[new]
    #[pyo3(signature = (*, ca_file=None, insecure=false, server_name=None))]
    fn new(ca_file: Option<PathBuf>, insecure: bool, server_name: Option<String>) -> Self {
        Self {
            inner: TlsOptions {
                ca_file,
                insecure,
                server_name,
            },
        }
    }
    #[getter]
    fn ca_file(&self) -> Option<String> {
        self.inner.ca_file.as_ref().map(|p| p.display().to_string())
    }
    #[getter]
    fn insecure(&self) -> bool {
        self.inner.insecure
    }
    #[getter]
    fn server_name(&self) -> Option<&str> {
        self.inner.server_name.as_deref()
    }
    fn __repr__(&self) -> String {
        format!(
            "TlsConfig(ca_file={:?}, insecure={}, server_name={:?})",
            self.ca_file(),
            if self.inner.insecure { "True" } else { "False" },
            self.inner.server_name
        )
    }
}

pub fn extract_credentials(v: &Bound<'_, PyAny>) -> PyResult<Credentials> {
    if let Ok(c) = v.cast::<PyCredentials>() {
        return Ok(c.get().inner.clone());
    }
    if let Ok(t) = v.cast::<PyTuple>() {
        let parts: Vec<String> = t
            .extract()
            .map_err(|_| invalid("credentials", "a tuple must hold str values"))?;
        return match parts.as_slice() {
            [ak, sk] => Credentials::new(ak.clone(), sk.clone(), None),
            [ak, sk, tok] => Credentials::new(ak.clone(), sk.clone(), Some(tok.clone())),
            _ => {
                return Err(invalid(
                    "credentials",
                    "a tuple must be (access_key, secret_key[, security_token])",
                ))
            }
        }
        .map_err(to_pyerr);
    }
    Err(invalid(
        "credentials",
        "must be ferrymq.Credentials or an (access_key, secret_key) tuple",
    ))
}

fn extract_tls(v: &Bound<'_, PyAny>) -> PyResult<Option<TlsOptions>> {
    if let Ok(b) = v.extract::<bool>() {
        return Ok(b.then(TlsOptions::default));
    }
    if let Ok(t) = v.cast::<PyTlsConfig>() {
        return Ok(Some(t.get().inner.clone()));
    }
    if v.is_instance_of::<PyString>() || v.hasattr("__fspath__")? {
        let path: PathBuf = v.extract()?;
        return Ok(Some(TlsOptions {
            ca_file: Some(path),
            ..TlsOptions::default()
        }));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut t = TlsOptions::default();
        for (k, val) in d.iter() {
            let k: String = k.extract()?;
            match k.as_str() {
                "ca_file" => t.ca_file = val.extract()?,
                "insecure" => t.insecure = val.extract()?,
                "server_name" => t.server_name = val.extract()?,
                other => return Err(invalid("tls", format!("unknown key {other:?}"))),
            }
        }
        return Ok(Some(t));
    }
    Err(invalid(
        "tls",
        "must be a bool, a CA file path or ferrymq.TlsConfig",
    ))
}

/// An `endpoints` argument: a str `"<form>"`, or a list of them (joined by `;`).
pub fn extract_endpoints(endpoints: &Bound<'_, PyAny>, form: &str) -> PyResult<String> {
    if let Ok(s) = endpoints.extract::<String>() {
        return Ok(s);
    }
    let list: Vec<String> = endpoints.extract().map_err(|_| {
        invalid(
            "endpoints",
            format!("must be a str \"{form}\" or a list of them"),
        )
    })?;
    Ok(list.join(";"))
}

/// Keyword arguments of every RocketMQ client.
#[allow(clippy::too_many_arguments)]
pub fn client_options(
    endpoints: &Bound<'_, PyAny>,
    credentials: Option<&Bound<'_, PyAny>>,
    namespace: Option<String>,
    tls: Option<&Bound<'_, PyAny>>,
    request_timeout: Option<&Bound<'_, PyAny>>,
    max_attempts: Option<i64>,
    heartbeat_interval: Option<&Bound<'_, PyAny>>,
    route_refresh_interval: Option<&Bound<'_, PyAny>>,
    settings_sync_interval: Option<&Bound<'_, PyAny>>,
) -> PyResult<ClientOptions> {
    let mut o = ClientOptions::new(extract_endpoints(endpoints, "host:port[;host:port]")?);
    if let Some(c) = credentials.filter(|c| !c.is_none()) {
        o.credentials = Some(extract_credentials(c)?);
    }
    o.namespace = namespace.unwrap_or_default();
    if let Some(t) = tls.filter(|t| !t.is_none()) {
        o.tls = extract_tls(t)?;
    }
    if let Some(t) = request_timeout.filter(|t| !t.is_none()) {
        o.request_timeout = Some(crate::durations::positive("request_timeout", t)?);
    }
    if let Some(n) = max_attempts {
        o.max_attempts = Some(
            u32::try_from(n)
                .ok()
                .filter(|n| *n >= 1 && *n <= 100)
                .ok_or_else(|| invalid("max_attempts", format!("{n} is not from 1 to 100")))?,
        );
    }
    if let Some(t) = heartbeat_interval.filter(|t| !t.is_none()) {
        o.heartbeat_interval = crate::durations::positive("heartbeat_interval", t)?;
    }
    if let Some(t) = route_refresh_interval.filter(|t| !t.is_none()) {
        o.route_refresh_interval = crate::durations::positive("route_refresh_interval", t)?;
    }
    if let Some(t) = settings_sync_interval.filter(|t| !t.is_none()) {
        o.settings_sync_interval = crate::durations::positive("settings_sync_interval", t)?;
    }
    Ok(o)
}
