//! Subscription filter expressions: which messages of a topic a consumer group wants.
//!
//! RocketMQ filters on the broker. A TAG expression is `*` (everything) or tags joined by `||`
//! (`"TagA || TagB"`); an SQL92 expression filters on user properties (`"a > 1 AND b = 'x'"`) and
//! needs `enablePropertyFilter=true` on the broker.

use std::fmt;

use crate::error::{Error, Result};
use crate::proto;

/// Longest filter expression accepted, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 64 * 1024;

/// The two filter languages of RocketMQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterType {
    /// Tags joined by `||`, or `*`.
    Tag,
    /// An SQL92 condition over user properties.
    Sql,
}

impl FilterType {
    /// `"TAG"` or `"SQL"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FilterType::Tag => "TAG",
            FilterType::Sql => "SQL",
        }
    }
}

/// A validated filter expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FilterExpression {
    kind: FilterType,
    expression: String,
}

impl FilterExpression {
    /// The expression that matches every message (`TAG *`).
    pub fn all() -> Self {
        Self {
            kind: FilterType::Tag,
            expression: "*".to_string(),
        }
    }

    /// A TAG expression: `*`, one tag, or tags joined by `||`. Blanks around tags are ignored.
    pub fn tag(expression: &str) -> Result<Self> {
        let e = expression.trim();
        if e.is_empty() {
            return Err(Error::invalid(
                "filter",
                "a tag expression must not be blank (use \"*\" for every message)",
            ));
        }
        check_len(e)?;
        if e == "*" {
            return Ok(Self::all());
        }
        let tags: Vec<&str> = e.split("||").map(str::trim).collect();
        if tags.iter().any(|t| t.is_empty()) {
            return Err(Error::invalid(
                "filter",
                format!("tag expression {expression:?} has an empty tag around '||'"),
            ));
        }
        if let Some(t) = tags
            .iter()
            .find(|t| t.contains('*') || t.chars().any(char::is_control) || t.contains('|'))
        {
            return Err(Error::invalid(
                "filter",
                format!("tag {t:?} in {expression:?} is not valid ('*' only stands alone)"),
            ));
        }
        Ok(Self {
            kind: FilterType::Tag,
            expression: tags.join("||"),
        })
    }

    /// An SQL92 expression over user properties, e.g. `"a > 1 AND region = 'eu'"`.
    pub fn sql(expression: &str) -> Result<Self> {
        let e = expression.trim();
        if e.is_empty() {
            return Err(Error::invalid(
                "filter",
                "an SQL expression must not be blank",
            ));
        }
        check_len(e)?;
        Ok(Self {
            kind: FilterType::Sql,
            expression: e.to_string(),
        })
    }

    /// The filter language.
    pub fn kind(&self) -> FilterType {
        self.kind
    }

    /// The normalised expression text.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether this filter matches every message.
    pub fn is_all(&self) -> bool {
        self.kind == FilterType::Tag && self.expression == "*"
    }

    /// Whether a message with `tag` passes a TAG filter (SQL filters are the broker's business
    /// and always answer `true` here).
    pub fn matches_tag(&self, tag: Option<&str>) -> bool {
        match self.kind {
            FilterType::Sql => true,
            FilterType::Tag if self.is_all() => true,
            FilterType::Tag => tag.is_some_and(|t| self.expression.split("||").any(|x| x == t)),
        }
    }

    /// The wire form.
    pub fn to_proto(&self) -> proto::FilterExpression {
        proto::FilterExpression {
            r#type: match self.kind {
                FilterType::Tag => proto::FilterType::Tag as i32,
                FilterType::Sql => proto::FilterType::Sql as i32,
            },
            expression: self.expression.clone(),
        }
    }
}

impl Default for FilterExpression {
    fn default() -> Self {
        Self::all()
    }
}

impl fmt::Display for FilterExpression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.expression)
    }
}

fn check_len(e: &str) -> Result<()> {
    if e.len() > MAX_EXPRESSION_BYTES {
        return Err(Error::invalid(
            "filter",
            format!("{} bytes, longer than {MAX_EXPRESSION_BYTES}", e.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_expressions_are_normalised() {
        let f = FilterExpression::tag(" TagA || TagB ").unwrap();
        assert_eq!(f.expression(), "TagA||TagB");
        assert!(f.matches_tag(Some("TagB")));
        assert!(!f.matches_tag(Some("TagC")));
        assert!(!f.matches_tag(None));
        assert!(FilterExpression::tag("*").unwrap().is_all());
        assert!(FilterExpression::all().matches_tag(None));
    }

    #[test]
    fn bad_expressions_name_the_field() {
        for bad in ["", "  ", "A||", "||B", "A*", "A|B"] {
            let e = FilterExpression::tag(bad).unwrap_err();
            assert!(e.message().starts_with("filter:"), "{bad:?}: {e}");
        }
        assert!(FilterExpression::sql(" ").is_err());
        let s = FilterExpression::sql("a > 1").unwrap();
        assert_eq!(s.kind(), FilterType::Sql);
        assert_eq!(s.to_proto().r#type, proto::FilterType::Sql as i32);
        assert_eq!(s.to_string(), "SQL a > 1");
    }
}
