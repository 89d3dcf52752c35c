//! Every document of core's accepted policy corpus (upstream OpenShell's schema) goes through
//! the real CLI and gateway unchanged: `openshell policy set --commit-only` stores it and
//! `openshell policy get -o yaml` gives back a document that parses to the same policy, with
//! the same canonical hash, in upstream's spelling.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;

use openshell_core::policy::parse_policy;
use openshell_e2e::process::binary;
use openshell_e2e::{Backend, TOKEN, TestGateway};
use openshell_proto::v1 as pb;

fn corpus() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../core/tests/corpus/accepted");
    let mut docs: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml" || e == "json"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    docs.sort();
    docs
}

async fn openshell(gw: &TestGateway, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(binary("openshell"))
        .args(args)
        .env("OPENSHELL_GATEWAY", gw.endpoint())
        .env("OPENSHELL_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_corpus_document_round_trips_through_the_cli() {
    let docs = corpus();
    assert!(
        docs.len() >= 60,
        "the corpus holds {} documents",
        docs.len()
    );
    let gw = TestGateway::start(Backend::Sqlite).await;
    let mut api = gw.api().await;
    let dir = tempfile::tempdir().unwrap();
    for (i, (name, text)) in docs.iter().enumerate() {
        let sandbox = format!("corpus-{i}");
        api.create_sandbox(pb::CreateSandboxRequest {
            name: sandbox.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        let file = file.display().to_string();
        let (code, _, stderr) = openshell(
            &gw,
            &[
                "policy",
                "set",
                &sandbox,
                "-f",
                &file,
                "--commit-only",
                "--yes",
            ],
        )
        .await;
        assert_eq!(code, 0, "{name}: policy set failed: {stderr}");
        let (code, yaml, stderr) = openshell(&gw, &["policy", "get", &sandbox, "-o", "yaml"]).await;
        assert_eq!(code, 0, "{name}: policy get failed: {stderr}");
        let written = parse_policy(text).unwrap();
        let returned = parse_policy(&yaml).unwrap_or_else(|e| panic!("{name}: {e}\n{yaml}"));
        assert_eq!(returned, written, "{name}: the document changed\n{yaml}");
        assert_eq!(returned.policy_hash(), written.policy_hash(), "{name}");
        let stored = api
            .get_sandbox_policy(pb::GetSandboxPolicyRequest {
                sandbox: openshell_e2e::sandbox_ref(&sandbox),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .policy
            .unwrap();
        assert_eq!(stored.policy_hash, written.policy_hash(), "{name}");
    }
}
