//! Each SDK call as a `Call`: a future that runs the Rust client and ends in
//! the Python view of its answer, or the Python exception for its error.
//! Both clients run the same `Call`s, blocking or as coroutines.

use std::future::Future;
use std::time::Duration;

use openshell_sdk::{
    LogQuery, OperationState, ProviderSpec, ProviderUpdate, SandboxLifecycle, SandboxRef, SdkError,
    Target, UpdateConfig,
};
use pyo3::prelude::*;

use crate::errors;
use crate::into_view::IntoView;
use crate::progress::{self, Progress};
use crate::runtime::Call;

/// Runs `request` with a clone of `client` and converts its outcome.
fn call<T, F>(
    client: &openshell_sdk::Client,
    request: impl FnOnce(openshell_sdk::Client) -> F,
) -> Call
where
    T: IntoView + Send + 'static,
    F: Future<Output = Result<T, SdkError>> + Send + 'static,
{
    let client = client.clone();
    let pending = request(client.clone());
    Box::pin(async move {
        let result = pending.await;
        Python::attach(|py| match result {
            Ok(value) => value.into_view(py, &client),
            Err(err) => Err(errors::to_py(py, err, &client)),
        })
    })
}

pub(crate) fn create_sandbox(
    client: &openshell_sdk::Client,
    name: String,
    workspace: Option<String>,
    policy: Option<String>,
) -> Call {
    call(client, move |c| async move {
        c.create_sandbox(&name, workspace.as_deref(), policy.as_deref())
            .await
    })
}

pub(crate) fn get_sandbox(client: &openshell_sdk::Client, sandbox: SandboxRef) -> Call {
    call(
        client,
        move |c| async move { c.get_sandbox(&sandbox).await },
    )
}

pub(crate) fn list_sandboxes(
    client: &openshell_sdk::Client,
    workspace: Option<String>,
    include_deleted: bool,
) -> Call {
    call(client, move |c| async move {
        c.list_sandboxes(workspace.as_deref(), include_deleted)
            .await
    })
}

pub(crate) fn delete_sandbox(client: &openshell_sdk::Client, sandbox: SandboxRef) -> Call {
    call(
        client,
        move |c| async move { c.delete_sandbox(&sandbox).await },
    )
}

pub(crate) fn set_sandbox_lifecycle(
    client: &openshell_sdk::Client,
    sandbox: SandboxRef,
    lifecycle: SandboxLifecycle,
) -> Call {
    call(client, move |c| async move {
        c.set_sandbox_lifecycle(&sandbox, lifecycle).await
    })
}

pub(crate) fn update_provider(client: &openshell_sdk::Client, update: ProviderUpdate) -> Call {
    call(
        client,
        move |c| async move { c.update_provider(&update).await },
    )
}

pub(crate) fn delete_provider(
    client: &openshell_sdk::Client,
    provider: String,
    workspace: Option<String>,
) -> Call {
    call(client, move |c| async move {
        c.delete_provider(&provider, workspace.as_deref()).await
    })
}

pub(crate) fn get_provider(
    client: &openshell_sdk::Client,
    provider: String,
    workspace: Option<String>,
) -> Call {
    call(client, move |c| async move {
        c.get_provider(&provider, workspace.as_deref()).await
    })
}

pub(crate) fn list_providers(client: &openshell_sdk::Client, workspace: Option<String>) -> Call {
    call(client, move |c| async move {
        c.list_providers(workspace.as_deref()).await
    })
}

pub(crate) fn detach_provider(
    client: &openshell_sdk::Client,
    sandbox: SandboxRef,
    provider: String,
) -> Call {
    call(client, move |c| async move {
        c.detach_provider(&sandbox, &provider).await
    })
}

pub(crate) fn get_sandbox_policy(
    client: &openshell_sdk::Client,
    sandbox: SandboxRef,
    revision: Option<u64>,
) -> Call {
    call(client, move |c| async move {
        c.get_sandbox_policy(&sandbox, revision).await
    })
}

pub(crate) fn list_sandbox_policies(
    client: &openshell_sdk::Client,
    sandbox: SandboxRef,
    limit: u32,
) -> Call {
    call(client, move |c| async move {
        c.list_sandbox_policies(&sandbox, limit).await
    })
}

pub(crate) fn get_global_policy(client: &openshell_sdk::Client, revision: Option<u64>) -> Call {
    call(client, move |c| async move {
        c.get_global_policy(revision).await
    })
}

pub(crate) fn list_global_policies(client: &openshell_sdk::Client, limit: u32) -> Call {
    call(client, move |c| async move {
        c.list_global_policies(limit).await
    })
}

pub(crate) fn get_settings(client: &openshell_sdk::Client, target: Target) -> Call {
    call(
        client,
        move |c| async move { c.get_settings(&target).await },
    )
}

pub(crate) fn list_setting_definitions(client: &openshell_sdk::Client) -> Call {
    call(
        client,
        |c| async move { c.list_setting_definitions().await },
    )
}

pub(crate) fn create_provider(client: &openshell_sdk::Client, spec: ProviderSpec) -> Call {
    call(
        client,
        move |c| async move { c.create_provider(&spec).await },
    )
}

pub(crate) fn attach_provider(
    client: &openshell_sdk::Client,
    sandbox: SandboxRef,
    provider: String,
) -> Call {
    call(client, move |c| async move {
        c.attach_provider(&sandbox, &provider).await
    })
}

pub(crate) fn update_config(client: &openshell_sdk::Client, update: UpdateConfig) -> Call {
    call(
        client,
        move |c| async move { c.update_config(update).await },
    )
}

pub(crate) fn get_operation(client: &openshell_sdk::Client, id: String) -> Call {
    call(client, move |c| async move { c.get_operation(&id).await })
}

pub(crate) fn list_operations(
    client: &openshell_sdk::Client,
    sandbox: Option<SandboxRef>,
    states: Vec<OperationState>,
    limit: u32,
) -> Call {
    call(client, move |c| async move {
        c.list_operations(sandbox.as_ref(), &states, limit).await
    })
}

pub(crate) fn list_operation_targets(
    client: &openshell_sdk::Client,
    id: String,
    states: Vec<OperationState>,
    page_size: u32,
    page_token: Option<String>,
) -> Call {
    call(client, move |c| async move {
        c.list_operation_targets(&id, &states, page_size, page_token.as_deref())
            .await
    })
}

pub(crate) fn list_sessions(client: &openshell_sdk::Client) -> Call {
    call(client, |c| async move { c.list_sessions().await })
}

pub(crate) fn inspect_session(client: &openshell_sdk::Client, sandbox: SandboxRef) -> Call {
    call(
        client,
        move |c| async move { c.inspect_session(&sandbox).await },
    )
}

pub(crate) fn get_sandbox_logs(
    client: &openshell_sdk::Client,
    sandbox: SandboxRef,
    query: LogQuery,
) -> Call {
    call(client, move |c| async move {
        c.get_sandbox_logs(&sandbox, &query).await
    })
}

pub(crate) fn gateway_info(client: &openshell_sdk::Client) -> Call {
    call(client, |c| async move { c.gateway_info().await })
}

/// A wait on one operation, from a client or from an `Operation`.
pub(crate) struct Wait {
    pub(crate) id: String,
    /// The operation as last seen; when already terminal there is nothing
    /// to wait for and the gateway is not asked again.
    pub(crate) known: Option<openshell_sdk::Operation>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) threshold: Option<f64>,
    pub(crate) progress: Option<Progress>,
    /// `Operation.result()` raises `OperationFailed` for a FAILED operation;
    /// `wait_for_apply` returns it like any other final state.
    pub(crate) raise_failed: bool,
}

pub(crate) fn wait(client: &openshell_sdk::Client, wait: Wait) -> Call {
    let client = client.clone();
    Box::pin(async move {
        let operation = match wait.known.filter(openshell_sdk::Operation::is_terminal) {
            Some(done) => {
                if let Some(progress) = &wait.progress {
                    progress.deliver(done.clone(), &client).await?;
                }
                done
            }
            None => {
                progress::follow(
                    &client,
                    &wait.id,
                    wait.timeout,
                    wait.threshold,
                    wait.progress.as_ref(),
                )
                .await?
            }
        };
        Python::attach(|py| {
            if wait.raise_failed && operation.state == OperationState::Failed {
                return Err(errors::operation_failed(py, operation, &client));
            }
            operation.into_view(py, &client)
        })
    })
}
