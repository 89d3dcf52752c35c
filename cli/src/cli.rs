//! The command tree: every flag, argument and subcommand of `openshell`.
//!
//! Parsing only; what each command does lives in `commands/`.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand, ValueEnum};
use openshell_sdk::OperationState;

use crate::complete::{gateway_names, operation_ids, provider_names, sandbox_names};
use crate::context::GlobalArgs;
use crate::exit::EXIT_CODES_HELP;
use crate::parse;

const SANDBOX_HELP: &str = "Sandbox id, name, or WORKSPACE/NAME";

/// Most items the gateway returns in one list page; it refuses a larger page.
pub const MAX_PAGE: u32 = 1000;

/// A `--limit` of a one-page list: checked here, so a larger one is a usage error before
/// anything is sent.
fn page_limit() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(MAX_PAGE))
}

/// Operate OpenShell sandboxes: their policies, settings, providers and the
/// operations that deliver changes to them.
#[derive(Debug, Parser)]
#[command(name = "openshell", version, after_help = EXIT_CODES_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, inspect, stop, start and delete sandboxes.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Set and read sandbox and global policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Set and read typed settings at global, workspace or sandbox scope.
    #[command(subcommand)]
    Settings(SettingsCommand),
    /// Manage providers (environment and credentials) and attach them to sandboxes.
    #[command(subcommand)]
    Provider(ProviderCommand),
    /// Read, wait for and list the durable operations of configuration writes.
    #[command(subcommand, alias = "operation", alias = "ops")]
    Operations(OperationsCommand),
    /// Diagnose configuration delivery to supervisors.
    #[command(subcommand, alias = "session")]
    Sessions(SessionsCommand),
    /// Save, select and describe gateways.
    #[command(subcommand)]
    Gateway(GatewayCommand),
    /// Create, list and revoke operator tokens (admin tokens of every workspace only).
    #[command(subcommand, alias = "tokens")]
    Token(TokenCommand),
    /// Show which gateway commands use, where its address and token come
    /// from, and whether it answers; exits 1 when it does not.
    Status,
    /// Check the way to the gateway: address, reachability, TLS, token and
    /// clock; each failed check prints its fix. Exits 1 when one fails.
    Doctor,
    /// Print a shell's completion script to stdout; it completes sandbox,
    /// provider, operation and saved gateway names by asking the gateway.
    ///
    /// Load it with e.g. `source <(openshell completions bash)`; names come
    /// from the gateway OPENSHELL_GATEWAY or the selected saved gateway names.
    Completions {
        /// Shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Render this command reference (docs/cli.md is its output).
    #[command(subcommand, hide = true)]
    Docs(DocsCommand),
    /// Upstream's form of `openshell sandbox logs`.
    #[command(hide = true)]
    Logs(LogsArgs),
}

#[derive(Debug, Subcommand)]
pub enum DocsCommand {
    /// Every command, flag and help text as Markdown, with exit codes,
    /// output formats, JSON shapes and environment variables.
    Markdown,
    /// One man page per command (openshell.1, openshell-sandbox-create.1, …)
    /// into a directory (docs/man is their output).
    Man {
        /// Directory to write the pages to; created if missing.
        #[arg(long, value_name = "DIR", default_value = "docs/man")]
        out_dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Create a sandbox and print its supervisor credential (shown only once).
    Create {
        /// Sandbox name (a DNS label).
        name: String,
        /// Workspace to create it in (default: the gateway's default workspace).
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
        /// First policy, YAML or JSON; `-` reads stdin.
        #[arg(short = 'f', long = "file", value_name = "POLICY")]
        policy: Option<String>,
        /// Write the supervisor credential to this new file (mode 0600) instead of printing it.
        ///
        /// An existing file, or a symlink even to nothing, is refused unless --force is given.
        #[arg(long, value_name = "PATH")]
        credential_file: Option<PathBuf>,
        /// Replace an existing --credential-file; a symlink there is replaced, never followed.
        #[arg(long, requires = "credential_file")]
        force: bool,
    },
    /// Show one sandbox.
    Get {
        #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
        sandbox: String,
    },
    /// List sandboxes.
    #[command(alias = "ls")]
    List {
        /// Only this workspace.
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
        /// Include deleted sandboxes.
        #[arg(long)]
        all: bool,
    },
    /// Delete a sandbox; its pending operations end CANCELLED. Asks to confirm.
    #[command(alias = "rm")]
    Delete {
        #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
        sandbox: String,
    },
    /// Stop a sandbox; its pending operations end INACTIVE.
    Stop {
        #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
        sandbox: String,
    },
    /// Start a stopped sandbox again.
    Start {
        #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
        sandbox: String,
    },
    /// Show a sandbox's recent log lines: the supervisor's own and the workload's stdout and
    /// stderr, as its supervisor pushed them to the gateway (provider values masked).
    ///
    /// Lines are kept in memory by the gateway replica the supervisor pushes to (the newest
    /// 2000 per sandbox); a gateway restart loses them. Lines the supervisor or the gateway
    /// had to drop are counted in a warning. Upstream's form, `openshell logs SB` (with
    /// `--tail` for `--follow`), works too.
    Logs(LogsArgs),
}

/// `openshell sandbox logs` (also upstream's form, `openshell logs`).
#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
    pub sandbox: String,
    /// Keep printing new lines as they arrive, until interrupted.
    #[arg(short = 'f', long, alias = "tail")]
    pub follow: bool,
    /// Only lines of the last DURATION, e.g. 5m or 1h.
    #[arg(long, value_name = "DURATION", value_parser = crate::parse::duration)]
    pub since: Option<std::time::Duration>,
    /// Show at most N of the newest lines (default 2000; 200 before --follow).
    #[arg(short = 'n', long, value_name = "N")]
    pub lines: Option<u32>,
    /// Only lines of this source: supervisor or workload (repeatable); upstream's `sandbox`
    /// means both.
    #[arg(long, value_name = "SOURCE", value_parser = ["supervisor", "workload", "sandbox"])]
    pub source: Vec<String>,
    /// Only lines at or above this level.
    #[arg(long, value_name = "LEVEL", value_parser = clap::builder::PossibleValuesParser::new(["trace", "debug", "info", "warn", "error"]))]
    pub level: Option<String>,
}

/// How a write returns: right after commit, or after the change is applied.
///
/// Without `--wait` (or `--timeout`) a write returns right after commit, on a terminal
/// or not: the same command does the same thing for a person and a script.
#[derive(Debug, Clone, Default, Args)]
pub struct WaitArgs {
    /// Return right after the write is committed (the default; states it explicitly).
    #[arg(long, conflicts_with_all = ["wait", "timeout"])]
    pub commit_only: bool,
    /// Wait until the change is applied, failed, or the timeout passes.
    #[arg(long)]
    pub wait: bool,
    /// How long to wait, e.g. 90s or 2m (gateway default 60s, at most 10m); implies --wait.
    #[arg(long, value_name = "DURATION", value_parser = parse::wait_timeout)]
    pub timeout: Option<Duration>,
    /// Fleet writes: stop waiting once this fraction (0-1] of sandboxes applied.
    #[arg(long, value_name = "FRACTION", value_parser = parse::threshold)]
    pub threshold: Option<f64>,
    /// Makes the write safe to retry: repeating it returns the original operation.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
}

/// `policy update`'s edits, in upstream's forms (see `EditSpecs`).
#[derive(Debug, Clone, Default, Args)]
pub struct EditArgs {
    /// Add or merge an endpoint: HOST:PORT[:ACCESS[:PROTOCOL[:ENFORCEMENT[:OPTIONS]]]]
    /// (ACCESS read-only|read-write|full, PROTOCOL rest|websocket|sql, ENFORCEMENT
    /// enforce|audit, OPTIONS websocket-credential-rewrite); repeatable.
    #[arg(long = "add-endpoint", value_name = "SPEC")]
    pub add_endpoints: Vec<String>,
    /// Remove an endpoint's port: HOST:PORT; repeatable.
    #[arg(long = "remove-endpoint", value_name = "HOST:PORT")]
    pub remove_endpoints: Vec<String>,
    /// Add a REST allow rule to an endpoint: HOST:PORT:METHOD:PATH_GLOB; repeatable.
    #[arg(long = "add-allow", value_name = "RULE")]
    pub add_allow: Vec<String>,
    /// Add a REST deny rule to an endpoint: HOST:PORT:METHOD:PATH_GLOB; repeatable.
    #[arg(long = "add-deny", value_name = "RULE")]
    pub add_deny: Vec<String>,
    /// Remove a network rule by name; repeatable.
    #[arg(long = "remove-rule", value_name = "NAME")]
    pub remove_rules: Vec<String>,
    /// A binary the added endpoints are for; repeatable.
    #[arg(long = "binary", value_name = "PATH")]
    pub binaries: Vec<String>,
    /// Name of the rule for one --add-endpoint (default allow_HOST_PORT).
    #[arg(long, value_name = "NAME")]
    pub rule_name: Option<String>,
}

impl From<EditArgs> for openshell_sdk::EditSpecs {
    fn from(a: EditArgs) -> Self {
        Self {
            add_endpoints: a.add_endpoints,
            remove_endpoints: a.remove_endpoints,
            add_allow: a.add_allow,
            add_deny: a.add_deny,
            remove_rules: a.remove_rules,
            binaries: a.binaries,
            rule_name: a.rule_name,
        }
    }
}

/// Help of `--expected-revision`, shared by the policy writes.
const EXPECTED_REVISION_HELP: &str = "Write only if the sandbox's policy (the global one with --global) is still at revision N; otherwise refuse the write (FAILED_PRECONDITION, exit code 1) and write nothing";

/// Whose policy a policy command is about: one sandbox's, or with `--global` the global
/// policy, which replaces every sandbox's policy while it is set.
#[derive(Debug, Clone, Args)]
pub struct PolicyTarget {
    #[arg(
        value_name = "SB",
        help = SANDBOX_HELP, add = sandbox_names(),
        required_unless_present = "global",
        conflicts_with = "global"
    )]
    pub sandbox: Option<String>,
    /// The global policy instead of a sandbox's: it replaces every sandbox's policy while set.
    #[arg(long)]
    pub global: bool,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Set a sandbox's policy, or the global policy with --global.
    ///
    /// A sandbox policy that omits filesystem_policy, landlock or process
    /// keeps the sandbox's current section (they are fixed at its first
    /// revision); the CLI names the sections it kept. Asks to confirm a global
    /// policy, and a policy that removes network access the sandbox has now;
    /// --yes confirms in advance (required when not on a terminal).
    ///
    /// --dry-run has the gateway check the policy exactly as a write would,
    /// against the stored policy, and print what would change, writing
    /// nothing: no revision, no operation, no confirmation asked.
    Set {
        #[command(flatten)]
        target: PolicyTarget,
        /// Policy file, YAML or JSON; `-` reads stdin (upstream's `--policy` works too).
        #[arg(
            short = 'f',
            long = "file",
            visible_alias = "policy",
            value_name = "FILE"
        )]
        file: String,
        /// Check the policy at the gateway and print what would change
        /// (network policies and endpoints added, removed, changed); write nothing.
        #[arg(long, conflicts_with_all = ["wait", "timeout", "threshold"])]
        dry_run: bool,
        #[arg(long, value_name = "N", help = EXPECTED_REVISION_HELP)]
        expected_revision: Option<u64>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Edit a sandbox's network rules (or the global policy's, with --global) in place,
    /// without resending the whole policy.
    ///
    /// The gateway applies the edits to the sandbox's latest revision (or the global
    /// policy in effect) inside the write's own transaction, so two concurrent edits
    /// never lose one another,
    /// and validates the result as any policy. An endpoint already allowed by a
    /// rule is merged into that rule; fields it already sets are kept, and the
    /// CLI prints a note for each. Removing what is not there changes nothing.
    /// --dry-run shows what the edits would change, writing nothing.
    ///
    /// Examples:
    ///   openshell policy update SB --add-endpoint api.github.com:443:read-only:rest:enforce
    ///   openshell policy update SB --add-allow 'api.github.com:443:POST:/repos/*/issues'
    ///   openshell policy update SB --remove-endpoint pypi.org:443 --wait
    ///   openshell policy update --global --add-endpoint pypi.org:443 --yes
    #[command(verbatim_doc_comment)]
    Update {
        #[command(flatten)]
        target: PolicyTarget,
        #[command(flatten)]
        edits: EditArgs,
        /// Check the edits at the gateway and print what they would change; write nothing.
        #[arg(long, conflicts_with_all = ["wait", "timeout", "threshold"])]
        dry_run: bool,
        #[arg(long, value_name = "N", help = EXPECTED_REVISION_HELP)]
        expected_revision: Option<u64>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Check a policy file offline, with the validation the gateway runs; no gateway needed.
    ///
    /// Prints `valid` and exits 0, or lists every problem as `field: message`,
    /// one per line, and exits 1. `-o json` gives {valid, violations: [{field, message}]}.
    /// The static-section rule, which needs the sandbox's stored policy, is
    /// checked by `policy set --dry-run`.
    Validate {
        /// Policy file, YAML or JSON; `-` reads stdin.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
    },
    /// Remove the global policy so sandbox policies apply again (asks to confirm).
    ClearGlobal {
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Show a sandbox's policy revision, or the global policy's with --global; `-o yaml`
    /// prints the policy itself.
    Get {
        #[command(flatten)]
        target: PolicyTarget,
        /// Revision to show (default: the latest); upstream's `--rev` works too.
        #[arg(long, visible_alias = "rev", value_name = "N")]
        revision: Option<u64>,
    },
    /// Compare a sandbox's current policy (or the global policy, with --global) with a
    /// file; exits 0 when equal, 1 when different.
    ///
    /// Both are normalized first, so comments and layout are not differences,
    /// and static sections the file omits are the current ones, as `policy
    /// set` keeps them. `-o json` gives {changed, removed_network_access, diff,
    /// kept_static_sections}.
    Diff {
        #[command(flatten)]
        target: PolicyTarget,
        /// Policy file, YAML or JSON; `-` reads stdin.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: String,
    },
    /// List a sandbox's policy revisions, or the global policy's with --global, newest first.
    #[command(visible_alias = "list")]
    History {
        #[command(flatten)]
        target: PolicyTarget,
        /// At most this many revisions (1-1000, the gateway's page limit).
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = page_limit())]
        limit: u32,
    },
}

/// Exactly one scope for a settings command.
#[derive(Debug, Clone, Args)]
#[group(required = true, multiple = false)]
pub struct ScopeArgs {
    /// Sandbox scope.
    #[arg(long, value_name = "SB", add = sandbox_names())]
    pub sandbox: Option<String>,
    /// Workspace scope.
    #[arg(long, value_name = "W")]
    pub workspace: Option<String>,
    /// Global scope: overrides every other scope.
    #[arg(long)]
    pub global: bool,
}

#[derive(Debug, Subcommand)]
pub enum SettingsCommand {
    /// Set settings at a scope, as one operation; --global asks to confirm.
    Set {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Settings to set; values are typed by the registry (see `settings keys`).
        #[arg(required = true, value_name = "KEY=VALUE", value_parser = parse::key_value)]
        pairs: Vec<(String, String)>,
        /// Check keys and values at the gateway and print which would change,
        /// from what to what; write nothing.
        #[arg(long, conflicts_with_all = ["wait", "timeout", "threshold"])]
        dry_run: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Remove settings from a scope so a lower scope or the default applies; --global asks to confirm.
    Delete {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Setting keys to remove from the scope.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
        /// Check the keys at the gateway and print which would change; write nothing.
        #[arg(long, conflicts_with_all = ["wait", "timeout", "threshold"])]
        dry_run: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Show settings at a scope; for a sandbox, every effective value and its source.
    Get {
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// List the settings registry: every key, its type and default.
    Keys,
}

/// Values of a provider. Credentials are never echoed back.
#[derive(Debug, Clone, Default, Args)]
pub struct ProviderValues {
    /// Plain environment value.
    #[arg(long = "env", value_name = "K=V", value_parser = parse::key_value)]
    pub env: Vec<(String, String)>,
    /// Credential value (visible in the process list; prefer --credential-from-env).
    // Split after parsing: clap would quote a malformed value, a secret, in its error.
    #[arg(long = "credential", value_name = "K=V")]
    pub credentials: Vec<String>,
    /// Credential K taken from this CLI's environment variable K.
    #[arg(long = "credential-from-env", value_name = "K")]
    pub credentials_from_env: Vec<String>,
    /// Credential expiry, RFC 3339 (e.g. 2027-01-31T00:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = parse::timestamp)]
    pub expires_at: Option<SystemTime>,
}

#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Create a provider.
    Create {
        /// Provider name (a DNS label).
        name: String,
        /// Provider type, e.g. github or openai.
        #[arg(long = "type", value_name = "T")]
        provider_type: String,
        /// Workspace (default: the gateway's default workspace).
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
        #[command(flatten)]
        values: ProviderValues,
    },
    /// Replace a provider's values; the given set replaces the old one whole.
    Update {
        /// Provider id, name or WORKSPACE/NAME.
        #[arg(add = provider_names())]
        provider: String,
        /// Workspace to resolve a name in.
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
        #[command(flatten)]
        values: ProviderValues,
    },
    /// Delete a provider that no sandbox attaches.
    #[command(alias = "rm")]
    Delete {
        /// Provider id, name or WORKSPACE/NAME.
        #[arg(add = provider_names())]
        provider: String,
        /// Workspace to resolve a name in.
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
    },
    /// Show a provider (credential names only).
    Get {
        /// Provider id, name or WORKSPACE/NAME.
        #[arg(add = provider_names())]
        provider: String,
        /// Workspace to resolve a name in.
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
    },
    /// List providers.
    #[command(alias = "ls")]
    List {
        /// Only this workspace.
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
    },
    /// Attach a provider to a sandbox.
    Attach {
        #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
        sandbox: String,
        /// Provider id, name (resolved in the sandbox's workspace) or WORKSPACE/NAME.
        #[arg(add = provider_names())]
        provider: String,
    },
    /// Detach a provider from a sandbox.
    Detach {
        #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
        sandbox: String,
        /// Provider id, name (resolved in the sandbox's workspace) or WORKSPACE/NAME.
        #[arg(add = provider_names())]
        provider: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum OperationsCommand {
    /// Show one operation, or with --targets the sandboxes it targets.
    Get {
        /// Operation id (op-…).
        #[arg(add = operation_ids())]
        id: String,
        /// List the operation's targets: each sandbox, its state and why.
        #[arg(long)]
        targets: bool,
        /// With --targets: only targets in these states, e.g. failed,pending.
        #[arg(long = "state", value_name = "S", value_delimiter = ',',
              value_parser = parse::operation_state, requires = "targets")]
        states: Vec<OperationState>,
        /// With --targets: at most this many (default: every target).
        #[arg(long, value_name = "N", requires = "targets")]
        limit: Option<usize>,
    },
    /// Follow an operation until it is terminal or the timeout passes.
    Wait {
        /// Operation id (op-…).
        #[arg(add = operation_ids())]
        id: String,
        /// How long to wait, e.g. 90s or 2m (gateway default 60s, at most 10m).
        #[arg(long, value_name = "DURATION", value_parser = parse::wait_timeout)]
        timeout: Option<Duration>,
        /// Fleet operations: stop once this fraction (0-1] of sandboxes applied.
        #[arg(long, value_name = "FRACTION", value_parser = parse::threshold)]
        threshold: Option<f64>,
    },
    /// List operations, newest first.
    #[command(alias = "ls")]
    List {
        /// Only operations of this sandbox, with the global and workspace ones that targeted it.
        #[arg(long, value_name = "SB", add = sandbox_names())]
        sandbox: Option<String>,
        /// Only operations in this state (repeatable), e.g. pending.
        #[arg(long = "state", value_name = "S", value_parser = parse::operation_state)]
        states: Vec<OperationState>,
        /// At most this many (1-1000, the gateway's page limit).
        #[arg(long, value_name = "N", default_value_t = 50, value_parser = page_limit())]
        limit: u32,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// List connected supervisor sessions.
    #[command(alias = "ls")]
    List,
    /// Explain configuration delivery for one sandbox, with hints.
    Inspect {
        #[arg(value_name = "SB", help = SANDBOX_HELP, add = sandbox_names())]
        sandbox: String,
    },
}

/// What an operator token may do; each role has the rights of the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TokenRoleArg {
    /// Reads, and follows operations, sessions and logs.
    Viewer,
    /// Also writes sandboxes, sandbox and workspace configuration, providers and attachments.
    Operator,
    /// Also writes the global policy and settings, and manages tokens.
    Admin,
}

/// Operator tokens the gateway keeps (hashed) in its store, beside the ones
/// of its configuration. A token's name is the caller recorded on the
/// operations it makes.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print its secret: the only time it is shown.
    Create {
        /// Token name (a DNS label).
        name: String,
        /// What the token may do.
        #[arg(long, value_enum)]
        role: TokenRoleArg,
        /// Limit the token to this workspace's sandboxes, settings and providers.
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
    },
    /// List tokens: name, role, workspace, where it comes from; never a secret.
    #[command(alias = "ls")]
    List,
    /// Revoke a token created with `token create`; its next call is refused.
    #[command(alias = "rm")]
    Revoke {
        /// Token name.
        name: String,
    },
}

/// Saved gateways, like kubectl's contexts: `gateway add` names an address,
/// `gateway login` saves its token, `gateway select` makes it the one
/// commands use. `--gateway`, `--token`, `--ca-cert` and their environment
/// variables still override the selected gateway.
#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Save a gateway under a name: `gateway add NAME URL`, or `gateway add URL [--name NAME]`.
    ///
    /// The first saved gateway is selected. Adding a name again replaces its
    /// address and CA; its saved token is dropped when the address changes,
    /// so a token never goes to a server it was not saved for. The CA file
    /// is `--ca-cert` given on this command (not OPENSHELL_CA_CERT).
    Add {
        /// The name, or the address when it is the only argument.
        #[arg(value_name = "NAME|URL")]
        first: String,
        /// Gateway address, http://HOST:PORT or https://HOST:PORT.
        #[arg(value_name = "URL")]
        url: Option<String>,
        /// Name for a gateway given by address alone (default: its host).
        #[arg(long, value_name = "NAME", conflicts_with = "url")]
        name: Option<String>,
    },
    /// Save the operator token of a saved gateway (default: the selected one).
    ///
    /// The token is read from a hidden prompt on a terminal, else from stdin
    /// (`openshell gateway login prod < token-file`), never from the command
    /// line. It is checked with the gateway first when the gateway answers,
    /// saved mode 0600, and never printed.
    Login {
        #[arg(value_name = "NAME", add = gateway_names())]
        name: Option<String>,
    },
    /// Remove the saved token of a saved gateway (default: the selected one).
    Logout {
        #[arg(value_name = "NAME", add = gateway_names())]
        name: Option<String>,
    },
    /// Make a saved gateway the one commands use.
    Select {
        #[arg(value_name = "NAME", add = gateway_names())]
        name: String,
    },
    /// List saved gateways; `*` marks the selected one.
    #[command(alias = "ls")]
    List,
    /// Forget a saved gateway and its token.
    #[command(alias = "rm")]
    Remove {
        #[arg(value_name = "NAME", add = gateway_names())]
        name: String,
    },
    /// Show a gateway's version, delivery mode, store and replicas
    /// (default: the gateway commands use).
    Info {
        /// A saved gateway to ask instead.
        #[arg(value_name = "NAME", add = gateway_names())]
        name: Option<String>,
        /// The same, as upstream spells it.
        #[arg(
            long = "name",
            value_name = "NAME",
            conflicts_with = "name",
            hide = true
        )]
        name_flag: Option<String>,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    use super::*;
    use crate::output::OutputFormat;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("openshell").chain(args.iter().copied()))
    }

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The gateway refuses a page over its limit; the CLI never sends one.
    #[test]
    fn a_list_limit_over_the_gateways_page_limit_is_a_usage_error() {
        for command in [&["policy", "history", "web"][..], &["operations", "list"]] {
            let args = |limit: &'static str| [command, &["--limit", limit]].concat();
            assert!(parse(&args("1000")).is_ok(), "{command:?}");
            for bad in ["1001", "0"] {
                let err = parse(&args(bad)).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::ValueValidation, "{command:?} {bad}");
                assert!(err.to_string().contains("1..=1000"), "{err}");
            }
        }
    }

    #[test]
    fn a_token_may_start_with_a_hyphen() {
        let cli = parse(&["sandbox", "list", "--token", "-cXg_token"]).unwrap();
        assert_eq!(cli.global.token.as_deref(), Some("-cXg_token"));
    }

    #[test]
    fn global_flags_work_after_subcommands() {
        let cli = parse(&[
            "sandbox",
            "list",
            "-o",
            "json",
            "--gateway",
            "http://gw:1",
            "--quiet",
            "--yes",
        ])
        .unwrap();
        assert_eq!(cli.global.output, OutputFormat::Json);
        assert_eq!(cli.global.gateway.as_deref(), Some("http://gw:1"));
        assert!(cli.global.quiet && cli.global.yes);
    }

    #[test]
    fn policy_set_flags() {
        let cli = parse(&[
            "policy",
            "set",
            "team/demo",
            "-f",
            "p.yaml",
            "--commit-only",
            "--idempotency-key",
            "k1",
        ])
        .unwrap();
        let Command::Policy(PolicyCommand::Set {
            target: PolicyTarget { sandbox, global },
            file,
            dry_run,
            wait,
            ..
        }) = cli.command
        else {
            panic!("wrong command");
        };
        assert_eq!(sandbox.as_deref(), Some("team/demo"));
        assert!(!global);
        assert!(!dry_run);
        assert_eq!(file, "p.yaml");
        assert!(wait.commit_only);
        assert_eq!(wait.idempotency_key.as_deref(), Some("k1"));

        let cli = parse(&[
            "policy",
            "set",
            "sb",
            "-f",
            "-",
            "--wait",
            "--timeout",
            "2m",
        ])
        .unwrap();
        let Command::Policy(PolicyCommand::Set { wait, .. }) = cli.command else {
            panic!("wrong command");
        };
        assert!(wait.wait);
        assert_eq!(wait.timeout, Some(Duration::from_secs(120)));
    }

    #[test]
    fn policy_dry_run_and_validate_flags() {
        let cli = parse(&["policy", "set", "sb", "-f", "p.yaml", "--dry-run"]).unwrap();
        let Command::Policy(PolicyCommand::Set { dry_run, .. }) = cli.command else {
            panic!("wrong command");
        };
        assert!(dry_run);
        assert!(parse(&["policy", "set", "--global", "-f", "p", "--dry-run"]).is_ok());
        // A dry run waits for nothing.
        for flag in [
            &["--wait"][..],
            &["--timeout", "30s"],
            &["--threshold", "0.5"],
        ] {
            let mut args = vec!["policy", "set", "sb", "-f", "p", "--dry-run"];
            args.extend_from_slice(flag);
            let err = parse(&args).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ArgumentConflict, "{flag:?}");
        }
        let cli = parse(&["policy", "validate", "-f", "p.yaml", "-o", "json"]).unwrap();
        let Command::Policy(PolicyCommand::Validate { file }) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!(file, "p.yaml");
        let err = parse(&["policy", "validate"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn policy_set_needs_exactly_one_target() {
        assert!(parse(&["policy", "set", "--global", "-f", "p.yaml"]).is_ok());
        let err = parse(&["policy", "set", "-f", "p.yaml"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
        let err = parse(&["policy", "set", "sb", "--global", "-f", "p.yaml"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
        let err = parse(&["policy", "set", "sb"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn wait_flags_conflict() {
        let err =
            parse(&["policy", "set", "sb", "-f", "p", "--wait", "--commit-only"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
        let err = parse(&[
            "policy",
            "set",
            "sb",
            "-f",
            "p",
            "--timeout",
            "1m",
            "--commit-only",
        ])
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
        let err = parse(&["policy", "set", "sb", "-f", "p", "--timeout", "soon"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn a_timeout_above_the_longest_wait_is_a_usage_error() {
        let writes: [&[&str]; 4] = [
            &["policy", "set", "sb", "-f", "p"],
            &["policy", "clear-global"],
            &["settings", "set", "--global", "a=b"],
            &["settings", "delete", "--global", "a"],
        ];
        let waits = writes
            .iter()
            .map(|w| w.to_vec())
            .chain([vec!["operations", "wait", "op-1"]]);
        for mut args in waits {
            args.extend(["--timeout", "10m"]);
            assert!(parse(&args).is_ok(), "{args:?}");
            let last = args.len() - 1;
            args[last] = "11m";
            let err = parse(&args).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{args:?}");
            assert_eq!(err.exit_code(), 2);
            let text = err.to_string();
            for needed in ["--timeout", "'11m'", "at most 10m"] {
                assert!(text.contains(needed), "{needed:?} in {text}");
            }
        }
    }

    #[test]
    fn settings_scope_is_required_and_exclusive() {
        let cli = parse(&["settings", "set", "--global", "log_level=debug", "a=b"]).unwrap();
        let Command::Settings(SettingsCommand::Set { scope, pairs, .. }) = cli.command else {
            panic!("wrong command");
        };
        assert!(scope.global);
        assert_eq!(
            pairs,
            vec![
                ("log_level".to_string(), "debug".to_string()),
                ("a".to_string(), "b".to_string())
            ]
        );
        let err = parse(&["settings", "set", "log_level=debug"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
        let err = parse(&["settings", "get", "--global", "--sandbox", "sb"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
        assert!(parse(&["settings", "get", "--workspace", "team"]).is_ok());
        assert!(parse(&["settings", "delete", "--sandbox", "sb", "log_level"]).is_ok());
    }

    #[test]
    fn settings_set_rejects_bad_pairs_as_usage() {
        let err = parse(&["settings", "set", "--global", "log_level"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        assert_eq!(err.exit_code(), 2);
        let err = parse(&["settings", "set", "--global", "=x"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
    }

    #[test]
    fn settings_threshold_is_validated() {
        assert!(
            parse(&[
                "settings",
                "set",
                "--global",
                "a=b",
                "--wait",
                "--threshold",
                "0.95"
            ])
            .is_ok()
        );
        let err = parse(&["settings", "set", "--global", "a=b", "--threshold", "1.5"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
    }

    #[test]
    fn provider_create_collects_values() {
        let cli = parse(&[
            "provider",
            "create",
            "gh",
            "--type",
            "github",
            "--env",
            "GH_HOST=github.com",
            "--credential",
            "GITHUB_TOKEN=ghp_x",
            "--credential-from-env",
            "OTHER",
            "--expires-at",
            "2027-01-31T00:00:00Z",
        ])
        .unwrap();
        let Command::Provider(ProviderCommand::Create {
            name,
            provider_type,
            values,
            ..
        }) = cli.command
        else {
            panic!("wrong command");
        };
        assert_eq!(name, "gh");
        assert_eq!(provider_type, "github");
        assert_eq!(values.env.len(), 1);
        assert_eq!(values.credentials[0], "GITHUB_TOKEN=ghp_x");
        assert_eq!(values.credentials_from_env, vec!["OTHER".to_string()]);
        assert!(values.expires_at.is_some());
    }

    #[test]
    fn malformed_credential_reaches_the_command_unechoed() {
        // Validation happens in the provider command, where errors never quote the value.
        assert!(
            parse(&[
                "provider",
                "create",
                "gh",
                "--type",
                "t",
                "--credential",
                "sk-secret"
            ])
            .is_ok()
        );
    }

    #[test]
    fn operations_list_parses_states() {
        let cli = parse(&[
            "operations",
            "list",
            "--state",
            "pending",
            "--state",
            "DELIVERED",
        ])
        .unwrap();
        let Command::Operations(OperationsCommand::List { states, .. }) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!(
            states,
            vec![OperationState::Pending, OperationState::Delivered]
        );
        let err = parse(&["operations", "list", "--state", "done"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        assert!(parse(&["ops", "wait", "op-1", "--timeout", "30s"]).is_ok());
    }

    #[test]
    fn sandbox_commands_parse() {
        assert!(
            parse(&[
                "sandbox",
                "create",
                "demo",
                "--workspace",
                "team",
                "-f",
                "p.yaml"
            ])
            .is_ok()
        );
        assert!(parse(&["sandbox", "create", "demo", "--credential-file", "/tmp/c"]).is_ok());
        let cli = parse(&[
            "sandbox",
            "create",
            "demo",
            "--credential-file",
            "/tmp/c",
            "--force",
        ])
        .unwrap();
        let Command::Sandbox(SandboxCommand::Create { force, .. }) = cli.command else {
            panic!("wrong command");
        };
        assert!(force);
        // --force only says what to do with an existing credential file.
        let err = parse(&["sandbox", "create", "demo", "--force"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
        assert!(parse(&["sandbox", "delete", "demo", "--yes"]).is_ok());
        assert!(parse(&["sandbox", "list", "--all"]).is_ok());
        assert!(parse(&["sandbox", "stop", "demo"]).is_ok());
        assert!(parse(&["sandbox", "start", "demo"]).is_ok());
        assert!(parse(&["sessions", "inspect", "demo"]).is_ok());
        assert!(parse(&["gateway", "info"]).is_ok());
        assert!(parse(&["completions", "bash"]).is_ok());
        assert!(parse(&["policy", "diff", "demo", "-f", "p.yaml"]).is_ok());
        assert!(parse(&["docs", "markdown"]).is_ok());
        let err = parse(&["policy", "diff", "demo"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::MissingRequiredArgument);
        let err = parse(&["sandbox", "get"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn gateway_commands_take_upstream_forms_too() {
        let cli = parse(&[
            "gateway",
            "add",
            "prod",
            "https://gw:7070",
            "--ca-cert",
            "ca.pem",
        ])
        .unwrap();
        let Command::Gateway(GatewayCommand::Add { first, url, name }) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!(
            (first.as_str(), url.as_deref(), name),
            ("prod", Some("https://gw:7070"), None)
        );
        assert_eq!(cli.global.ca_cert, Some(PathBuf::from("ca.pem")));
        // Upstream's form: the address alone, the name as a flag.
        let cli = parse(&["gateway", "add", "https://gw:7070", "--name", "prod"]).unwrap();
        let Command::Gateway(GatewayCommand::Add { first, url, name }) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!(
            (first.as_str(), url, name.as_deref()),
            ("https://gw:7070", None, Some("prod"))
        );
        let err = parse(&["gateway", "add", "prod", "https://gw:7070", "--name", "x"]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict);
        assert!(parse(&["gateway", "login"]).is_ok());
        assert!(parse(&["gateway", "login", "prod"]).is_ok());
        assert!(parse(&["gateway", "logout"]).is_ok());
        assert!(parse(&["gateway", "select", "prod"]).is_ok());
        assert!(parse(&["gateway", "ls"]).is_ok());
        assert!(parse(&["gateway", "rm", "prod"]).is_ok());
        let cli = parse(&["gateway", "info", "--name", "prod"]).unwrap();
        let Command::Gateway(GatewayCommand::Info { name, name_flag }) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!((name, name_flag.as_deref()), (None, Some("prod")));
        assert!(parse(&["gateway", "info", "prod", "--name", "x"]).is_err());
        assert!(parse(&["status"]).is_ok());
        assert!(parse(&["doctor", "-o", "json"]).is_ok());
        // The token is never an argument of login.
        assert!(parse(&["gateway", "login", "prod", "tok"]).is_err());
        let cli = parse(&["sandbox", "list", "--gateway", "prod"]).unwrap();
        assert_eq!(cli.global.gateway.as_deref(), Some("prod"));
    }

    #[test]
    fn docs_command_is_hidden() {
        let cmd = Cli::command();
        let docs = cmd.find_subcommand("docs").unwrap();
        assert!(docs.is_hide_set());
    }

    #[test]
    fn help_lists_exit_codes() {
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("124"), "{help}");
        assert!(help.contains("Exit codes"), "{help}");
    }
}
