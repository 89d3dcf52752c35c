//! Turning Python arguments into SDK inputs: durations in seconds, sandbox
//! references, targets and setting maps.

use std::collections::BTreeMap;
use std::time::Duration;

use openshell_sdk::{SandboxRef, SettingChange};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

use crate::errors;
use crate::target::Target;

/// Seconds as a float (the Python convention, as in `time.sleep`).
pub(crate) fn seconds(
    py: Python<'_>,
    value: Option<f64>,
    param: &str,
) -> PyResult<Option<Duration>> {
    value
        .map(|secs| {
            Duration::try_from_secs_f64(secs).map_err(|_| {
                errors::invalid_argument(
                    py,
                    param,
                    "must be a finite, non-negative number of seconds",
                )
            })
        })
        .transpose()
}

/// `NAME`, `ID` or `WORKSPACE/NAME`, as the CLI accepts them.
pub(crate) fn sandbox_ref(text: &str) -> SandboxRef {
    SandboxRef::from(text)
}

/// Which log lines to read or follow; a negative `since_ms` names no time.
pub(crate) fn log_query(
    py: Python<'_>,
    lines: u32,
    since_ms: i64,
    sources: Option<Vec<String>>,
    min_level: Option<String>,
) -> PyResult<openshell_sdk::LogQuery> {
    if since_ms < 0 {
        return Err(errors::invalid_argument(
            py,
            "since_ms",
            "must be milliseconds since the epoch (0: no filter)",
        ));
    }
    Ok(openshell_sdk::LogQuery {
        lines,
        since_ms,
        sources: sources.unwrap_or_default(),
        min_level,
    })
}

/// A `Target`, or a string naming a sandbox.
pub(crate) fn target(value: &Bound<'_, PyAny>) -> PyResult<openshell_sdk::Target> {
    if let Ok(target) = value.cast::<Target>() {
        return Ok(target.get().inner.clone());
    }
    if let Ok(text) = value.extract::<String>() {
        return Ok(openshell_sdk::Target::Sandbox(sandbox_ref(&text)));
    }
    Err(PyTypeError::new_err(
        "target must be a Target (Target.sandbox(...), Target.workspace(...), Target.global_()) or a sandbox name",
    ))
}

/// Setting values as the gateway's registry parses them: text, with Python
/// bools and ints spelled the way the registry expects (`true`, `42`).
pub(crate) fn settings(map: &Bound<'_, PyAny>) -> PyResult<Vec<SettingChange>> {
    mapping_items(map, "settings")?
        .into_iter()
        .map(|(key, value)| Ok(SettingChange::set(key, setting_text(&value)?)))
        .collect()
}

fn setting_text(value: &Bound<'_, PyAny>) -> PyResult<String> {
    // bool first: in Python every bool is also an int.
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(if flag.is_true() { "true" } else { "false" }.to_owned());
    }
    if value.is_instance_of::<PyInt>() {
        return value.str()?.extract();
    }
    if value.is_instance_of::<PyString>() {
        return value.extract();
    }
    Err(PyTypeError::new_err(format!(
        "setting values must be str, int or bool, not {}",
        value.get_type().name()?
    )))
}

/// A `Mapping[str, str]` such as provider env values or credentials.
pub(crate) fn string_map(
    map: Option<&Bound<'_, PyAny>>,
    param: &str,
) -> PyResult<BTreeMap<String, String>> {
    let Some(map) = map else {
        return Ok(BTreeMap::new());
    };
    mapping_items(map, param)?
        .into_iter()
        .map(|(key, value)| {
            let value = value
                .extract::<String>()
                .map_err(|_| PyTypeError::new_err(format!("{param}[{key:?}] must be str")))?;
            Ok((key, value))
        })
        .collect()
}

/// The items of any mapping, in its iteration order, with `str` keys.
fn mapping_items<'py>(
    map: &Bound<'py, PyAny>,
    param: &str,
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let items = map
        .call_method0("items")
        .map_err(|_| PyTypeError::new_err(format!("{param} must be a mapping")))?;
    items
        .try_iter()?
        .map(|item| {
            let (key, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
            let key = key
                .extract::<String>()
                .map_err(|_| PyTypeError::new_err(format!("{param} keys must be str")))?;
            Ok((key, value))
        })
        .collect()
}

/// A `datetime` as the SDK's `SystemTime`, through its POSIX timestamp
/// (naive datetimes are local time, as `datetime.timestamp()` has it).
pub(crate) fn system_time(
    py: Python<'_>,
    value: Option<&Bound<'_, PyAny>>,
    param: &str,
) -> PyResult<Option<std::time::SystemTime>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let timestamp: f64 = value
        .call_method0("timestamp")
        .and_then(|t| t.extract())
        .map_err(|_| PyTypeError::new_err(format!("{param} must be a datetime")))?;
    let since_epoch = Duration::try_from_secs_f64(timestamp)
        .map_err(|_| errors::invalid_argument(py, param, "must be after 1970-01-01"))?;
    std::time::UNIX_EPOCH
        .checked_add(since_epoch)
        .map(Some)
        .ok_or_else(|| errors::invalid_argument(py, param, "is too far in the future"))
}
