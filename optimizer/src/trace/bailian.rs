//! Qwen-Bailian usage trace lines.
//!
//! One JSON object per line: `chat_id`, `parent_chat_id`, `timestamp` (seconds, usually
//! fractional), `input_length`, `output_length`, `type`, `turn`, `hash_ids` (one id per 16-token
//! block, prefix-chained). Only `timestamp` and `hash_ids` matter for replay: a conversation's
//! earlier turns are already the prefix of its later turns' `hash_ids`, so the chat fields add
//! nothing to what the cache sees. All other fields are ignored.

use super::{RawRequest, parse_timed_line};

/// Parses one non-blank line.
pub(crate) fn parse_line(line: &str) -> Result<RawRequest, serde_json::Error> {
    parse_timed_line(line, 1_000_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bailian_line_becomes_a_request_with_fractional_seconds_in_microseconds() {
        let request = parse_line(
            r#"{"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521, "output_length": 132, "type": "text", "turn": 1, "hash_ids": [1089, 1090, 1091]}"#,
        )
        .unwrap();
        assert_eq!(request.time_us, 61_114_000);
        assert_eq!(request.keys, vec![1089, 1090, 1091]);
    }

    #[test]
    fn a_line_without_a_timestamp_is_rejected_naming_the_field() {
        let err = parse_line(r#"{"chat_id": 1, "hash_ids": [1]}"#).unwrap_err();
        assert!(err.to_string().contains("timestamp"), "{err}");
    }
}
