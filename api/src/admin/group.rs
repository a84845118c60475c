//! Instance-group RPCs: createInstanceGroup, updateInstanceGroup (optimistic on
//! `current_version`), removeInstanceGroup, getInstanceGroup, listInstanceGroup.

use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::Error;
use kvcm_core::wire::Empty;
use kvcm_core::wire::admin::*;
use kvcm_core::wire::common::TraceOnly;

fn required(g: Option<InstanceGroup>) -> Result<InstanceGroup, Error> {
    g.ok_or_else(|| Error::invalid("instance_group is required"))
}

pub async fn create(State(s): State<AppState>, WireJson(req): WireJson<CreateInstanceGroupRequest>) -> Reply<Empty> {
    Reply(async { s.registry.create_group(required(req.instance_group)?).await.map(|_| Empty {}) }.await)
}

pub async fn update(State(s): State<AppState>, WireJson(req): WireJson<UpdateInstanceGroupRequest>) -> Reply<Empty> {
    Reply(
        async { s.registry.update_group(required(req.instance_group)?, req.current_version).await.map(|_| Empty {}) }
            .await,
    )
}

pub async fn remove(State(s): State<AppState>, WireJson(req): WireJson<GroupNameRequest>) -> Reply<Empty> {
    Reply(s.registry.remove_group(&req.name).await.map(|_| Empty {}))
}

pub async fn get(
    State(s): State<AppState>,
    WireJson(req): WireJson<GroupNameRequest>,
) -> Reply<GetInstanceGroupResponse> {
    Reply(
        async {
            let instance_group = s.registry.get_group(&req.name).await?;
            // The snapshot get_group just refreshed (or a newer one, if another refresh landed).
            let missing_storage_candidates = s.registry.snapshot().missing_candidates(&instance_group);
            Ok(GetInstanceGroupResponse { instance_group, missing_storage_candidates })
        }
        .await,
    )
}

pub async fn list(State(s): State<AppState>, WireJson(_): WireJson<TraceOnly>) -> Reply<ListInstanceGroupResponse> {
    Reply(s.registry.list_groups().await.map(|instance_group| ListInstanceGroupResponse { instance_group }))
}
