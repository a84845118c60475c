//! Concurrency of the two-phase write through two frontends: 32 writers of overlapping key
//! sequences race while readers poll. Every key ends with exactly one location, no key is
//! handed to two writers, and no read ever returns a location before its write was finished.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const KEYS: i64 = 96;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_writers_on_two_frontends_never_share_a_block_and_reads_never_see_unfinished_writes() {
    let ns = unique("ns");
    let fx = Arc::new(Fixture::on(Api::start_with(&ns, &[]), &[("tp0", 16), ("tp1", 16)], 1, json!({})).await);
    let other = Arc::new(Api::start_with(&ns, &[]));
    let claimed: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let finishing: Arc<Mutex<HashSet<i64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    let mut readers = Vec::new();
    for r in 0..2 {
        let (fx, other, finishing, stop) = (fx.clone(), other.clone(), finishing.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let all: Vec<i64> = (0..KEYS).collect();
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) {
                let api = if r == 0 { &fx.api } else { &*other };
                let (_, got) = api
                    .meta(
                        "getCacheLocation",
                        json!({"instance_id": fx.instance, "query_type": "QT_BATCH_GET", "block_keys": all}),
                    )
                    .await;
                // Snapshot the finishing set after the read: anything the read saw must be in it.
                let finishing = finishing.lock().unwrap().clone();
                for (k, real) in Fixture::real(&got).iter().enumerate() {
                    assert!(!real || finishing.contains(&(k as i64)), "key {k} was returned before its finish");
                }
                reads += 1;
            }
            reads
        }));
    }

    let mut writers = Vec::new();
    for w in 0..32i64 {
        let (fx, other, claimed, finishing) = (fx.clone(), other.clone(), claimed.clone(), finishing.clone());
        writers.push(tokio::spawn(async move {
            // Overlapping windows of 32 keys over a pool of 96, starting every 2 keys.
            let start = (w * 2) % (KEYS - 32);
            let keys: Vec<i64> = (start..start + 32).collect();
            let (a, b) = if w % 2 == 0 { (&fx.api, &*other) } else { (&*other, &fx.api) };
            let (_, s) = a.meta("startWriteCache", json!({"instance_id": fx.instance, "block_keys": keys})).await;
            assert_eq!(code(&s), "OK", "{s}");
            let present: Vec<bool> = match (&s["block_mask"]["offset"], &s["block_mask"]["bool_masks"]) {
                (Value::Number(n), _) => (0..32).map(|i| i < n.as_u64().unwrap() as usize).collect(),
                (_, b) => b["values"].as_array().unwrap().iter().map(|v| v.as_bool().unwrap()).collect(),
            };
            let mine: Vec<i64> = keys.iter().zip(&present).filter(|(_, p)| !**p).map(|(k, _)| *k).collect();
            assert_eq!(mine.len(), s["locations"].as_array().unwrap().len());
            {
                let mut c = claimed.lock().unwrap();
                for k in &mine {
                    assert!(c.insert(*k), "key {k} was handed to two writers");
                }
            }
            finishing.lock().unwrap().extend(mine.iter().copied());
            let (_, f) = b
                .meta("finishWriteCache", json!({"instance_id": fx.instance, "write_session_id": s["write_session_id"], "success_blocks": {"offset": mine.len()}}))
                .await;
            assert_eq!(code(&f), "OK", "{f}");
            mine.len()
        }));
    }
    let mut written = 0;
    for w in writers {
        written += w.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    assert!(reads > 0);
    let expected: HashSet<i64> = (0..32i64)
        .flat_map(|w| {
            let s = (w * 2) % (KEYS - 32);
            s..s + 32
        })
        .collect();
    assert_eq!(written, expected.len(), "every key was written exactly once");
    assert_eq!(*claimed.lock().unwrap(), expected);
    let all: Vec<i64> = expected.iter().copied().collect();
    let (_, meta) =
        fx.api.meta("getCacheMeta", json!({"instance_id": fx.instance, "block_keys": all, "detail_level": 1})).await;
    for m in meta["metas"].as_array().unwrap() {
        let m: Value = serde_json::from_str(m.as_str().unwrap()).unwrap();
        assert_eq!(m["locations"].as_array().unwrap().len(), 1, "{m}");
        assert_eq!(m["status"], "CLS_SERVING");
    }
}
