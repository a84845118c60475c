//! Instance RPCs of the meta plane: registerInstance (returns the group's storage configs as a
//! JSON string) and getInstanceInfo (returns the group name beside the info).

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::wire::meta::{MetaGetInstanceInfoResponse, RegisterInstanceResponse};
use kvcm_core::wire::{GetInstanceInfoRequest, RegisterInstanceRequest};

pub async fn register(
    State(s): State<AppState>,
    WireJson(req): WireJson<RegisterInstanceRequest>,
) -> Reply<RegisterInstanceResponse> {
    Reply(s.registry.register_instance(&req).await.map(|storage_configs| RegisterInstanceResponse { storage_configs }))
}

pub async fn get(
    State(s): State<AppState>,
    WireJson(req): WireJson<GetInstanceInfoRequest>,
) -> Reply<MetaGetInstanceInfoResponse> {
    Reply(
        async {
            kvcm_core::registry::validate::instance_id(&req.instance_id)?;
            let info = s.registry.instance(&req.instance_id).await?;
            Ok(MetaGetInstanceInfoResponse {
                instance_group: info.instance_group_name.clone(),
                instance_info: (*info).clone(),
            })
        }
        .await,
    )
}
