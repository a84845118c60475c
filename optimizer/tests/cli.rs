//! End-to-end tests of the `kvcm-optimizer` binary: the real executable, real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_kvcm-optimizer");

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "kvcm-optimizer-{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A small Mooncake-format trace: conversations that grow by one block per turn.
fn write_mooncake_trace(dir: &Path) -> PathBuf {
    let mut text = String::new();
    for turn in 0..30u64 {
        for conversation in 0..4u64 {
            let ids: Vec<String> = (0..=turn % 10).map(|i| (conversation * 1000 + i).to_string()).collect();
            text += &format!(
                "{{\"timestamp\": {}, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [{}]}}\n",
                turn * 100 + conversation,
                ids.join(", ")
            );
        }
    }
    let path = dir.join("trace.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn the_scripted_sweep_writes_csv_with_capacity_policy_and_hit_rate_columns() {
    let dir = TempDir::new("sweep");
    let trace = write_mooncake_trace(dir.path());
    let out = dir.path().join("out");
    let output = run(&[
        "sweep",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "mooncake",
        "--capacities",
        "5,10,40",
        "--policies",
        "lru,lfu,opt",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));

    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (capacity, policy, hit_rate) = (column("capacity"), column("policy"), column("hit_rate"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 9);
    let mut seen: Vec<(String, String)> = Vec::new();
    for row in &rows {
        let rate: f64 = row[hit_rate].parse().unwrap();
        assert!((0.0..=1.0).contains(&rate), "{rate}");
        seen.push((row[policy].to_owned(), row[capacity].to_owned()));
    }
    for p in ["lru", "lfu", "opt"] {
        for c in ["5", "10", "40"] {
            assert!(seen.contains(&(p.to_owned(), c.to_owned())), "{p} at {c} missing");
        }
    }
    // 40 blocks hold the whole trace (4 conversations × 10 blocks): every policy reaches the
    // maximum, so the recommendation names a capacity for each.
    let rec = std::fs::read_to_string(out.join("recommendation.csv")).unwrap();
    assert_eq!(rec.lines().count(), 4, "{rec}");
    assert!(out.join("recommendation.md").exists());
    assert!(out.join("hit_rate_table.md").exists());
    if kvcm_optimizer::plot::ensure_font().is_ok() {
        assert!(out.join("hit_rate.svg").exists());
        assert!(out.join("hit_rate.png").exists());
    }
    let text = stdout(&output);
    assert!(text.contains("accesses/s per core"), "{text}");
    assert!(text.contains("recommendation:"), "{text}");
}

#[test]
fn sizes_in_bytes_become_blocks_and_are_reported_in_bytes() {
    let dir = TempDir::new("bytes");
    let trace = write_mooncake_trace(dir.path());
    let out = dir.path().join("out");
    let output = run(&[
        "sweep",
        "--trace",
        trace.to_str().unwrap(),
        "--bytes",
        "8KiB,20KiB",
        "--block-bytes",
        "1KiB",
        "--policies",
        "leaf_lru",
        "--plot",
        "none",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 2);
    assert!(rows[0].starts_with("8,8192,"), "{}", rows[0]);
    assert!(rows[1].starts_with("20,20480,"), "{}", rows[1]);
    assert!(!out.join("hit_rate.svg").exists());
}

#[test]
fn a_malformed_trace_fails_naming_the_file_and_line() {
    let dir = TempDir::new("malformed");
    let path = dir.path().join("bad.jsonl");
    std::fs::write(&path, "{\"timestamp\": 0, \"hash_ids\": [1]}\n{\"timestamp\": 1, \"hash_ids\": 7}\n").unwrap();
    let output = run(&["stats", "--trace", path.to_str().unwrap()]);
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(err.contains("bad.jsonl"), "{err}");
    assert!(err.contains("line 2"), "{err}");
    assert!(err.contains("hash_ids") || err.contains("array"), "{err}");
}

#[test]
fn stats_reads_a_kvcm_event_log() {
    let dir = TempDir::new("events");
    let path = dir.path().join("events.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"source":"a","type":"getCacheLocation","trigger_time_us":"10","query_type":"QT_PREFIX_MATCH","keys":["1","2"]}"#,
            "\n",
            r#"{"source":"a","type":"startWriteCache","trigger_time_us":"11","keys":["1","2"]}"#,
            "\n",
            r#"{"source":"b","type":"getCacheLocation","trigger_time_us":"12","query_type":"QT_PREFIX_MATCH","keys":["1","2","3"]}"#,
            "\n",
        ),
    )
    .unwrap();
    let output = run(&["stats", "--trace", path.to_str().unwrap(), "--format", "kvcm"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("requests:          2"), "{text}");
    assert!(text.contains("block accesses:    5"), "{text}");
    assert!(text.contains("distinct blocks:   5"), "{text}");
}

#[test]
fn replay_prints_the_hit_rate_of_one_policy_at_one_capacity() {
    let dir = TempDir::new("replay");
    let trace = write_mooncake_trace(dir.path());
    let output = run(&["replay", "--trace", trace.to_str().unwrap(), "--policy", "opt", "--capacity-fraction", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    // 120 requests of 1..=10 blocks; 40 distinct blocks; everything else hits.
    assert!(text.contains("requested blocks:  660"), "{text}");
    assert!(text.contains("hit blocks:        620"), "{text}");
    assert!(text.contains("evictions:         0"), "{text}");
}

#[test]
fn help_teaches_the_replay_semantics_and_the_policies() {
    let output = run(&["--help"]);
    let text = stdout(&output);
    assert!(text.contains("longest prefix"), "{text}");
    let sweep_help = stdout(&run(&["sweep", "--help"]));
    for needle in [
        "--capacities",
        "--capacity-fractions",
        "--bytes",
        "--block-bytes",
        "--target-fraction",
        "--tokens-per-block",
        "--gpu-s-per-token",
        "random_lru",
        "leaf_lru",
    ] {
        assert!(sweep_help.contains(needle), "sweep --help lacks {needle}");
    }
}

#[test]
fn a_generated_workload_is_a_trace_the_other_commands_read_and_the_same_seed_repeats_it() {
    let dir = TempDir::new("generate");
    let file = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let (a, b, c) = (file("a.jsonl"), file("b.jsonl"), file("c.jsonl"));
    for (out, seed) in [(&a, "3"), (&b, "3"), (&c, "4")] {
        let o = run(&["generate", "--workload", "mix", "--requests", "500", "--seed", seed, "--out", out]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains("mix: 500 requests"), "{}", stdout(&o));
    }
    let read = |p: &str| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&a), read(&b), "the same seed gives the same file");
    assert_ne!(read(&a), read(&c));
    let stats = run(&["stats", "--trace", &a]);
    assert!(stats.status.success(), "{}", stderr(&stats));
    assert!(stdout(&stats).contains("500"), "{}", stdout(&stats));
    // Bad input: an unknown workload and zero requests are refused with the reason.
    let bad = run(&["generate", "--workload", "podcasts", "--out", &a]);
    assert!(!bad.status.success() && stderr(&bad).contains("unknown workload 'podcasts'"), "{}", stderr(&bad));
    let none = run(&["generate", "--workload", "chat", "--requests", "0", "--out", &a]);
    assert!(!none.status.success() && stderr(&none).contains("--requests must be at least 1"), "{}", stderr(&none));
    let huge = run(&["generate", "--workload", "chat", "--requests", "99999999999", "--out", &a]);
    assert!(!huge.status.success() && stderr(&huge).contains("at most 10000000"), "{}", stderr(&huge));
}
