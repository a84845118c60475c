//! The JSON a frontend renders for getCacheLocation straight from block records and per-storage
//! pieces is, byte for byte, what serde writes for the `CacheLocation` structs the data plane
//! builds for the same read: for every query type, with hits, misses and masked blocks, a spec
//! filter, and packed files. (A property test in core compares single locations; this compares
//! whole replies, separators and placeholders included, through a real kvcm-api.)

use kvcm_core::mask::BlockMask;
use kvcm_core::registry::Registry;
use kvcm_core::store::get_cache_location::QueryType;
use kvcm_core::store::{DataPlane, Limits};
use kvcm_core::wire::WireBlockMask;
use kvcm_tests::*;
use serde_json::{Value, json};

/// The raw bytes of the `locations` array in a getCacheLocation reply.
async fn rendered(api: &Api, body: &Value) -> Vec<u8> {
    let reply = reqwest::Client::new()
        .post(format!("{}/api/getCacheLocation", api.meta))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let bytes = reply.bytes().await.unwrap().to_vec();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.contains(r#""code":"OK""#), "{text}");
    let start = text.find(r#","locations":"#).expect("a locations field") + r#","locations":"#.len();
    assert!(text.ends_with('}'), "{text}");
    text.as_bytes()[start..text.len() - 1].to_vec()
}

#[tokio::test]
async fn every_query_renders_the_bytes_serde_writes_for_the_same_locations() {
    for per_file in [1, 2] {
        let fx = Fixture::new(&[("tp0", 10), ("tp1", 7)], per_file, json!({})).await;
        // Blocks 1..=4 and 6 cached; 5 and 7 missing.
        fx.write(&[1, 2, 3, 4]).await;
        fx.write(&[6]).await;
        let conn = {
            let c = redis::cluster::ClusterClient::new(vec![valkey_url()]).unwrap();
            c.get_async_connection().await.unwrap()
        };
        let registry = Registry::open(conn.clone(), &fx.api.namespace, Default::default()).await.unwrap();
        let inst = registry.instance(&fx.instance).await.unwrap();
        let data = DataPlane::new(conn, &fx.api.namespace, Limits { max_keys_per_request: 100, ..Default::default() });
        let keys = [1i64, 2, 3, 4, 5, 6, 7];
        let cases: [(QueryType, &str, i32, Value); 6] = [
            (QueryType::QT_PREFIX_MATCH, "QT_PREFIX_MATCH", 0, json!({"offset": 0})),
            (QueryType::QT_PREFIX_MATCH, "QT_PREFIX_MATCH", 0, json!({"offset": 2})),
            (QueryType::QT_BATCH_GET, "QT_BATCH_GET", 0, json!({"offset": 0})),
            (
                QueryType::QT_BATCH_GET,
                "QT_BATCH_GET",
                0,
                json!({"bool_masks": {"values": [false, true, false, false, false, false, false]}}),
            ),
            (QueryType::QT_REVERSE_ROLL_SW_MATCH, "QT_REVERSE_ROLL_SW_MATCH", 2, json!({"offset": 0})),
            (QueryType::QT_REVERSE_ROLL_SW_MATCH, "QT_REVERSE_ROLL_SW_MATCH", 4, json!({"offset": 0})),
        ];
        for filter in [vec![], vec!["tp1".to_string()]] {
            for (query, name, sw, mask) in &cases {
                let body = json!({"instance_id": fx.instance, "query_type": name, "block_keys": keys,
                    "block_mask": mask, "sw_size": sw, "location_spec_names": filter});
                let wire = rendered(&fx.api, &body).await;
                let wire_mask: WireBlockMask = serde_json::from_value(mask.clone()).unwrap();
                let parsed_mask = BlockMask::parse("block_mask", Some(&wire_mask), keys.len()).unwrap();
                let snap = registry.snapshot();
                let (locations, _) =
                    data.get_cache_location(&snap, &inst, *query, &keys, &parsed_mask, *sw, &filter).await.unwrap();
                assert!(!locations.is_empty(), "{name} {mask} found nothing: the case checks nothing");
                let expected = serde_json::to_vec(&locations).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&wire),
                    String::from_utf8_lossy(&expected),
                    "{name} mask {mask} sw {sw} filter {filter:?} per_file {per_file}"
                );
            }
        }
    }
}
