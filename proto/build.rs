//! Compiles `openshell/v1/*.proto` and `openshell/sandbox/v1/sandbox.proto`
//! with protox, a pure-Rust compiler, so a fresh machine needs no system
//! `protoc`. protox bundles the well-known types (`google/protobuf/*.proto`)
//! and prost maps them to `prost_types`.

const REDACTED_MESSAGES: [&str; 5] = [
    ".openshell.v1.ProviderValueInput",
    ".openshell.v1.CreateTokenResponse",
    ".openshell.v1.GetSandboxProviderEnvironmentResponse",
    ".openshell.v1.CreateSandboxResponse",
    ".openshell.v1.PeerNotifyConfigUpdateRequest",
];

/// Messages whose maps are encoded into fingerprints: a `BTreeMap` encodes
/// in key order, so equal content always gives equal bytes.
const ORDERED_MAPS: [&str; 3] = [
    ".openshell.sandbox.v1",
    ".openshell.v1.GetSandboxProviderEnvironmentResponse",
    ".openshell.v1.SandboxConfigSnapshot",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "openshell/sandbox/v1/sandbox.proto",
        "openshell/v1/types.proto",
        "openshell/v1/openshell.proto",
        "openshell/v1/supervisor.proto",
        "openshell/v1/peer.proto",
        "openshell/v1/config_plane.proto",
        "openshell/datamodel/v1/datamodel.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["."])?;
    let mut builder = tonic_prost_build::configure();
    for path in ORDERED_MAPS {
        builder = builder.btree_map(path);
    }
    builder
        // A shared, reference-counted buffer: cloning a snapshot does not copy its policy.
        .bytes(".openshell.v1.SandboxConfigSnapshot.policy")
        // These carry credentials: `redact.rs` gives them a Debug that hides them.
        .skip_debug(REDACTED_MESSAGES)
        // Test doubles implement only the calls they need; the others answer UNIMPLEMENTED.
        .generate_default_stubs(true)
        // Small initial stream buffers: see `src/codec.rs`.
        .codec_path("crate::codec::SmallBufferCodec")
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
