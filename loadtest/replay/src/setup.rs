//! Setup mode: creates (or updates) what a replay writes into, through the admin plane — a
//! `file` storage, an instance group with a quota and a reclaim policy, and one instance.
//!
//! Capacity is given the way the optimizer counts it, in blocks: `capacity_blocks` is the level
//! kvcm's reclaimer evicts down to (the watermark, `trigger_strategy.used_percentage ×
//! quota.capacity`), and the quota itself sits `headroom` above it, so that blocks written
//! between two reclaim rounds are not refused. With one spec of `block_bytes` bytes per block:
//!
//! ```text
//! quota.capacity   = ceil(capacity_blocks × block_bytes × (1 + headroom))
//! used_percentage  = (capacity_blocks × block_bytes + ½) / quota.capacity   (≈ 1 / (1 + headroom))
//! ```
//!
//! An existing storage of the same name is reused; an existing group is updated to the new quota
//! and policy (`updateInstanceGroup`, version + 1); `registerInstance` is idempotent. Any other
//! failure stops setup with the reply's message.

use crate::client::{CallError, Client};
use serde_json::{Value, json};

/// What setup creates.
#[derive(Clone, Debug)]
pub struct Setup {
    pub storage: String,
    /// The storage's root directory (created if missing); absolute.
    pub root: String,
    pub group: String,
    pub instance: String,
    /// Bytes of one block (one spec, `tp0`).
    pub block_bytes: u64,
    /// The watermark in blocks: what the optimizer calls capacity. 0 = no quota.
    pub capacity_blocks: u64,
    /// Quota above the watermark, as a fraction of it.
    pub headroom: f64,
    /// `POLICY_LRU`, `POLICY_LFU` or `POLICY_TTL`.
    pub policy: String,
    /// Tokens per block the instance declares (informational: the replay sends block keys).
    pub block_size: u32,
}

impl Setup {
    /// The group's `quota.capacity` in bytes and `used_percentage`.
    pub fn quota(&self) -> (u64, f64) {
        if self.capacity_blocks == 0 {
            return (0, 0.0);
        }
        let watermark = self.capacity_blocks * self.block_bytes;
        let quota = (watermark as f64 * (1.0 + self.headroom)).ceil() as u64;
        // The worker truncates `used_percentage × quota` to whole bytes: aim half a byte above
        // the watermark so that float rounding never lands a byte below it (one block too few).
        (quota, (watermark as f64 + 0.5) / quota as f64)
    }

    fn group_body(&self, version: i64) -> Value {
        let (quota, pct) = self.quota();
        json!({
            "name": self.group,
            "storage_candidates": [self.storage],
            "quota": {"capacity": quota},
            "cache_config": {"reclaim_strategy": {
                "storage_unique_name": self.storage,
                "reclaim_policy": self.policy,
                "trigger_strategy": {"used_percentage": pct},
            }},
            "version": version,
        })
    }

    /// Runs setup against the admin plane.
    pub async fn run(&self, admin: &Client) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.root)?;
        let mut root = self.root.clone();
        if !root.ends_with('/') {
            root.push('/');
        }
        let storage = json!({"storage": {"global_unique_name": self.storage, "nfs": {"root_path": root, "key_count_per_file": 1}}});
        match admin.call("addStorage", &storage).await.1 {
            Ok(_) => {}
            Err(CallError::Status { code, .. }) if code == "DUPLICATE_ENTITY" => {
                tracing::info!(storage = %self.storage, "storage exists; reusing it");
            }
            Err(e) => anyhow::bail!("addStorage {}: {e}", self.storage),
        }
        match admin.call("createInstanceGroup", &json!({"instance_group": self.group_body(1)})).await.1 {
            Ok(_) => {}
            Err(CallError::Status { code, .. }) if code == "DUPLICATE_ENTITY" => {
                let current = admin
                    .call("getInstanceGroup", &json!({"name": self.group}))
                    .await
                    .1
                    .map_err(|e| anyhow::anyhow!("getInstanceGroup {}: {e}", self.group))?;
                let version: i64 = match &current["instance_group"]["version"] {
                    Value::String(s) => s.parse()?,
                    v => v.as_i64().unwrap_or(0),
                };
                let body = json!({"instance_group": self.group_body(version + 1), "current_version": version});
                admin
                    .call("updateInstanceGroup", &body)
                    .await
                    .1
                    .map_err(|e| anyhow::anyhow!("updateInstanceGroup {}: {e}", self.group))?;
                tracing::info!(group = %self.group, "group exists; quota and policy updated");
            }
            Err(e) => anyhow::bail!("createInstanceGroup {}: {e}", self.group),
        }
        let register = json!({
            "instance_group": self.group, "instance_id": self.instance, "block_size": self.block_size,
            "location_spec_infos": [{"name": "tp0", "size": self.block_bytes}],
            "model_deployment": {"model_name": "kvcm-replay", "dtype": "bf16"},
        });
        admin
            .call("registerInstance", &register)
            .await
            .1
            .map_err(|e| anyhow::anyhow!("registerInstance {}: {e}", self.instance))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(capacity_blocks: u64, headroom: f64) -> Setup {
        Setup {
            storage: "s".into(),
            root: "/tmp".into(),
            group: "g".into(),
            instance: "i".into(),
            block_bytes: 4096,
            capacity_blocks,
            headroom,
            policy: "POLICY_LRU".into(),
            block_size: 512,
        }
    }

    #[test]
    fn the_watermark_is_the_capacity_and_the_quota_sits_headroom_above_it() {
        let (quota, pct) = setup(1000, 0.25).quota();
        assert_eq!(quota, 5_120_000);
        assert_eq!((pct * quota as f64) as u64, 4_096_000, "the worker's watermark, truncated as it does");
    }

    #[test]
    fn capacity_zero_means_no_quota() {
        assert_eq!(setup(0, 0.25).quota(), (0, 0.0));
    }
}
