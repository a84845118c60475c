//! Instance RPCs of the meta plane: registerInstance (returns the group's storage configs as a
//! JSON string) and getInstanceInfo (returns the group name beside the info). Both check that
//! the caller may act on the instance's group: the one it names, and — for an id already
//! registered — the one it is in.

use crate::auth::Caller;
use crate::reply::{Reply, WireJson};
use crate::state::AppState;
use axum::extract::State;
use kvcm_core::wire::meta::{MetaGetInstanceInfoResponse, RegisterInstanceResponse};
use kvcm_core::wire::{GetInstanceInfoRequest, RegisterInstanceRequest};

pub async fn register(
    State(s): State<AppState>,
    caller: Caller,
    WireJson(req): WireJson<RegisterInstanceRequest>,
) -> Reply<RegisterInstanceResponse> {
    Reply(
        async {
            // The names are checked first (at the caps of what may exist): a refusal must not echo
            // an unbounded id. The registry validates the whole registration.
            let lookup = s.registry.lookup_limits();
            kvcm_core::registry::validate::instance_id(lookup, &req.instance_id)?;
            kvcm_core::registry::validate::name(lookup, "instance_group", &req.instance_group)?;
            authorize_registration(&s, &caller, &req)?;
            // If the id is taken, the stored registration's group decides (the snapshot above
            // may have predated it) before the DUPLICATE_ENTITY message names its fields.
            s.registry
                .register_instance_as(&req, |stored| caller.authorize(&stored.instance_group_name, &req.instance_id))
                .await
                .map(|storage_configs| RegisterInstanceResponse { storage_configs })
        }
        .await,
    )
}

/// A registration acts on the group it names and, if the id is taken, on the group it is in (a
/// scoped engine must not learn another group's registration from the DUPLICATE_ENTITY diff).
pub fn authorize_registration(s: &AppState, caller: &Caller, req: &RegisterInstanceRequest) -> kvcm_core::Result<()> {
    caller.authorize(&req.instance_group, &req.instance_id)?;
    if let Some(existing) = s.registry.snapshot().instances.get(&req.instance_id) {
        caller.authorize(&existing.instance_group_name, &req.instance_id)?;
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
