//! Mooncake trace lines (FAST'25 traces: `conversation`, `toolagent`, `synthetic`).
//!
//! One JSON object per line: `timestamp` (milliseconds since the trace start, integer or
//! fractional), `hash_ids` (one id per 512-token block, prefix-chained: an equal id at an equal
//! position means an equal prefix). `input_length`, `output_length` and unknown fields are
//! ignored. Ids may be numbers or decimal strings.

use super::{RawRequest, parse_timed_line};

/// Parses one non-blank line.
pub(crate) fn parse_line(line: &str) -> Result<RawRequest, serde_json::Error> {
    parse_timed_line(line, 1_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mooncake_line_becomes_a_request_with_microsecond_time() {
        let request =
            parse_line(r#"{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}"#)
                .unwrap();
        assert_eq!(request.time_us, 27_482_000);
        assert_eq!(request.keys, vec![46, 47, 48]);
        assert_eq!(request.namespace, None);
    }

    #[test]
    fn a_negative_timestamp_is_rejected() {
        let err = parse_line(r#"{"timestamp": -1, "hash_ids": []}"#).unwrap_err();
        assert!(err.to_string().contains("timestamp -1"), "{err}");
    }
}
