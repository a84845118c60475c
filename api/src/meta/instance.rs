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

/// `getClusterInfo`: every frontend answers that it serves (kvcm has no leader; any frontend
/// behind the load balancer takes any request), naming itself as the leader Tair's clients look
/// for. `instance_id` is only checked for length: the answer does not depend on it.
pub async fn cluster_info(
    State(s): State<AppState>,
    _caller: Caller,
    WireJson(req): WireJson<kvcm_core::wire::meta::GetClusterInfoRequest>,
) -> Reply<kvcm_core::wire::meta::GetClusterInfoResponse> {
    Reply(
        async {
            if !req.instance_id.is_empty() {
                kvcm_core::registry::validate::instance_id(s.registry.lookup_limits(), &req.instance_id)?;
            }
            let n = &s.node;
            Ok(kvcm_core::wire::meta::GetClusterInfoResponse {
                self_node_id: n.id.clone(),
                leader_node_id: n.id.clone(),
                leader_endpoint: kvcm_core::wire::meta::MetaNodeEndpoint {
                    node_id: n.id.clone(),
                    host: n.host.clone(),
                    meta_rpc_port: n.grpc_meta_port as i32,
                    meta_http_port: n.meta_port as i32,
                    custom_info: r#"{"leaderless":true,"note":"every kvcm-api frontend serves every request"}"#
                        .to_string(),
                },
            })
        }
        .await,
    )
}
