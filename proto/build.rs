//! Compiles `openshell/v1/*.proto` with protox, a pure-Rust compiler, so a
//! fresh machine needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "openshell/v1/types.proto",
        "openshell/v1/openshell.proto",
        "openshell/v1/supervisor.proto",
        "openshell/v1/peer.proto",
    ];
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(files, ["."])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
