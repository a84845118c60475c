//! Storages kvcm keeps in the registry but cannot place blocks on (`tair_mem_pool`): Tair's
//! memory pool hands out addresses of its own, which kvcm does not model. Writes skip them;
//! a location naming one (none can be written) would not be expressed.

use super::StorageBackend;
use crate::store::record::Location;

/// A storage no block is placed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemPoolBackend;

impl StorageBackend for MemPoolBackend {
    fn writable(&self) -> bool {
        false
    }

    fn uri_prefix(&self, _storage: &str, _instance: &str, _spec: &str) -> Option<String> {
        None
    }

    fn push_uri_rest_bytes(&self, _out: &mut Vec<u8>, _size: i64, _key: i64, _loc: &Location) {}
}
