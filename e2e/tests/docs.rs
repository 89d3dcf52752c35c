//! The docs cannot rot: the configuration example in the operator guide is
//! parsed by the gateway, every command of the troubleshooting skill runs
//! against a real gateway and supervisor, the README's demo runs, TLS
//! works as the operator guide says, and the code maps (the README's change
//! flow, the "by file" tables of docs/architecture.md) name files that exist.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use openshell_e2e::process::{binary, free_port, spawn_supervisor};
use openshell_e2e::{TOKEN, TestGateway, create_sandbox};
use openshell_gateway::DeliveryMode;

fn repo_file(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap()
}

/// Fenced blocks of one language in a Markdown file.
fn blocks(markdown: &str, language: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        let fence = line.trim_start();
        match &mut current {
            None if fence == format!("```{language}") => current = Some(String::new()),
            Some(block) if fence.starts_with("```") => {
                out.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn the_operator_guide_configuration_examples_are_accepted() {
    let guide = repo_file("docs/operator-guide.md");
    let toml = blocks(&guide, "toml");
    assert_eq!(
        toml.len(),
        2,
        "the gateway configuration and a refresh hook"
    );
    let dir = tempfile::tempdir().unwrap();
    let configs: Vec<_> = toml
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let path = dir.path().join(format!("gateway-{i}.toml"));
            std::fs::write(&path, text).unwrap();
            use clap::Parser;
            let flags = openshell_gateway::config::Flags::parse_from([
                "openshell-gateway",
                "--config",
                path.to_str().unwrap(),
            ]);
            openshell_gateway::config::GatewayConfig::resolve(flags)
                .unwrap_or_else(|e| panic!("example {i} is refused: {e}\n{text}"))
        })
        .collect();
    assert_eq!(configs[0].config_delivery_mode, DeliveryMode::Push);
    assert_eq!(configs[0].operator_tokens[0].name, "ci");
    let hook = &configs[1].provider_refresh[0];
    assert_eq!(
        (hook.workspace.as_str(), hook.provider.as_str()),
        ("team", "github")
    );
    assert_eq!(hook.lead, std::time::Duration::from_secs(300));
}

#[test]
fn the_operator_guide_start_command_starts_a_gateway() {
    let guide = repo_file("docs/operator-guide.md");
    let commands = blocks(&guide, "sh");
    assert_eq!(commands.len(), 1, "one start command");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let bin_dir = binary("openshell-gateway").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // `VAR=value exec cmd`: the command's environment assignments stay in front of exec.
    let words: Vec<&str> = commands[0].split_whitespace().collect();
    let assignments = words
        .iter()
        .take_while(|w| {
            w.split_once('=').is_some_and(|(k, _)| {
                !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            })
        })
        .count();
    let command = format!(
        "{} exec {}",
        words[..assignments].join(" "),
        words[assignments..].join(" ")
    );
    // The documented defaults, moved to a free port and a temp dir so tests can run side by side.
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(command.trim())
        .current_dir(dir.path())
        .env("PATH", path)
        .env("OPENSHELL_TOKEN", TOKEN)
        .env("OPENSHELL_LISTEN", format!("127.0.0.1:{port}"))
        .env("OPENSHELL_METRICS_LISTEN", "off")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut listening = false;
    while started.elapsed() < std::time::Duration::from_secs(30) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            listening = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The token is in the gateway's environment, not in its argument list.
    let argv = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert!(listening, "the documented command starts a gateway");
    let argv = String::from_utf8_lossy(&argv);
    assert!(argv.contains("openshell-gateway"), "{argv:?}");
    assert!(
        !argv.contains(TOKEN),
        "the token is on the command line: {argv:?}"
    );
    assert!(
        dir.path().join("openshell-data/gateway.db").exists(),
        "the default SQLite file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_in_the_troubleshooting_skill_runs() {
    let gw = TestGateway::start_for_delivery(DeliveryMode::Push).await;
    let mut api = gw.api().await;
    let policy = repo_file("examples/policy.yaml");
    let (id, credential) = create_sandbox(&mut api, "skill", &policy).await;
    let _supervisor = spawn_supervisor(
        &gw.endpoint(),
        &id,
        &credential,
        &gw.store.dir.path().join("s"),
        &[],
    );
    let op = api
        .update_config(openshell_proto::v1::UpdateConfigRequest {
            sandbox: id.clone(),
            policy_text: policy.replacen("port: 443", "port: 8443", 1),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .operation
        .unwrap();
    openshell_e2e::terminal_operation(&api, &op.id).await;

    let skill = repo_file("skills/openshell-troubleshooting/SKILL.md");
    let mut ran = 0;
    for block in blocks(&skill, "sh") {
        for line in block.lines() {
            let command = line.split(" #").next().unwrap().trim();
            if !command.starts_with("openshell ") {
                continue;
            }
            let command = command.replace("OP_ID", &op.id).replace(" SB", " skill");
            let args: Vec<&str> = command.split_whitespace().skip(1).collect();
            let output = Command::new(binary("openshell"))
                .args(&args)
                .env("OPENSHELL_GATEWAY", gw.endpoint())
                .env("OPENSHELL_TOKEN", TOKEN)
                .env("NO_COLOR", "1")
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "`{command}` failed: {}\n{}",
                String::from_utf8_lossy(&output.stderr),
                String::from_utf8_lossy(&output.stdout)
            );
            ran += 1;
        }
    }
    assert!(ran >= 5, "the skill's commands were found ({ran})");
}

#[test]
fn the_readme_demo_runs_to_the_end() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let port = free_port();
    let binaries = binary("openshell");
    let output = Command::new("bash")
        .arg(root.join("scripts/demo.sh"))
        .arg("--exit")
        .current_dir(&root)
        .env(
            "OPENSHELL_DEMO_BINARIES",
            binaries.parent().expect("the binaries' directory"),
        )
        .env("OPENSHELL_DEMO_PORT", port.to_string())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("APPLIED"), "{stdout}");
    assert!(
        stdout.contains("reloaded"),
        "the workload saw the change: {stdout}"
    );
    assert!(stdout.contains("PUSH"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_tls_when_given_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert_path = dir.path().join("cert.pem");
    let key_path = dir.path().join("key.pem");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let store = openshell_e2e::TestStore::new(openshell_e2e::Backend::Sqlite).await;
    let gw = TestGateway::start_with(store, DeliveryMode::Push, |config| {
        config.tls = Some(openshell_gateway::config::TlsFiles {
            cert: cert_path.clone(),
            key: key_path.clone(),
        });
    })
    .await;
    let endpoint = format!("https://localhost:{}", gw.handle.addr.port());
    let client = openshell_sdk::Client::connect(
        openshell_sdk::ClientOptions::new(endpoint.clone())
            .with_token(TOKEN)
            .with_ca_cert_pem(cert.cert.pem().into_bytes()),
    )
    .await
    .unwrap();
    let info = client.gateway_info().await.unwrap();
    assert_eq!(info.config_delivery_mode, "push");
    // The CLI speaks TLS with --ca-cert too.
    let output = Command::new(binary("openshell"))
        .args([
            "--gateway",
            &endpoint,
            "--ca-cert",
            cert_path.to_str().unwrap(),
            "gateway",
            "info",
            "-o",
            "json",
        ])
        .env("OPENSHELL_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Plain text is refused.
    let plain = openshell_sdk::Client::connect(
        openshell_sdk::ClientOptions::new(format!("http://127.0.0.1:{}", gw.handle.addr.port()))
            .with_token(TOKEN),
    )
    .await;
    let refused = match plain {
        Err(_) => true,
        Ok(client) => client.gateway_info().await.is_err(),
    };
    assert!(refused, "a plaintext client must not get an answer");
}

/// Files named on one line of a code map that do not exist. A path from the
/// repository root is checked as is; a bare `file.rs` or `dir/` is checked
/// against the folders of the root paths on the same line (`api/mod.rs`
/// after `gateway/src/auth.rs` is `gateway/src/api/mod.rs`).
fn missing_files(root: &std::path::Path, line: &str) -> Vec<String> {
    const ROOTS: &[&str] = &[
        "proto/",
        "core/",
        "gateway/",
        "supervisor/",
        "sdk-rs/",
        "sdk-node/",
        "sdk-python/",
        "cli/",
        "e2e/",
        "bench/",
        "scripts/",
        "docs/",
        "skills/",
    ];
    let tokens: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || "`|,()".contains(c))
        .filter(|t| !t.is_empty() && !t.contains(['{', '}']))
        .collect();
    let mut missing = Vec::new();
    let mut bases = Vec::new();
    for token in &tokens {
        if ROOTS.iter().any(|r| token.starts_with(r)) {
            if !root.join(token).exists() {
                missing.push((*token).to_string());
            }
            let dir = match token.rfind('/') {
                Some(i) => &token[..=i],
                None => token,
            };
            let mut base = dir.trim_end_matches('/');
            loop {
                bases.push(format!("{base}/"));
                match base.rfind('/') {
                    Some(i) => base = &base[..i],
                    None => break,
                }
            }
        }
    }
    for token in &tokens {
        let local = token.ends_with(".rs") || (token.ends_with('/') && token.len() > 1);
        let plain = token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
        if !local || !plain || ROOTS.iter().any(|r| token.starts_with(r)) || bases.is_empty() {
            continue;
        }
        if !bases.iter().any(|b| root.join(b).join(token).exists()) {
            missing.push(format!("{token} (under {})", bases[0]));
        }
    }
    missing
}

#[test]
fn the_code_maps_name_real_files() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut missing = Vec::new();
    let mut lines = 0;
    let readme = repo_file("README.md");
    let flow = readme
        .split("## Where a change flows")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("the README's change flow");
    for line in flow.lines() {
        lines += 1;
        missing.extend(missing_files(&root, line));
    }
    let architecture = repo_file("docs/architecture.md");
    for section in architecture.split("\n## ").skip(1) {
        let (title, body) = section.split_once('\n').unwrap();
        if !title.ends_with(", by file") {
            continue;
        }
        let table = body.split("\n### ").next().unwrap();
        for line in table.lines().filter(|l| l.starts_with('|')) {
            lines += 1;
            missing.extend(missing_files(&root, line));
        }
    }
    assert!(lines > 30, "the code maps were found ({lines} lines)");
    assert!(
        missing.is_empty(),
        "code maps name missing files: {missing:?}"
    );
}

/// The workspace crates a manifest depends on (normal dependencies), by folder name.
fn workspace_dependencies(folder: &str) -> std::collections::BTreeSet<String> {
    let by_package = [
        ("openshell-proto", "proto"),
        ("openshell-core", "core"),
        ("openshell-gateway", "gateway"),
        ("openshell-supervisor", "supervisor"),
        ("openshell-sdk", "sdk-rs"),
    ];
    let manifest = repo_file(&format!("{folder}/Cargo.toml"));
    let mut in_dependencies = false;
    let mut found = std::collections::BTreeSet::new();
    for line in manifest.lines() {
        if line.starts_with('[') {
            in_dependencies = line.trim() == "[dependencies]";
            continue;
        }
        if !in_dependencies {
            continue;
        }
        let name = line.split(['.', '=', ' ']).next().unwrap_or_default();
        if let Some((_, folder)) = by_package.iter().find(|(package, _)| *package == name) {
            found.insert((*folder).to_string());
        }
    }
    found
}

/// Backticked words of a table cell that name a crate folder.
fn crate_names(cell: &str, folders: &[&str]) -> std::collections::BTreeSet<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|word| folders.contains(word))
        .map(str::to_string)
        .collect()
}

/// The table of crates in docs/architecture.md says which workspace crates each one uses;
/// the manifests are the truth, and a dependency added or dropped must change the table.
#[test]
fn the_crate_table_states_each_crates_workspace_dependencies() {
    let folders = [
        "proto",
        "core",
        "gateway",
        "supervisor",
        "sdk-rs",
        "cli",
        "sdk-node",
        "sdk-python",
        "e2e",
        "bench",
    ];
    let doc = repo_file("docs/architecture.md");
    let table: Vec<&str> = doc
        .lines()
        .skip_while(|line| !line.starts_with("| crate | owns | does not | uses |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    let mut checked = std::collections::BTreeSet::new();
    for row in table {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (names, uses) = (cells[1], cells[cells.len() - 2]);
        let crates = crate_names(names, &folders);
        for name in &crates {
            // A cell shared by several crates names each one's part as "`name`: …; …".
            let part = uses
                .split(';')
                .find(|part| part.trim_start().starts_with(&format!("`{name}`:")))
                .map_or(uses, |part| {
                    part.split_once(':').map_or(part, |(_, rest)| rest)
                });
            let stated = crate_names(part, &folders);
            assert_eq!(
                stated,
                workspace_dependencies(name),
                "docs/architecture.md: the crate table's `uses` of {name} differs from {name}/Cargo.toml"
            );
            checked.insert(name.clone());
        }
    }
    let all: std::collections::BTreeSet<String> = folders.iter().map(|f| f.to_string()).collect();
    assert_eq!(checked, all, "every crate has a row in the table");
}
