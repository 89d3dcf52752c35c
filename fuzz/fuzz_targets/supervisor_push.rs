//! The supervisor's handling of what a gateway pushes: each frame of the input is decoded as a
//! `GatewayMessage` and handled as an apply-capable session does (`SessionAccepted` with its
//! bootstrap, `ConfigUpdate`, startup candidate): decoded, staged and validated by the same
//! code, applied to a `MemoryApplier`, so no disk or network is touched. Every answer must be
//! encodable.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use openshell_fuzz::{SANDBOX_ID, frames};
use openshell_proto::v1::GatewayMessage;
use openshell_supervisor::{MemoryApplier, PushReplay};
use prost::Message;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fuzz_target!(
    init: openshell_fuzz::seeds::write_if_asked("supervisor_push"),
    |data: &[u8]| {
    runtime().block_on(async {
        let applier = Arc::new(MemoryApplier::new());
        let mut session = PushReplay::new(SANDBOX_ID, applier);
        for frame in frames(data) {
            // A frame that does not decode ends a real session (a transport error).
            let Ok(message) = GatewayMessage::decode(frame) else {
                return;
            };
            if let Some(answer) = session.receive(message).await {
                let _ = answer.encode_to_vec();
            }
        }
    });
}
);
