//! `network_middlewares` checks: names, implementation, failure mode, unique order, host
//! selectors, and selectors that would reach traffic OpenShell cannot inspect.

use std::collections::BTreeMap;

use super::host::{HostPattern, HostSelector};
use super::schema::SandboxPolicy;
use super::validate::Findings;
use super::{MAX_MIDDLEWARES, MAX_SELECTOR_PATTERNS, ON_ERROR_MODES, key_segment};

pub(super) fn check(out: &mut Findings, policy: &SandboxPolicy) {
    let count = policy.network_middlewares.len();
    if count > MAX_MIDDLEWARES {
        out.error(
            "network_middlewares",
            format!("{count} middlewares configured; the limit is {MAX_MIDDLEWARES}"),
        );
    }
    let mut orders: BTreeMap<i32, &str> = BTreeMap::new();
    for (key, mw) in &policy.network_middlewares {
        let base = format!("network_middlewares{}", key_segment(key));
        if key.is_empty() {
            out.error(&base, "middleware name (the map key) must not be empty");
        }
        if let Some(first) = orders.insert(mw.order, key) {
            orders.insert(mw.order, first);
            out.error(
                format!("{base}.order"),
                format!(
                    "order {} is also used by middleware {first:?}; orders must be unique",
                    mw.order
                ),
            );
        }
        if mw.middleware.trim().is_empty() {
            out.error(
                format!("{base}.middleware"),
                "middleware is required: name the built-in or registered implementation to run",
            );
        }
        if !mw.on_error.is_empty() && !ON_ERROR_MODES.contains(&mw.on_error.as_str()) {
            out.error(
                format!("{base}.on_error"),
                format!(
                    "unknown on_error value {:?}; expected one of {}",
                    mw.on_error,
                    ON_ERROR_MODES.join(", ")
                ),
            );
        }
        let Some(selector) = &mw.endpoints else {
            out.error(
                format!("{base}.endpoints"),
                "an endpoint selector is required: endpoints: {include: [host patterns]}",
            );
            continue;
        };
        if selector.include.is_empty() {
            out.error(
                format!("{base}.endpoints.include"),
                "the endpoint selector must include at least one host pattern",
            );
        }
        let patterns = selector.include.len() + selector.exclude.len();
        if patterns > MAX_SELECTOR_PATTERNS {
            out.error(
                format!("{base}.endpoints"),
                format!(
                    "{patterns} include and exclude patterns; the limit is {MAX_SELECTOR_PATTERNS} \
                     in all"
                ),
            );
            continue;
        }
        for (list, patterns) in [
            ("include", &selector.include),
            ("exclude", &selector.exclude),
        ] {
            for (i, pattern) in patterns.iter().enumerate() {
                if let Err(reason) = HostPattern::new(pattern) {
                    out.error(
                        format!("{base}.endpoints.{list}[{i}]"),
                        format!("host pattern {pattern:?} is invalid: {reason}"),
                    );
                }
            }
        }
        if mw.fails_closed() && count <= MAX_MIDDLEWARES {
            check_tls_skip_reach(
                out,
                policy,
                &base,
                selector.include.as_slice(),
                &selector.exclude,
            );
        }
    }
}

/// A fail-closed middleware must not select a `tls: skip` endpoint: that traffic is never
/// decrypted, so the middleware could only ever fail, and fail closed.
fn check_tls_skip_reach(
    out: &mut Findings,
    policy: &SandboxPolicy,
    base: &str,
    include: &[String],
    exclude: &[String],
) {
    let Some(selector) = HostSelector::new(include, exclude) else {
        return;
    };
    for (key, np) in &policy.network_policies {
        for (i, ep) in np.endpoints.iter().enumerate() {
            if ep.tls != "skip" {
                continue;
            }
            let Ok(pattern) = HostPattern::new(&ep.host) else {
                continue;
            };
            if selector.may_match_pattern(&pattern, &out.budget) {
                out.error(
                    format!("{base}.endpoints"),
                    format!(
                        "selects network_policies{}.endpoints[{i}] (host {:?}, tls: skip), whose \
                         traffic cannot be inspected; exclude that host or set on_error: fail_open",
                        key_segment(key),
                        ep.host
                    ),
                );
            }
        }
    }
}
