//! Instance RPCs of the admin plane: registerInstance (CommonResponse here, unlike the meta
//! plane), removeInstance, getInstanceInfo, listInstanceInfo.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::{Empty, GetInstanceInfoRequest, RegisterInstanceRequest};

pub async fn register(State(s): State<AppState>, WireJson(req): WireJson<RegisterInstanceRequest>) -> Reply<Empty> {
    Reply(s.registry.register_instance(&req).await.map(|_| Empty {}))
}

pub async fn remove(State(s): State<AppState>, WireJson(req): WireJson<RemoveInstanceRequest>) -> Reply<Empty> {
    Reply(s.registry.remove_instance(&req.instance_id, &req.instance_group).await.map(|_| Empty {}))
}

pub async fn get(
    State(s): State<AppState>,
    WireJson(req): WireJson<GetInstanceInfoRequest>,
) -> Reply<AdminGetInstanceInfoResponse> {
    Reply(
        async {
            kvcm_core::registry::validate::instance_id(&req.instance_id)?;
            let info = s.registry.instance(&req.instance_id).await?;
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
