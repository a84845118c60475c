//! Where instances and storages live on disk, through real processes on a real Valkey cluster:
//! instance ids that nest as strings (`a`, `a/b`) get sibling directories, and a worker removing
//! one never touches the other's files or reads; storages whose roots nest or coincide are
//! refused, with the namespace left byte-identical, even when admins race. Waits poll with a
//! deadline.

use kvcm_tests::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Registers `id` in the fixture's group `g`, with 2-byte specs.
async fn register(api: &Api, id: &str, specs: &[&str]) {
    let specs: Vec<Value> = specs.iter().map(|name| json!({"name": name, "size": 2})).collect();
    let reg = json!({"instance_group": "g", "instance_id": id, "block_size": 4, "location_spec_infos": specs,
                     "model_deployment": {"model_name": "m", "dtype": "bf16"}});
    assert_ok(&api.meta("registerInstance", reg).await);
}

/// Writes `keys` of `id` as an engine does: files at the handed-out URIs (content = the URI),
/// then finishWriteCache. Returns every (URI, path).
async fn write_files(api: &Api, id: &str, keys: &[i64]) -> Vec<(String, PathBuf)> {
    let (_, s) = api.meta("startWriteCache", json!({"instance_id": id, "block_keys": keys})).await;
    assert_eq!(code(&s), "OK", "{s}");
    let mut out = Vec::new();
    for loc in s["locations"].as_array().unwrap() {
        for spec in loc["location_specs"].as_array().unwrap() {
            let uri = spec["uri"].as_str().unwrap().to_string();
            let path = file_path(&uri);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &uri).unwrap();
            out.push((uri, path));
        }
    }
    assert_eq!(out.len(), keys.len() * s["locations"][0]["location_specs"].as_array().unwrap().len());
    let finish =
        json!({"instance_id": id, "write_session_id": s["write_session_id"], "success_blocks": {"offset": keys.len()}});
    assert_ok(&api.meta("finishWriteCache", finish).await);
    out
}

/// Every URI a batch read of `keys` returns for `id`, in order (empty for a miss).
async fn read_uris(api: &Api, id: &str, keys: &[i64]) -> Vec<String> {
    let (_, r) = api
        .meta("getCacheLocation", json!({"instance_id": id, "query_type": "QT_BATCH_GET", "block_keys": keys}))
        .await;
    assert_eq!(code(&r), "OK", "{r}");
    r["locations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|l| l["location_specs"].as_array().unwrap().iter().map(|s| s["uri"].as_str().unwrap().to_string()))
        .collect()
}

async fn xlen(key: &str) -> i64 {
    redis::cmd("XLEN").arg(key).query_async(&mut valkey().await).await.unwrap()
}

/// The instance directory a block file lives in (`<root><instance>/<spec>/<file>`).
fn instance_dir(path: &Path) -> &Path {
    path.parent().and_then(Path::parent).unwrap()
}

/// Two instances `a` and `a/b` on one storage, both with written files. `a` has a spec named
/// `b`, so with ids used as raw paths its `b` spec directory would be `a/b`'s instance directory.
struct Nested {
    fx: Fixture,
    b: String,
    a_files: Vec<(String, PathBuf)>,
    b_files: Vec<(String, PathBuf)>,
}

const KEYS: [i64; 3] = [1, 2, 3];

async fn nested() -> Nested {
    let fx = Fixture::new(&[("tp0", 2), ("b", 2)], 1, json!({})).await;
    let b = format!("{}/b", fx.instance);
    register(&fx.api, &b, &["tp0"]).await;
    let a_files = write_files(&fx.api, &fx.instance, &KEYS).await;
    let b_files = write_files(&fx.api, &b, &KEYS).await;

    // Sibling directories under the root, neither inside the other.
    let a_dir = fx.root.join(&fx.instance);
    let b_dir = fx.root.join(format!("{}~2Fb", fx.instance));
    for (uri, path) in &a_files {
        assert_eq!(instance_dir(path), a_dir, "{uri}");
    }
    for (uri, path) in &b_files {
        assert!(uri.contains(&format!("/{}~2Fb/tp0/", fx.instance)), "{uri}");
        assert_eq!(instance_dir(path), b_dir, "{uri}");
    }
    assert_eq!(a_dir.parent(), b_dir.parent());
    assert!(!a_dir.starts_with(&b_dir) && !b_dir.starts_with(&a_dir));
    Nested { fx, b, a_files, b_files }
}

/// Waits until every file is gone and `id`'s deletion stream is drained with no dead letter.
async fn wait_deleted(n: &Nested, id: &str, files: &[(String, PathBuf)]) {
    let ns = &n.fx.api.namespace;
    let (del, dead) = (instance_key(ns, id, "del"), instance_key(ns, id, "del_dead"));
    let done = eventually(Duration::from_secs(15), || async {
        (files.iter().all(|(_, p)| !p.exists()) && xlen(&del).await == 0).then_some(())
    })
    .await;
    assert!(done.is_some(), "{id}'s files were not all deleted, or its stream did not drain");
    assert_eq!(xlen(&dead).await, 0, "no deletion of {id} failed");
}

/// `id`'s files are all there, unchanged, and reads hand out exactly their URIs.
async fn untouched(n: &Nested, id: &str, files: &[(String, PathBuf)]) {
    for (uri, path) in files {
        assert_eq!(std::fs::read_to_string(path).ok().as_deref(), Some(uri.as_str()), "{} changed", path.display());
    }
    let uris: Vec<&str> = files.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(read_uris(&n.fx.api, id, &KEYS).await, uris);
}

#[tokio::test]
async fn trimming_instance_a_slash_b_leaves_instance_a_files_and_reads_untouched() {
    let n = nested().await;
    let _w = WorkerProc::start(&n.fx.api.namespace, &[]);
    assert_ok(&n.fx.api.meta("trimCache", json!({"instance_id": n.b, "strategy": "TS_REMOVE_ALL_CACHE"})).await);
    wait_deleted(&n, &n.b, &n.b_files).await;
    untouched(&n, &n.fx.instance, &n.a_files).await;
    assert!(read_uris(&n.fx.api, &n.b, &KEYS).await.iter().all(String::is_empty), "a/b's blocks are gone");
}

#[tokio::test]
async fn removing_instance_a_blocks_leaves_instance_a_slash_b_files_and_reads_untouched() {
    let n = nested().await;
    let _w = WorkerProc::start(&n.fx.api.namespace, &[]);
    assert_ok(&n.fx.api.meta("removeCache", json!({"instance_id": n.fx.instance, "block_keys": KEYS})).await);
    wait_deleted(&n, &n.fx.instance, &n.a_files).await;
    untouched(&n, &n.b, &n.b_files).await;
}

fn nfs(name: &str, root: &Path) -> Value {
    json!({"storage": {"global_unique_name": name, "nfs": {"root_path": root.to_str().unwrap()}}})
}

#[tokio::test]
async fn storages_whose_roots_nest_or_coincide_are_refused_naming_both_and_change_nothing() {
    let api = Api::start();
    let base = repo_root().join(".kvcm/test-data").join(unique("roots"));
    assert_ok(&api.admin("addStorage", nfs("outer", &base.join("a"))).await);
    // A string prefix is not a path prefix: /…/ab/ is a sibling of /…/a/.
    assert_ok(&api.admin("addStorage", nfs("sibling", &base.join("ab"))).await);
    let before = dump_namespace(&api.namespace).await;
    let threefs = json!({"storage": {"global_unique_name": "t", "threefs": {"mountpoint": base.to_str().unwrap(), "root_dir": "a/x"}}});
    for (rpc, body, relation) in [
        ("addStorage", nfs("inner", &base.join("a/b")), "lies inside"),
        ("addStorage", nfs("inner", &base), "contains"),
        ("addStorage", nfs("inner", &base.join("a/")), "is the same directory as"),
        ("addStorage", nfs("inner", &base.join("./a//b")), "lies inside"),
        ("addStorage", threefs, "lies inside"),
    ] {
        let reply = api.admin(rpc, body.clone()).await;
        assert_err(&reply, "INVALID_ARGUMENT", relation);
        let name = body["storage"]["global_unique_name"].as_str().unwrap();
        let m = message(&reply.1);
        assert!(m.contains(&format!("storage '{name}'")) && m.contains("storage 'outer'"), "{m}");
        assert_eq!(dump_namespace(&api.namespace).await, before, "a refused {body} changed state");
    }
    // Moving an existing storage into another's root is refused the same way, even when forced.
    let mut moved = nfs("sibling", &base.join("a/ab"));
    moved["force_update"] = json!(true);
    let reply = api.admin("updateStorage", moved).await;
    assert_err(&reply, "INVALID_ARGUMENT", "storage 'sibling' root");
    assert!(message(&reply.1).contains("storage 'outer'"), "{}", reply.1);
    assert_eq!(dump_namespace(&api.namespace).await, before, "a refused update changed state");
}

#[tokio::test]
async fn admins_racing_to_add_nested_roots_get_exactly_one_through() {
    let ns = unique("ns");
    let apis = [Api::start_with(&ns, &[]), Api::start_with(&ns, &[])];
    let base = repo_root().join(".kvcm/test-data").join(unique("race"));
    // Eight storages, each root inside the previous one, added at once through two frontends.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..8 {
        let root = (0..=i).fold(base.clone(), |p, d| p.join(d.to_string()));
        let url = format!("{}/api/addStorage", apis[i % 2].admin);
        let body = nfs(&format!("s{i}"), &root).to_string();
        tasks.spawn(async move {
            let text = reqwest::Client::new().post(url).body(body).send().await.unwrap().text().await.unwrap();
            serde_json::from_str::<Value>(&text).unwrap()
        });
    }
    let replies = tasks.join_all().await;
    let ok = replies.iter().filter(|r| code(r) == "OK").count();
    assert_eq!(ok, 1, "{replies:?}");
    for r in replies.iter().filter(|r| code(r) != "OK") {
        assert_eq!(code(r), "INVALID_ARGUMENT", "{r}");
    }
    let (_, list) = apis[0].admin("listStorage", json!({})).await;
    assert_eq!(list["storage"].as_array().unwrap().len(), 1, "{list}");
}
