//! `infra/valkey-cluster.sh` (what `make run` and `make test` start Valkey with) recovers from an
//! earlier run that did not stop cleanly, and never touches a process it did not start.

use kvcm_tests::*;
use std::process::Command;

fn script(args: &[&str]) -> (bool, String) {
    let out = Command::new(repo_root().join("infra/valkey-cluster.sh")).args(args).output().expect("run the script");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn cli(port: u16, args: &[&str]) -> String {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<String>(&mut conn).unwrap_or_default()
}

/// A base port for this test's nodes (6 ports and their bus ports at +10000), away from the
/// ports other tests and `make run` use and below the ephemeral range (32768 and up).
fn base_port() -> u16 {
    12000 + (std::process::id() % 1400) as u16 * 6
}

/// Stops a cluster of this test's when dropped, also when an assertion fails.
struct Stop(Vec<String>);

impl Drop for Stop {
    fn drop(&mut self) {
        let args: Vec<&str> = self.0.iter().map(String::as_str).collect();
        script(&args);
    }
}

#[test]
fn a_cluster_left_half_dead_by_an_unclean_stop_is_rebuilt_and_foreign_ports_are_refused() {
    let base = base_port();
    let b = base.to_string();
    let dir = repo_root().join(".kvcm/test-tmp").join(unique("stale-cluster"));
    let d = dir.to_str().unwrap();
    let _stop = Stop(["stop", "--base-port", &b, "--replicas", "1", "--dir", d].map(String::from).to_vec());
    let (ok, out) = script(&["start", "--base-port", &b, "--replicas", "1", "--dir", d]);
    assert!(ok, "{out}");
    // An unclean stop that left some nodes running: the cluster they form is down, and its
    // primaries still know each other (`cluster create` would say "Node … is not empty").
    for i in [0u16, 2, 4] {
        let pid = std::fs::read_to_string(dir.join((base + i).to_string()).join("valkey.pid")).unwrap();
        Command::new("kill").args(["-9", pid.trim()]).status().unwrap();
    }
    let (ok, out) = script(&["start", "--base-port", &b, "--replicas", "1", "--dir", d]);
    assert!(ok, "the second start failed: {out}");
    assert!(out.contains("left over from an earlier run"), "{out}");
    let info = cli(base, &["CLUSTER", "INFO"]);
    assert!(info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:6"), "{info}");
    let (ok, out) = script(&["stop", "--base-port", &b, "--replicas", "1", "--dir", d]);
    assert!(ok, "{out}");

    // Something else on one of the ports: refused with the reason, and left running.
    let foreign = std::net::TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let other = repo_root().join(".kvcm/test-tmp").join(unique("foreign"));
    let _stop_other = Stop(["stop", "--base-port", &b, "--dir", other.to_str().unwrap()].map(String::from).to_vec());
    let (ok, out) = script(&["start", "--base-port", &b, "--dir", other.to_str().unwrap()]);
    assert!(!ok, "started over a foreign process: {out}");
    assert!(out.contains(&format!("port {} is taken by a process this script did not start", base + 1)), "{out}");
    assert!(foreign.local_addr().is_ok());
    assert!(std::net::TcpStream::connect(("127.0.0.1", base)).is_err(), "a node was started before the refusal");
    drop(foreign);
}
