//! Tair KVCM's internal JSON format for storages and groups, as operators already write it in
//! startup files (DESIGN §6) and as `registerInstance` returns it in `storage_configs`.
//!
//! It differs from the protobuf JSON: a storage is `{type, global_unique_name, storage_spec}`
//! with `type` one of `file`, `hf3fs`, `vcns_hf3fs`, `mooncake`, `pace`; enums are numbers;
//! `quota_config[].storage_type` uses the same type strings; `cache_prefer_strategy` replaces
//! `data_storage_strategy`; mooncake's master entry is `master_server_entry`.

use crate::error::{Error, Result};
use crate::wire::StorageType;
use crate::wire::admin::*;
use serde_json::{Map, Value, json};

/// A startup file: one storage (or a list) and one group (or a list).
#[derive(Debug, Default)]
pub struct Startup {
    pub storages: Vec<StorageConfig>,
    pub groups: Vec<InstanceGroup>,
}

fn type_name(t: StorageType) -> &'static str {
    match t {
        StorageType::ST_3FS => "hf3fs",
        StorageType::ST_MOONCAKE => "mooncake",
        StorageType::ST_TAIRMEMPOOL => "pace",
        StorageType::ST_VCNS_3FS => "vcns_hf3fs",
        _ => "file",
    }
}

fn type_from_name(field: &str, v: &Value) -> Result<StorageType> {
    let s = v.as_str().ok_or_else(|| Error::invalid(format!("{field} must be a string")))?;
    Ok(match s {
        "file" | "nfs" | "local" => StorageType::ST_NFS,
        "hf3fs" | "3fs" => StorageType::ST_3FS,
        "mooncake" => StorageType::ST_MOONCAKE,
        "pace" | "tair_mem_pool" => StorageType::ST_TAIRMEMPOOL,
        "vcns_hf3fs" => StorageType::ST_VCNS_3FS,
        other => match StorageType::from_name(other) {
            Some(t) => t,
            None => {
                return Err(Error::invalid(format!(
                    "{field} \"{other}\" is not one of file, hf3fs, vcns_hf3fs, mooncake, pace"
                )));
            }
        },
    })
}

fn from_value<T: serde::de::DeserializeOwned>(field: &str, v: Value) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| Error::invalid(format!("{field}.{}: {}", e.path(), e.inner())))
}

/// Parses one storage in the Tair format.
pub fn parse_storage(v: &Value) -> Result<StorageConfig> {
    let obj = v.as_object().ok_or_else(|| Error::invalid("storage_config must be an object"))?;
    let name = obj.get("global_unique_name").and_then(Value::as_str).unwrap_or_default().to_string();
    let ty = obj.get("type").ok_or_else(|| Error::invalid("storage_config.type is required"))?;
    let storage_type = type_from_name("storage_config.type", ty)?;
    if matches!(storage_type, StorageType::ST_EVENT_REPORT_L1P5 | StorageType::ST_EVENT_REPORT_L2) {
        return Err(Error::invalid(
            "storage_config.type: event-report storages are added with addStorage (event_report and storage_type), \
             not in a startup file",
        ));
    }
    let mut spec = obj.get("storage_spec").cloned().unwrap_or(json!({}));
    let mut cfg = StorageConfig {
        global_unique_name: name,
        check_storage_available_when_open: obj
            .get("check_storage_available_when_open")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        ..Default::default()
    };
    match storage_type {
        StorageType::ST_3FS => cfg.threefs = Some(from_value("storage_config.storage_spec", spec)?),
        StorageType::ST_VCNS_3FS => cfg.vcnsthreefs = Some(from_value("storage_config.storage_spec", spec)?),
        StorageType::ST_MOONCAKE => {
            if let Some(m) = spec.as_object_mut()
                && let Some(e) = m.remove("master_server_entry")
            {
                m.entry("master_service_entry").or_insert(e);
            }
            cfg.mooncake = Some(from_value("storage_config.storage_spec", spec)?)
        }
        StorageType::ST_TAIRMEMPOOL => cfg.tair_mem_pool = Some(from_value("storage_config.storage_spec", spec)?),
        _ => cfg.nfs = Some(from_value("storage_config.storage_spec", spec)?),
    }
    Ok(cfg)
}

/// Writes one storage in the Tair format (for `storage_configs`).
pub fn storage_to_value(cfg: &StorageConfig) -> Value {
    let ty = cfg.storage_type().unwrap_or(StorageType::ST_NFS);
    let spec = if let Some(s) = &cfg.nfs {
        serde_json::to_value(s)
    } else if let Some(s) = &cfg.local {
        Ok(json!({"root_path": s.path, "key_count_per_file": 1}))
    } else if let Some(s) = &cfg.threefs {
        serde_json::to_value(s)
    } else if let Some(s) = &cfg.vcnsthreefs {
        serde_json::to_value(s)
    } else if let Some(s) = &cfg.mooncake {
        serde_json::to_value(s).map(|mut v| {
            if let Some(m) = v.as_object_mut()
                && let Some(e) = m.remove("master_service_entry")
            {
                m.insert("master_server_entry".into(), e);
            }
            v
        })
    } else if let Some(s) = &cfg.tair_mem_pool {
        serde_json::to_value(s)
    } else {
        Ok(json!({}))
    }
    .unwrap_or(json!({}));
    json!({
        "type": type_name(ty),
        "global_unique_name": cfg.global_unique_name,
        "is_available": cfg.is_available,
        "check_storage_available_when_open": cfg.check_storage_available_when_open,
        "storage_spec": spec,
    })
}

/// Parses one instance group in the Tair format. Enum fields accept numbers or names.
pub fn parse_group(v: &Value) -> Result<InstanceGroup> {
    let mut v = v.clone();
    let obj = v.as_object_mut().ok_or_else(|| Error::invalid("instance_group must be an object"))?;
    if let Some(Value::Object(quota)) = obj.get_mut("quota")
        && let Some(Value::Array(list)) = quota.get_mut("quota_config")
    {
        for (i, q) in list.iter_mut().enumerate() {
            if let Some(q) = q.as_object_mut()
                && let Some(t) = q.get("storage_type").cloned()
                && t.is_string()
            {
                let ty = type_from_name(&format!("instance_group.quota.quota_config[{i}].storage_type"), &t)?;
                q.insert("storage_type".into(), json!(ty.name()));
            }
        }
    }
    if let Some(Value::Object(cc)) = obj.get_mut("cache_config")
        && let Some(p) = cc.remove("cache_prefer_strategy")
    {
        cc.entry("data_storage_strategy").or_insert(p);
    }
    from_value("instance_group", Value::Object(std::mem::take(obj)))
}

/// Parses a startup file. `storage_config` and `instance_group` may each be an object or a list.
pub fn parse_startup(text: &str) -> Result<Startup> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| Error::invalid(format!("startup config is not JSON: {e}")))?;
    let obj: Map<String, Value> = match v {
        Value::Object(o) => o,
        _ => return Err(Error::invalid("startup config must be a JSON object")),
    };
    let list = |key: &str| -> Vec<Value> {
        match obj.get(key) {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::Null) | None => vec![],
            Some(other) => vec![other.clone()],
        }
    };
    let mut out = Startup::default();
    for s in list("storage_config") {
        out.storages.push(parse_storage(&s)?);
    }
    for g in list("instance_group") {
        out.groups.push(parse_group(&g)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESIGN_EXAMPLE: &str = r#"{ "storage_config": { "type": "file", "global_unique_name": "nfs_01",
        "storage_spec": { "root_path": "/mnt/nfs/kvcache/", "key_count_per_file": 8 } },
      "instance_group": { "name": "default", "storage_candidates": ["nfs_01"],
        "quota": { "capacity": 30000000000,
                   "quota_config": [ { "storage_type": "file", "capacity": 10000000000 } ] },
        "cache_config": { "reclaim_strategy": { "reclaim_policy": 1,
                              "trigger_strategy": { "used_percentage": 0.8 },
                              "delay_before_delete_ms": 1000 } } } }"#;

    #[test]
    fn the_design_example_parses_into_protocol_types() {
        let s = parse_startup(DESIGN_EXAMPLE).unwrap();
        assert_eq!(s.storages.len(), 1);
        let nfs = s.storages[0].nfs.as_ref().unwrap();
        assert_eq!((nfs.root_path.as_str(), nfs.key_count_per_file), ("/mnt/nfs/kvcache/", 8));
        let g = &s.groups[0];
        assert_eq!(g.quota.capacity, 30_000_000_000);
        assert_eq!(g.quota.quota_config[0].storage_type, StorageType::ST_NFS);
        assert_eq!(g.cache_config.reclaim_strategy.reclaim_policy, ReclaimPolicy::POLICY_LRU);
        assert_eq!(g.cache_config.reclaim_strategy.trigger_strategy.used_percentage, 0.8);
    }

    #[test]
    fn storages_round_trip_through_the_tair_format() {
        let s = parse_startup(DESIGN_EXAMPLE).unwrap();
        let back = parse_storage(&storage_to_value(&s.storages[0])).unwrap();
        assert_eq!(back.nfs, s.storages[0].nfs);
        let mc = parse_storage(&json!({"type": "mooncake", "global_unique_name": "mc",
            "storage_spec": {"master_server_entry": "10.0.0.1:50051", "protocol": "tcp"}}))
        .unwrap();
        assert_eq!(mc.mooncake.as_ref().unwrap().master_service_entry, "10.0.0.1:50051");
        assert_eq!(storage_to_value(&mc)["storage_spec"]["master_server_entry"], "10.0.0.1:50051");
    }

    #[test]
    fn unknown_storage_types_are_named_in_the_error() {
        let e = parse_startup(r#"{"storage_config": {"type": "s3", "global_unique_name": "x"}}"#).unwrap_err();
        assert!(e.to_string().contains("\"s3\""), "{e}");
    }
}
