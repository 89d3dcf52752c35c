//! CI smoke test: the benchmark's quick mode runs end to end with tiny numbers and writes a
//! report in which every scenario is present and sane. It never asserts on timings: this test
//! keeps the harness from rotting, it does not judge performance.
//!
//! PostgreSQL is included (commit throughput, writes through a replica that does not own the
//! session) only when `OPENSHELL_TEST_POSTGRES_URL` is set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

fn count(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} missing or not a count in {v:#}"))
}

/// Every process log the run left: the gateway's, each replica's and each swarm's. A replica
/// that dies writes its panic only to its own log, so a failure shows them all.
fn run_logs(out: &std::path::Path) -> String {
    let mut logs: Vec<_> = std::fs::read_dir(out)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    logs.retain(|p| p.extension().is_some_and(|e| e == "log"));
    logs.sort();
    logs.iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            format!("--- {} ---\n{text}", p.display())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn quick_mode_writes_a_complete_report() {
    let out = tempfile::tempdir().unwrap();
    let postgres = std::env::var("OPENSHELL_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_openshell-bench"));
    cmd.args([
        "--quick",
        "--sessions",
        "20",
        "--fleet-sessions",
        "20",
        "--replicas-sessions",
        "20",
        "--samples",
        "5",
        "--short-poll-samples",
        "2",
        "--out",
    ])
    .arg(out.path())
    .env_remove("OPENSHELL_BENCH_POSTGRES_URL");
    if let Some(url) = &postgres {
        cmd.args(["--postgres-url", url]);
    }
    let output = cmd.output().unwrap();
    assert!(
        output.status.success(),
        "openshell-bench --quick failed\nstdout:\n{}\nstderr:\n{}\nlogs:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        run_logs(out.path())
    );

    let text = std::fs::read_to_string(out.path().join("report.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["mode"], "quick");
    assert!(count(&r, "/machine/cores") > 0);
    let s = &r["scenarios"];

    // 1. single-sandbox latency: every sample applied, in push and in poll.
    let l = &s["single_sandbox_latency"];
    assert_eq!(count(l, "/push/call/count"), 5);
    assert_eq!(count(l, "/push/not_applied"), 0);
    assert_eq!(count(l, "/push/supervisor_ack/count"), 5);
    assert_eq!(count(l, "/poll_short/call/count"), 2);
    assert!(count(l, "/machine/cores") > 0);
    assert_eq!(count(l, "/params/sessions"), 20);
    // Its floor, measured in the same run, part by part.
    for part in ["sqlite_commit", "apply_fsync", "grpc_round_trip"] {
        assert!(count(l, &format!("/floor/{part}/count")) >= 50, "{part}");
    }
    assert!(l["floor"]["p50_ms"].as_f64().unwrap() > 0.0);
    assert!(l["push_p50_over_floor"].as_f64().unwrap() > 0.0);

    // 2. fleet convergence: each round reached every session and the operation says so.
    let runs = s["fleet_convergence"]["runs"].as_array().unwrap();
    assert!(!runs.is_empty());
    for run in runs {
        for round in run["rounds"].as_array().unwrap() {
            assert_eq!(round["operation_state"], "APPLIED", "{round:#}");
            assert_eq!(count(round, "/sessions_missing"), 0);
            assert_eq!(count(round, "/fleet_targets"), 20);
            assert_eq!(count(round, "/fleet_applied"), 20);
            assert_eq!(count(round, "/per_session/count"), 20);
            // The gateway's metric of its last frame, read after the round.
            assert!(
                round["last_frame_sent_ms"]
                    .as_f64()
                    .is_some_and(|ms| ms >= 0.0),
                "{round:#}"
            );
        }
    }

    // 3. no starvation: sandbox writes happened while fanouts ran.
    let st = &s["no_starvation"];
    assert!(count(st, "/fanouts") > 0);
    assert!(count(st, "/baseline_wait_for_apply/count") > 0);
    assert!(count(st, "/during_fanout_wait_for_apply/count") > 0);

    // The etcd baseline: measured at every fleet size, or skipped with the reason.
    let etcd = &s["etcd_baseline"];
    if etcd["skipped"].is_null() {
        let mut sizes: Vec<u64> = runs.iter().map(|r| count(r, "/sessions")).collect();
        sizes.dedup();
        let watchers: Vec<u64> = etcd["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| count(r, "/watchers"))
            .collect();
        assert_eq!(watchers, sizes);
        for run in etcd["runs"].as_array().unwrap() {
            assert!(
                run["median_notify_all_ms"].as_f64().unwrap() > 0.0,
                "{run:#}"
            );
        }
    } else {
        assert!(etcd["skipped"].as_str().unwrap().contains("etcd"));
    }

    // 4. idle cost: both modes measured with every session connected.
    for mode in ["push", "poll"] {
        let run = &s["idle_cost"][mode];
        assert_eq!(count(run, "/sessions"), 20, "{mode}");
        assert!(count(run, "/rss_after_kib") > 0, "{mode}");
    }

    // 5. commit throughput: SQLite always, PostgreSQL when configured.
    let tp = s["commit_throughput"]["runs"].as_array().unwrap();
    let stores: Vec<&str> = tp.iter().map(|r| r["store"].as_str().unwrap()).collect();
    assert_eq!(
        stores.contains(&"postgres"),
        postgres.is_some(),
        "{stores:?}"
    );
    assert!(stores.contains(&"sqlite"));
    for run in tp {
        assert!(count(run, "/commits") > 0, "{run:#}");
        assert!(count(run, "/serial/commits") > 0, "{run:#}");
        assert!(
            run["over_serial"].as_f64().is_some_and(|r| r > 0.0),
            "{run:#}"
        );
        // Read from the gateway's counters: every write of the clients' run started a
        // transaction, and a group holds two writes or more.
        let started = count(run, "/groups/writes_started");
        assert!(started >= count(run, "/commits"), "{run:#}");
        assert!(
            count(run, "/groups/writes_grouped") >= 2 * count(run, "/groups/groups"),
            "{run:#}"
        );
    }
    // PostgreSQL's own pgbench beside it, on the server that has PostgreSQL (and its pgbench).
    let pgbench = &s["commit_throughput"]["pgbench"];
    if postgres.is_some() {
        assert!(
            pgbench["tps"].as_f64().is_some_and(|r| r > 0.0),
            "{pgbench:#}"
        );
        assert!(
            pgbench["serial_tps"].as_f64().is_some_and(|r| r > 0.0),
            "{pgbench:#}"
        );
        let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
        assert!(md.contains("pgbench simple-update"), "{md}");
    } else {
        assert!(pgbench.is_null(), "{pgbench:#}");
    }

    // 6. reconnect storm: everyone came back.
    let storm = &s["reconnect_storm"];
    assert_eq!(count(storm, "/sessions_missing"), 0);
    assert_eq!(count(storm, "/per_session/count"), 20);
    assert!(count(storm, "/gateway_hwm_kib") > 0);

    // 7. writes through a replica that does not own the session: PostgreSQL only; both
    // routes applied every write, with the sessions spread over 2 and then 3 replicas.
    let x = &s["cross_replica"];
    if postgres.is_some() {
        let runs = x["runs"].as_array().unwrap();
        let replicas: Vec<u64> = runs.iter().map(|r| count(r, "/replicas")).collect();
        assert_eq!(replicas, [2, 3]);
        for run in runs {
            let per: Vec<u64> = run["sessions_per_replica"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            let expected: &[u64] = if per.len() == 2 {
                &[10, 10]
            } else {
                &[7, 7, 6]
            };
            assert_eq!(per, expected, "{run:#}");
            for route in ["owner", "non_owner"] {
                assert_eq!(count(run, &format!("/{route}/call/count")), 5, "{run:#}");
                assert_eq!(
                    count(run, &format!("/{route}/supervisor_ack/count")),
                    5,
                    "{run:#}"
                );
                assert_eq!(count(run, &format!("/{route}/not_applied")), 0, "{run:#}");
            }
        }
    } else {
        assert!(x.is_null(), "{x:#}");
        let skipped = r["notes"].as_array().unwrap().iter().any(|n| {
            n.as_str()
                .unwrap()
                .contains("does not own the session: skipped")
        });
        assert!(skipped, "{:#}", r["notes"]);
    }

    // 8. a global change over three replicas, 20 sessions each: PostgreSQL only; every
    // replica held its sessions and every round reached all of them.
    let rf = &s["replicas_fleet"];
    if postgres.is_some() {
        let held: Vec<u64> = rf["sessions_held"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(held, [20, 20, 20], "{rf:#}");
        for round in rf["rounds"].as_array().unwrap() {
            assert_eq!(round["operation_state"], "APPLIED", "{round:#}");
            assert_eq!(count(round, "/fleet_applied"), 60, "{round:#}");
            assert_eq!(count(round, "/sessions_missing"), 0, "{round:#}");
            assert_eq!(count(round, "/per_session/count"), 60, "{round:#}");
        }
    } else {
        assert!(rf.is_null(), "{rf:#}");
    }

    assert!(!r["targets"].as_array().unwrap().is_empty());
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(
        md.contains("| Scenario |") && md.contains("## Targets"),
        "{md}"
    );
}

/// `--tls`: the gateways serve TLS, and the swarm's supervisors (each on a connection of its
/// own) and the operator clients verify the run's certificate, so every session still gets
/// its bootstrap and every fleet change.
#[test]
fn quick_mode_over_tls_reaches_every_session() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_openshell-bench"))
        .args([
            "--quick",
            "--tls",
            "--scenarios",
            "fleet",
            "--sessions",
            "10",
            "--fleet-sessions",
            "20",
            "--out",
        ])
        .arg(out.path())
        .env_remove("OPENSHELL_BENCH_POSTGRES_URL")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "openshell-bench --quick --tls failed\nstdout:\n{}\nstderr:\n{}\nlogs:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        run_logs(out.path())
    );
    let text = std::fs::read_to_string(out.path().join("report.json")).unwrap();
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(r["scenarios"]["tls"], true);
    let runs = r["scenarios"]["fleet_convergence"]["runs"]
        .as_array()
        .unwrap();
    assert_eq!(runs.len(), 2, "{runs:#?}");
    for run in runs {
        for round in run["rounds"].as_array().unwrap() {
            assert_eq!(round["operation_state"], "APPLIED", "{round:#}");
            assert_eq!(count(round, "/sessions_missing"), 0);
        }
    }
    let md = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(md.contains("TLS (the etcd baseline without)"), "{md}");
}
