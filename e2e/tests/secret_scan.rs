//! A day of work on one gateway process, then a scan of everything it left behind: the
//! gateway's and the supervisor's logs at debug level, every file in their directories, the
//! store (the SQLite files, or every row of every PostgreSQL table), the metrics, and the
//! output of every CLI command run. No provider value and no token may appear anywhere but
//! where it must be: the supervisor's provider environment (0600) and its credential file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_e2e::cli::openshell;
use openshell_e2e::process::{free_port, spawn_gateway, spawn_supervisor};
use openshell_e2e::{
    Backend, BearerToken, POLICY, TOKEN, create_sandbox, eventually, fresh_postgres_database,
    scrape_metrics,
};
use openshell_proto::v1 as pb;
use tonic::transport::Channel;

const FIRST: &str = "ghp_scan_FIRST_secret_value_7c41e0";
const ROTATED: &str = "ghp_scan_ROTATED_secret_value_93bd22";
const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_written_holds_a_secret_on_sqlite() {
    a_day_of_work_leaves_no_secret_behind(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_written_holds_a_secret_on_postgres() {
    a_day_of_work_leaves_no_secret_behind(Backend::Postgres).await;
}

async fn a_day_of_work_leaves_no_secret_behind(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let metrics_port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let metrics_listen = format!("127.0.0.1:{metrics_port}");
    let data_dir = dir.path().join("data");
    let token_arg = format!("ci={TOKEN}");
    let database_url = match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(fresh_postgres_database().await),
    };
    let mut args = vec![
        "--listen",
        &listen,
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--operator-token",
        &token_arg,
        "--metrics-listen",
        &metrics_listen,
        "--config-delivery-mode",
        "push",
        "--log",
        "debug",
    ];
    if let Some(url) = &database_url {
        args.extend(["--database-url", url.as_str()]);
    }
    let gateway = spawn_gateway(&args, &[], dir.path().join("gateway.log"), port);
    let endpoint = format!("http://{listen}");
    let channel = Channel::from_shared(endpoint.clone())
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut api = openshell_e2e::Api::new(channel, BearerToken(Some(TOKEN.into())));

    let (id, supervisor_credential) = create_sandbox(&mut api, "web", POLICY).await;
    let value = |name: &str, value: &str, class: pb::ValueClass| pb::ProviderValueInput {
        name: name.into(),
        value: value.into(),
        class: class as i32,
        expires_at: (class == pb::ValueClass::Credential).then_some(prost_types::Timestamp {
            seconds: 4_102_444_800,
            nanos: 0,
        }),
    };
    api.create_provider(pb::CreateProviderRequest {
        name: "github".into(),
        r#type: "github".into(),
        values: vec![
            value("GITHUB_TOKEN", FIRST, pb::ValueClass::Credential),
            value("GITHUB_ORG", "acme", pb::ValueClass::NonSecret),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    let supervisor_dir = dir.path().join("supervisor");
    let supervisor = spawn_supervisor(&endpoint, &id, &supervisor_credential, &supervisor_dir, &[]);

    let mut outputs: Vec<(String, String)> = Vec::new();
    let mut cli = async |args: &[&str]| {
        let run = openshell(&endpoint, args, None).await;
        outputs.push((args.join(" "), format!("{}\n{}", run.stdout, run.stderr)));
        run
    };
    cli(&["provider", "attach", "web", "github"])
        .await
        .expect(0);
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(&policy_file, openshell_e2e::policy_with_port(8443)).unwrap();
    cli(&[
        "policy",
        "set",
        "web",
        "--policy",
        policy_file.to_str().unwrap(),
        "--wait",
        "--yes",
    ])
    .await
    .expect(0);
    cli(&[
        "settings",
        "set",
        "--sandbox",
        "web",
        "log_level=debug",
        "--wait",
    ])
    .await
    .expect(0);
    // A rotation reaches the workload's environment, and so the supervisor's state.
    api.update_provider(pb::UpdateProviderRequest {
        provider: "github".into(),
        values: vec![
            value("GITHUB_TOKEN", ROTATED, pb::ValueClass::Credential),
            value("GITHUB_ORG", "acme", pb::ValueClass::NonSecret),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    eventually("the rotated credential to be active", DEADLINE, || async {
        supervisor
            .active_file("provider-env.json")
            .filter(|env| env.contains(ROTATED))
            .map(|_| ())
    })
    .await;
    // A token created here is shown once, by its create command, and nowhere else.
    let created = openshell(
        &endpoint,
        &["token", "create", "scanner", "--role", "viewer"],
        None,
    )
    .await;
    created.expect(0);
    let token_secret = created
        .stdout
        .split_whitespace()
        .find(|word| word.starts_with("ost_"))
        .unwrap_or_else(|| panic!("no secret in {}", created.stdout))
        .to_string();
    for args in [
        &["sandbox", "list"][..],
        &["sandbox", "get", "web"],
        &["sandbox", "get", "web", "-o", "json"],
        &["provider", "list", "-o", "wide"],
        &["provider", "get", "github"],
        &["provider", "get", "github", "-o", "json"],
        &["provider", "get", "github", "-o", "yaml"],
        &["policy", "get", "web"],
        &["policy", "history", "web"],
        &["settings", "get", "--sandbox", "web"],
        &["operations", "list", "-o", "json"],
        &["sessions", "list"],
        &["sessions", "inspect", "web"],
        &["sessions", "inspect", "web", "-o", "json"],
        &["sandbox", "logs", "web"],
        &["token", "list", "-o", "json"],
        &["gateway", "info"],
        &["status"],
    ] {
        cli(args).await;
    }
    let metrics = scrape_metrics(metrics_port);
    let store_rows = match &database_url {
        Some(url) => postgres_rows(url).await,
        None => String::new(),
    };
    let supervisor_state = supervisor.kill();
    drop(gateway);

    let secrets = [
        ("the first credential", FIRST),
        ("the rotated credential", ROTATED),
        ("the operator token", TOKEN),
        ("the supervisor credential", supervisor_credential.as_str()),
        ("the created token", token_secret.as_str()),
    ];
    let mut texts: Vec<(String, Vec<u8>)> = outputs
        .into_iter()
        .map(|(args, text)| (format!("`openshell {args}`"), text.into_bytes()))
        .collect();
    texts.push(("the metrics".into(), metrics.into_bytes()));
    texts.push(("the PostgreSQL rows".into(), store_rows.into_bytes()));
    let mut provider_env_files = 0;
    for path in files_under(dir.path()) {
        let holds_by_design = if path.file_name().is_some_and(|n| n == "provider-env.json")
            && path.starts_with(&supervisor_state)
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(
                mode & 0o777,
                0o600,
                "{} is readable by others",
                path.display()
            );
            provider_env_files += 1;
            vec![FIRST, ROTATED]
        } else if path == supervisor_dir.join("credential") {
            vec![supervisor_credential.as_str()]
        } else {
            Vec::new()
        };
        let bytes = std::fs::read(&path).unwrap();
        let kept: Vec<u8> = if holds_by_design.is_empty() {
            bytes
        } else {
            // Scanned still, for every other secret.
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            for allowed in holds_by_design {
                text = text.replace(allowed, "");
            }
            text.into_bytes()
        };
        texts.push((path.display().to_string(), kept));
    }
    assert!(
        provider_env_files >= 1,
        "the supervisor's environment was not found"
    );
    let log = std::fs::read_to_string(dir.path().join("gateway.log")).unwrap();
    assert!(
        log.contains("provider created"),
        "the log is captured at debug"
    );

    let leaks: Vec<String> = texts
        .iter()
        .flat_map(|(place, bytes)| {
            secrets
                .iter()
                .filter(move |(_, secret)| {
                    bytes.windows(secret.len()).any(|w| w == secret.as_bytes())
                })
                .map(move |(what, _)| format!("{what} in {place}"))
        })
        .collect();
    assert!(leaks.is_empty(), "secrets found:\n{}", leaks.join("\n"));
}

/// Every file below `root`, recursively.
fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                files.push(entry.path());
            }
        }
    }
    files
}

/// Every row of every table of the store's PostgreSQL database, as text.
async fn postgres_rows(url: &str) -> String {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert!(tables.iter().any(|t| t == "providers"), "{tables:?}");
    let mut rows = String::new();
    for table in tables {
        let text: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COALESCE(string_agg(t::text, E'\\n'), '') FROM \"{table}\" t"
        )))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        rows.push_str(&text);
        rows.push('\n');
    }
    rows
}
