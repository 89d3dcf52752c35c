//! Compiles the subset of etcd's API the etcd baseline speaks (`proto/etcd_watch.proto`), with
//! protox as `openshell-proto` does, so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "proto/etcd_watch.proto";
    println!("cargo:rerun-if-changed={file}");
    let descriptors = protox::compile([file], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(false)
        .compile_fds(descriptors)?;
    Ok(())
}
