//! Compiles the control plane's protocol (`proto/holdfast/control/v1`)
//! with Debian's `protoc` (`scripts/install-deps.sh` installs it).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .compile_protos(&["proto/holdfast/control/v1/control.proto"], &["proto"])?;
    Ok(())
}
