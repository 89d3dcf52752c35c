//! Durable operations, fleet counts and what `update_config` returns.

use pyo3::prelude::*;

use super::{client_view, to_dict};
use crate::args::{Callback, Seconds, arg};
use crate::calls;
use crate::enums::PyEnum;
use crate::into_view::IntoView;
use crate::progress::Progress;
use crate::repr::quote;
use crate::runtime;

/// A durable record of one committed write and how far its delivery got.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct Operation {
    pub(crate) inner: openshell_sdk::Operation,
    pub(crate) client: openshell_sdk::Client,
}

client_view!(openshell_sdk::Operation => Operation);

impl Operation {
    fn wait_call(
        &self,
        timeout: Option<Seconds>,
        threshold: Option<f64>,
        progress: Option<Progress>,
    ) -> runtime::Call {
        calls::wait(
            &self.client,
            calls::Wait {
                id: self.inner.id.clone(),
                known: Some(self.inner.clone()),
                timeout: timeout.map(|Seconds(limit)| limit),
                threshold,
                progress,
                raise_failed: true,
            },
        )
    }
}

#[pymethods]
impl Operation {
    #[getter]
    fn id(&self) -> &str {
        &self.inner.id
    }

    #[getter]
    fn target_kind<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.target_kind.to_py(py)
    }

    #[getter]
    fn target(&self) -> &str {
        &self.inner.target
    }

    #[getter]
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.state.to_py(py)
    }

    #[getter]
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.outcome.to_py(py)
    }

    #[getter]
    fn error(&self) -> Option<&str> {
        self.inner.error.as_deref()
    }

    #[getter]
    fn policy_revision(&self) -> u64 {
        self.inner.policy_revision
    }

    #[getter]
    fn settings_revision(&self) -> u64 {
        self.inner.settings_revision
    }

    #[getter]
    fn global_policy_revision(&self) -> u64 {
        self.inner.global_policy_revision
    }

    #[getter]
    fn no_op(&self) -> bool {
        self.inner.no_op
    }

    #[getter]
    fn idempotency_key(&self) -> Option<&str> {
        self.inner.idempotency_key.as_deref()
    }

    #[getter]
    fn created_at(&self) -> Option<&str> {
        self.inner.created_at.as_deref()
    }

    #[getter]
    fn updated_at(&self) -> Option<&str> {
        self.inner.updated_at.as_deref()
    }

    #[getter]
    fn completed_at(&self) -> Option<&str> {
        self.inner.completed_at.as_deref()
    }

    #[getter]
    fn wait_timed_out(&self) -> bool {
        self.inner.wait_timed_out
    }

    #[getter]
    fn fleet(&self) -> Option<FleetProgress> {
        self.inner.fleet.map(FleetProgress::from)
    }

    #[getter]
    fn caller(&self) -> &str {
        &self.inner.caller
    }

    #[getter]
    fn is_terminal(&self) -> bool {
        self.inner.is_terminal()
    }

    fn threshold_met(&self, #[pyo3(from_py_with = arg::fraction)] fraction: f64) -> bool {
        self.inner.threshold_met(fraction)
    }

    /// Blocks (without the GIL) until the operation is terminal.
    #[pyo3(signature = (timeout=None, *, threshold=None, on_progress=None))]
    fn result(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<Seconds>,
        #[pyo3(from_py_with = arg::threshold)] threshold: Option<f64>,
        #[pyo3(from_py_with = arg::on_progress)] on_progress: Option<Callback>,
    ) -> PyResult<Py<PyAny>> {
        let progress = on_progress.map(|Callback(callback)| Progress::OnCaller(callback));
        runtime::block(py, self.wait_call(timeout, threshold, progress))
    }

    /// The coroutine form of `result`.
    #[pyo3(signature = (timeout=None, *, threshold=None, on_progress=None))]
    fn result_async(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = arg::timeout)] timeout: Option<Seconds>,
        #[pyo3(from_py_with = arg::threshold)] threshold: Option<f64>,
        #[pyo3(from_py_with = arg::on_progress)] on_progress: Option<Callback>,
    ) -> PyResult<Py<PyAny>> {
        let progress = on_progress.map(|Callback(callback)| Progress::OnLoop(callback));
        runtime::awaitable(py, self.wait_call(timeout, threshold, progress))
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        repr(&self.inner)
    }
}

fn repr(op: &openshell_sdk::Operation) -> String {
    let mut text = format!("Operation(id={}, state={}", quote(&op.id), op.state);
    if op.outcome != openshell_sdk::ApplyOutcome::Unspecified {
        text.push_str(&format!(", outcome={}", op.outcome));
    }
    if op.policy_revision != 0 {
        text.push_str(&format!(", policy_revision={}", op.policy_revision));
    }
    if op.settings_revision != 0 {
        text.push_str(&format!(", settings_revision={}", op.settings_revision));
    }
    if let Some(fleet) = op.fleet {
        text.push_str(&format!(
            ", fleet={}",
            FleetProgress::from(fleet).__repr__()
        ));
    }
    if op.wait_timed_out {
        text.push_str(", wait_timed_out=True");
    }
    if let Some(error) = &op.error {
        text.push_str(&format!(", error={}", quote(error)));
    }
    text.push(')');
    text
}

/// Per-target counts of a fleet operation (workspace, global or provider writes).
#[pyclass(frozen, get_all, eq, module = "openshell")]
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct FleetProgress {
    targets: u32,
    applied: u32,
    failed: u32,
    pending: u32,
    inactive: u32,
    superseded: u32,
    cancelled: u32,
}

impl From<openshell_sdk::FleetProgress> for FleetProgress {
    fn from(p: openshell_sdk::FleetProgress) -> Self {
        Self {
            targets: p.targets,
            applied: p.applied,
            failed: p.failed,
            pending: p.pending,
            inactive: p.inactive,
            superseded: p.superseded,
            cancelled: p.cancelled,
        }
    }
}

#[pymethods]
impl FleetProgress {
    fn __repr__(&self) -> String {
        format!(
            "FleetProgress(targets={}, applied={}, failed={}, pending={}, inactive={}, superseded={}, cancelled={})",
            self.targets,
            self.applied,
            self.failed,
            self.pending,
            self.inactive,
            self.superseded,
            self.cancelled
        )
    }
}

/// What `update_config` returns for a write.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct UpdateResult {
    inner: openshell_sdk::UpdateResult,
    client: openshell_sdk::Client,
}

/// A validate-only result gets a class of its own, without an operation, so
/// that `UpdateResult.operation` stays an `Operation` for every write.
impl IntoView for openshell_sdk::UpdateResult {
    fn into_view(self, py: Python<'_>, client: &openshell_sdk::Client) -> PyResult<Py<PyAny>> {
        if self.validate_only {
            Ok(Py::new(py, DryRunResult { inner: self })?.into_any())
        } else {
            Ok(Py::new(
                py,
                UpdateResult {
                    inner: self,
                    client: client.clone(),
                },
            )?
            .into_any())
        }
    }
}

fn py_bool(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

#[pymethods]
impl UpdateResult {
    #[getter]
    fn operation(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.inner.operation.clone().into_view(py, &self.client)
    }

    /// An earlier request with the same idempotency key was found; nothing was written.
    #[getter]
    fn idempotent_replay(&self) -> bool {
        self.inner.idempotent_replay
    }

    /// Static sections the sandbox policy omitted, kept from the sandbox's latest revision.
    #[getter]
    fn kept_static_sections(&self) -> Vec<String> {
        self.inner.kept_static_sections.clone()
    }

    /// Always False: a write.
    #[getter]
    fn validate_only(&self) -> bool {
        self.inner.validate_only
    }

    /// With `policy_edits`: what the gateway's merge kept or rewrote instead
    /// of doing it literally, one line each (empty for an idempotent replay).
    #[getter]
    fn merge_notes(&self) -> Vec<String> {
        self.inner.merge_notes.clone()
    }

    /// A sandbox policy written (or checked) while a global policy is set: that global
    /// policy's revision, which replaces it (the operation ends INACTIVE with
    /// SHADOWED_BY_GLOBAL); None when no global policy is set.
    #[getter]
    fn shadowed_by_global_policy(&self) -> Option<u64> {
        self.inner.shadowed_by_global_policy
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let operation = self
            .inner
            .operation
            .as_ref()
            .map_or_else(|| "None".to_owned(), repr);
        let mut text = format!(
            "UpdateResult(operation={operation}, idempotent_replay={}",
            py_bool(self.inner.idempotent_replay)
        );
        if !self.inner.kept_static_sections.is_empty() {
            text.push_str(&format!(
                ", kept_static_sections={}",
                list_repr(&self.inner.kept_static_sections)
            ));
        }
        if !self.inner.merge_notes.is_empty() {
            text.push_str(&format!(
                ", merge_notes={}",
                list_repr(&self.inner.merge_notes)
            ));
        }
        if let Some(global) = self.inner.shadowed_by_global_policy {
            text.push_str(&format!(", shadowed_by_global_policy={global}"));
        }
        text.push(')');
        text
    }
}

fn list_repr(items: &[String]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| quote(s))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// What `update_config(..., validate_only=True)` returns: nothing was written.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct DryRunResult {
    inner: openshell_sdk::UpdateResult,
}

#[pymethods]
impl DryRunResult {
    /// Always None: a dry run creates no operation.
    #[getter]
    fn operation(&self) -> Option<Operation> {
        None
    }

    /// The idempotency key matches an earlier, equal request: the write would change nothing.
    #[getter]
    fn idempotent_replay(&self) -> bool {
        self.inner.idempotent_replay
    }

    /// Static sections the sandbox policy omits that the write would keep.
    #[getter]
    fn kept_static_sections(&self) -> Vec<String> {
        self.inner.kept_static_sections.clone()
    }

    /// Always True.
    #[getter]
    fn validate_only(&self) -> bool {
        self.inner.validate_only
    }

    /// With `policy_edits`: what the merge would keep or rewrite instead of
    /// doing it literally, one line each.
    #[getter]
    fn merge_notes(&self) -> Vec<String> {
        self.inner.merge_notes.clone()
    }

    /// A sandbox policy written (or checked) while a global policy is set: that global
    /// policy's revision, which replaces it (the operation ends INACTIVE with
    /// SHADOWED_BY_GLOBAL); None when no global policy is set.
    #[getter]
    fn shadowed_by_global_policy(&self) -> Option<u64> {
        self.inner.shadowed_by_global_policy
    }

    /// How the policy differs from the target's current one; None without a policy.
    #[getter]
    fn policy_diff(&self) -> Option<PolicyDiff> {
        self.inner
            .policy_diff
            .clone()
            .map(|inner| PolicyDiff { inner })
    }

    /// The settings that would change at the target's scope.
    #[getter]
    fn setting_changes(&self) -> Vec<SettingDiff> {
        self.inner
            .setting_changes
            .iter()
            .cloned()
            .map(|inner| SettingDiff { inner })
            .collect()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let diff = self.inner.policy_diff.clone().map_or_else(
            || "None".to_owned(),
            |inner| PolicyDiff { inner }.__repr__(),
        );
        format!(
            "DryRunResult(policy_diff={diff}, setting_changes={}, kept_static_sections={}, merge_notes={}, idempotent_replay={})",
            self.inner.setting_changes.len(),
            list_repr(&self.inner.kept_static_sections),
            list_repr(&self.inner.merge_notes),
            py_bool(self.inner.idempotent_replay)
        )
    }
}

/// What a policy would change compared with the target's current policy, rule by rule.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct PolicyDiff {
    inner: openshell_sdk::PolicyDiff,
}

#[pymethods]
impl PolicyDiff {
    /// Network policies (by map key) only in the new policy.
    #[getter]
    fn added_policies(&self) -> Vec<String> {
        self.inner.added_policies.clone()
    }

    /// Network policies only in the current policy.
    #[getter]
    fn removed_policies(&self) -> Vec<String> {
        self.inner.removed_policies.clone()
    }

    /// Network policies on both sides whose content differs.
    #[getter]
    fn changed_policies(&self) -> Vec<PolicyChange> {
        self.inner
            .changed_policies
            .iter()
            .cloned()
            .map(|inner| PolicyChange { inner })
            .collect()
    }

    /// Static sections whose content would change (a first policy, or the global one).
    #[getter]
    fn changed_static_sections(&self) -> Vec<String> {
        self.inner.changed_static_sections.clone()
    }

    /// Other top-level sections that differ, e.g. ``network_middlewares``.
    #[getter]
    fn changed_sections(&self) -> Vec<String> {
        self.inner.changed_sections.clone()
    }

    /// The revision compared against; 0 when the target has no policy yet.
    #[getter]
    fn current_revision(&self) -> u64 {
        self.inner.current_revision
    }

    #[getter]
    fn current_policy_hash(&self) -> Option<String> {
        self.inner.current_policy_hash.clone()
    }

    /// The hash the stored policy would have, kept sections included.
    #[getter]
    fn new_policy_hash(&self) -> String {
        self.inner.new_policy_hash.clone()
    }

    /// True when the policy would change nothing.
    fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "PolicyDiff(added_policies={}, removed_policies={}, changed_policies={}, current_revision={})",
            list_repr(&self.inner.added_policies),
            list_repr(&self.inner.removed_policies),
            list_repr(
                &self
                    .inner
                    .changed_policies
                    .iter()
                    .map(|c| c.name.clone())
                    .collect::<Vec<_>>()
            ),
            self.inner.current_revision
        )
    }
}

/// One network policy on both sides with different content. Endpoints are named by host,
/// ports and path (``api.example.com:443/v1/**``), or ``endpoints[i]`` when they have no host.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct PolicyChange {
    inner: openshell_sdk::PolicyChange,
}

#[pymethods]
impl PolicyChange {
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    #[getter]
    fn added_endpoints(&self) -> Vec<String> {
        self.inner.added_endpoints.clone()
    }

    #[getter]
    fn removed_endpoints(&self) -> Vec<String> {
        self.inner.removed_endpoints.clone()
    }

    #[getter]
    fn changed_endpoints(&self) -> Vec<String> {
        self.inner.changed_endpoints.clone()
    }

    /// Fields other than ``endpoints`` that differ, e.g. ``binaries``.
    #[getter]
    fn changed_fields(&self) -> Vec<String> {
        self.inner.changed_fields.clone()
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        format!(
            "PolicyChange(name={}, added_endpoints={}, removed_endpoints={}, changed_endpoints={}, changed_fields={})",
            quote(&self.inner.name),
            list_repr(&self.inner.added_endpoints),
            list_repr(&self.inner.removed_endpoints),
            list_repr(&self.inner.changed_endpoints),
            list_repr(&self.inner.changed_fields)
        )
    }
}

/// One setting a validate-only update would change at the target's scope.
#[pyclass(frozen, module = "openshell")]
pub(crate) struct SettingDiff {
    inner: openshell_sdk::SettingDiff,
}

#[pymethods]
impl SettingDiff {
    #[getter]
    fn key(&self) -> &str {
        &self.inner.key
    }

    /// Stored at the scope now; None when the key is not set there.
    #[getter]
    fn old_value(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner.old_value)
    }

    /// What it would be; None when the change deletes it.
    #[getter]
    fn new_value(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner.new_value)
    }

    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_dict(py, &self.inner)
    }

    fn __repr__(&self) -> String {
        let show = |v: &Option<openshell_sdk::SettingValue>| match v {
            None => "None".to_owned(),
            Some(openshell_sdk::SettingValue::Bool(b)) => py_bool(*b).to_owned(),
            Some(openshell_sdk::SettingValue::Int(i)) => i.to_string(),
            Some(openshell_sdk::SettingValue::String(s)) => quote(s),
        };
        format!(
            "SettingDiff(key={}, old_value={}, new_value={})",
            quote(&self.inner.key),
            show(&self.inner.old_value),
            show(&self.inner.new_value)
        )
    }
}
