//! TLS and AUTH from kvcm to Valkey (docs/security.md, "To Valkey"), for real: kvcm-api and
//! kvcm-worker processes against local clusters that clients reach only through stunnel's TLS
//! ports — every node announces its TLS port, so the slot map and redirects lead to TLS ports
//! only — with AUTH on every node ([`TlsCluster`]). A second cluster requires client
//! certificates. Misconfigurations must stop the start with a message saying what to fix, and
//! never print a password.

use kvcm_tests::*;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

/// Both planes through a frontend on `env`: storage, group and instance created, blocks written
/// and found again, the admin lists showing them. Returns the fixture and the written files.
async fn smoke(env: &[(String, String)]) -> (Fixture, Vec<PathBuf>) {
    let api = Api::start_with(&unique("ns"), &pairs(env));
    let fx = Fixture::on(api, &[("tp0", 2)], 1, json!({})).await;
    let paths = fx.write_files(&[1, 2, 3]).await;
    let found = fx.get("QT_PREFIX_MATCH", &[1, 2, 3, 4], json!({})).await;
    assert_eq!(Fixture::real(&found), vec![true, true, true], "{found}");
    let (_, groups) = fx.api.admin("listInstanceGroup", json!({})).await;
    assert_eq!(groups["instance_group"][0]["name"], "g", "{groups}");
    let (_, storages) = fx.api.admin("listStorage", json!({})).await;
    assert_eq!(storages["storage"][0]["global_unique_name"], "files", "{storages}");
    let (_, instances) = fx.api.admin("listInstanceInfo", json!({})).await;
    assert_eq!(instances["instance_info"][0]["instance_id"], fx.instance.as_str(), "{instances}");
    (fx, paths)
}

/// A worker on `env` deletes removed blocks' files (its cluster connection and its per-node
/// discovery connections over TLS); the worker is returned so its log can be read.
async fn worker_deletes(fx: &Fixture, paths: &[PathBuf], env: &[(String, String)]) -> WorkerProc {
    let w = WorkerProc::start(&fx.api.namespace, &pairs(env));
    assert_ok(&fx.api.meta("removeCache", json!({"instance_id": fx.instance, "block_keys": [2, 3]})).await);
    let gone = eventually(Duration::from_secs(15), || async { paths[1..].iter().all(|p| !p.exists()).then_some(()) });
    assert!(gone.await.is_some(), "the worker did not delete the removed blocks' files:\n{}", read(&w.log));
    assert!(paths[0].exists(), "block 1 is kept");
    // Deletions follow a discovery pass, which scans every primary on its own connection: had a
    // node connection failed (wrong scheme, no CA, no password), the pass would have said so.
    let log = read(&w.log);
    assert!(!log.contains("discovery scan of a node failed"), "{log}");
    w
}

fn read(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `env` without the variables named in `drop`, plus `add`.
fn with(env: &[(String, String)], drop: &[&str], add: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = env.iter().filter(|(k, _)| !drop.contains(&k.as_str())).cloned().collect();
    out.extend(add.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    out
}

/// Starts kvcm-api and kvcm-worker on `env`, both of which must refuse to start; returns what
/// each printed.
fn both_refuse(env: &[(String, String)]) -> [String; 2] {
    let api = Api::try_start(&unique("ns"), &pairs(env)).err().expect("kvcm-api must not start");
    let worker = WorkerProc::try_start(&unique("ns"), &pairs(env)).err().expect("kvcm-worker must not start");
    [api.stderr, worker.stderr]
}

#[tokio::test]
async fn both_planes_and_the_worker_work_over_tls_with_a_ca_file_and_a_password_from_the_environment() {
    let cluster = TlsCluster::tls();
    let env = cluster.env();
    let (fx, paths) = smoke(&env).await;
    // The metadata is on the TLS cluster, and not only on the seed node: the client followed the
    // slot map to other nodes' announced TLS ports (the registry's slot is on the second node).
    let keys = cluster.keys_per_node(&fx.api.namespace).await;
    let tls_ports: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", tls_port(cluster, i))).collect();
    assert_eq!(keys.keys().cloned().collect::<Vec<_>>(), tls_ports, "every primary is announced at its TLS port");
    let seed = &tls_ports[0];
    assert!(keys.iter().any(|(addr, n)| addr != seed && *n > 0), "keys beyond the seed node: {keys:?}");
    worker_deletes(&fx, &paths, &env).await;
}

#[tokio::test]
async fn mutual_tls_works_with_a_client_certificate_and_an_acl_user_whose_password_is_in_a_file() {
    let cluster = TlsCluster::mtls();
    let password_file = cluster.user_password_file.to_str().unwrap();
    let env = with(
        &cluster.env(),
        &["KVCM_VALKEY_PASSWORD"],
        &[("KVCM_VALKEY_USERNAME", cluster.user), ("KVCM_VALKEY_PASSWORD_FILE", password_file)],
    );
    let (fx, paths) = smoke(&env).await;
    worker_deletes(&fx, &paths, &env).await;
    // The same start without the client certificate is refused by the server, and says so.
    let no_cert = with(&env, &["KVCM_VALKEY_TLS_CLIENT_CERT_FILE", "KVCM_VALKEY_TLS_CLIENT_KEY_FILE"], &[]);
    for printed in both_refuse(&no_cert) {
        assert!(printed.contains("requires a client certificate (mutual TLS)"), "{printed}");
        assert!(printed.contains("valkey_tls_client_cert_file"), "{printed}");
    }
}

#[tokio::test]
async fn a_server_certificate_the_ca_file_does_not_trust_fails_the_start_naming_the_file() {
    let cluster = TlsCluster::tls();
    let other = cluster.other_ca.to_str().unwrap();
    let env = with(&cluster.env(), &["KVCM_VALKEY_TLS_CA_FILE"], &[("KVCM_VALKEY_TLS_CA_FILE", other)]);
    for printed in both_refuse(&env) {
        assert!(printed.contains("is not trusted by valkey_tls_ca_file"), "{printed}");
        assert!(printed.contains(other), "{printed}");
    }
    // Without a CA file the system's trusted roots decide, and they do not know a throwaway CA.
    let env = with(&cluster.env(), &["KVCM_VALKEY_TLS_CA_FILE"], &[]);
    for printed in both_refuse(&env) {
        assert!(printed.contains("not trusted by the system's trusted roots"), "{printed}");
    }
}

#[tokio::test]
async fn without_a_ca_file_the_system_trust_store_decides() {
    // SSL_CERT_FILE replaces the platform's CA bundle for rustls-native-certs, which is how the
    // system store is read: a store holding the cluster's CA lets kvcm in, one holding an
    // unrelated CA does not.
    let cluster = TlsCluster::tls();
    let (ca, other) = (cluster.ca.to_str().unwrap(), cluster.other_ca.to_str().unwrap());
    let env = with(&cluster.env(), &["KVCM_VALKEY_TLS_CA_FILE"], &[("SSL_CERT_FILE", other)]);
    for printed in both_refuse(&env) {
        assert!(printed.contains("not trusted by the system's trusted roots"), "{printed}");
    }
    // Both planes and the worker (its cluster connection and its per-node connections).
    let env = with(&cluster.env(), &["KVCM_VALKEY_TLS_CA_FILE"], &[("SSL_CERT_FILE", ca)]);
    let (fx, paths) = smoke(&env).await;
    worker_deletes(&fx, &paths, &env).await;
}

#[tokio::test]
async fn a_plain_url_to_the_tls_ports_fails_the_start_saying_use_rediss() {
    let cluster = TlsCluster::tls();
    let plain = cluster.url.replace("rediss://", "redis://");
    let env = with(&cluster.env(), &["KVCM_VALKEY_URL", "KVCM_VALKEY_TLS_CA_FILE"], &[("KVCM_VALKEY_URL", &plain)]);
    let expected = format!("the endpoint at 127.0.0.1:{} seems to speak TLS: use rediss://", tls_port(cluster, 0));
    for printed in both_refuse(&env) {
        assert!(printed.contains(&expected), "{printed}");
    }
}

#[tokio::test]
async fn a_tls_url_to_a_plain_port_fails_the_start_saying_it_answers_in_plain_text() {
    let cluster = TlsCluster::tls();
    // A node's own port, behind the terminator: plain RESP.
    let url = cluster.plain_url.replace("redis://", "rediss://");
    let env = with(&cluster.env(), &["KVCM_VALKEY_URL"], &[("KVCM_VALKEY_URL", &url)]);
    let addr = url.trim_start_matches("rediss://");
    for printed in both_refuse(&env) {
        assert!(printed.contains(&format!("the endpoint at {addr} answers in plain text, not TLS")), "{printed}");
    }
}

#[tokio::test]
async fn a_wrong_or_missing_password_fails_the_start_clearly_without_printing_it() {
    const WRONG: &str = "Wr0ngT0kenQx";
    let cluster = TlsCluster::tls();
    let mut printed = String::new();
    let env = with(&cluster.env(), &["KVCM_VALKEY_PASSWORD"], &[("KVCM_VALKEY_PASSWORD", WRONG)]);
    for out in both_refuse(&env) {
        assert!(
            out.contains("refused the credentials of user `default` (password from KVCM_VALKEY_PASSWORD)"),
            "{out}"
        );
        printed += &out;
    }
    // A wrong password of the ACL user, from a file.
    let file = repo_root().join(".kvcm/test-tmp").join(unique("wrong-password"));
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, format!("{WRONG}\n")).unwrap();
    let env = with(
        &cluster.env(),
        &["KVCM_VALKEY_PASSWORD"],
        &[("KVCM_VALKEY_USERNAME", cluster.user), ("KVCM_VALKEY_PASSWORD_FILE", file.to_str().unwrap())],
    );
    for out in both_refuse(&env) {
        assert!(out.contains("refused the credentials of user `kvcm` (password from valkey_password_file"), "{out}");
        printed += &out;
    }
    // No password at all.
    let env = with(&cluster.env(), &["KVCM_VALKEY_PASSWORD"], &[]);
    for out in both_refuse(&env) {
        assert!(out.contains("Valkey requires a password and none is configured"), "{out}");
        printed += &out;
    }
    assert!(!printed.contains(WRONG) && !printed.contains(&cluster.token), "a password was printed:\n{printed}");
}

/// The `i`-th TLS port of a test cluster.
fn tls_port(cluster: &TlsCluster, i: u16) -> u16 {
    let base: u16 = cluster.url.rsplit(':').next().unwrap().parse().unwrap();
    base + i
}
