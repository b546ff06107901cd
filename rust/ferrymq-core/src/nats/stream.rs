//! JetStream stream management: create a stream with subjects, read its state, delete it.
//!
//! Enough for tests, benchmarks and simple deployments; anything richer belongs to the `nats`
//! CLI or the server's configuration.

use std::time::Duration;

use async_nats::jetstream::stream;

use super::{error, JetStream};
use crate::error::{Error, Result};

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Storage {
    /// On disk (the server default).
    #[default]
    File,
    /// In memory.
    Memory,
}

impl Storage {
    /// Parse `"file"` or `"memory"`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "file" => Ok(Storage::File),
            "memory" => Ok(Storage::Memory),
            other => Err(Error::invalid(
                "storage",
                format!("{other:?} is not \"file\" or \"memory\""),
            )),
        }
    }
}

/// When a stream discards messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Retention {
    /// Keep messages until a limit is reached (the default).
    #[default]
    Limits,
    /// Keep messages while a consumer is interested.
    Interest,
    /// Remove each message once it is acked (a work queue).
    WorkQueue,
}

impl Retention {
    /// Parse `"limits"`, `"interest"` or `"workqueue"`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "limits" => Ok(Retention::Limits),
            "interest" => Ok(Retention::Interest),
            "workqueue" | "work_queue" => Ok(Retention::WorkQueue),
            other => Err(Error::invalid(
                "retention",
                format!("{other:?} is not \"limits\", \"interest\" or \"workqueue\""),
            )),
        }
    }
}

/// The settings of a stream ferrymq can create.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamConfig {
    /// Stream name: no spaces, dots, `*` or `>`.
    pub name: String,
    /// Subjects stored in the stream (wildcards allowed).
    pub subjects: Vec<String>,
    /// File or memory.
    pub storage: Storage,
    /// Retention policy.
    pub retention: Retention,
    /// Window in which a repeated `Nats-Msg-Id` is dropped (server default: 2 minutes).
    pub duplicate_window: Option<Duration>,
    /// Most messages kept (`None`: unlimited).
    pub max_messages: Option<i64>,
    /// Most bytes kept (`None`: unlimited).
    pub max_bytes: Option<i64>,
    /// Oldest message kept (`None`: no age limit).
    pub max_age: Option<Duration>,
    /// Replicas (1 on a single server).
    pub replicas: usize,
}

/// The state of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// Name.
    pub name: String,
    /// Subjects.
    pub subjects: Vec<String>,
    /// Messages stored.
    pub messages: u64,
    /// Bytes stored.
    pub bytes: u64,
    /// First sequence stored.
    pub first_sequence: u64,
    /// Last sequence stored.
    pub last_sequence: u64,
    /// Consumers defined on the stream.
    pub consumer_count: usize,
    /// The de-duplication window.
    pub duplicate_window: Duration,
}

impl From<stream::Info> for StreamInfo {
    fn from(i: stream::Info) -> Self {
        Self {
            name: i.config.name,
            subjects: i.config.subjects,
            messages: i.state.messages,
            bytes: i.state.bytes,
            first_sequence: i.state.first_sequence,
            last_sequence: i.state.last_sequence,
            consumer_count: i.state.consumer_count,
            duplicate_window: i.config.duplicate_window,
        }
    }
}

/// Check a stream (or consumer) name: non-empty, no whitespace, `.`, `*`, `>`, `/` or `\`.
pub fn validate_name(field: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
    {
        return Err(Error::invalid(
            field,
            format!("{name:?} contains {c:?}, which JetStream names may not contain"),
        ));
    }
    Ok(())
}

impl StreamConfig {
    fn to_nats(&self) -> Result<stream::Config> {
        validate_name("name", &self.name)?;
        if self.subjects.is_empty() {
            return Err(Error::invalid("subjects", "give at least one subject"));
        }
        for s in &self.subjects {
            if s.is_empty() || s.split('.').any(str::is_empty) || s.contains(char::is_whitespace) {
                return Err(Error::invalid(
                    "subjects",
                    format!("{s:?} is not a valid subject"),
                ));
            }
        }
        Ok(stream::Config {
            name: self.name.clone(),
            subjects: self.subjects.clone(),
            storage: match self.storage {
                Storage::File => stream::StorageType::File,
                Storage::Memory => stream::StorageType::Memory,
            },
            retention: match self.retention {
                Retention::Limits => stream::RetentionPolicy::Limits,
                Retention::Interest => stream::RetentionPolicy::Interest,
                Retention::WorkQueue => stream::RetentionPolicy::WorkQueue,
            },
            duplicate_window: self.duplicate_window.unwrap_or_default(),
            max_messages: self.max_messages.unwrap_or(-1),
            max_bytes: self.max_bytes.unwrap_or(-1),
            max_age: self.max_age.unwrap_or_default(),
            num_replicas: self.replicas.max(1),
            ..stream::Config::default()
        })
    }
}

impl JetStream {
    /// Create a stream; if one with the same name and settings exists, return its state.
    pub async fn create_stream(&self, config: &StreamConfig) -> Result<StreamInfo> {
        let cfg = config.to_nats()?;
        let what = format!("create stream {:?}", config.name);
        let mut s = self
            .context()
            .create_stream(cfg)
            .await
            .map_err(|e| error::map(&what, e))?;
        let info = s.info().await.map_err(|e| error::map(&what, e))?;
        Ok(info.clone().into())
    }

    /// The current state of stream `name`.
    pub async fn stream_info(&self, name: &str) -> Result<StreamInfo> {
        validate_name("stream", name)?;
        let what = format!("stream info {name:?}");
        let mut s = self
            .context()
            .get_stream(name)
            .await
            .map_err(|e| error::map(&what, e))?;
        let info = s.info().await.map_err(|e| error::map(&what, e))?;
        Ok(info.clone().into())
    }

    /// Delete stream `name`; `false` when it did not exist.
    pub async fn delete_stream(&self, name: &str) -> Result<bool> {
        validate_name("stream", name)?;
        match self.context().delete_stream(name).await {
            Ok(status) => Ok(status.success),
            Err(e) => {
                let err = error::map(&format!("delete stream {name:?}"), e);
                if err.status().is_some_and(|s| s.code == 10059) {
                    Ok(false)
                } else {
                    Err(err)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_subjects_are_checked() {
        assert!(validate_name("name", "ORDERS").is_ok());
        let e = validate_name("name", "a.b").unwrap_err();
        assert!(e.message().starts_with("name:"), "{e}");
        let cfg = StreamConfig {
            name: "S".into(),
            ..StreamConfig::default()
        };
        let e = cfg.to_nats().unwrap_err();
        assert!(e.message().starts_with("subjects:"), "{e}");
        let cfg = StreamConfig {
            name: "S".into(),
            subjects: vec!["a.>".into()],
            duplicate_window: Some(Duration::from_secs(60)),
            ..StreamConfig::default()
        };
        let n = cfg.to_nats().unwrap();
        assert_eq!(n.max_messages, -1);
        assert_eq!(n.duplicate_window, Duration::from_secs(60));
        assert_eq!(Storage::parse("MEMORY").unwrap(), Storage::Memory);
        assert!(Retention::parse("x").is_err());
    }
}
