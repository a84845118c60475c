//! Instance RPCs of the meta plane: registerInstance (returns the group's storage configs as a
//! JSON string) and getInstanceInfo (returns the group name beside the info). Both check that
//! the caller may act on the instance's group: the one it names, and — for an id already
//! registered — the one it is in.

use crate::auth::Caller;
use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::wire::StatusCode;
use kvcm_core::wire::meta::{MetaGetInstanceInfoResponse, RegisterInstanceResponse};
use kvcm_core::wire::{GetInstanceInfoRequest, RegisterInstanceRequest};

pub async fn register(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<RegisterInstanceRequest>,
) -> Reply<RegisterInstanceResponse> {
    Reply(
        async {
            // Validated first: a refusal must not echo an unbounded id.
            kvcm_core::registry::validate::registration(s.registry.limits(), &req)?;
            authorize_registration(&s, &caller, &req)?;
            match s.registry.register_instance(&req).await {
                Ok(storage_configs) => Ok(RegisterInstanceResponse { storage_configs }),
                // The id was taken: the snapshot above may have predated it (registered through
                // another frontend just now). Its group decides, before the diff names it.
                Err(e @ kvcm_core::Error::Status { code: StatusCode::DUPLICATE_ENTITY, .. }) => {
                    s.registry.refresh().await?;
                    authorize_registration(&s, &caller, &req)?;
                    Err(e)
                }
                Err(e) => Err(e),
            }
        }
        .await,
    )
}

/// A registration acts on the group it names and, if the id is taken, on the group it is in (a
/// scoped engine must not learn another group's registration from the DUPLICATE_ENTITY diff).
pub fn authorize_registration(s: &AppState, caller: &Caller, req: &RegisterInstanceRequest) -> kvcm_core::Result<()> {
    let what = format!("instance '{}'", req.instance_id);
    caller.authorize(&req.instance_group, &what)?;
    if let Some(existing) = s.registry.snapshot().instances.get(&req.instance_id) {
        caller.authorize(&existing.instance_group_name, &what)?;
    }
    Ok(())
}

pub async fn get(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<GetInstanceInfoRequest>,
) -> Reply<MetaGetInstanceInfoResponse> {
    Reply(
        async {
            let (_, info) = crate::meta::cache::instance(&s, &caller, &req.instance_id).await?;
            Ok(MetaGetInstanceInfoResponse {
                instance_group: info.instance_group_name.clone(),
                instance_info: (*info).clone(),
            })
        }
        .await,
    )
}
