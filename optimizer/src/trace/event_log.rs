//! kvcm event log lines (written by the data plane, see DESIGN §6).
//!
//! One JSON object per line with `source` (instance id), `type` (`getCacheLocation`,
//! `startWriteCache`, `finishWriteCache`), `trigger_time_us`, `query_type`, `keys`,
//! `block_mask`, `sw_size`, `write_session_id`, `success_blocks`.
//!
//! Replay reads only `getCacheLocation` events: each is one request whose blocks are its `keys`
//! in order, at `trigger_time_us`. Every other event type is skipped, for two reasons: a lookup
//! is the moment the cache is asked for a prefix (which is what a hit rate measures), and in a
//! live system a write follows a missed lookup of the same keys, so replaying writes as well
//! would count the same blocks twice. `query_type`, `block_mask` and `sw_size` are ignored: the
//! simulated cache answers every lookup as a prefix match over all its keys.
//!
//! Keys are namespaced by `source`: the same 64-bit key sent by two instances names two
//! different blocks, as it does in kvcm's storage. Keys and `trigger_time_us` may be JSON
//! numbers or decimal strings (kvcm writes 64-bit integers as strings).

use serde::Deserialize;

use super::{RawRequest, deserialize_keys, deserialize_u64_flexible};

/// The only event type that replay uses.
pub const LOOKUP_EVENT: &str = "getCacheLocation";

#[derive(Deserialize)]
struct Kind<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
struct Lookup {
    source: String,
    #[serde(deserialize_with = "deserialize_u64_flexible")]
    trigger_time_us: u64,
    #[serde(deserialize_with = "deserialize_keys")]
    keys: Vec<i64>,
}

/// Parses one non-blank line; `Ok(None)` for events other than `getCacheLocation`.
pub(crate) fn parse_line(line: &str) -> Result<Option<RawRequest>, serde_json::Error> {
    let kind: Kind<'_> = serde_json::from_str(line)?;
    if kind.kind != LOOKUP_EVENT {
        return Ok(None);
    }
    let lookup: Lookup = serde_json::from_str(line)?;
    Ok(Some(RawRequest { time_us: lookup.trigger_time_us, namespace: Some(lookup.source), keys: lookup.keys }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Trace, TraceFormat};

    #[test]
    fn a_lookup_event_becomes_a_request_in_its_sources_namespace() {
        let request = parse_line(
            r#"{"source":"inst-a","type":"getCacheLocation","trigger_time_us":"1700000000000123","query_type":"QT_PREFIX_MATCH","keys":["455111481605203084",-3],"block_mask":{"offset":0},"sw_size":0}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(request.time_us, 1_700_000_000_000_123);
        assert_eq!(request.namespace.as_deref(), Some("inst-a"));
        assert_eq!(request.keys, vec![455_111_481_605_203_084, -3]);
    }

    #[test]
    fn write_events_are_skipped() {
        for kind in ["startWriteCache", "finishWriteCache"] {
            let line =
                format!(r#"{{"source":"a","type":"{kind}","trigger_time_us":1,"keys":[1],"write_session_id":"s"}}"#);
            assert_eq!(parse_line(&line).unwrap(), None, "{kind}");
        }
    }

    #[test]
    fn equal_keys_of_different_instances_are_different_blocks() {
        let log = concat!(
            r#"{"source":"a","type":"getCacheLocation","trigger_time_us":1,"keys":[1,2]}"#,
            "\n",
            r#"{"source":"a","type":"startWriteCache","trigger_time_us":2,"keys":[1,2]}"#,
            "\n",
            r#"{"source":"b","type":"getCacheLocation","trigger_time_us":3,"keys":[1,2]}"#,
            "\n",
            r#"{"source":"a","type":"getCacheLocation","trigger_time_us":4,"keys":[1]}"#,
            "\n",
        );
        let trace = Trace::from_reader(log.as_bytes(), TraceFormat::Kvcm).unwrap();
        assert_eq!(trace.requests(), 3);
        assert_eq!(trace.distinct_blocks(), 4);
        assert_eq!(trace.request(1), &[2, 3]);
        assert_eq!(trace.request(2), &[0]);
    }

    #[test]
    fn a_lookup_without_keys_is_malformed_and_names_its_line() {
        let log = concat!(
            r#"{"source":"a","type":"finishWriteCache","trigger_time_us":1}"#,
            "\n",
            r#"{"source":"a","type":"getCacheLocation","trigger_time_us":2}"#,
            "\n",
        );
        let err = Trace::from_reader(log.as_bytes(), TraceFormat::Kvcm).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("line 2:"), "{message}");
        assert!(message.contains("keys"), "{message}");
    }
}
