//! Transactions of the RocketMQ producer: half messages of a [`Transaction`] ended with
//! `EndTransaction` (commit or roll back), and the broker's orphaned-transaction checks
//! answered by a [`TransactionChecker`].

use std::sync::Arc;

use futures::future::BoxFuture;
use parking_lot::Mutex;

use super::client::{check_status, deadline, Client, CommandHandler};
use super::endpoints::Endpoints;
use super::message_view::MessageView;
use super::producer::{Mode, Producer, SendReceipt};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::metrics::Operation;
use crate::proto;

/// How a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionResolution {
    /// Deliver the half messages.
    Commit,
    /// Discard them.
    Rollback,
    /// Not known yet: the broker asks again later.
    Unknown,
}

/// Answers the broker's orphaned-transaction checks.
pub trait TransactionChecker: Send + Sync + 'static {
    /// How did transaction `transaction_id`, which sent `message`, end?
    fn check(
        &self,
        message: MessageView,
        transaction_id: String,
    ) -> BoxFuture<'static, TransactionResolution>;
}

/// Answers the broker's orphaned-transaction checks with the producer's checker.
pub(super) struct TransactionHandler {
    pub(super) checker: Option<Arc<dyn TransactionChecker>>,
}

impl CommandHandler for TransactionHandler {
    fn recover_orphaned_transaction(
        &self,
        client: Client,
        endpoints: Endpoints,
        message: MessageView,
        transaction_id: String,
    ) -> BoxFuture<'static, ()> {
        let Some(checker) = self.checker.clone() else {
            tracing::warn!(target: "ferrymq::rocketmq", message_id = %message.message_id(), "orphaned-transaction check, but the producer has no transaction_checker");
            return Box::pin(async {});
        };
        Box::pin(async move {
            let topic = message.topic().to_string();
            let message_id = message.message_id().to_string();
            let resolution = checker.check(message, transaction_id.clone()).await;
            if resolution == TransactionResolution::Unknown {
                tracing::debug!(target: "ferrymq::rocketmq", message_id = %message_id, "transaction checker answered unknown");
                return;
            }
            if let Err(e) = end_transaction(
                &client,
                &endpoints,
                &topic,
                &message_id,
                &transaction_id,
                resolution,
                proto::TransactionSource::SourceServerCheck,
            )
            .await
            {
                tracing::warn!(target: "ferrymq::rocketmq", message_id = %message_id, error = %e, "cannot resolve an orphaned transaction");
            }
        })
    }
}

/// Send `EndTransaction` for one half message.
pub async fn end_transaction(
    client: &Client,
    endpoints: &Endpoints,
    topic: &str,
    message_id: &str,
    transaction_id: &str,
    resolution: TransactionResolution,
    source: proto::TransactionSource,
) -> Result<()> {
    let resolution = match resolution {
        TransactionResolution::Commit => proto::TransactionResolution::Commit,
        TransactionResolution::Rollback => proto::TransactionResolution::Rollback,
        TransactionResolution::Unknown => return Ok(()),
    };
    let timeout = client.settings().request_timeout;
    let req = client.request_with_timeout(
        proto::EndTransactionRequest {
            topic: Some(client.resource(topic)),
            message_id: message_id.to_string(),
            transaction_id: transaction_id.to_string(),
            resolution: resolution as i32,
            source: source as i32,
            trace_context: String::new(),
        },
        timeout,
    );
    let mut stub = client.stub(endpoints)?;
    let resp = deadline(timeout, stub.end_transaction(req))
        .await
        .map_err(|e| e.context("end transaction"))?;
    check_status(resp.into_inner().status.as_ref()).map_err(|e| e.context("end transaction"))
}

struct TxState {
    receipts: Vec<SendReceipt>,
    ended: Option<TransactionResolution>,
}

/// A local transaction: half messages sent with [`Transaction::send`] become visible on
/// [`Transaction::commit`] or are discarded on [`Transaction::rollback`].
pub struct Transaction {
    producer: Producer,
    state: Mutex<TxState>,
}

impl std::fmt::Debug for Transaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("Transaction")
            .field("messages", &st.receipts.len())
            .field("ended", &st.ended)
            .finish()
    }
}

impl Transaction {
    pub(super) fn new(producer: Producer) -> Self {
        Self {
            producer,
            state: Mutex::new(TxState {
                receipts: Vec::new(),
                ended: None,
            }),
        }
    }

    fn check_open(&self) -> Result<()> {
        match self.state.lock().ended {
            None => Ok(()),
            Some(r) => Err(Error::invalid(
                "transaction",
                format!(
                    "already {}",
                    if r == TransactionResolution::Commit {
                        "committed"
                    } else {
                        "rolled back"
                    }
                ),
            )),
        }
    }

    /// Send a half message (never retried: a failure is returned at once).
    pub async fn send(&self, message: Message) -> Result<SendReceipt> {
        self.check_open()?;
        let receipt = self
            .producer
            .send_messages(vec![message], Mode::Transactional)
            .await?
            .pop()
            .ok_or_else(|| Error::protocol("the broker returned no send result"))?;
        if receipt.transaction_id.is_none() {
            return Err(Error::protocol(
                "the broker returned no transaction id for a half message",
            ));
        }
        self.state.lock().receipts.push(receipt.clone());
        Ok(receipt)
    }

    /// How the transaction ended, if it did.
    pub fn ended(&self) -> Option<TransactionResolution> {
        self.state.lock().ended
    }

    /// The receipts of the half messages sent so far.
    pub fn receipts(&self) -> Vec<SendReceipt> {
        self.state.lock().receipts.clone()
    }

    /// Commit every half message.
    pub async fn commit(&self) -> Result<()> {
        self.end(TransactionResolution::Commit).await
    }

    /// Roll back every half message.
    pub async fn rollback(&self) -> Result<()> {
        self.end(TransactionResolution::Rollback).await
    }

    async fn end(&self, resolution: TransactionResolution) -> Result<()> {
        let receipts = {
            let mut st = self.state.lock();
            if let Some(r) = st.ended {
                if r == resolution {
                    return Ok(());
                }
            }
            drop(st);
            self.check_open()?;
            st = self.state.lock();
            st.ended = Some(resolution);
            st.receipts.clone()
        };
        let _guard = self.producer.enter()?;
        let op = self.producer.metrics().begin(Operation::EndTransaction);
        let client = self.producer.client();
        let results = futures::future::join_all(receipts.iter().map(|r| {
            end_transaction(
                client,
                &r.endpoints,
                &r.topic,
                &r.message_id,
                r.transaction_id.as_deref().unwrap_or_default(),
                resolution,
                proto::TransactionSource::SourceClient,
            )
        }))
        .await;
        let outcome = results.into_iter().collect::<Result<Vec<()>>>().map(drop);
        // One record per transaction, on its first topic, carrying its half messages.
        let topic = receipts.first().map_or("", |r| r.topic.as_str());
        op.finish(topic, receipts.len() as u64, outcome.as_ref().copied());
        outcome
    }
}
