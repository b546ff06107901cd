//! Channels to brokers: one lazily-connected HTTP/2 connection ([`H2Channel`]) per address,
//! shared by every request of a client (HTTP/2 multiplexes any number of in-flight RPCs on it).
//! An [`Endpoints`] with several addresses rotates over their channels.
//!
//! TLS goes through rustls with the `ring` provider: system roots (default), a custom CA file,
//! or an explicit insecure mode that accepts any certificate (for self-signed test proxies).
//!
//! [`deadline`] bounds one RPC on such a channel; the client and the telemetry session both use
//! it.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::channel::{Dial, H2Channel};
use super::endpoints::{Address, Endpoints};
use crate::error::{Error, Result};
use crate::proto::messaging_service_client::MessagingServiceClient;

/// The gRPC client type used for every RPC.
pub type Stub = MessagingServiceClient<H2Channel>;

/// Run `fut` with a deadline; a timeout becomes `ErrorKind::Timeout`.
pub async fn deadline<T, E, F>(timeout: Duration, fut: F) -> Result<T>
where
    F: Future<Output = std::result::Result<T, E>>,
    Error: From<E>,
{
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r.map_err(Error::from),
        Err(_) => Err(Error::timeout(format!(
            "no answer within {:.3}s",
            timeout.as_secs_f64()
        ))),
    }
}

/// TLS settings. `None` in [`ConnectionOptions::tls`] means plaintext.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// A PEM file of CA certificates to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate (no verification at all). For tests only.
    pub insecure: bool,
    /// The name to verify the certificate against (default: the host of each address).
    pub server_name: Option<String>,
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectionOptions {
    /// TLS, or plaintext when `None`.
    pub tls: Option<TlsOptions>,
    /// TCP + TLS connect timeout.
    pub connect_timeout: Duration,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        Self {
            tls: None,
            connect_timeout: Duration::from_secs(3),
        }
    }
}

struct EndpointChannels {
    stubs: Vec<Stub>,
    next: AtomicUsize,
}

/// The channels of one client, keyed by endpoints.
pub struct Connections {
    options: ConnectionOptions,
    tls: Option<Arc<ClientConfig>>,
    map: RwLock<HashMap<String, Arc<EndpointChannels>>>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("tls", &self.options.tls)
            .field("endpoints", &self.map.read().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Connections {
    /// Validate the options (reads the CA file now, so a bad path fails at construction).
    pub fn new(options: ConnectionOptions) -> Result<Self> {
        let tls = match &options.tls {
            None => None,
            Some(t) => Some(Arc::new(rustls_config(t)?)),
        };
        Ok(Self {
            options,
            tls,
            map: RwLock::new(HashMap::new()),
        })
    }

    /// A stub for `endpoints` (cheap: clones a shared channel; connects lazily).
    pub fn stub(&self, endpoints: &Endpoints) -> Result<Stub> {
        if let Some(ch) = self.map.read().get(endpoints.key()) {
            return Ok(pick(ch));
        }
        let mut map = self.map.write();
        if let Some(ch) = map.get(endpoints.key()) {
            return Ok(pick(ch));
        }
        let stubs = endpoints
            .addresses()
            .iter()
            .map(|a| self.connect(a))
            .collect::<Result<Vec<_>>>()?;
        let ch = Arc::new(EndpointChannels {
            stubs,
            next: AtomicUsize::new(0),
        });
        let stub = pick(&ch);
        map.insert(endpoints.key().to_string(), ch);
        Ok(stub)
    }

    /// Forget the channels of `endpoints`; the next [`Connections::stub`] reconnects.
    pub fn reset(&self, endpoints: &Endpoints) {
        self.map.write().remove(endpoints.key());
    }

    /// Drop every channel.
    pub fn clear(&self) {
        self.map.write().clear();
    }

    fn connect(&self, addr: &Address) -> Result<Stub> {
        let tls = match &self.tls {
            None => None,
            Some(cfg) => {
                let name = self
                    .options
                    .tls
                    .as_ref()
                    .and_then(|t| t.server_name.clone())
                    .unwrap_or_else(|| addr.host.clone());
                let server_name = ServerName::try_from(name.clone()).map_err(|_| {
                    Error::invalid("tls.server_name", format!("{name:?} is not a valid name"))
                })?;
                Some((Arc::clone(cfg), server_name))
            }
        };
        let authority = addr.authority();
        let channel = H2Channel::new(Dial {
            addr: authority.clone(),
            tls,
            connect_timeout: self.options.connect_timeout,
        })
        .map_err(|e| Error::invalid("endpoints", format!("{authority}: {e}")))?;
        Ok(MessagingServiceClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX))
    }
}

fn pick(ch: &EndpointChannels) -> Stub {
    let i = ch.next.fetch_add(1, Ordering::Relaxed) % ch.stubs.len();
    ch.stubs[i].clone()
}

fn rustls_config(t: &TlsOptions) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("TLS setup: {e}")))?;
    let mut config = if t.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        if let Some(path) = &t.ca_file {
            use rustls::pki_types::pem::PemObject;
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| Error::invalid("tls.ca_file", format!("{}: {e}", path.display())))?
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::invalid("tls.ca_file", format!("{}: {e}", path.display())))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(Error::invalid(
                    "tls.ca_file",
                    format!("{} holds no usable certificate", path.display()),
                ));
            }
        } else {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(Error::invalid(
                    "tls",
                    "no system root certificates found; pass a ca_file or insecure=True",
                ));
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The verifier of `insecure` mode: accepts every certificate and signature.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[tokio::test]
    async fn stubs_are_shared_per_endpoint() {
        let c = Connections::new(ConnectionOptions::default()).unwrap();
        let ep = Endpoints::parse_access_point("127.0.0.1:1;127.0.0.1:2")
            .unwrap()
            .endpoints;
        c.stub(&ep).unwrap();
        c.stub(&ep).unwrap();
        assert_eq!(c.map.read().len(), 1);
        assert_eq!(c.map.read()[ep.key()].stubs.len(), 2);
        c.reset(&ep);
        assert!(c.map.read().is_empty());
    }

    /// A call to an address where nothing listens fails as a connection error; once a broker
    /// listens there, the next call on the same stub connects.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_connection_is_retried_by_the_next_call() {
        use ferrymq_server::broker::{Broker, BrokerConfig};
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Connections::new(ConnectionOptions::default()).unwrap();
        let ep = Endpoints::parse_access_point(&format!("127.0.0.1:{port}"))
            .unwrap()
            .endpoints;
        let metadata = super::super::metadata::RequestMetadata::new("c@1@0@x", "", None).unwrap();
        let heartbeat = || {
            let mut r = tonic::Request::new(crate::proto::HeartbeatRequest {
                group: None,
                client_type: crate::proto::ClientType::Producer as i32,
            });
            metadata.apply(r.metadata_mut());
            r
        };
        let e = Error::from(
            c.stub(&ep)
                .unwrap()
                .heartbeat(heartbeat())
                .await
                .unwrap_err(),
        );
        assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
        let broker = Broker::start(BrokerConfig {
            ports: vec![port],
            ..BrokerConfig::default()
        })
        .await
        .unwrap();
        // Answered (a heartbeat without a group is refused, but by the broker).
        let r = c.stub(&ep).unwrap().heartbeat(heartbeat()).await.unwrap();
        assert!(r.into_inner().status.is_some());
        drop(broker);
    }

    #[test]
    fn tls_options_are_validated() {
        let e = Connections::new(ConnectionOptions {
            tls: Some(TlsOptions {
                ca_file: Some("/nonexistent/ca.pem".into()),
                ..TlsOptions::default()
            }),
            ..ConnectionOptions::default()
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().starts_with("tls.ca_file"), "{e}");
        Connections::new(ConnectionOptions {
            tls: Some(TlsOptions {
                insecure: true,
                ..TlsOptions::default()
            }),
            ..ConnectionOptions::default()
        })
        .unwrap();
    }
}
