//! finishWriteCache: successful locations become serving, failed ones are removed and queued for
//! deletion — one script, any frontend (the session lives in Valkey).

use super::DataPlane;
use crate::error::{Error, Result};
use crate::scripts;
use crate::wire::{StatusCode, WireBlockMask};

/// A session id as startWriteCache hands it out: 16 lowercase hex digits.
fn valid_session_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl DataPlane {
    /// Returns the number of blocks that became serving.
    pub async fn finish_write_cache(
        &self,
        instance_id: &str,
        session_id: &str,
        success: Option<&WireBlockMask>,
    ) -> Result<i64> {
        if !valid_session_id(session_id) {
            let shown: String = session_id.chars().take(32).collect();
            return Err(Error::invalid(format!(
                "write_session_id \"{}\" is not a session id startWriteCache returned",
                shown.escape_debug()
            )));
        }
        // The script knows how many locations the session has; it checks the mask's length.
        let mask = match success {
            None => "o0".to_string(),
            Some(m) => match (m.offset, m.bool_masks.as_ref()) {
                (Some(_), Some(_)) => {
                    return Err(Error::invalid("success_blocks sets both offset and bool_masks; send one"));
                }
                (Some(o), None) if o < 0 => return Err(Error::invalid("success_blocks.offset must be >= 0")),
                (Some(o), None) => format!("o{o}"),
                (None, Some(b)) if b.values.len() > self.limits.max_keys_per_request => {
                    return Err(Error::invalid(format!(
                        "success_blocks.bool_masks has {} values; a session has at most {} blocks \
                         (max_keys_per_request)",
                        b.values.len(),
                        self.limits.max_keys_per_request
                    )));
                }
                (None, Some(b)) => {
                    format!("b{}", b.values.iter().map(|v| if *v { '1' } else { '0' }).collect::<String>())
                }
                (None, None) => "o0".to_string(),
            },
        };
        let keys = self.keys(instance_id);
        let session_key = keys.session(session_id);
        let reply = self
            .run(
                &scripts::FINISH_WRITE_CACHE,
                &keys.finish_keys(&session_key),
                &[session_id.as_bytes(), mask.as_bytes()],
            )
            .await
            .map_err(|e| match e {
                Error::Status { code: StatusCode::INVALID_ARGUMENT, message } => Error::invalid(message),
                other => other,
            })?;
        super::first(reply)
    }
}
