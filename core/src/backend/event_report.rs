//! Event-report storages (Tair's `event_report`, `ST_EVENT_REPORT_L1P5` / `_L2`): not a place
//! kvcm writes blocks to, but the configuration of one engine tier's reporters — their liveness
//! and snapshot settings, routed by the group's `event_report_storage_candidates`
//! (`store::report_event::settings_for`). The engines hold the data; kvcm never places,
//! deletes or probes anything here.

use super::StorageBackend;
use crate::store::record::Location;

/// An engine tier's reporting configuration: no block is placed on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventReportBackend;

impl StorageBackend for EventReportBackend {
    fn writable(&self) -> bool {
        false
    }

    fn uri_prefix(&self, _storage: &str, _instance: &str, _spec: &str) -> Option<String> {
        None
    }

    fn push_uri_rest_bytes(&self, _out: &mut Vec<u8>, _size: i64, _key: i64, _loc: &Location) {}
}
