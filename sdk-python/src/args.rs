//! Turning Python arguments into SDK inputs: strings, counts, durations in
//! seconds, sandbox references, targets, enums and maps.
//!
//! Every public parameter converts here, through `#[pyo3(from_py_with =
//! arg::NAME)]`: pyo3's own conversions raise a bare `TypeError` whose
//! message does not name the argument (only a note added to it does), while
//! these raise the SDK's `InvalidArgument` naming it, as `field` of its one
//! violation and at the start of its message (`InvalidArgumentType`, also a
//! `TypeError`, for a value of the wrong type).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use openshell_sdk::{EditSpecs, SandboxRef, SettingChange};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyString};

use crate::errors;

/// A Python value as one SDK input. `field` names the argument (dotted or
/// indexed for an entry of a mapping or sequence) in the error.
pub(crate) trait FromArg: Sized {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self>;
}

/// The error for a value of the wrong type: `expected` says what fits.
pub(crate) fn wrong_type(value: &Bound<'_, PyAny>, field: &str, expected: &str) -> PyErr {
    let got = value
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "an unnamed type".to_owned());
    errors::wrong_type(value.py(), field, expected, &got)
}

/// One converter per public parameter name, generic over the parameter's
/// Rust type, so a signature reads `#[pyo3(from_py_with = arg::limit)] limit: u32`.
macro_rules! parameters {
    ($($name:ident),+ $(,)?) => {
        pub(crate) mod arg {
            use pyo3::prelude::*;

            $(
                pub(crate) fn $name<T: super::FromArg>(value: &Bound<'_, PyAny>) -> PyResult<T> {
                    T::from_arg(value, stringify!($name))
                }
            )+
        }
    };
}

parameters!(
    ca_cert_pem,
    clear_global_policy,
    credentials,
    delete_settings,
    endpoint,
    env,
    expected_revision,
    expires_at,
    fraction,
    id,
    idempotency_key,
    include_deleted,
    limit,
    lifecycle,
    lines,
    min_level,
    mode,
    name,
    on_progress,
    page_size,
    page_token,
    policy,
    policy_edits,
    provider,
    provider_type,
    revision,
    sandbox,
    settings,
    since_ms,
    sources,
    states,
    target,
    threshold,
    timeout,
    token,
    validate_only,
    wait_timeout,
    workspace,
);

/// `None` is the parameter's default, whatever its type.
impl<T: FromArg> FromArg for Option<T> {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        if value.is_none() {
            return Ok(None);
        }
        T::from_arg(value, field).map(Some)
    }
}

impl FromArg for String {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        match value.cast::<PyString>() {
            Ok(text) => Ok(text.to_cow()?.into_owned()),
            Err(_) => Err(wrong_type(value, field, "a str")),
        }
    }
}

impl FromArg for bool {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        match value.cast::<PyBool>() {
            Ok(flag) => Ok(flag.is_true()),
            Err(_) => Err(wrong_type(value, field, "a bool")),
        }
    }
}

/// An `int` (not a `bool`, though Python counts every bool as one).
fn integer<'a, 'py>(value: &'a Bound<'py, PyAny>, field: &str) -> PyResult<&'a Bound<'py, PyAny>> {
    if value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>() {
        Ok(value)
    } else {
        Err(wrong_type(value, field, "an int"))
    }
}

macro_rules! integers {
    ($($ty:ty => $range:literal),+ $(,)?) => {$(
        impl FromArg for $ty {
            fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
                integer(value, field)?
                    .extract()
                    .map_err(|_| errors::invalid_argument(value.py(), field, $range))
            }
        }
    )+};
}

integers!(
    u32 => "must be an int from 0 to 4294967295",
    u64 => "must be an int from 0 to 18446744073709551615",
    i64 => "must be an int from -9223372036854775808 to 9223372036854775807",
);

impl FromArg for f64 {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        if value.is_instance_of::<PyBool>()
            || !(value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyInt>())
        {
            return Err(wrong_type(value, field, "a float or int"));
        }
        value
            .extract()
            .map_err(|_| errors::invalid_argument(value.py(), field, "is too large for a float"))
    }
}

/// Seconds as a float (the Python convention, as in `time.sleep`).
pub(crate) struct Seconds(pub(crate) Duration);

impl FromArg for Seconds {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        let secs = f64::from_arg(value, field)?;
        Duration::try_from_secs_f64(secs).map(Self).map_err(|_| {
            errors::invalid_argument(
                value.py(),
                field,
                "must be a finite, non-negative number of seconds",
            )
        })
    }
}

/// `NAME`, `ID` or `WORKSPACE/NAME`, as the CLI accepts them.
impl FromArg for SandboxRef {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        match value.cast::<PyString>() {
            Ok(text) => Ok(SandboxRef::from(text.to_cow()?.as_ref())),
            Err(_) => Err(wrong_type(
                value,
                field,
                "a str (NAME, ID or WORKSPACE/NAME)",
            )),
        }
    }
}

/// A sequence, each item converted alone. A `str` or a `dict` is refused,
/// though Python would iterate it: a lone name, or a mapping, in place of a
/// list is a mistake.
impl<T: FromArg> FromArg for Vec<T> {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        items(value, field, "a list or tuple")?
            .iter()
            .enumerate()
            .map(|(index, item)| T::from_arg(item, &format!("{field}[{index}]")))
            .collect()
    }
}

/// The items of a list, tuple or other iterable that is not text.
fn items<'py>(
    value: &Bound<'py, PyAny>,
    field: &str,
    expected: &str,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if value.is_instance_of::<PyString>()
        || value.is_instance_of::<PyBytes>()
        || value.is_instance_of::<PyDict>()
    {
        return Err(wrong_type(value, field, expected));
    }
    let iterator = value
        .try_iter()
        .map_err(|_| wrong_type(value, field, expected))?;
    iterator.collect()
}

/// A `Mapping[str, str]` such as provider env values or credentials.
impl FromArg for BTreeMap<String, String> {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        mapping_items(value, field, "a mapping of str to str")?
            .into_iter()
            .map(|(key, item)| {
                let text = String::from_arg(&item, &format!("{field}.{key}"))?;
                Ok((key, text))
            })
            .collect()
    }
}

/// Setting values as the gateway's registry parses them: text, with Python
/// bools and ints spelled the way the registry expects (`true`, `42`).
pub(crate) struct Settings(pub(crate) Vec<SettingChange>);

impl FromArg for Settings {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        mapping_items(value, field, "a mapping of str to str, int or bool")?
            .into_iter()
            .map(|(key, item)| {
                let text = setting_text(&item, &format!("{field}.{key}"))?;
                Ok(SettingChange::set(key, text))
            })
            .collect::<PyResult<_>>()
            .map(Self)
    }
}

fn setting_text(value: &Bound<'_, PyAny>, field: &str) -> PyResult<String> {
    // bool first: in Python every bool is also an int.
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(if flag.is_true() { "true" } else { "false" }.to_owned());
    }
    if value.is_instance_of::<PyInt>() {
        return value.str()?.extract();
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(text.to_cow()?.into_owned());
    }
    Err(wrong_type(value, field, "a str, int or bool"))
}

/// `policy_edits`: upstream's command-line forms of incremental edits, under
/// `EditSpecs`' own field names, so every binding accepts the same text the
/// CLI does and the core checks it once.
pub(crate) struct PolicyEdits(pub(crate) EditSpecs);

const POLICY_EDIT_KEYS: &str =
    "add_endpoints, remove_endpoints, add_allow, add_deny, remove_rules, binaries, rule_name";

impl FromArg for PolicyEdits {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        let mut specs = EditSpecs::default();
        for (key, item) in mapping_items(value, field, "a mapping (PolicyEdits)")? {
            let entry = format!("{field}.{key}");
            let list = match key.as_str() {
                "add_endpoints" => &mut specs.add_endpoints,
                "remove_endpoints" => &mut specs.remove_endpoints,
                "add_allow" => &mut specs.add_allow,
                "add_deny" => &mut specs.add_deny,
                "remove_rules" => &mut specs.remove_rules,
                "binaries" => &mut specs.binaries,
                "rule_name" => {
                    specs.rule_name = Option::<String>::from_arg(&item, &entry)?;
                    continue;
                }
                _ => {
                    return Err(errors::invalid_argument(
                        value.py(),
                        &entry,
                        &format!("is not an edit; the keys are {POLICY_EDIT_KEYS}"),
                    ));
                }
            };
            *list = Vec::<String>::from_arg(&item, &entry)?;
        }
        Ok(Self(specs))
    }
}

/// `expected_revision`: a revision number, which starts at 1.
pub(crate) struct ExpectedRevision(pub(crate) u64);

impl FromArg for ExpectedRevision {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        match integer(value, field)?.extract::<u64>() {
            Ok(revision) if revision > 0 => Ok(Self(revision)),
            _ => Err(errors::invalid_argument(
                value.py(),
                field,
                "must be a revision number, from 1 to 18446744073709551615",
            )),
        }
    }
}

/// The items of any mapping, in its iteration order, with `str` keys.
fn mapping_items<'py>(
    map: &Bound<'py, PyAny>,
    field: &str,
    expected: &str,
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let Ok(items) = map.call_method0("items") else {
        return Err(wrong_type(map, field, expected));
    };
    items
        .try_iter()
        .map_err(|_| wrong_type(map, field, expected))?
        .map(|item| {
            let (key, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item
                .and_then(|pair| pair.extract())
                .map_err(|_| wrong_type(map, field, expected))?;
            let key = match key.cast::<PyString>() {
                Ok(text) => text.to_cow()?.into_owned(),
                Err(_) => return Err(wrong_type(&key, field, "str keys")),
            };
            Ok((key, value))
        })
        .collect()
}

/// A `datetime` as the SDK's `SystemTime`, through its POSIX timestamp
/// (naive datetimes are local time, as `datetime.timestamp()` has it).
impl FromArg for SystemTime {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        let is_datetime = value
            .py()
            .import("datetime")?
            .getattr("datetime")
            .and_then(|class| value.is_instance(&class))?;
        if !is_datetime {
            return Err(wrong_type(value, field, "a datetime"));
        }
        let timestamp: f64 = value.call_method0("timestamp")?.extract()?;
        let since_epoch = Duration::try_from_secs_f64(timestamp)
            .map_err(|_| errors::invalid_argument(value.py(), field, "must be after 1970-01-01"))?;
        std::time::UNIX_EPOCH
            .checked_add(since_epoch)
            .ok_or_else(|| errors::invalid_argument(value.py(), field, "is too far in the future"))
    }
}

/// PEM text as `str` or `bytes`.
pub(crate) struct Pem(pub(crate) Vec<u8>);

impl FromArg for Pem {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        if let Ok(bytes) = value.cast::<PyBytes>() {
            return Ok(Self(bytes.as_bytes().to_vec()));
        }
        match value.cast::<PyString>() {
            Ok(text) => Ok(Self(text.to_cow()?.as_bytes().to_vec())),
            Err(_) => Err(wrong_type(value, field, "a str or bytes (PEM text)")),
        }
    }
}

/// A callable, checked when given rather than when the first call fails.
pub(crate) struct Callback(pub(crate) Py<PyAny>);

impl FromArg for Callback {
    fn from_arg(value: &Bound<'_, PyAny>, field: &str) -> PyResult<Self> {
        if value.is_callable() {
            Ok(Self(value.clone().unbind()))
        } else {
            Err(wrong_type(value, field, "a callable"))
        }
    }
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
