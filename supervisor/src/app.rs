//! The binary's wiring: a [`FileApplier`], a [`Supervisor`] (or standalone mode) and the
//! workload, started once the first configuration is active.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::args::Args;
use crate::error::SupervisorError;
use crate::file_applier::{FileApplier, FileApplierConfig};
use crate::identity::Identity;
use crate::local_policy::{PolicyFileWatcher, WatchEvent};
use crate::logs::LogBuffer;
use crate::middleware::{
    MiddlewareRegistry, Readiness, ReadinessConfig, TcpProbe, await_startable, log_readiness,
    required_by,
};
use crate::options::SupervisorOptions;
use crate::signals::{Signals, signal_exit_code};
use crate::standalone::{self, STANDALONE_SANDBOX_ID, StandaloneOptions, log_invalid};
use crate::supervisor::Supervisor;
use crate::workload::{Workload, supervise};

/// How long the supervisor waits for its session to wind down after the workload exited.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Runs the supervisor the command line describes; returns the process exit code.
pub async fn run(args: Args) -> Result<i32, SupervisorError> {
    let registry = MiddlewareRegistry::new(args.middlewares.clone())
        .map_err(|err| SupervisorError::Usage(err.to_string()))?;
    let mut signals = Signals::install().map_err(SupervisorError::Signals)?;
    // A name becomes the id here, before the state directory and the session use it.
    let sandbox_id = tokio::select! {
        resolved = crate::sandbox_ref::sandbox_id_from_args(&args) => resolved?,
        signal = signals.recv() => return Ok(signal_exit_code(signal)),
    }
    .unwrap_or_else(|| STANDALONE_SANDBOX_ID.to_string());
    let mut applier_config = FileApplierConfig::new(&args.state_dir, &sandbox_id);
    applier_config.on_apply = args.on_apply.clone();
    applier_config.hook_timeout = args.on_apply_timeout;
    applier_config.reload_signal = args.reload_signal;
    applier_config.write_fault =
        crate::WriteFault::delay_from_env().map_err(SupervisorError::Usage)?;
    let applier =
        Arc::new(
            FileApplier::new(applier_config).map_err(|source| SupervisorError::StateDir {
                path: args.state_dir.clone(),
                source,
            })?,
        );
    if args.standalone {
        let Some(policy_file) = args.policy_file.clone() else {
            return Err(SupervisorError::Usage(
                "--standalone needs --policy-file".into(),
            ));
        };
        let options = StandaloneOptions {
            policy_file,
            sandbox_id,
            watch_interval: args.watch_interval,
            command: args.command.clone(),
            launch: args.launch.clone(),
            apply_retry_backoff: crate::backoff::BackoffConfig::apply_retry(),
            middlewares: registry,
            readiness: readiness_config(&args),
        };
        return standalone::run(options, applier, &mut signals).await;
    }
    run_gateway(args, sandbox_id, applier, registry, &mut signals).await
}

async fn run_gateway(
    args: Args,
    sandbox_id: String,
    applier: Arc<FileApplier>,
    registry: MiddlewareRegistry,
    signals: &mut Signals,
) -> Result<i32, SupervisorError> {
    let (Some(gateway), Some(credential_file)) =
        (args.gateway.clone(), args.credential_file.clone())
    else {
        return Err(SupervisorError::Usage(
            "--gateway, --sandbox and --credential-file are required without --standalone".into(),
        ));
    };
    let identity = Identity::from_credential_file(sandbox_id, &credential_file)?;
    let mut options = SupervisorOptions::new(gateway, identity);
    options.protocol_revision = args.protocol_revision;
    options.config_apply = !args.no_config_apply;
    options.poll_interval = args.poll_interval;
    options.heartbeat_interval = args.heartbeat_interval;
    options.logs = Some(LogBuffer::global().clone());
    if let Some(path) = &args.ca_file {
        options.ca_pem = Some(
            std::fs::read(path).map_err(|source| SupervisorError::CaFile {
                path: path.clone(),
                source,
            })?,
        );
    }
    if let Some(path) = &args.image_policy {
        options.image_policy = Some(std::fs::read_to_string(path).map_err(|source| {
            SupervisorError::ImagePolicyFile {
                path: path.clone(),
                source,
            }
        })?);
    }
    let mut watcher = args.policy_file.as_ref().map(PolicyFileWatcher::new);
    if let Some(watcher) = watcher.as_mut() {
        options.local_policy = Some(match watcher.check() {
            WatchEvent::Changed(result) => result?,
            WatchEvent::Unreadable(err) => return Err(err.into()),
            WatchEvent::Unchanged => crate::LocalPolicy::load(watcher.path())?,
        });
    }

    let supervisor = Supervisor::new(options, applier.clone());
    let mut status = supervisor.status();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let runner = supervisor.clone();
    let mut task = tokio::spawn(async move {
        runner
            .run(async {
                let _ = stop_rx.await;
            })
            .await
    });

    info!("waiting for the first configuration before starting the workload");
    let active = tokio::select! {
        ready = status.wait_for(|s| s.active.is_some()) => match ready {
            Ok(s) => s.active.clone(),
            Err(_) => None,
        },
        signal = signals.recv() => {
            info!(signal = %signal, "stopped before the workload started");
            let _ = stop_tx.send(());
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await;
            return Ok(signal_exit_code(signal));
        }
        joined = &mut task => return Err(session_end(joined)),
    };
    if active.is_none() {
        return Err(session_end(task.await));
    }
    let readiness_config = readiness_config(&args);
    tokio::select! {
        _ = wait_for_middleware(&supervisor, &registry, &readiness_config) => {}
        signal = signals.recv() => {
            info!(signal = %signal, "stopped before the workload started");
            let _ = stop_tx.send(());
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut task).await;
            return Ok(signal_exit_code(signal));
        }
        joined = &mut task => return Err(session_end(joined)),
    }
    // Subscribe before reading the configuration to start with: a change after this point is
    // signalled, one before it is already in what the workload starts with.
    let reload = applier.subscribe();
    let Some(active) = status.borrow().active.clone() else {
        return Err(session_end(task.await));
    };
    let workload = Workload::spawn(
        &args.command,
        &active.provider_values(),
        &applier.state_env(),
        &args.launch,
        Some(LogBuffer::global()),
    )
    .await?;
    drop(active);
    let watch = watcher.map(|w| {
        tokio::spawn(watch_local_policy(
            w,
            supervisor.clone(),
            args.watch_interval,
        ))
    });

    let mut fatal = None;
    let code = {
        let stop = async {
            match (&mut task).await {
                Ok(Ok(())) => std::future::pending::<()>().await,
                joined => fatal = Some(session_end(joined)),
            }
        };
        supervise(workload, reload, signals, stop, || {
            supervisor.begin_shutdown()
        })
        .await
    };
    if let Some(watch) = watch {
        watch.abort();
    }
    if let Some(err) = fatal {
        return Err(err);
    }
    let _ = stop_tx.send(());
    if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
        .await
        .is_err()
    {
        warn!("session did not wind down in time");
        task.abort();
    }
    Ok(code)
}

fn readiness_config(args: &Args) -> ReadinessConfig {
    ReadinessConfig {
        deadline: args.middleware_ready_timeout,
        ..ReadinessConfig::default()
    }
}

/// Waits until the remote middleware of the active policy lets the workload start, recording
/// each outcome in the status (which an accepted session reports to the gateway).
async fn wait_for_middleware(
    supervisor: &Supervisor,
    registry: &MiddlewareRegistry,
    config: &ReadinessConfig,
) -> Readiness {
    let status = supervisor.status();
    // Asked before every check: a policy update while blocked may drop the middleware.
    let required = || {
        status
            .borrow()
            .active
            .as_ref()
            .map(|active| required_by(active, registry))
            .unwrap_or_default()
    };
    await_startable(required, &TcpProbe, config, |readiness| {
        log_readiness(readiness);
        supervisor.set_readiness(readiness.clone());
    })
    .await
}

/// Turns the supervisor task's end into the error the binary exits with.
fn session_end(
    joined: Result<Result<(), SupervisorError>, tokio::task::JoinError>,
) -> SupervisorError {
    match joined {
        Ok(Err(err)) => err,
        Ok(Ok(())) => SupervisorError::Rejected {
            reason: "the session ended".into(),
        },
        Err(join) => SupervisorError::Rejected {
            reason: format!("the session task failed: {join}"),
        },
    }
}

/// With a gateway, edits to the local policy file are re-applied too (the gateway's settings
/// and provider environment stay as they are).
async fn watch_local_policy(
    mut watcher: PolicyFileWatcher,
    supervisor: Supervisor,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        match watcher.check() {
            WatchEvent::Unchanged | WatchEvent::Unreadable(_) => {}
            WatchEvent::Changed(Ok(policy)) => {
                let hash = policy.hash().to_string();
                match supervisor.set_local_policy(policy).await {
                    Some(Ok(())) | None => {
                        info!(policy_hash = %hash, "local policy file changed; applied")
                    }
                    Some(Err(err)) => {
                        warn!(reason = %err, "local policy file changed but did not apply; keeping the last-known-good")
                    }
                }
            }
            WatchEvent::Changed(Err(err)) => log_invalid(&err),
        }
    }
}
