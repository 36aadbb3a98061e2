//! Compiles the CRI v1 proto into Rust types plus tonic client and server code.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not baked in with env!(): cargo reuses a compiled
    // build script across checkouts at different paths that share a target
    // directory, and the baked path would point into another checkout.
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let proto = proto_dir.join("api.proto");
    println!("cargo:rerun-if-changed={}", proto.display());

    // A protoc shipped inside a crate keeps the build working on a machine
    // without Debian's protobuf-compiler; an explicit PROTOC still wins.
    if std::env::var_os("PROTOC").is_none() {
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Hand-written (src/metrics_answer.rs): it may carry its pods
        // already encoded.
        .extern_path(
            ".runtime.v1.ListPodSandboxMetricsResponse",
            "crate::metrics_answer::ListPodSandboxMetricsResponse",
        )
        .compile_protos(&[proto], &[proto_dir])?;
    Ok(())
}
