//! Compiles GoBGP's API (`gobgp.proto`, `attribute.proto`,
//! `capability.proto`, package `apipb`) from Debian's
//! golang-github-osrg-gobgp-dev with Debian's `protoc`
//! (`scripts/install-deps.sh` installs both). The files are not copied
//! into the repository: the package is the source of truth, so the
//! messages match the `gobgp` client of the same GoBGP release.
//! `HOLDFAST_GOBGP_PROTO_DIR` overrides the directory.

use std::path::PathBuf;

const DEBIAN_DIR: &str = "/usr/share/gocode/src/github.com/osrg/gobgp/api";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-env-changed=HOLDFAST_GOBGP_PROTO_DIR");
    let dir = PathBuf::from(
        std::env::var("HOLDFAST_GOBGP_PROTO_DIR").unwrap_or_else(|_| DEBIAN_DIR.to_string()),
    );
    let gobgp = dir.join("gobgp.proto");
    if !gobgp.exists() {
        return Err(format!(
            "{} not found: install Debian's golang-github-osrg-gobgp-dev (scripts/install-deps.sh) or set HOLDFAST_GOBGP_PROTO_DIR",
            gobgp.display()
        )
        .into());
    }
    let files = ["gobgp.proto", "attribute.proto", "capability.proto"].map(|f| dir.join(f));
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Every RPC holdfast does not serve answers UNIMPLEMENTED; the
        // server names the method in the message (`service::Named`).
        .generate_default_stubs(true)
        .compile_protos(&files, &[dir])?;
    Ok(())
}
