//! Instance RPCs of the admin plane: registerInstance (CommonResponse here, unlike the meta
//! plane), removeInstance, getInstanceInfo, listInstanceInfo.

use crate::auth::Caller;
use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::{Empty, GetInstanceInfoRequest, RegisterInstanceRequest};

pub async fn register(State(s): State<AppState>, WireJson(req): WireJson<RegisterInstanceRequest>) -> Reply<Empty> {
    Reply(s.registry.register_instance(&req).await.map(|_| Empty {}))
}

/// Trims the instance's cache (queueing every block for deletion) and drops what engines
/// reported holding of it before removing it from the
/// registry: a crash in between leaves a registered instance with an empty cache, never
/// unregistered blocks nobody would delete.
pub async fn remove(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<RemoveInstanceRequest>,
) -> Reply<Empty> {
    Reply(
        async {
            let (_, inst) = crate::meta::cache::instance(&s, &caller, &req.instance_id).await?;
            if !req.instance_group.is_empty() && req.instance_group != inst.instance_group_name {
                return Err(kvcm_core::Error::invalid(format!(
                    "instance '{}' belongs to instance group '{}', not '{}'",
                    inst.instance_id, inst.instance_group_name, req.instance_group
                )));
            }
            s.data.trim_cache(&inst, kvcm_core::store::trim_cache::TrimStrategy::TS_REMOVE_ALL_CACHE, 0, 0).await?;
            // What engines reported holding goes too (it is theirs: nothing to delete but the
            // metadata; an engine reporting again after a re-registration starts over).
            s.data.drop_engine_reports(&inst.instance_id).await?;
            s.registry.remove_instance(&req.instance_id, &req.instance_group).await.map(|_| Empty {})
        }
        .await,
    )
}

pub async fn get(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<GetInstanceInfoRequest>,
) -> Reply<AdminGetInstanceInfoResponse> {
    Reply(
        async {
            let (_, info) = crate::meta::cache::instance(&s, &caller, &req.instance_id).await?;
            Ok(AdminGetInstanceInfoResponse { instance_info: (*info).clone() })
        }
        .await,
    )
}

pub async fn list(
    State(s): State<AppState>,
    WireJson(req): WireJson<ListInstanceInfoRequest>,
) -> Reply<ListInstanceInfoResponse> {
    Reply(
        s.registry
            .list_instances(&req.instance_group_name)
            .await
            .map(|instance_info| ListInstanceInfoResponse { instance_info }),
    )
}
