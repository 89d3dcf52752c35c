//! Saved gateways, `status`, `doctor`, the supervisor named by name, the
//! refusals that say what to do, and completion of names: the real
//! `openshell` and `openshell-supervisor` binaries against a real gateway
//! process, with the configuration directory in a temporary HOME.
//!
//! The operator token goes in only through stdin or a terminal prompt, and
//! every output, log and argument list these tests see is checked for it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use openshell_e2e::process::{ChildGuard, binary, free_port, spawn_gateway};
use openshell_e2e::{TOKEN, eventually};
use serde_json::Value;
use tokio::io::AsyncWriteExt;

const DEADLINE: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", self.stdout, self.stderr))
    }

    fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A gateway process and a CLI whose only configuration is its HOME.
struct World {
    gateway: ChildGuard,
    url: String,
    home: PathBuf,
    /// Every output the CLI printed, to check for the token at the end.
    seen: std::sync::Mutex<String>,
    _dir: tempfile::TempDir,
}

impl World {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let data_dir = dir.path().join("data");
        let token_env = format!("ci={TOKEN}");
        let metrics = format!("127.0.0.1:{}", free_port());
        let args = [
            "--listen",
            listen.as_str(),
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--metrics-listen",
            metrics.as_str(),
        ];
        // The gateway's own token from its environment, not its argv.
        let gateway = spawn_gateway(
            &args,
            &[("OPENSHELL_OPERATOR_TOKENS", token_env.as_str())],
            dir.path().join("gateway.log"),
            port,
        );
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        Self {
            gateway,
            url: format!("http://{listen}"),
            home,
            seen: std::sync::Mutex::new(String::new()),
            _dir: dir,
        }
    }

    fn config_dir(&self) -> PathBuf {
        self.home.join(".config/openshell")
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(binary("openshell"));
        cmd.args(args)
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("OPENSHELL_GATEWAY")
            .env_remove("OPENSHELL_GATEWAY_ENDPOINT")
            .env_remove("OPENSHELL_TOKEN")
            .env_remove("OPENSHELL_CA_CERT")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    fn record(&self, output: std::process::Output) -> Run {
        let run = Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).unwrap(),
            stderr: String::from_utf8(output.stderr).unwrap(),
        };
        self.seen.lock().unwrap().push_str(&run.all());
        run
    }

    async fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[]).await
    }

    async fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = self.command(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        self.record(cmd.output().await.unwrap())
    }

    async fn run_with_stdin(&self, args: &[&str], input: &str) -> Run {
        let mut child = self.command(args).stdin(Stdio::piped()).spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        drop(stdin);
        self.record(child.wait_with_output().await.unwrap())
    }

    /// Nothing this world printed or logged holds the token.
    fn assert_token_never_shown(&self) {
        let seen = self.seen.lock().unwrap();
        assert!(!seen.contains(TOKEN), "the token was printed:\n{seen}");
        let log = self.gateway.log_text();
        assert!(!log.contains(TOKEN), "the token is in the gateway's log");
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_gateway_needs_no_flags_and_flags_and_env_still_win() {
    let world = World::start();
    let url = world.url.clone();

    // Nothing saved, no flags: the default address, and nothing answers there with our token.
    let added = world
        .run(&["gateway", "add", "prod", &url, "-o", "json"])
        .await;
    let added = added.expect_code(0).json();
    assert_eq!(added["name"], "prod");
    assert_eq!(added["selected"], true);
    assert!(added["token"].is_null());

    // Selected but no token yet: refused, with the way to fix it.
    let refused = world.run(&["sandbox", "list"]).await;
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("openshell gateway login"),
        "{}",
        refused.stderr
    );

    // A token the gateway refuses is not saved.
    let wrong = world
        .run_with_stdin(&["gateway", "login", "prod"], "not-the-token\n")
        .await;
    wrong.expect_code(1);
    assert!(
        wrong.stderr.contains("nothing was saved"),
        "{}",
        wrong.stderr
    );
    let token_file = world.config_dir().join("tokens/prod");
    assert!(!token_file.exists());

    // The right one, from stdin: checked, saved 0600, never printed.
    let login = world
        .run_with_stdin(&["gateway", "login"], &format!("{TOKEN}\n"))
        .await;
    login.expect_code(0);
    assert!(
        login.stderr.contains("accepted the token"),
        "{}",
        login.stderr
    );
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), TOKEN);
    assert_eq!(mode(&token_file), 0o600);
    assert_eq!(mode(&world.config_dir().join("gateways.yaml")), 0o600);
    assert_eq!(mode(&world.config_dir().join("tokens")), 0o700);

    // Now plain commands work.
    let listed = world.run(&["sandbox", "list", "-o", "json"]).await;
    assert_eq!(listed.expect_code(0).json(), serde_json::json!([]));
    let gateways = world
        .run(&["gateway", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(gateways[0]["name"], "prod");
    assert_eq!(gateways[0]["url"], url.as_str());
    assert_eq!(gateways[0]["token"], token_file.display().to_string());

    // Precedence: a flag or the environment beats the saved token and address.
    world
        .run(&["sandbox", "list", "--token", "wrong"])
        .await
        .expect_code(1);
    world
        .run_with(&["sandbox", "list"], &[("OPENSHELL_TOKEN", "wrong")])
        .await
        .expect_code(1);
    let elsewhere = format!("http://127.0.0.1:{}", free_port());
    let away = world
        .run(&["sandbox", "list", "--gateway", &elsewhere])
        .await;
    away.expect_code(1);
    // A saved gateway by name, and a name that is not saved (usage, naming it).
    world
        .run(&["sandbox", "list", "--gateway", "prod"])
        .await
        .expect_code(0);
    let unknown = world
        .run_with(&["sandbox", "list"], &[("OPENSHELL_GATEWAY", "staging")])
        .await;
    unknown.expect_code(2);
    assert!(unknown.stderr.contains("\"staging\""), "{}", unknown.stderr);

    // A second gateway: select, list, remove.
    world
        .run(&["gateway", "add", &elsewhere, "--name", "staging"])
        .await
        .expect_code(0);
    world
        .run(&["gateway", "select", "staging"])
        .await
        .expect_code(0);
    let table = world.run(&["gateway", "list"]).await;
    let line = table
        .expect_code(0)
        .stdout
        .lines()
        .find(|l| l.contains("staging"))
        .unwrap()
        .to_owned();
    assert!(line.starts_with('*'), "{}", table.stdout);
    world.run(&["sandbox", "list"]).await.expect_code(1);
    world
        .run(&["gateway", "select", "prod"])
        .await
        .expect_code(0);
    world
        .run(&["gateway", "remove", "staging"])
        .await
        .expect_code(0);
    let gateways = world
        .run(&["gateway", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    assert_eq!(gateways.as_array().unwrap().len(), 1, "{gateways}");
    // Re-adding prod at another address drops its token: it was saved for the old one.
    world
        .run(&["gateway", "add", "prod", &elsewhere])
        .await
        .expect_code(0);
    assert!(!token_file.exists());
    world
        .run(&["gateway", "add", "prod", &url])
        .await
        .expect_code(0);
    world
        .run_with_stdin(&["gateway", "login", "prod"], TOKEN)
        .await
        .expect_code(0);
    world.run(&["gateway", "logout"]).await.expect_code(0);
    assert!(!token_file.exists());

    // XDG_CONFIG_HOME, when set, is where saved gateways live instead.
    let xdg = world.home.join("xdg");
    let xdg_arg = xdg.display().to_string();
    let elsewhere_list = world
        .run_with(
            &["gateway", "list", "-o", "json"],
            &[("XDG_CONFIG_HOME", &xdg_arg)],
        )
        .await;
    assert_eq!(elsewhere_list.expect_code(0).json(), serde_json::json!([]));
    world
        .run_with(
            &["gateway", "add", "prod", &url],
            &[("XDG_CONFIG_HOME", &xdg_arg)],
        )
        .await
        .expect_code(0);
    assert!(xdg.join("openshell/gateways.yaml").exists());

    world.assert_token_never_shown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_doctor_say_what_is_wrong_and_how_to_fix_it() {
    let world = World::start();
    let url = world.url.clone();
    world
        .run(&["gateway", "add", "prod", &url])
        .await
        .expect_code(0);

    // No token: status cannot connect, doctor names the fix.
    let status = world.run(&["status", "-o", "json"]).await;
    let status_json = status.expect_code(1).json();
    assert_eq!(status_json["reachable"], false);
    assert_eq!(status_json["url_source"], "selected");
    let doctor = world.run(&["doctor"]).await;
    doctor.expect_code(1);
    let text = &doctor.stdout;
    assert!(text.contains("ok    reachable"), "{text}");
    assert!(text.contains("FAIL  token"), "{text}");
    assert!(
        text.contains("fix: save a valid operator token with `openshell gateway login prod`"),
        "{text}"
    );

    world
        .run_with_stdin(&["gateway", "login"], TOKEN)
        .await
        .expect_code(0);
    let status = world.run(&["status", "-o", "json"]).await;
    let status_json = status.expect_code(0).json();
    assert_eq!(status_json["reachable"], true);
    assert_eq!(status_json["name"], "prod");
    assert_eq!(status_json["token_source"], "saved");
    assert!(status_json["gateway"]["version"].is_string());
    let table = world.run(&["status"]).await;
    assert!(
        table
            .expect_code(0)
            .stdout
            .contains("token         set (from saved)"),
        "{}",
        table.stdout
    );

    // All well: every check passes, the clock from the answer's date header.
    let doctor = world.run(&["doctor", "-o", "json"]).await;
    let checks = doctor.expect_code(0).json();
    let names: Vec<&str> = checks
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["config", "gateway", "reachable", "tls", "token", "clock"]
    );
    for check in checks.as_array().unwrap() {
        assert_eq!(check["status"], "ok", "{check}");
    }

    // A refused flag token: its fix names the flag.
    let doctor = world.run(&["doctor", "--token", "wrong"]).await;
    doctor.expect_code(1);
    assert!(doctor.stdout.contains("FAIL  token"), "{}", doctor.stdout);
    assert!(
        doctor.stdout.contains("fix: check --token"),
        "{}",
        doctor.stdout
    );

    // Nothing listening: unreachable, with the fix, and no later check pretends.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let doctor = world.run(&["doctor", "--gateway", &nowhere]).await;
    doctor.expect_code(1);
    assert!(
        doctor.stdout.contains("FAIL  reachable"),
        "{}",
        doctor.stdout
    );
    assert!(
        doctor.stdout.contains("fix: start the gateway"),
        "{}",
        doctor.stdout
    );
    assert!(!doctor.stdout.contains("token"), "{}", doctor.stdout);

    // An https address to a plain gateway: TLS fails, named as such, with the fix.
    let https = url.replace("http://", "https://");
    let doctor = world.run(&["doctor", "--gateway", &https]).await;
    doctor.expect_code(1);
    assert!(doctor.stdout.contains("FAIL  tls"), "{}", doctor.stdout);
    assert!(
        doctor.stdout.contains("speaks plain HTTP, not TLS"),
        "{}",
        doctor.stdout
    );

    world.assert_token_never_shown();
}

/// Issue 59 item 7 (and 57 item 4): upstream's address settings are honoured, never
/// silently ignored: `OPENSHELL_GATEWAY_ENDPOINT` and `--gateway-endpoint` beat the selected
/// saved gateway, disagreeing with `OPENSHELL_GATEWAY` is refused naming both, a name where
/// an address belongs is refused; and an https address to a plain-HTTP gateway is named as
/// such, by `doctor` and by any command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_endpoint_settings_are_honoured_and_a_plain_gateway_is_named() {
    let world = World::start();
    let url = world.url.clone();
    world
        .run(&["gateway", "add", "dead", "http://127.0.0.1:1"])
        .await
        .expect_code(0);

    let by_env = world
        .run_with(
            &["sandbox", "list", "-o", "json"],
            &[
                ("OPENSHELL_GATEWAY_ENDPOINT", &url),
                ("OPENSHELL_TOKEN", TOKEN),
            ],
        )
        .await;
    assert_eq!(by_env.expect_code(0).json(), serde_json::json!([]));
    let by_flag = world
        .run_with(
            &["--gateway-endpoint", &url, "sandbox", "list", "-o", "json"],
            &[("OPENSHELL_TOKEN", TOKEN)],
        )
        .await;
    assert_eq!(by_flag.expect_code(0).json(), serde_json::json!([]));

    let both = world
        .run_with(
            &["sandbox", "list"],
            &[
                ("OPENSHELL_GATEWAY_ENDPOINT", &url),
                ("OPENSHELL_GATEWAY", "dead"),
                ("OPENSHELL_TOKEN", TOKEN),
            ],
        )
        .await;
    both.expect_code(2);
    assert!(
        both.stderr.contains("OPENSHELL_GATEWAY_ENDPOINT")
            && both.stderr.contains("OPENSHELL_GATEWAY (dead)")
            && both.stderr.contains("different gateways"),
        "{}",
        both.stderr
    );
    let a_name = world
        .run_with(
            &["sandbox", "list"],
            &[("OPENSHELL_GATEWAY_ENDPOINT", "dead")],
        )
        .await;
    a_name.expect_code(2);
    assert!(
        a_name
            .stderr
            .contains("OPENSHELL_GATEWAY_ENDPOINT takes an address"),
        "{}",
        a_name.stderr
    );

    // https to a gateway that speaks plain HTTP, with a CA to trust: named as such.
    let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let ca_file = world.home.join("ca.pem");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    let https = url.replace("http://", "https://");
    let doctor = world
        .run(&[
            "doctor",
            "--gateway",
            &https,
            "--ca-cert",
            ca_file.to_str().unwrap(),
        ])
        .await;
    doctor.expect_code(1);
    assert!(
        doctor.stdout.contains("speaks plain HTTP, not TLS")
            && doctor
                .stdout
                .contains(&format!("use its http:// address: --gateway {url}")),
        "{}",
        doctor.stdout
    );
    let listed = world
        .run_with(
            &[
                "sandbox",
                "list",
                "--gateway",
                &https,
                "--ca-cert",
                ca_file.to_str().unwrap(),
            ],
            &[("OPENSHELL_TOKEN", TOKEN)],
        )
        .await;
    assert_ne!(listed.code, 0);
    assert!(
        listed.stderr.contains("answered in plain HTTP, not TLS"),
        "{}",
        listed.stderr
    );
}

/// Issue 59 item 7: an https gateway whose certificate chains to a root the system trusts
/// needs no CA file. The root store here is injected the way OpenSSL-style stores are,
/// through `SSL_CERT_FILE`; without it the same command refuses the unknown issuer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_gateway_signed_by_a_trusted_root_needs_no_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let signed =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, signed.cert.pem()).unwrap();
    std::fs::write(&key, signed.signing_key.serialize_pem()).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let metrics = format!("127.0.0.1:{}", free_port());
    let data_dir = dir.path().join("data");
    let token_env = format!("ci={TOKEN}");
    let _gateway = spawn_gateway(
        &[
            "--listen",
            &listen,
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--metrics-listen",
            &metrics,
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[("OPENSHELL_OPERATOR_TOKENS", token_env.as_str())],
        dir.path().join("gateway.log"),
        port,
    );
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let run = |roots: Option<&Path>| {
        let mut cmd = tokio::process::Command::new(binary("openshell"));
        cmd.args(["sandbox", "list", "-o", "json"])
            .env("HOME", &home)
            .env("OPENSHELL_GATEWAY", format!("https://localhost:{port}"))
            .env("OPENSHELL_TOKEN", TOKEN)
            .env_remove("OPENSHELL_CA_CERT")
            .env_remove("OPENSHELL_GATEWAY_ENDPOINT")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("SSL_CERT_DIR")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        match roots {
            Some(file) => cmd.env("SSL_CERT_FILE", file),
            // An empty store: nothing is trusted.
            None => cmd.env("SSL_CERT_FILE", dir.path().join("no-roots.pem")),
        };
        async move { cmd.output().await.unwrap() }
    };
    std::fs::write(dir.path().join("no-roots.pem"), "").unwrap();

    let trusted = run(Some(&cert)).await;
    assert_eq!(
        trusted.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&trusted.stdout).trim(), "[]");
    let untrusted = run(None).await;
    assert_ne!(untrusted.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_supervisor_command_runs_the_sandbox_by_name() {
    let world = World::start();
    let url = world.url.clone();
    world
        .run(&["gateway", "add", "prod", &url])
        .await
        .expect_code(0);
    world
        .run_with_stdin(&["gateway", "login"], TOKEN)
        .await
        .expect_code(0);
    let dir = world.home.join("web");
    std::fs::create_dir_all(&dir).unwrap();
    let cred = dir.join("credential");
    let cred_arg = cred.display().to_string();

    let created = world
        .run(&[
            "sandbox",
            "create",
            "web",
            "--workspace",
            "team",
            "--credential-file",
            &cred_arg,
        ])
        .await;
    created.expect_code(0);
    let expected = format!(
        "openshell-supervisor --gateway {url} --sandbox team/web --credential-file {cred_arg} -- COMMAND"
    );
    assert!(
        created
            .stdout
            .contains(&format!("Start its supervisor with:\n  {expected}\n")),
        "{}",
        created.stdout
    );
    let json = world.run(&["sandbox", "create", "api", "-o", "json"]).await;
    let json = json.expect_code(0).json();
    let command = json["supervisor_command"].as_str().unwrap();
    assert!(
        command.contains("--sandbox default/api --credential-file CREDENTIAL_FILE"),
        "{command}"
    );
    let credential = json["supervisor_credential"].as_str().unwrap().to_owned();
    assert!(
        !command.contains(&credential),
        "the credential is never in the command"
    );

    // The printed command, with a workload for COMMAND, runs the sandbox.
    let words: Vec<String> = expected.split(' ').map(str::to_owned).collect();
    let log = dir.join("supervisor.log");
    // `--state-dir` after `--` would be the workload's: put it before.
    let mut args: Vec<String> = words[1..words.len() - 2].to_vec();
    args.extend([
        "--state-dir".into(),
        dir.join("state").display().to_string(),
        "--".into(),
        "sleep".into(),
        "60".into(),
    ]);
    let mut supervisor = std::process::Command::new(binary("openshell-supervisor"));
    supervisor
        .args(&args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut child = supervisor.spawn().unwrap();
    eventually("sandbox team/web to be RUNNING", DEADLINE, || async {
        let run = world
            .run(&["sandbox", "get", "team/web", "-o", "json"])
            .await;
        (run.code == 0 && run.json()["lifecycle"] == "RUNNING").then_some(())
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("sandbox name resolved"), "{text}");
    let _ = child.kill();
    let _ = child.wait();

    // Another sandbox's name with this credential is refused, permanently.
    let wrong = std::process::Command::new(binary("openshell-supervisor"))
        .args([
            "--gateway",
            &url,
            "--sandbox",
            "default/api",
            "--credential-file",
            &cred_arg,
        ])
        .arg("--state-dir")
        .arg(dir.join("state-2"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("credential is not valid for sandbox default/api"),
        "{stderr}"
    );
    assert!(!stderr.contains(&credential));

    world.assert_token_never_shown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_sandbox_meant_and_the_sandboxes_attached() {
    let world = World::start();
    let url = world.url.clone();
    world
        .run(&["gateway", "add", "prod", &url])
        .await
        .expect_code(0);
    world
        .run_with_stdin(&["gateway", "login"], TOKEN)
        .await
        .expect_code(0);
    for (name, workspace) in [("web", "team"), ("web", "ops"), ("api", "team")] {
        world
            .run(&["sandbox", "create", name, "--workspace", workspace, "-q"])
            .await
            .expect_code(0);
    }

    let missing = world.run(&["sandbox", "get", "web"]).await;
    missing.expect_code(1);
    assert!(
        missing.stderr.contains(
            "sandbox \"web\" not found in workspace \"default\"; did you mean ops/web or team/web?"
        ),
        "{}",
        missing.stderr
    );
    let missing = world.run(&["sandbox", "get", "api"]).await;
    assert!(
        missing.stderr.contains("did you mean team/api?"),
        "{}",
        missing.stderr
    );
    let missing = world.run(&["sandbox", "get", "nothing"]).await;
    assert!(
        !missing.stderr.contains("did you mean"),
        "{}",
        missing.stderr
    );

    world
        .run(&[
            "provider",
            "create",
            "gh",
            "--type",
            "github",
            "--workspace",
            "team",
            "--env",
            "GH_HOST=github.com",
        ])
        .await
        .expect_code(0);
    world
        .run(&["provider", "attach", "team/web", "gh"])
        .await
        .expect_code(0);
    world
        .run(&["provider", "attach", "team/api", "gh"])
        .await
        .expect_code(0);
    let refused = world
        .run(&["provider", "delete", "gh", "--workspace", "team", "--yes"])
        .await;
    refused.expect_code(1);
    assert!(
        refused.stderr.contains("is attached to 2 sandboxes: team/api, team/web; detach it first (openshell provider detach team/api gh)"),
        "{}",
        refused.stderr
    );

    world.assert_token_never_shown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_offers_the_gateways_names() {
    let world = World::start();
    let url = world.url.clone();
    world
        .run(&["gateway", "add", "prod", &url])
        .await
        .expect_code(0);
    world
        .run_with_stdin(&["gateway", "login"], TOKEN)
        .await
        .expect_code(0);
    world
        .run(&["sandbox", "create", "web", "--workspace", "team", "-q"])
        .await
        .expect_code(0);
    world
        .run(&[
            "provider",
            "create",
            "gh",
            "--type",
            "github",
            "--workspace",
            "team",
        ])
        .await
        .expect_code(0);
    world
        .run(&["provider", "attach", "team/web", "gh"])
        .await
        .expect_code(0);
    let op = world
        .run(&["operations", "list", "-o", "json"])
        .await
        .expect_code(0)
        .json();
    let op_id = op[0]["id"].as_str().unwrap().to_owned();

    // What fish asks: `COMPLETE=fish openshell -- WORDS`, one candidate a line.
    let complete = |words: &'static [&'static str]| {
        let world = &world;
        async move {
            let mut args = vec!["--", "openshell"];
            args.extend_from_slice(words);
            let run = world.run_with(&args, &[("COMPLETE", "fish")]).await;
            run.expect_code(0);
            run.stdout
                .lines()
                .map(|l| l.split('\t').next().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let sandboxes = complete(&["sandbox", "get", ""]).await;
    assert!(sandboxes.contains(&"team/web".to_owned()), "{sandboxes:?}");
    assert!(sandboxes.contains(&"web".to_owned()), "{sandboxes:?}");
    let providers = complete(&["provider", "delete", ""]).await;
    assert!(providers.contains(&"gh".to_owned()), "{providers:?}");
    let ops = complete(&["operations", "wait", ""]).await;
    assert!(ops.contains(&op_id), "{ops:?}");
    let gateways = complete(&["gateway", "select", ""]).await;
    assert!(gateways.contains(&"prod".to_owned()), "{gateways:?}");
    // A gateway that does not answer completes nothing, quickly, without an error.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let run = world
        .run_with(
            &["--", "openshell", "sandbox", "get", ""],
            &[("COMPLETE", "fish"), ("OPENSHELL_GATEWAY", &nowhere)],
        )
        .await;
    run.expect_code(0);
    assert!(!run.stdout.contains("web"), "{}", run.stdout);
    assert!(run.stderr.is_empty(), "{}", run.stderr);

    // The scripts the shells load call back into openshell.
    let bash = world.run(&["completions", "bash"]).await;
    assert!(
        bash.expect_code(0).stdout.contains("COMPLETE=\"bash\""),
        "{}",
        bash.stdout
    );
    let zsh = world.run(&["completions", "zsh"]).await;
    assert!(
        zsh.expect_code(0).stdout.starts_with("#compdef openshell"),
        "{}",
        zsh.stdout
    );

    world.assert_token_never_shown();
}

/// `gateway login` on an 80-column terminal: the prompt hides what is
/// typed, and the token is in no argument list while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_on_a_terminal_hides_the_token() {
    use expectrl::process::unix::WaitStatus;
    use expectrl::{Eof, Expect, Session};

    let world = World::start();
    let url = world.url.clone();
    world
        .run(&["gateway", "add", "prod", &url])
        .await
        .expect_code(0);
    let home = world.home.clone();
    let (code, output, argv) = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(binary("openshell"));
        cmd.args(["gateway", "login", "prod"])
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("OPENSHELL_TOKEN")
            .env_remove("OPENSHELL_GATEWAY")
            .env("TERM", "xterm-256color");
        let mut session = Session::spawn(cmd).unwrap();
        session.get_process_mut().set_window_size(80, 24).unwrap();
        session.set_expect_timeout(Some(Duration::from_secs(60)));
        let prompt = session.expect("Operator token for gateway prod: ").unwrap();
        let mut seen = prompt.as_bytes().to_vec();
        let pid = session.get_process().pid();
        let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        // The prompt is written before echo is switched off, and switching
        // it off (TCSAFLUSH) discards input typed until then: type only
        // once the terminal no longer echoes, as a person reading the
        // prompt does.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while session.get_process().get_echo().unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "the prompt never switched echo off"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        session.send(format!("{TOKEN}\r")).unwrap();
        let rest = session.expect(Eof).unwrap();
        seen.extend_from_slice(rest.as_bytes());
        let code = match session.get_process().wait().unwrap() {
            WaitStatus::Exited(_, code) => code,
            other => panic!("openshell did not exit normally: {other:?}"),
        };
        (
            code,
            String::from_utf8_lossy(&seen).into_owned(),
            String::from_utf8_lossy(&argv).into_owned(),
        )
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("accepted the token"), "{output:?}");
    assert!(
        !output.contains(TOKEN),
        "the typed token was echoed: {output:?}"
    );
    assert!(!argv.contains(TOKEN), "{argv:?}");
    let token_file = world.config_dir().join("tokens/prod");
    assert_eq!(std::fs::read_to_string(&token_file).unwrap().trim(), TOKEN);
    assert_eq!(mode(&token_file), 0o600);
    world.assert_token_never_shown();
}
