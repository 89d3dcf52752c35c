//! Document-level validation: version, static sections, network policy entries, and the
//! collection of every finding so an operator can fix a policy in one pass.

use super::glob::{Budget, MAX_GLOB_STEPS};
use super::schema::{FilesystemPolicy, ProcessPolicy, SandboxPolicy};
use super::{
    MAX_PATH_BYTES, MAX_PATHS, MAX_POLICY_KEY_CHARS, MAX_SANDBOX_ID, MIN_SANDBOX_ID,
    SUPPORTED_VERSION, ambiguity, key_segment, l7, middleware,
};
use crate::violation::Violation;

/// What validation found: errors refuse the policy, warnings do not.
#[derive(Debug, Default)]
pub(super) struct Findings {
    pub errors: Vec<Violation>,
    pub warnings: Vec<Violation>,
    /// Shared by every glob comparison of this validation.
    pub budget: Budget,
}

impl Findings {
    pub fn error(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(Violation::new(field, message));
    }

    pub fn warn(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Violation::new(field, message));
    }
}

pub(super) fn check(policy: &SandboxPolicy) -> Findings {
    let mut out = Findings::default();
    if policy.version != SUPPORTED_VERSION {
        out.error(
            "version",
            format!(
                "unsupported policy version {}; only version {SUPPORTED_VERSION} is supported",
                policy.version
            ),
        );
    }
    if let Some(fs) = &policy.filesystem_policy {
        check_filesystem(&mut out, fs);
    }
    if let Some(process) = &policy.process {
        check_process(&mut out, process);
    }
    for (key, np) in &policy.network_policies {
        let base = format!("network_policies{}", key_segment(key));
        check_key(&mut out, &base, "network policy", key);
        for (i, endpoint) in np.endpoints.iter().enumerate() {
            l7::check_endpoint(&mut out, &format!("{base}.endpoints[{i}]"), endpoint);
        }
        for (i, binary) in np.binaries.iter().enumerate() {
            let field = format!("{base}.binaries[{i}].path");
            if binary.path.is_empty() {
                out.error(field, "path is required: the executable allowed to connect");
            } else {
                check_path_text(&mut out, &field, &binary.path);
            }
        }
    }
    for key in policy.network_middlewares.keys() {
        if !key.is_empty() {
            let base = format!("network_middlewares{}", key_segment(key));
            check_key(&mut out, &base, "middleware", key);
        }
    }
    middleware::check(&mut out, policy);
    ambiguity::check(&mut out, policy);
    if out.budget.exhausted() {
        out.error(
            "network_policies",
            format!(
                "the endpoint hosts, paths and middleware selectors are too many or too complex \
                 to check for overlaps within {MAX_GLOB_STEPS} steps; merge or simplify them"
            ),
        );
    }
    out
}

/// Map keys are identities shown in logs, CLI output and field paths; upstream sets no bound,
/// this project keeps them non-empty, printable and short.
fn check_key(out: &mut Findings, field: &str, what: &str, key: &str) {
    let len = key.chars().count();
    if key.is_empty() {
        if what == "network policy" {
            out.error(
                field,
                format!("{what} name (the map key) must not be empty"),
            );
        }
    } else if len > MAX_POLICY_KEY_CHARS {
        out.error(
            field,
            format!("{what} name is {len} characters; the limit is {MAX_POLICY_KEY_CHARS}"),
        );
    } else if let Some(bad) = key.chars().find(|c| c.is_control()) {
        out.error(
            field,
            format!("{what} name must not contain control characters, found {bad:?}"),
        );
    }
}

fn check_filesystem(out: &mut Findings, fs: &FilesystemPolicy) {
    let (ro, rw) = (fs.read_only.len(), fs.read_write.len());
    let mut over = false;
    for (field, count) in [
        ("filesystem_policy.read_only", ro),
        ("filesystem_policy.read_write", rw),
    ] {
        if count > MAX_PATHS {
            over = true;
            out.error(
                field,
                format!(
                    "{count} paths listed; the limit is {MAX_PATHS} for read_only and read_write \
                     together"
                ),
            );
        }
    }
    if !over && ro + rw > MAX_PATHS {
        out.error(
            "filesystem_policy",
            format!(
                "{} paths in read_only and read_write together; the limit is {MAX_PATHS}",
                ro + rw
            ),
        );
    }
    for (list, paths, writable) in [
        ("read_only", &fs.read_only, false),
        ("read_write", &fs.read_write, true),
    ] {
        for (i, path) in paths.iter().enumerate() {
            let field = format!("filesystem_policy.{list}[{i}]");
            if path.is_empty() {
                out.error(field, "path is empty; give an absolute path");
                continue;
            }
            if !check_path_text(out, &field, path) {
                continue;
            }
            if !path.starts_with('/') {
                out.error(
                    &field,
                    format!("path {path:?} must be absolute (start with '/')"),
                );
            }
            if path.split('/').any(|component| component == "..") {
                out.error(&field, "path must not contain a '..' component");
            }
            if writable && is_root(path) {
                out.error(
                    &field,
                    "the root directory `/` may not be read-write; list the directories that need writing",
                );
            }
        }
    }
}

/// Length and NUL checks shared by filesystem and binary paths; false when the path is too
/// long to be worth checking further (as upstream, which reports only the length then).
fn check_path_text(out: &mut Findings, field: &str, path: &str) -> bool {
    if path.len() > MAX_PATH_BYTES {
        out.error(
            field,
            format!(
                "path is {} bytes; the limit is {MAX_PATH_BYTES}",
                path.len()
            ),
        );
        return false;
    }
    if path.contains('\0') {
        out.error(field, "path must not contain a NUL character");
    }
    true
}

/// True for `/` and spellings of it such as `//` or `/.`.
fn is_root(path: &str) -> bool {
    path.starts_with('/') && path.split('/').all(|c| c.is_empty() || c == ".")
}

fn check_process(out: &mut Findings, process: &ProcessPolicy) {
    for (field, value) in [
        ("process.run_as_user", &process.run_as_user),
        ("process.run_as_group", &process.run_as_group),
    ] {
        let Some(value) = value.as_deref().filter(|v| !v.is_empty()) else {
            continue;
        };
        if !is_sandbox_identity(value) {
            out.error(
                field,
                format!(
                    "{value:?} is not allowed; use \"sandbox\" or a numeric ID from {MIN_SANDBOX_ID} \
                     to {MAX_SANDBOX_ID}, or leave it out to let the runtime choose"
                ),
            );
        }
    }
}

/// Upstream's identity rule: the literal `sandbox`, or a numeric ID in the sandbox range (so
/// never root or a system account).
pub fn is_sandbox_identity(value: &str) -> bool {
    value == "sandbox"
        || value
            .parse::<u32>()
            .is_ok_and(|id| (MIN_SANDBOX_ID..=MAX_SANDBOX_ID).contains(&id))
}
