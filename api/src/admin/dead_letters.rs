//! kvcm extensions: listDeadLetters and redriveDeadLetters — an instance's deletions the workers
//! gave up on (`worker.max_delete_attempts`), listed page by page and queued again once their
//! cause is fixed. The instance may be registered or removed and still draining.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::Error;
use kvcm_core::registry::validate;
use kvcm_core::wire::admin::*;

/// Most dead letters one request lists or re-drives.
const MAX_PAGE: i32 = 1000;

fn page(field: &str, limit: i32, default: i32) -> Result<usize, Error> {
    match limit {
        0 => Ok(default as usize),
        1..=MAX_PAGE => Ok(limit as usize),
        _ => Err(Error::invalid(format!("{field} must be within 1..={MAX_PAGE} (0: {default})"))),
    }
}

pub async fn list(
    State(s): State<AppState>,
    WireJson(req): WireJson<ListDeadLettersRequest>,
) -> Reply<ListDeadLettersResponse> {
    Reply(
        async {
            validate::instance_id(s.registry.lookup_limits(), &req.instance_id)?;
            let limit = page("limit", req.limit, 100)?;
            let (dead_letters, total, next_start_after) =
                s.data.list_dead_letters(&s.registry.snapshot(), &req.instance_id, &req.start_after, limit).await?;
            Ok(ListDeadLettersResponse { dead_letters, total, next_start_after })
        }
        .await,
    )
}

pub async fn redrive(
    State(s): State<AppState>,
    WireJson(req): WireJson<RedriveDeadLettersRequest>,
) -> Reply<RedriveDeadLettersResponse> {
    Reply(
        async {
            validate::instance_id(s.registry.lookup_limits(), &req.instance_id)?;
            let limit = page("limit", req.limit, MAX_PAGE)?;
            if req.ids.len() > MAX_PAGE as usize {
                return Err(Error::invalid(format!(
                    "ids has {} entries; at most {MAX_PAGE} per request",
                    req.ids.len()
                )));
            }
            let (redriven, not_found) = s.data.redrive_dead_letters(&req.instance_id, &req.ids, limit).await?;
            tracing::info!(instance = %req.instance_id, redriven, not_found, "dead letters re-driven");
            Ok(RedriveDeadLettersResponse { redriven, not_found })
        }
        .await,
    )
}
