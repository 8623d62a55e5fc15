//! Text logs escaped at the sink: [`LogFields`] formats every field of a
//! text log line through [`Escaped`]. The escaping itself is
//! `lockstep_core::escape`, re-exported here so `crate::escape::...` paths
//! stay valid.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

pub use lockstep_core::escape::*;

/// Field formatting for text logs: every field value (the message, `%`
/// and `?` fields, errors) is escaped, so one event stays one line and a
/// ref or a summary from a webhook cannot drive the terminal reading the
/// log. JSON logs do not use it: JSON escapes by itself and keeps the raw
/// value for machines.
///
/// Otherwise as tracing's default: the message, then `name=value` pairs.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogFields;

impl<'writer> FormatFields<'writer> for LogFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut v = LogVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct LogVisitor<'a> {
    writer: Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl LogVisitor<'_> {
    fn field(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // Metadata of events that came from the `log` crate.
        if name.starts_with("log.") {
            return;
        }
        let pad = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{pad}{}", Escaped(value))
        } else {
            let name = name.strip_prefix("r#").unwrap_or(name);
            if self.writer.has_ansi_escapes() {
                // An italic name and a dimmed `=`, as tracing's default.
                write!(
                    self.writer,
                    "{pad}\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m{}",
                    Escaped(value)
                )
            } else {
                write!(self.writer, "{pad}{name}={}", Escaped(value))
            }
        };
    }
}

impl Visit for LogVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.field(field, format_args!("{value}"));
        } else {
            self.field(field, format_args!("{value:?}"));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut sources = Vec::new();
        let mut next = value.source();
        while let Some(s) = next {
            sources.push(s.to_string());
            next = s.source();
        }
        if sources.is_empty() {
            self.field(field, format_args!("{value}"));
        } else {
            self.field(
                field,
                format_args!("{value} {}.sources=[{}]", field.name(), sources.join(", ")),
            );
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field, format_args!("{value:?}"));
    }
}
