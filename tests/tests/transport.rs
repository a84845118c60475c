//! Connection handling of kvcm-api's two listeners, black-box over raw sockets: the header-read
//! timeout (slow-loris clients), the idle keep-alive timeout, the per-listener connection cap,
//! graceful shutdown, `/api/healthy` answering from the background health check, and the meta
//! plane's connections spread over its serving threads.
//!
//! Timeouts are shortened through `KVCM_*` variables. Assertions about time are one-sided and
//! cannot fail on a slow machine: a connection must not be closed *before* its timeout, and must
//! be closed eventually (a generous deadline). Every frontend here checks health once a minute
//! unless the test is about the checker, so their PINGs do not blur the PING count of
//! `healthy_answers_from_the_background_check_without_pinging_valkey_per_call`.

use kvcm_tests::*;
use serde_json::json;
use std::time::{Duration, Instant};

const RARE_HEALTH_CHECKS: (&str, &str) = ("KVCM_HEALTH_CHECK_INTERVAL_MS", "60000");
const EVENTUALLY: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_client_that_does_not_finish_its_request_head_is_disconnected_after_the_header_read_timeout() {
    let api = Api::start_with(
        &unique("ns"),
        &[("KVCM_HEADER_READ_TIMEOUT_MS", "500"), ("KVCM_IDLE_TIMEOUT_MS", "60000"), RARE_HEALTH_CHECKS],
    );
    let opened = Instant::now();
    let mut silent = RawConn::connect(&api.meta).await;
    let mut trickler = RawConn::connect(&api.admin).await;
    trickler.send(b"POST /api/listStorage HTTP/1.1\r\nhost: kvcm\r\n").await.unwrap();
    // One more header byte every 50 ms: bytes keep coming, the head never completes.
    let mut trickled_until_closed = None;
    for byte in b"x-slow-loris: 1".iter().cycle().take(EVENTUALLY.as_millis() as usize / 50) {
        if trickler.send(&[*byte]).await.is_err() {
            trickled_until_closed = Some(Instant::now());
            break;
        }
        if let Some(at) = trickler.closed_within(Duration::from_millis(50)).await {
            trickled_until_closed = Some(at);
            break;
        }
    }
    let trickled_until_closed = trickled_until_closed.expect("a trickling client was never disconnected");
    assert!(trickled_until_closed - opened >= Duration::from_millis(500), "closed before the header-read timeout");
    let silent_closed = silent.closed_within(EVENTUALLY).await.expect("a silent client was never disconnected");
    assert!(silent_closed - opened >= Duration::from_millis(500), "closed before the header-read timeout");
    assert!(silent.unread().is_empty() && trickler.unread().is_empty(), "no reply is sent on a header timeout");

    // A client that sends its request in time is served on both planes.
    assert_eq!(RawConn::connect(&api.meta).await.get("/api/healthy").await.status, 200);
    assert_eq!(RawConn::connect(&api.admin).await.get("/api/healthy").await.status, 200);
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_while_a_used_one_keeps_working() {
    // The idle timeout is five times the header-read timeout: hyper's own header-read timeout,
    // which also runs while a kept-alive connection waits, would close both connections early.
    let api = Api::start_with(
        &unique("ns"),
        &[("KVCM_HEADER_READ_TIMEOUT_MS", "300"), ("KVCM_IDLE_TIMEOUT_MS", "1500"), RARE_HEALTH_CHECKS],
    );
    let mut idle = RawConn::connect(&api.meta).await;
    // Taken before the request: the server's idle clock starts after it has answered, so a
    // close at its idle timeout is never less than the timeout after this instant.
    let idle_since = Instant::now();
    assert_eq!(idle.get("/api/healthy").await.status, 200);
    let idle_closed = tokio::spawn(async move { idle.closed_within(EVENTUALLY).await });

    // A request every 500 ms on one connection for twice the idle timeout: each gap is longer
    // than the header-read timeout and shorter than the idle timeout.
    let mut used = RawConn::connect(&api.meta).await;
    let started = Instant::now();
    let mut requests = 0;
    while started.elapsed() < Duration::from_millis(3000) {
        let resp = used.get("/api/healthy").await;
        assert_eq!(
            (resp.status, resp.header("connection")),
            (200, None),
            "request {requests} on the kept-alive connection"
        );
        requests += 1;
        assert!(used.closed_within(Duration::from_millis(500)).await.is_none(), "a used connection was closed");
    }
    assert!(requests >= 4, "{requests}");

    let closed_at = idle_closed.await.unwrap().expect("the idle connection was never closed");
    assert!(closed_at - idle_since >= Duration::from_millis(1500), "closed before the idle timeout");
}

#[tokio::test]
async fn beyond_max_connections_a_new_connection_waits_until_another_closes() {
    let api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_MAX_CONNECTIONS", "3"),
            ("KVCM_HEADER_READ_TIMEOUT_MS", "60000"),
            ("KVCM_IDLE_TIMEOUT_MS", "60000"),
            RARE_HEALTH_CHECKS,
        ],
    );
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = RawConn::connect(&api.meta).await;
        assert_eq!(conn.get("/api/healthy").await.status, 200);
        held.push(conn);
    }
    // The kernel completes the handshake (the socket sits in the accept backlog), but kvcm does
    // not accept it, so its request is not answered while the cap holds...
    let mut extra = RawConn::connect(&api.meta).await;
    extra.send(b"GET /api/healthy HTTP/1.1\r\nhost: kvcm\r\n\r\n").await.unwrap();
    assert!(extra.read_response(Duration::from_millis(500)).await.is_none(), "served beyond the cap");
    // ...the cap is per listener, so the admin plane still serves...
    assert_eq!(RawConn::connect(&api.admin).await.get("/api/healthy").await.status, 200);
    // ...and as soon as one of the held connections closes, the waiting one is served.
    drop(held.pop());
    let resp = extra.read_response(EVENTUALLY).await.expect("the waiting connection was never served");
    assert_eq!((resp.status, resp.body.as_str()), (200, r#"{"status":"OK"}"#));
    assert_eq!(extra.get("/api/healthy").await.status, 200, "it is a normal kept-alive connection");
}

#[tokio::test]
async fn healthy_answers_from_the_background_check_without_pinging_valkey_per_call() {
    let api = Api::start_with(&unique("ns"), &[RARE_HEALTH_CHECKS]);
    let (mut meta, mut admin) = (RawConn::connect(&api.meta).await, RawConn::connect(&api.admin).await);
    let before = command_calls("ping").await;
    for i in 0..100 {
        let resp = if i % 2 == 0 { meta.get("/api/healthy").await } else { admin.get("/api/healthy").await };
        assert_eq!((resp.status, resp.body.as_str()), (200, r#"{"status":"OK"}"#));
        assert_eq!(resp.header("content-type"), Some("application/json"));
    }
    let after = command_calls("ping").await;
    // Answering from a live PING, as before, sends 100 PINGs to every node. What remains are
    // other frontends' start-up checks.
    for (node, calls) in &after {
        let delta = calls - before.get(node).copied().unwrap_or(0);
        assert!(delta < 50, "node {node} got {delta} PINGs during 100 /api/healthy calls");
    }
}

#[tokio::test]
async fn healthy_turns_unhealthy_while_valkey_is_down_without_revealing_why_and_recovers() {
    let mut valkey = SoloValkey::start();
    let api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_VALKEY_URL", valkey.url.as_str()),
            ("KVCM_HEALTH_CHECK_INTERVAL_MS", "100"),
            ("KVCM_VALKEY_TIMEOUT_MS", "500"),
            ("KVCM_VALKEY_CONNECT_TIMEOUT_MS", "500"),
        ],
    );
    assert_eq!(api.get_admin("/api/healthy").await, (200, r#"{"status":"OK"}"#.to_string()));
    valkey.kill();
    let (status, body) = eventually(EVENTUALLY, || async {
        let mut conn = RawConn::connect(&api.meta).await;
        let resp = conn.get("/api/healthy").await;
        (resp.status == 503).then_some((resp.status, resp.body))
    })
    .await
    .expect("/api/healthy stayed OK with Valkey down");
    let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reply["status"], "UNHEALTHY", "{status} {body}");
    let reason = reply["reason"].as_str().unwrap();
    let port = valkey.url.rsplit(':').next().unwrap();
    for internal in ["127.0.0.1", port, "os error", "refused", "IoError"] {
        assert!(!reason.contains(internal), "the reason reveals {internal:?}: {reason}");
    }
    assert!(reason.contains("Valkey"), "{reason}");

    valkey.restart();
    eventually(EVENTUALLY, || async {
        let mut conn = RawConn::connect(&api.admin).await;
        (conn.get("/api/healthy").await.status == 200).then_some(())
    })
    .await
    .expect("/api/healthy did not recover with Valkey back");
}

#[tokio::test]
async fn shutdown_finishes_an_in_flight_request_and_is_not_held_by_idle_or_slow_clients() {
    let mut api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_REQUEST_TIMEOUT_MS", "4000"),
            ("KVCM_HEADER_READ_TIMEOUT_MS", "60000"),
            ("KVCM_IDLE_TIMEOUT_MS", "60000"),
            RARE_HEALTH_CHECKS,
        ],
    );
    let mut idle = RawConn::connect(&api.admin).await;
    assert_eq!(idle.get("/api/healthy").await.status, 200);
    let mut slow_loris = RawConn::connect(&api.meta).await;
    slow_loris.send(b"GET /api/healthy HTTP/1.1\r\nho").await.unwrap();
    // A request whose body is still on its way when the signal comes. `expect: 100-continue`
    // makes the server say when its handler has started (and waits for the body).
    let body = json!({"instance_id": "nobody"}).to_string();
    let mut in_flight = RawConn::connect(&api.meta).await;
    let head = format!(
        "POST /api/getInstanceInfo HTTP/1.1\r\nhost: kvcm\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    in_flight.send(head.as_bytes()).await.unwrap();
    let interim = in_flight.read_response(EVENTUALLY).await.expect("no 100 Continue");
    assert_eq!(interim.status, 100);
    in_flight.send(&body.as_bytes()[..5]).await.unwrap();

    api.sigterm();
    assert!(idle.closed_within(EVENTUALLY).await.is_some(), "an idle connection was kept open during shutdown");
    in_flight.send(&body.as_bytes()[5..]).await.unwrap();
    let resp = in_flight.read_response(EVENTUALLY).await.expect("the in-flight request got no reply");
    assert_eq!(resp.status, 200, "{}", resp.body);
    assert_eq!(code(&serde_json::from_str(&resp.body).unwrap()), "INSTANCE_NOT_EXIST", "{}", resp.body);
    assert_eq!(resp.header("connection"), Some("close"));

    // The half-sent head would hold the connection for a minute; the drain bound
    // (request_timeout_ms) ends it, and the process exits cleanly.
    assert_eq!(api.exit_code_within(EVENTUALLY).await, Some(0));
    assert!(slow_loris.closed_within(EVENTUALLY).await.is_some());
}

#[tokio::test]
async fn bad_connection_settings_stop_the_process_with_the_key_named() {
    for (var, value, key) in [
        ("KVCM_HEADER_READ_TIMEOUT_MS", "0", "header_read_timeout_ms"),
        ("KVCM_IDLE_TIMEOUT_MS", "0", "idle_timeout_ms"),
        ("KVCM_MAX_CONNECTIONS", "0", "max_connections"),
        ("KVCM_SERVING_THREADS", "1025", "serving_threads"),
        ("KVCM_HEALTH_CHECK_INTERVAL_MS", "1", "health_check_interval_ms"),
    ] {
        let failed = Api::try_start(&unique("ns"), &[(var, value)]).err().expect("must not start");
        assert_ne!(failed.code, Some(0));
        assert!(failed.stderr.contains(key), "{var}={value}: {}", failed.stderr);
    }
}

/// One meta-plane call on a raw kept-alive connection; its reply, checked to be OK.
async fn call_on(conn: &mut RawConn, rpc: &str, body: serde_json::Value) -> serde_json::Value {
    let body = body.to_string();
    let head = format!(
        "POST /api/{rpc} HTTP/1.1\r\nhost: kvcm\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    conn.send(format!("{head}{body}").as_bytes()).await.unwrap();
    let resp = conn.read_response(EVENTUALLY).await.expect("no reply");
    let reply: serde_json::Value = serde_json::from_str(&resp.body).unwrap();
    assert_eq!((resp.status, code(&reply)), (200, "OK"), "{rpc}: {}", resp.body);
    reply
}

/// A prefix read on a raw connection: how many blocks matched.
async fn prefix_read_on(conn: &mut RawConn, instance: &str, keys: &[i64]) -> usize {
    let body = json!({"instance_id": instance, "query_type": "QT_PREFIX_MATCH", "block_keys": keys});
    call_on(conn, "getCacheLocation", body).await["locations"].as_array().map_or(0, Vec::len)
}

/// A two-phase write of `keys` (all successful) on a raw connection.
async fn write_on(conn: &mut RawConn, instance: &str, keys: &[i64]) {
    let start = call_on(conn, "startWriteCache", json!({"instance_id": instance, "block_keys": keys})).await;
    let n = start["locations"].as_array().unwrap().len();
    let finish = json!({"instance_id": instance, "write_session_id": start["write_session_id"], "success_blocks": {"offset": n}});
    call_on(conn, "finishWriteCache", finish).await;
}

/// CPU time (in ns, from the scheduler's accounting) of each of a process's threads named
/// `kvcm-serve-N`, by N.
fn serving_thread_cpu(pid: u32, threads: usize) -> Vec<u64> {
    let mut cpu = vec![0; threads];
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let Some(n) = comm.trim().strip_prefix("kvcm-serve-").and_then(|n| n.parse::<usize>().ok()) else { continue };
        // schedstat: time on the CPU (ns), time waiting for it, time slices.
        let schedstat = std::fs::read_to_string(task.path().join("schedstat")).unwrap();
        cpu[n] = schedstat.split_whitespace().next().unwrap().parse().unwrap();
    }
    cpu
}

#[tokio::test]
async fn meta_connections_go_to_the_least_loaded_serving_thread_and_every_thread_serves_them() {
    const THREADS: usize = 3;
    let api = Api::start_with(
        &unique("ns"),
        &[
            ("KVCM_SERVING_THREADS", "3"),
            ("KVCM_HEADER_READ_TIMEOUT_MS", "60000"),
            ("KVCM_IDLE_TIMEOUT_MS", "60000"),
            RARE_HEALTH_CHECKS,
        ],
    );
    // Everything on the meta plane below goes through the raw connections: the fixture's own
    // client keeps the connection it set the instance up with, and nothing more.
    let fx = Fixture::on(api, &[("tp0", 1024)], 1, json!({})).await;
    let series = |t: usize| format!("kvcm_serving_thread_connections{{thread=\"{t}\"}}");
    let counts = || async {
        let mut counts = Vec::new();
        for t in 0..THREADS {
            counts.push(fx.api.metric(&series(t)).await as i64);
        }
        counts
    };
    // Opens a connection (one request on it) and tells which thread took it.
    let open = || async {
        let before = counts().await;
        let mut conn = RawConn::connect(&fx.api.meta).await;
        assert_eq!(conn.get("/api/healthy").await.status, 200);
        let after = counts().await;
        let grew: Vec<usize> = (0..THREADS).filter(|&t| after[t] == before[t] + 1).collect();
        assert_eq!(grew.len(), 1, "one thread takes the connection: {before:?} -> {after:?}");
        assert_eq!(after.iter().sum::<i64>(), before.iter().sum::<i64>() + 1, "{before:?} -> {after:?}");
        (conn, grew[0])
    };
    let mut conns = Vec::new();
    for _ in 0..2 * THREADS {
        let before = counts().await;
        let (conn, thread) = open().await;
        assert_eq!(before[thread], *before.iter().min().unwrap(), "{before:?}: went to thread {thread}");
        conns.push((conn, thread));
    }

    // Every thread serves its connections, over its own Valkey connection: each connection
    // writes a prompt and reads back the one the next connection wrote.
    let cpu_before = serving_thread_cpu(fx.api.pid(), THREADS);
    let prompts: Vec<Vec<i64>> = (0..conns.len() as i64).map(|c| (0..8).map(|b| 1000 * c + b + 1).collect()).collect();
    for (c, (conn, _)) in conns.iter_mut().enumerate() {
        assert_eq!(prefix_read_on(conn, &fx.instance, &prompts[c]).await, 0);
        write_on(conn, &fx.instance, &prompts[c]).await;
    }
    for round in 0..50 {
        for (c, (conn, _)) in conns.iter_mut().enumerate() {
            let next = &prompts[(c + 1) % prompts.len()];
            assert_eq!(prefix_read_on(conn, &fx.instance, next).await, 8, "round {round}, connection {c}");
        }
    }
    let cpu_after = serving_thread_cpu(fx.api.pid(), THREADS);
    for t in 0..THREADS {
        assert!(cpu_after[t] > cpu_before[t], "thread {t} did no work: {cpu_before:?} -> {cpu_after:?}");
        let busy = fx.api.metric(&format!("kvcm_serving_thread_busy_seconds_total{{thread=\"{t}\"}}")).await;
        assert!(busy > 0.0, "thread {t} reports no busy time");
    }

    // Two connections of one thread close: the next two connections go to that thread.
    let emptied = conns[0].1;
    let target = counts().await[emptied] - 2;
    let mut closed = 0;
    conns.retain(|(_, t)| {
        let close = *t == emptied && closed < 2;
        closed += usize::from(close);
        !close
    });
    assert_eq!(closed, 2);
    eventually(EVENTUALLY, || async { (counts().await[emptied] == target).then_some(()) })
        .await
        .expect("closed connections were never counted off");
    for _ in 0..2 {
        let (mut conn, thread) = open().await;
        assert_eq!(thread, emptied, "a new connection went to a busier thread: {:?}", counts().await);
        assert_eq!(prefix_read_on(&mut conn, &fx.instance, &prompts[0]).await, 8);
        conns.push((conn, thread));
    }
}
