//! Messages of Tair KVCM's debug service (`DebugService`: fault injection for tests).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

crate::wire_enum! {
    /// What an injected fault does: the call fails (an RPC answers `INTERNAL_ERROR`), or — a
    /// kvcm extension — waits `hang_ms` first (a storage operation blocks like a hung mount).
    pub enum FaultType { FT_INTERNAL_ERROR = 0, FT_HANG = 100 }
}

crate::wire_enum! {
    /// When an injected fault fires: on every call, or once, at call `trigger_at_call`.
    pub enum FaultTriggerStrategy { ALWAYS = 0, ONCE = 1 }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct InjectFaultRequest {
    /// The RPC, in Tair's spelling (`GetCacheLocation`) or kvcm's (`getCacheLocation`), or one
    /// of kvcm's fault points (`StorageUnlink`, `StorageProbe`: `kvcm_core::faults`).
    pub api_name: String,
    pub fault_type: FaultType,
    pub fault_trigger_strategy: FaultTriggerStrategy,
    /// With `ONCE`: which call after the injection fails (1 = the next one).
    pub trigger_at_call: i32,
    /// kvcm extension, with `FT_HANG`: how long the call waits (1..=600000 ms; removing the
    /// fault ends the wait early).
    pub hang_ms: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct RemoveFaultRequest {
    pub api_name: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct ClearFaultsRequest {}
