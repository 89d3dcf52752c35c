//! The workload process: started once the first configuration is active, given the provider
//! environment, signalled on live changes, sent the supervisor's termination signals, and its
//! exit code becomes the supervisor's. The supervisor binary starts it through a shim that
//! asks the kernel to kill it if the supervisor dies (see [`run_shim`]), so a supervisor
//! that is SIGKILLed leaves no workload behind.

use std::ffi::OsString;
use std::future::Future;
use std::io::IsTerminal;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgid, getpgrp, getppid, tcgetpgrp, tcsetpgrp};
use openshell_core::ProviderValue;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::signal::unix::SignalKind;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::SupervisorError;
use crate::logs::{LogBuffer, LogLine};
use crate::reload::ReloadReceiver;
use crate::sanitize::Masker;
use crate::signals::Signals;

/// How long the workload gets between SIGTERM and SIGKILL when the supervisor must stop it.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(10);

/// First argument that makes the supervisor binary act as the workload shim.
pub const SHIM_ARG: &str = "__openshell-workload-shim";

/// Exit code of a shim that could not start the workload, as a shell's for a command it
/// cannot run.
const CANNOT_RUN: i32 = 127;

/// How long the supervisor waits for the shim to become the workload.
const SHIM_EXEC_DEADLINE: Duration = Duration::from_secs(10);

/// How the workload process is started.
#[derive(Debug, Clone, Default)]
pub enum Launch {
    /// As a child of the supervisor; it outlives a supervisor that is killed, and starts with
    /// the supervisor's signal dispositions and mask (what the library's tests need).
    #[default]
    Direct,
    /// Through this executable (the supervisor binary) run with [`SHIM_ARG`]: it sets the
    /// parent-death signal and default signal handling, then becomes the workload.
    Shim(PathBuf),
}

/// The shim's side of [`Launch::Shim`]: `args` are the supervisor's pid and the workload
/// command. Asks for SIGKILL when the parent dies, then replaces itself with the workload;
/// the signal setting survives the exec. Returns only if that fails, with the exit code.
///
/// The kernel sends the signal when the thread that started the shim ends; the supervisor
/// starts it from a runtime thread, which lives as long as the process.
pub fn run_shim(args: &[OsString]) -> i32 {
    let Some((parent, command)) = args.split_first() else {
        shim_error(&format!(
            "error: {SHIM_ARG} needs the supervisor's pid and a command"
        ));
        return CANNOT_RUN;
    };
    let Some((program, program_args)) = command.split_first() else {
        shim_error(&format!("error: {SHIM_ARG} needs a command"));
        return CANNOT_RUN;
    };
    if let Err(err) = default_signal_handling(parent) {
        shim_error(&format!(
            "error: cannot give the workload the default signal handling: {err}"
        ));
        return CANNOT_RUN;
    }
    if let Err(err) = prctl::set_pdeathsig(Signal::SIGKILL) {
        shim_error(&format!(
            "error: cannot tie the workload to the supervisor's life: {err}"
        ));
        return CANNOT_RUN;
    }
    // The supervisor may have died before the setting took effect.
    if parent.to_str().and_then(|p| p.parse::<i32>().ok()) != Some(getppid().as_raw()) {
        shim_error("error: the supervisor is gone; not starting the workload");
        return CANNOT_RUN;
    }
    let err = std::process::Command::new(program)
        .args(program_args)
        .exec();
    shim_error(&format!(
        "error: cannot start workload {}: {err}",
        Path::new(program).display()
    ));
    CANNOT_RUN
}

/// Signals whose default the workload relies on (its reload signal among them). One the
/// supervisor was started with ignored would be passed on through exec: under `nohup`
/// SIGHUP is ignored, and a shell ignores SIGINT and SIGQUIT for what it starts in the
/// background; the workload would then miss its reloads and its stop without a word.
const DEFAULT_SIGNALS: [SignalKind; 8] = [
    SignalKind::hangup(),
    SignalKind::interrupt(),
    SignalKind::quit(),
    SignalKind::terminate(),
    SignalKind::user_defined1(),
    SignalKind::user_defined2(),
    SignalKind::alarm(),
    SignalKind::child(),
];

/// Prepares the shim's signal state for the workload it becomes: [`DEFAULT_SIGNALS`] at
/// their default, the terminal handed over when the supervisor had it, and no signal
/// blocked (a blocked signal stays blocked through exec too).
fn default_signal_handling(parent: &std::ffi::OsStr) -> std::io::Result<()> {
    // Exec resets a caught signal to its default but keeps an ignored one ignored. Catching
    // each one here (the handler never runs: the exec follows at once) is how the workload
    // gets the defaults without code that would need `unsafe`.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let _entered = runtime.enter();
    for kind in DEFAULT_SIGNALS {
        drop(tokio::signal::unix::signal(kind)?);
    }
    if let Some(supervisor) = parent.to_str().and_then(|p| p.parse::<i32>().ok()) {
        take_terminal(Pid::from_raw(supervisor));
    }
    SigSet::empty()
        .thread_set_mask()
        .map_err(std::io::Error::from)
}

/// The workload leads a process group of its own; a terminal the supervisor had in the
/// foreground goes to that group, or the workload would be stopped on reading it (and the
/// keyboard's signals would reach the supervisor instead). A supervisor in the background
/// keeps it where it is.
fn take_terminal(supervisor: Pid) {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return;
    }
    let (Ok(foreground), Ok(supervisor_group)) = (tcgetpgrp(&stdin), getpgid(Some(supervisor)))
    else {
        return;
    };
    if foreground != supervisor_group {
        return;
    }
    // Taking the terminal from a background group raises SIGTTOU, which would stop the shim;
    // the mask is cleared after.
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    if ttou.thread_block().is_ok() {
        let _ = tcsetpgrp(&stdin, getpgrp());
    }
}

/// Writes one line to stderr in a single write: the supervisor logs to the same pipe at the
/// same moment, and `eprintln!` may split a formatted line over several writes, which its lines
/// can then land between.
fn shim_error(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("{line}\n").as_bytes());
}

/// Longest stretch of output without a newline that still makes one line; longer output is
/// cut into several lines.
const MAX_CAPTURED_LINE: usize = 16 * 1024;
/// How long the last output may take to drain after the workload exited (a process it left
/// behind may hold the pipe open).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// A running workload.
pub struct Workload {
    child: Child,
    pid: Option<Pid>,
    program: String,
    /// The tasks copying captured stdout and stderr.
    pumps: Vec<tokio::task::JoinHandle<()>>,
}

/// Copies one output stream of the workload to the supervisor's own (byte for byte, as it
/// comes) and, line by line, masked, into `buffer`.
async fn pump<R, W>(mut from: R, mut to: W, stream: &'static str, buffer: LogBuffer)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut chunk = vec![0u8; 8192];
    let mut pending: Vec<u8> = Vec::new();
    let emit = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        let text = text.strip_suffix('\r').unwrap_or(&text);
        buffer.push(LogLine::workload(stream, text.to_string()));
    };
    let mut local_open = true;
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let bytes = &chunk[..n];
        // Nothing is lost locally: the output goes on to the supervisor's stdout or stderr
        // even when the gateway never sees it. A closed local stream stops only this copy.
        if local_open && (to.write_all(bytes).await.is_err() || to.flush().await.is_err()) {
            local_open = false;
        }
        pending.extend_from_slice(bytes);
        // Asked for every chunk: a value learnt meanwhile (a rotation) counts at once.
        take_lines(&mut pending, &buffer.masker(), emit);
    }
    if !pending.is_empty() {
        emit(&buffer.masker().mask_bytes(&pending));
    }
}

/// Hands the complete lines of `pending` to `emit`, masked, and cuts a line longer than
/// [`MAX_CAPTURED_LINE`] into several; what is left is the start of a line still to come.
///
/// Each line is masked whole, and a value spanning several lines is masked line by line (see
/// [`Masker`]). An overlong line is cut only once it runs at least the longest secret past
/// the cut: masked then, no secret can start before the cut and end in output still to come,
/// so the part before the cut holds neither a secret nor the first part of one.
fn take_lines(pending: &mut Vec<u8>, masker: &Masker, emit: impl Fn(&[u8])) {
    while let Some(end) = pending.iter().position(|b| *b == b'\n') {
        emit(&masker.mask_bytes(&pending[..end]));
        pending.drain(..=end);
    }
    let hold = masker.longest();
    while pending.len() >= MAX_CAPTURED_LINE + hold {
        let masked = masker.mask_bytes(pending).into_owned();
        if masked.len() < MAX_CAPTURED_LINE + hold {
            // Masking shortened it below the bound; more output decides.
            *pending = masked;
            return;
        }
        let cut = char_boundary_at_or_before(&masked, MAX_CAPTURED_LINE);
        emit(&masked[..cut]);
        *pending = masked[cut..].to_vec();
    }
}

/// The last position at most `at` that does not split a UTF-8 character (a cut there keeps
/// both lines readable), or `at` when the bytes are not UTF-8 there.
fn char_boundary_at_or_before(bytes: &[u8], at: usize) -> usize {
    let is_continuation = |b: u8| b & 0xC0 == 0x80;
    (at.saturating_sub(3)..=at)
        .rev()
        .find(|&i| i > 0 && bytes.get(i).is_none_or(|b| !is_continuation(*b)))
        .unwrap_or(at)
}

impl Workload {
    /// Starts `command` with the inherited environment plus the provider values and the
    /// state-directory variables (which win over a provider value of the same name), as the
    /// leader of a process group of its own: what it starts stays in that group, and
    /// termination signals go to the whole group.
    ///
    /// With `capture`, its stdout and stderr are copied line by line into that buffer (and
    /// still reach the supervisor's own stdout and stderr), masked with the provider values.
    pub async fn spawn(
        command: &[String],
        provider_env: &[(String, ProviderValue)],
        state_env: &[(&'static str, String)],
        launch: &Launch,
        capture: Option<&LogBuffer>,
    ) -> Result<Self, SupervisorError> {
        let Some((program, args)) = command.split_first() else {
            return Err(SupervisorError::Usage(
                "no workload command given; add `-- CMD ARGS`".into(),
            ));
        };
        let mut cmd = match launch {
            Launch::Direct => Command::new(program),
            Launch::Shim(shim) => {
                let mut cmd = Command::new(shim);
                cmd.arg(SHIM_ARG)
                    .arg(std::process::id().to_string())
                    .arg(program);
                cmd
            }
        };
        cmd.args(args).process_group(0);
        for (name, value) in provider_env {
            cmd.env(name, value.expose());
        }
        for (name, value) in state_env {
            cmd.env(name, value);
        }
        if let Some(buffer) = capture {
            // Before the start: the workload may print a value at once.
            buffer.learn_secrets(provider_env.iter().map(|(_, value)| value.expose()));
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|source| SupervisorError::Workload {
            program: program.clone(),
            source,
        })?;
        let mut pumps = Vec::new();
        if let Some(buffer) = capture {
            if let Some(out) = child.stdout.take() {
                pumps.push(tokio::spawn(pump(
                    out,
                    tokio::io::stdout(),
                    "stdout",
                    buffer.clone(),
                )));
            }
            if let Some(err) = child.stderr.take() {
                pumps.push(tokio::spawn(pump(
                    err,
                    tokio::io::stderr(),
                    "stderr",
                    buffer.clone(),
                )));
            }
        }
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        if let (Launch::Shim(shim), Some(pid)) = (launch, pid) {
            wait_for_exec(&mut child, pid, shim).await;
        }
        info!(
            program = %program,
            pid = pid.map(|p| p.as_raw()),
            provider_values = provider_env.len(),
            "workload started"
        );
        Ok(Self {
            child,
            pid,
            program: program.clone(),
            pumps,
        })
    }

    pub fn pid(&self) -> Option<Pid> {
        self.pid
    }

    /// Sends `signal` to the workload's main process only (a reload: the helpers it started
    /// may not expect one, and a signal's default is often to end the process). A workload
    /// that already exited is not an error worth more than a log.
    pub fn signal(&self, signal: Signal) {
        let Some(pid) = self.pid else { return };
        if let Err(err) = kill(pid, signal) {
            warn!(signal = %signal, error = %err, "signalling the workload failed");
        }
    }

    /// Sends `signal` to every process of the workload's group; the main process may be gone
    /// already while what it started is not.
    pub fn signal_group(&self, signal: Signal) {
        let Some(pgid) = self.pid else { return };
        match killpg(pgid, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(err) => {
                warn!(signal = %signal, error = %err, "signalling the workload's process group failed");
            }
        }
    }

    /// Waits for the main process; the exit code.
    async fn wait_main(&mut self) -> i32 {
        match self.child.wait().await {
            Ok(status) => exit_code(status),
            Err(err) => {
                warn!(error = %err, program = %self.program, "waiting for the workload failed");
                1
            }
        }
    }

    /// After the main process exited: ends what it left in its group (SIGTERM unless sent
    /// already, SIGKILL at `kill_at`), so nothing holding the provider environment outlives
    /// the supervisor, then reads the last output.
    async fn finish(&mut self, kill_at: Option<Instant>) {
        if let Some(pgid) = self.pid {
            end_group(pgid, kill_at).await;
        }
        // The last lines are often the ones that say why it exited.
        for pump in self.pumps.drain(..) {
            let _ = tokio::time::timeout(DRAIN_GRACE, pump).await;
        }
    }

    /// Waits for the main process and then for the rest of its group; the exit code.
    #[cfg(test)]
    async fn wait(&mut self) -> i32 {
        let code = self.wait_main().await;
        self.finish(None).await;
        code
    }

    /// SIGTERM to the group, SIGKILL after `grace`; returns the main process's exit code once
    /// the group is gone.
    async fn terminate(&mut self, grace: Duration) -> i32 {
        self.signal_group(Signal::SIGTERM);
        let kill_at = Instant::now() + grace;
        let code = match tokio::time::timeout_at(kill_at, self.wait_main()).await {
            Ok(code) => code,
            Err(_) => {
                warn!("workload ignored SIGTERM; killing its process group");
                self.signal_group(Signal::SIGKILL);
                self.wait_main().await
            }
        };
        self.finish(Some(kill_at)).await;
        code
    }
}

/// How often a process group that is ending is looked at.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// How long a killed process group may take to be gone before the supervisor stops waiting.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// Waits until the process group `pgid` is empty, killing it at `kill_at`; with no `kill_at`
/// (nobody signalled it yet) sends SIGTERM first and kills it [`TERMINATE_GRACE`] later.
async fn end_group(pgid: Pid, kill_at: Option<Instant>) {
    if !group_alive(pgid) {
        return;
    }
    let kill_at = match kill_at {
        Some(at) => at,
        None => {
            info!("the workload's main process exited; ending the processes it left behind");
            let _ = killpg(pgid, Signal::SIGTERM);
            Instant::now() + TERMINATE_GRACE
        }
    };
    let mut killed = false;
    while group_alive(pgid) {
        let now = Instant::now();
        if now >= kill_at + KILL_WAIT {
            // One this process may not signal (a setuid program, say).
            warn!("processes of the workload's group are still there after SIGKILL; leaving them");
            return;
        }
        if !killed && now >= kill_at {
            warn!("processes the workload left behind ignored SIGTERM; killing them");
            let _ = killpg(pgid, Signal::SIGKILL);
            killed = true;
        }
        tokio::time::sleep(GROUP_POLL).await;
    }
}

/// Whether any process of the group `pgid` is left. Processes of the group that became this
/// process's children (it runs as PID 1, or as a subreaper) are reaped here first: as zombies
/// they would still count.
fn group_alive(pgid: Pid) -> bool {
    let group = Pid::from_raw(-pgid.as_raw());
    while let Ok(status) = waitpid(group, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
    !matches!(killpg(pgid, None), Err(Errno::ESRCH))
}

/// Waits until the shim has become the workload, so that a reload signal sent right after
/// the start reaches the workload and not the shim, which it would kill. A shim that could
/// not start the workload said why on stderr and exits 127, as a shell does; its exit, like
/// a workload's that ends at once, is left for [`Workload::wait`].
async fn wait_for_exec(child: &mut Child, pid: Pid, shim: &Path) {
    let exe = PathBuf::from(format!("/proc/{}/exe", pid.as_raw()));
    let shim = std::fs::canonicalize(shim).unwrap_or_else(|_| shim.to_path_buf());
    let deadline = tokio::time::Instant::now() + SHIM_EXEC_DEADLINE;
    loop {
        // The status stays with the child for `wait`.
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        match std::fs::read_link(&exe) {
            Ok(running) if running != shim => return,
            Ok(_) => {}
            // Without /proc there is nothing to watch; the window is the shim's few
            // milliseconds of start-up.
            Err(err) => {
                warn!(error = %err, "cannot see whether the workload has started");
                return;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            warn!("the workload shim has not started the workload yet; going on");
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The exit code a shell would show: the process's own code, or 128 + the signal that ended it.
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

/// Runs until the workload exits and returns its exit code. Meanwhile sends the reload signal
/// for every live change, and stops the workload's process group when the supervisor gets a
/// termination signal (forwarded to the group, SIGKILL after [`TERMINATE_GRACE`]) or `stop`
/// completes (the supervisor cannot go on). `shutting_down` runs when that stop begins: from
/// then on the supervisor applies no configuration.
pub async fn supervise(
    mut workload: Workload,
    mut reload: ReloadReceiver,
    signals: &mut Signals,
    stop: impl Future<Output = ()>,
    shutting_down: impl FnOnce(),
) -> i32 {
    // Activations before the start are in the environment and files the workload starts with.
    reload.borrow_and_update();
    let mut reload_open = true;
    let mut shutting_down = Some(shutting_down);
    // When the group is killed if it has not ended by then: set by the first termination signal.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    tokio::pin!(stop);
    let code = loop {
        let kill_due = async {
            match kill_at {
                Some(at) if !killed => tokio::time::sleep_until(at).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            code = workload.wait_main() => break code,
            signal = signals.recv() => {
                if let Some(begin) = shutting_down.take() {
                    begin();
                }
                info!(signal = %signal, "forwarding signal to the workload's process group");
                workload.signal_group(signal);
                kill_at.get_or_insert_with(|| Instant::now() + TERMINATE_GRACE);
            }
            () = kill_due => {
                warn!(grace = ?TERMINATE_GRACE, "workload still running after the termination signal; killing its process group");
                workload.signal_group(Signal::SIGKILL);
                killed = true;
            }
            changed = reload.changed(), if reload_open => {
                if changed.is_err() {
                    reload_open = false;
                    continue;
                }
                let notice = *reload.borrow_and_update();
                match notice.signal.to_nix() {
                    Some(signal) => {
                        info!(signal = %signal, generation = notice.generation, "configuration changed; signalling the workload");
                        workload.signal(signal);
                    }
                    None => info!(generation = notice.generation, "configuration changed; reload signal disabled"),
                }
            }
            () = &mut stop => {
                if let Some(begin) = shutting_down.take() {
                    begin();
                }
                let code = workload.terminate(TERMINATE_GRACE).await;
                info!(code, "workload exited");
                return code;
            }
        }
    };
    workload.finish(kill_at).await;
    info!(code, "workload exited");
    code
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::reload::{ReloadSignal, notify, reload_channel};

    #[tokio::test]
    async fn env_and_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env.txt");
        let command = vec![
            "sh".to_string(),
            "-c".to_string(),
            format!(
                "echo \"$TOKEN|$PLAIN|$OPENSHELL_SANDBOX_ID\" > {}; exit 7",
                out.display()
            ),
        ];
        let env = vec![
            (
                "TOKEN".to_string(),
                ProviderValue::Credential("tok-secret".into()),
            ),
            ("PLAIN".to_string(), ProviderValue::Plain("plain".into())),
        ];
        let mut w = Workload::spawn(
            &command,
            &env,
            &[("OPENSHELL_SANDBOX_ID", "sb-1".to_string())],
            &Launch::Direct,
            None,
        )
        .await
        .unwrap();
        assert_eq!(w.wait().await, 7);
        assert_eq!(
            std::fs::read_to_string(&out).unwrap().trim(),
            "tok-secret|plain|sb-1"
        );
    }

    #[tokio::test]
    async fn reload_notice_signals_and_stop_terminates() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("hup");
        let ready = dir.path().join("ready");
        let script = format!(
            "trap 'touch {m}' HUP; trap 'exit 42' TERM; touch {r}; while true; do sleep 0.05; done",
            m = marker.display(),
            r = ready.display()
        );
        let command = vec!["sh".to_string(), "-c".to_string(), script];
        let w = Workload::spawn(&command, &[], &[], &Launch::Direct, None)
            .await
            .unwrap();
        let (tx, rx) = reload_channel();
        notify(&tx, ReloadSignal::Hup); // before the start: absorbed, not signalled
        let mut signals = Signals::install().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let marker2 = marker.clone();
        let driver = async move {
            wait_for_path(&ready).await;
            assert!(!marker2.exists(), "first activation must not be signalled");
            notify(&tx, ReloadSignal::Hup);
            wait_for_path(&marker2).await;
            let _ = stop_tx.send(());
            tx
        };
        let stop = async {
            let _ = stop_rx.await;
        };
        let (code, _tx) = tokio::join!(supervise(w, rx, &mut signals, stop, || {}), driver);
        assert_eq!(code, 42);
    }

    async fn wait_for_path(path: &std::path::Path) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !path.exists() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} never appeared",
                path.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn signal_exit_codes() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
    }

    /// True while `pid` runs (not gone, not a zombie waiting for its reaper).
    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    }

    /// What the workload started in the background ends with it: it would otherwise run on
    /// under init, the provider values in its environment.
    #[tokio::test]
    async fn what_the_workload_left_behind_ends_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let command = vec![
            "sh".to_string(),
            "-c".to_string(),
            format!("sleep 300 & echo $! > {}", pid_file.display()),
        ];
        let mut w = Workload::spawn(&command, &[], &[], &Launch::Direct, None)
            .await
            .unwrap();
        assert_eq!(w.wait().await, 0);
        let left: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!running(left), "sleep {left} outlived the workload");
    }

    /// Feeds `output` to [`take_lines`] in pipe-sized chunks; the lines it emits, and what it
    /// has left at the end (emitted as the last line, masked, as at EOF).
    fn capture(output: &[u8], masker: &Masker) -> Vec<String> {
        let lines = std::cell::RefCell::new(Vec::new());
        let emit = |bytes: &[u8]| {
            lines
                .borrow_mut()
                .push(String::from_utf8_lossy(bytes).into_owned());
        };
        let mut pending = Vec::new();
        for chunk in output.chunks(8192) {
            pending.extend_from_slice(chunk);
            take_lines(&mut pending, masker, emit);
        }
        if !pending.is_empty() {
            emit(&masker.mask_bytes(&pending));
        }
        lines.into_inner()
    }

    /// Defect: an overlong line was cut into 16 KiB pieces before it was masked, so no piece
    /// held a long secret whole and each went out in clear.
    #[test]
    fn an_overlong_line_is_masked_before_it_is_cut() {
        let secret = "0123456789".repeat(4000);
        let masker = Masker::new([secret.as_str()]);
        let filler = "x".repeat(20_000);
        let output = format!("{filler}{secret}{filler}\nnext\n");
        let lines = capture(output.as_bytes(), &masker);
        for line in &lines {
            assert!(
                !line.contains("0123456789"),
                "a piece of the secret: {line:.80}"
            );
            assert!(line.len() <= MAX_CAPTURED_LINE + secret.len() + 8192);
        }
        assert!(lines.len() >= 3, "the line was cut");
        assert_eq!(lines.concat(), format!("{filler}***{filler}next"));
    }

    /// Defect: a secret spanning several lines went out line by line, in clear.
    #[test]
    fn a_secret_spanning_lines_is_masked_on_every_line() {
        let key = "-----BEGIN KEY-----\nfirstSecretLine1\nsecondSecretLine2\n-----END KEY-----";
        let masker = Masker::new([key]);
        let output = format!("key={key}\n> firstSecretLine1\nafter\n");
        assert_eq!(
            capture(output.as_bytes(), &masker),
            ["key=***", "***", "***", "***", "> ***", "after"]
        );
    }

    #[test]
    fn an_overlong_line_is_cut_between_characters() {
        let output = "é".repeat(MAX_CAPTURED_LINE);
        let lines = capture(output.as_bytes(), &Masker::default());
        assert!(lines.len() >= 2);
        assert!(
            lines.iter().all(|l| !l.contains('\u{FFFD}')),
            "a character split"
        );
        assert_eq!(lines.concat(), output);
    }

    #[tokio::test]
    async fn captured_output_becomes_lines_of_each_stream() {
        let buffer = LogBuffer::new(100, usize::MAX);
        let command = vec![
            "sh".to_string(),
            "-c".to_string(),
            "echo one; echo two >&2; printf 'no newline'".to_string(),
        ];
        let mut w = Workload::spawn(&command, &[], &[], &Launch::Direct, Some(&buffer))
            .await
            .unwrap();
        assert_eq!(w.wait().await, 0);
        let (lines, dropped) = buffer.take(100);
        assert_eq!(dropped, 0);
        let mut seen: Vec<(String, String)> = lines
            .iter()
            .map(|l| (l.target.clone(), l.message.clone()))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                ("stderr".to_string(), "two".to_string()),
                ("stdout".to_string(), "no newline".to_string()),
                ("stdout".to_string(), "one".to_string()),
            ]
        );
        assert!(
            lines
                .iter()
                .all(|l| l.source == crate::logs::SOURCE_WORKLOAD)
        );
    }
}
