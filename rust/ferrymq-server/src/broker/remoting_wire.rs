//! What every remoting request handler of the embedded broker shares: the connection a request
//! arrived on (`Conn`), the reply type (`Answer`), replies as a Java server sends them, and
//! reading required header fields.
//!
//! The server loop ([`remoting`](super::remoting)) and the pull and send handlers
//! ([`remoting_pull`](super::remoting_pull), [`remoting_send`](super::remoting_send)) import
//! this module; it imports none of them.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::endpoint::{Core, Endpoint};
use super::store::Queue;
use crate::remoting::codec::{RemotingCommand, VERSION};
use crate::remoting::codes::response as rs;

/// `LanguageCode` of the replies: the server is "Java".
const LANGUAGE_JAVA: u8 = 0;
/// The cluster every endpoint belongs to.
pub(crate) const CLUSTER: &str = "DefaultCluster";
/// The region the broker stamps on messages and send replies.
pub(crate) const REGION: &str = "DefaultRegion";

/// What a request handler needs: the broker, the endpoint, the peer and the connection's end.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) core: Arc<Core>,
    pub(crate) ep: Arc<Endpoint>,
    pub(crate) peer: SocketAddr,
    /// Cancelled when the connection ends or the broker shuts down.
    pub(crate) closed: CancellationToken,
}

impl Conn {
    /// The endpoint's remoting address (the store host of its messages).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.ep.remoting.addr.unwrap_or(self.ep.addr)
    }

    /// Queue `id` of `topic` on this endpoint, when both exist.
    pub(crate) fn queue(&self, topic: &str, id: i32) -> Option<Arc<Queue>> {
        self.core
            .store
            .topic(topic)?
            .queue(self.ep.index, id)
            .cloned()
    }
}

/// A reply, or the error reply a handler stops with.
pub(crate) type Answer = Result<RemotingCommand, RemotingCommand>;

/// The reply to `req` with `code`, as a Java server of version 5.3.3 sends it.
pub(crate) fn reply(req: &RemotingCommand, code: i32, remark: Option<String>) -> RemotingCommand {
    let mut r = RemotingCommand::response(code, req.opaque, remark);
    r.language = LANGUAGE_JAVA;
    r.version = VERSION;
    r
}

/// An error reply with a remark.
pub(crate) fn refuse(
    req: &RemotingCommand,
    code: i32,
    remark: impl Into<String>,
) -> RemotingCommand {
    reply(req, code, Some(remark.into()))
}

/// A required header field; missing, it is the `SYSTEM_ERROR` a Java server answers.
pub(crate) fn field<'a>(req: &'a RemotingCommand, key: &str) -> Result<&'a str, RemotingCommand> {
    req.ext(key).ok_or_else(|| {
        refuse(
            req,
            rs::SYSTEM_ERROR,
            format!("the custom field <{key}> is null"),
        )
    })
}

/// A required numeric header field.
pub(crate) fn number<T: std::str::FromStr>(
    req: &RemotingCommand,
    key: &str,
) -> Result<T, RemotingCommand> {
    field(req, key)?.trim().parse().map_err(|_| {
        refuse(
            req,
            rs::SYSTEM_ERROR,
            format!("the custom field <{key}> is not a number"),
        )
    })
}

/// An optional boolean header field (`Boolean.parseBoolean`: only "true" is true).
pub(crate) fn flag_field(req: &RemotingCommand, key: &str) -> bool {
    req.ext(key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
}
