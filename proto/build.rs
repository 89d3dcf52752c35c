//! Compiles `openshell/v1/*.proto` and `openshell/sandbox/v1/sandbox.proto`
//! with protox, a pure-Rust compiler, so a fresh machine needs no system
//! `protoc`. protox bundles the well-known types (`google/protobuf/*.proto`)
//! and prost maps them to `prost_types`.

const REDACTED_MESSAGES: [&str; 5] = [
    ".openshell.v1.ProviderValueInput",
    ".openshell.v1.EnvValue",
    ".openshell.v1.SupervisorIdentity",
    ".openshell.v1.CreateSandboxResponse",
    ".openshell.v1.PeerNotifyConfigUpdateRequest",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "openshell/v1/types.proto",
        "openshell/v1/openshell.proto",
        "openshell/v1/supervisor.proto",
        "openshell/v1/peer.proto",
        "openshell/sandbox/v1/sandbox.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        // These carry credentials: `redact.rs` gives them a Debug that hides them.
        .skip_debug(REDACTED_MESSAGES)
        // Small initial stream buffers: see `src/codec.rs`.
        .codec_path("crate::codec::SmallBufferCodec")
        // Policy maps iterate in key order, as the policy document's own maps do, so a
        // converted policy encodes to the same bytes every time.
        .btree_map(".openshell.sandbox.v1")
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
