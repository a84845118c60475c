//! Mooncake stores: kvcm keeps the metadata and hands out keys; the engine's Mooncake client
//! moves the bytes. URIs are `mooncake://<storage>/?key=<instance>/<spec>/<hex key>&size=n`. Keys
//! are flat strings in a key-value store, not paths, so they are not escaped (module docs of
//! [`super`]). kvcm has no Mooncake client: nothing to delete or probe here (a future deleter
//! must delete exact keys, never the prefix `<instance>/`).

use super::{StorageBackend, push_hex};
use crate::store::record::Location;

/// Keys in a Mooncake store (metadata only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MooncakeBackend;

impl StorageBackend for MooncakeBackend {
    fn uri_prefix(&self, storage: &str, instance: &str, spec: &str) -> Option<String> {
        Some(format!("mooncake://{storage}/?key={instance}/{spec}/"))
    }

    fn push_uri_rest_bytes(&self, out: &mut Vec<u8>, size: i64, key: i64, _loc: &Location) {
        push_hex(out, key as u64, 16);
        out.extend_from_slice(b"&size=");
        out.extend_from_slice(itoa::Buffer::new().format(size).as_bytes());
    }
}
