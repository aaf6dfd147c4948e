//! JSON lines whose span fields sit at the top level beside the event's own.
//!
//! tracing-subscriber's JSON format with `flatten_event` puts only the event's fields at the
//! top level and nests the span's under `"span"`. A line from inside a reconcile that does not
//! name the link itself (the cloud client's request lines, say) then carries only
//! `span.clusterlink`, and a collector query on `clusterlink` misses it. Here every field of
//! every span the event is in is copied to the top level too.
//!
//! On a clash the nearest wins: the event's own field, then the innermost span's, then the
//! outer ones'. `timestamp`, `level` and `target` come first and are never shadowed.
//!
//! `"span"` (the innermost span: its name and fields) stays, exactly as before: queries and
//! dashboards written against `span.clusterlink` or `span.name` keep working across an
//! upgrade, and the span's name is only there. It costs a few dozen bytes a line.

use std::fmt;

use serde::ser::SerializeMap;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event format; spans' fields must be recorded with [`JsonFields`] (`fmt_fields`), so
/// they can be read back from each span's extensions as a JSON object.
pub struct FlatJson;

impl<S> FormatEvent<S, JsonFields> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // The same clock and rendering as tracing-subscriber's own JSON lines had.
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut fields = EventFields::default();
        event.record(&mut fields);
        let meta = event.metadata();

        let mut line = Line::default();
        line.put("timestamp", timestamp.into());
        line.put("level", meta.level().as_str().into());
        let target = fields
            .log_target
            .unwrap_or_else(|| meta.target().to_owned());
        line.put("target", target.into());
        for (k, v) in fields.values {
            line.put(&k, v);
        }
        let mut innermost = None;
        // Innermost span first, so the nearest span's field wins over an outer one's.
        for span in ctx.event_scope().into_iter().flatten() {
            let ext = span.extensions();
            let recorded = ext
                .get::<FormattedFields<JsonFields>>()
                .map(|f| span_fields(f.as_str()))
                .unwrap_or_default();
            if innermost.is_none() {
                let mut nested = recorded.clone();
                nested.insert("name".into(), span.name().into());
                innermost = Some(nested);
            }
            for (k, v) in recorded {
                line.put(&k, v);
            }
        }
        if let Some(span) = innermost {
            line.put("span", Value::Object(span));
        }

        serde_json::to_writer(WriteAdaptor(&mut writer), &line).map_err(|_| fmt::Error)?;
        writeln!(writer)
    }
}

/// A span's fields as [`JsonFields`] recorded them: a JSON object, or nothing for a span
/// without fields (its string is empty until a field is recorded).
fn span_fields(recorded: &str) -> Map<String, Value> {
    serde_json::from_str(recorded).unwrap_or_default()
}

/// The line's entries in order; the first value put under a key stays.
#[derive(Default)]
struct Line(Vec<(String, Value)>);

/// An object with the entries in their order (serde_json's `Map` would sort them).
impl serde::Serialize for Line {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl Line {
    fn put(&mut self, key: &str, value: Value) {
        if !self.0.iter().any(|(k, _)| k == key) {
            self.0.push((key.to_owned(), value));
        }
    }
}

/// An event's fields in the order it gave them.
#[derive(Default)]
struct EventFields {
    values: Vec<(String, Value)>,
    /// Records of the `log` crate arrive through tracing-log as events of target `log`, their
    /// real target in the field `log.target`.
    log_target: Option<String>,
}

impl EventFields {
    fn put(&mut self, field: &Field, value: Value) {
        let name = field.name();
        // tracing-log's bookkeeping (`log.target`, `log.module_path`, `log.file`, `log.line`)
        // is no field of the record: tracing-subscriber's own JSON fields drop it too.
        if let Some(rest) = name.strip_prefix("log.") {
            if let ("target", Value::String(t)) = (rest, value) {
                self.log_target = Some(t);
            }
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.values.push((name.to_owned(), value));
    }
}

impl Visit for EventFields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        // Not finite: null, as serde_json writes it.
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

/// serde_json writes bytes; the formatter's writer takes `str`.
struct WriteAdaptor<'a, 'w>(&'a mut Writer<'w>);

impl std::io::Write for WriteAdaptor<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let s = std::str::from_utf8(buf).map_err(std::io::Error::other)?;
        self.0.write_str(s).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `emit` logs, as written.
    fn written(emit: impl FnOnce()) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    fn parse(text: &str) -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    #[test]
    fn span_fields_are_top_level() {
        let got = parse(&written(|| {
            let span = tracing::info_span!("reconcile", clusterlink = "link-a");
            let _in = span.enter();
            // As the cloud client logs inside a reconcile: the link is only in the span.
            tracing::debug!(target: "bnerd_cloud::http", code = 200u64, ms = 12u64, "neutron request");
        }));
        let l = &got[0];
        assert_eq!(l["clusterlink"], "link-a", "{l}");
        assert_eq!(l["message"], "neutron request");
        assert_eq!(l["code"], 200);
        assert_eq!(l["level"], "DEBUG");
        assert_eq!(l["target"], "bnerd_cloud::http");
        assert!(
            l["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{l}"
        );
        // The nested form stays for queries written against it.
        assert_eq!(
            l["span"],
            serde_json::json!({"name": "reconcile", "clusterlink": "link-a"})
        );
    }

    #[test]
    fn the_nearest_field_wins() {
        let text = written(|| {
            let outer = tracing::info_span!("outer", clusterlink = "outer", request = 7u64);
            let _o = outer.enter();
            let inner = tracing::info_span!("reconcile", clusterlink = tracing::field::Empty);
            let _i = inner.enter();
            tracing::info!("before the inner span has the field");
            inner.record("clusterlink", "inner");
            tracing::info!("after");
            tracing::warn!(clusterlink = "own", "the event's own field");
        });
        let got = parse(&text);
        assert_eq!(got[0]["clusterlink"], "outer", "{}", got[0]);
        assert_eq!(got[0]["request"], 7);
        assert_eq!(got[1]["clusterlink"], "inner", "{}", got[1]);
        assert_eq!(got[1]["request"], 7);
        assert_eq!(got[2]["clusterlink"], "own", "{}", got[2]);
        assert_eq!(got[2]["span"]["clusterlink"], "inner");
        // A clash is resolved, never written twice (once at the top, once inside "span").
        let last = text.lines().nth(2).unwrap();
        assert_eq!(last.matches("\"clusterlink\"").count(), 2, "{last}");
    }

    #[test]
    fn outside_spans_only_the_event() {
        let text = written(|| tracing::info!(kind = "IPsecGateway", "gateway kind not installed"));
        assert!(text.starts_with(r#"{"timestamp":"#), "{text}");
        let got = parse(&text);
        let keys: Vec<&str> = got[0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // serde_json's map sorts its keys.
        assert_eq!(keys, ["kind", "level", "message", "target", "timestamp"]);
    }
}
