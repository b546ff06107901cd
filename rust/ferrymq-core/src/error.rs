//! The one error type of the core.
//!
//! Every failure is an [`Error`] with an [`ErrorKind`]; broker answers keep their status code
//! (`apache.rocketmq.v2.Code`, a classic remoting `ResponseCode`, a JMQ4 or a NATS code) and
//! whether retrying may help. The Python binding maps kinds to the `ferrymq.FerryError` tree in
//! a single function.

use std::fmt;

use crate::status;

/// Result alias used across the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarse enough to map onto one exception class each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The broker could not be reached, or the connection broke.
    Connection,
    /// A deadline passed before the broker answered.
    Timeout,
    /// Bytes on the wire did not decode, or the peer broke the protocol.
    Protocol,
    /// The broker answered with a non-OK status code.
    Broker,
    /// The broker throttled the request (`TOO_MANY_REQUESTS` and friends).
    FlowControl,
    /// The caller passed something invalid; nothing was sent.
    InvalidArgument,
    /// The client (or broker) was closed, or belongs to another process after `fork()`.
    Closed,
    /// A bug: a panic or a broken invariant inside ferrymq.
    Internal,
}

/// Which wire protocol a broker status code belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `apache.rocketmq.v2.Code`.
    RocketMq,
    /// JMQ4 (JoyQueue) `JoyQueueCode`.
    Jmq,
    /// NATS JetStream API error code.
    Nats,
    /// Classic RocketMQ remoting (TCP) response code (`ResponseCode`).
    Remoting,
}

/// A non-OK answer from a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerStatus {
    /// The protocol the code comes from.
    pub protocol: Protocol,
    /// The numeric status code as sent on the wire.
    pub code: i32,
    /// The symbolic name of the code, when known.
    pub name: &'static str,
    /// Whether retrying the same request may succeed.
    pub retriable: bool,
}

/// The error type of ferrymq-core.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    status: Option<BrokerStatus>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    /// A new error of `kind` with a human-readable message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            source: None,
        }
    }

    /// Bad input from the caller; `field` names what was wrong.
    pub fn invalid(field: &str, why: impl fmt::Display) -> Self {
        Self::new(ErrorKind::InvalidArgument, format!("{field}: {why}"))
    }

    /// Refuse a zero count: `field` "must be at least 1".
    pub fn require_count<T: PartialEq + Default>(field: &str, n: T) -> Result<()> {
        if n == T::default() {
            return Err(Self::invalid(field, "must be at least 1"));
        }
        Ok(())
    }

    /// Refuse a zero duration: `field` "must be positive".
    pub fn require_positive(field: &str, d: std::time::Duration) -> Result<()> {
        if d.is_zero() {
            return Err(Self::invalid(field, "must be positive"));
        }
        Ok(())
    }

    /// A copy to report elsewhere (to an observer): the same kind, broker status and text,
    /// the source chain kept as text.
    pub fn to_report(&self) -> Self {
        Self {
            kind: self.kind,
            message: self.to_string(),
            status: self.status.clone(),
            source: None,
        }
    }

    /// Use of a closed client.
    pub fn closed(what: impl Into<String>) -> Self {
        Self::new(ErrorKind::Closed, what)
    }

    /// A protocol / decoding error.
    pub fn protocol(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Protocol, message)
    }

    /// A connection error.
    pub fn connection(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Connection, message)
    }

    /// A timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Timeout, message)
    }

    /// An internal error (a bug in ferrymq).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// A non-OK RocketMQ v2 status code from a broker.
    pub fn rocketmq_status(code: i32, message: impl Into<String>) -> Self {
        let class = status::classify(code);
        let kind = if class == status::Class::Throttled {
            ErrorKind::FlowControl
        } else {
            ErrorKind::Broker
        };
        let name = status::name(code);
        let message = message.into();
        let message = if message.is_empty() {
            name.to_string()
        } else {
            format!("{name}: {message}")
        };
        Self {
            kind,
            message,
            status: Some(BrokerStatus {
                protocol: Protocol::RocketMq,
                code,
                name,
                retriable: class.retriable(),
            }),
            source: None,
        }
    }

    /// A broker status of another protocol (JMQ4, NATS), classified by the caller.
    pub fn broker_status(
        status: BrokerStatus,
        flow_control: bool,
        message: impl Into<String>,
    ) -> Self {
        let kind = if flow_control {
            ErrorKind::FlowControl
        } else {
            ErrorKind::Broker
        };
        Self {
            kind,
            message: message.into(),
            status: Some(status),
            source: None,
        }
    }

    /// The same error for another caller (one failure reported to several): kind, message and
    /// broker status; the cause is kept as text in the message.
    pub fn replicate(&self) -> Self {
        Self {
            kind: self.kind,
            message: self.to_string(),
            status: self.status.clone(),
            source: None,
        }
    }

    /// Attach the underlying cause.
    #[must_use]
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Prefix the message with what was being done, e.g. `"send to topic t"`.
    #[must_use]
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }

    /// The coarse kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The broker status, when the broker answered with one.
    pub fn status(&self) -> Option<&BrokerStatus> {
        self.status.as_ref()
    }

    /// The RocketMQ status code, if this error carries one.
    pub fn rocketmq_code(&self) -> Option<i32> {
        self.status
            .as_ref()
            .filter(|s| s.protocol == Protocol::RocketMq)
            .map(|s| s.code)
    }

    /// Whether retrying the operation may succeed.
    pub fn is_retriable(&self) -> bool {
        match self.kind {
            ErrorKind::Connection | ErrorKind::Timeout | ErrorKind::FlowControl => true,
            ErrorKind::Broker => self.status.as_ref().is_some_and(|s| s.retriable),
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(src) = &self.source {
            write!(f, " ({src})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        use tonic::Code;
        let mut msg = format!("gRPC {:?}: {}", s.code(), s.message());
        let mut kind = match s.code() {
            Code::Unavailable | Code::Aborted => ErrorKind::Connection,
            Code::DeadlineExceeded | Code::Cancelled => ErrorKind::Timeout,
            Code::ResourceExhausted => ErrorKind::FlowControl,
            Code::Unimplemented => ErrorKind::Broker,
            Code::InvalidArgument => ErrorKind::InvalidArgument,
            Code::Unknown | Code::Internal | Code::DataLoss => ErrorKind::Protocol,
            _ => ErrorKind::Broker,
        };
        // A status that tonic made from a local transport failure (never one a server sent)
        // carries that failure as its source: name it (e.g. a plaintext client reading a TLS
        // server's alert as an HTTP/2 frame), and report it as the connection failure it is.
        let mut cause = std::error::Error::source(&s);
        if cause.is_some() && s.code() == Code::Unknown {
            kind = ErrorKind::Connection;
        }
        while let Some(c) = cause {
            let text = c.to_string();
            if !msg.contains(&text) {
                msg.push_str(": ");
                msg.push_str(&text);
            }
            cause = c.source();
        }
        let mut e = Error::new(kind, msg);
        if kind == ErrorKind::Broker {
            e.status = Some(BrokerStatus {
                protocol: Protocol::RocketMq,
                code: status::GRPC_BASE + s.code() as i32,
                name: "GRPC_STATUS",
                retriable: false,
            });
        }
        e
    }
}

impl From<tonic::transport::Error> for Error {
    fn from(e: tonic::transport::Error) -> Self {
        Error::connection("transport error").with_source(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match e.kind() {
            K::TimedOut => ErrorKind::Timeout,
            K::InvalidData | K::UnexpectedEof => ErrorKind::Protocol,
            _ => ErrorKind::Connection,
        };
        Error::new(kind, "I/O error").with_source(e)
    }
}

impl From<prost::DecodeError> for Error {
    fn from(e: prost::DecodeError) -> Self {
        Error::protocol("protobuf decode error").with_source(e)
    }
}

impl From<tokio::time::error::Elapsed> for Error {
    fn from(_: tokio::time::error::Elapsed) -> Self {
        Error::timeout("deadline exceeded")
    }
}

/// States a protocol's status codes once: a constant per code (with its doc, if any) and
/// `fn $name_fn(code) -> &'static str`, the code's symbolic name (`$unknown` for a code the
/// table does not list).
macro_rules! code_table {
    (
        $(#[$fm:meta])* fn $name_fn:ident -> $unknown:literal;
        $($(#[$m:meta])* $name:ident = $code:literal,)*
    ) => {
        $($(#[$m])* pub const $name: i32 = $code;)*

        $(#[$fm])*
        pub fn $name_fn(code: i32) -> &'static str {
            match code {
                $($code => stringify!($name),)*
                _ => $unknown,
            }
        }
    };
}

pub(crate) use code_table;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_is_flow_control_and_retriable() {
        let e = Error::rocketmq_status(42900, "slow down");
        assert_eq!(e.kind(), ErrorKind::FlowControl);
        assert!(e.is_retriable());
        assert_eq!(e.rocketmq_code(), Some(42900));
        assert_eq!(e.message(), "TOO_MANY_REQUESTS: slow down");
    }

    #[test]
    fn caller_errors_are_not_retriable() {
        let e = Error::rocketmq_status(40014, "");
        assert_eq!(e.kind(), ErrorKind::Broker);
        assert!(!e.is_retriable());
        assert_eq!(
            e.status().unwrap().name,
            "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"
        );
    }

    #[test]
    fn a_local_transport_failure_is_a_connection_error_naming_its_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe");
        let e: Error = tonic::Status::from_error(Box::new(io)).into();
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert!(e.message().ends_with("broken pipe"), "{}", e.message());
        // A status the server sent (no source) keeps its kind.
        let e: Error = tonic::Status::unknown("odd").into();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert_eq!(e.message(), "gRPC Unknown: odd");
    }

    #[test]
    fn grpc_unavailable_is_connection() {
        let e: Error = tonic::Status::unavailable("down").into();
        assert_eq!(e.kind(), ErrorKind::Connection);
        assert!(e.is_retriable());
    }
}
