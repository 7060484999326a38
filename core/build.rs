//! Builds the built-in policy components (`plugins/default`, `plugins/identity`) for
//! wasm32-wasip2 so the engine can embed them. strait has no native copy of those policies.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let plugins = manifest_dir.join("../plugins");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for watched in [
        "../plugins/Cargo.toml",
        "../plugins/default",
        "../plugins/identity",
        "../plugins/mm2-naming",
        "../plugins/neutral",
        "../wit",
    ] {
        println!("cargo:rerun-if-changed={watched}");
    }
    add_wasm_target();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = out.join("plugins-target");
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
        .arg(plugins.join("Cargo.toml"))
        .args(["-p", "strait-policy-default", "-p", "strait-policy-identity", "--target-dir"])
        .arg(&target_dir);
    // The host build's flags and target must not leak into the component build.
    for var in
        ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR", "RUSTC_WORKSPACE_WRAPPER"]
    {
        cmd.env_remove(var);
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run cargo to build the policy components: {e}"));
    if !status.success() {
        panic!("building the policy components in plugins/ failed; if the error says the target is missing, run `rustup target add wasm32-wasip2`");
    }
    for name in ["strait_policy_default", "strait_policy_identity"] {
        let built = target_dir.join("wasm32-wasip2/release").join(format!("{name}.wasm"));
        std::fs::copy(&built, out.join(format!("{name}.wasm")))
            .unwrap_or_else(|e| panic!("copy {}: {e}", built.display()));
    }
}

/// rustup installs the target `rust-toolchain.toml` names when it installs the toolchain, but not
/// for a toolchain a machine already has: add it then, so `cargo build` is the only step. Without
/// rustup (a distribution's Rust), the component build below says what is missing.
fn add_wasm_target() {
    let Ok(toolchain) = std::env::var("RUSTUP_TOOLCHAIN") else { return };
    let installed = Command::new("rustup").args(["target", "list", "--installed", "--toolchain", &toolchain]).output();
    let Ok(installed) = installed else { return };
    if String::from_utf8_lossy(&installed.stdout).lines().any(|t| t.trim() == "wasm32-wasip2") {
        return;
    }
    println!("cargo:warning=adding the wasm32-wasip2 target to {toolchain} (the policy components are built for it)");
    let added = Command::new("rustup").args(["target", "add", "--toolchain", &toolchain, "wasm32-wasip2"]).status();
    if !added.is_ok_and(|s| s.success()) {
        println!("cargo:warning=`rustup target add wasm32-wasip2` failed; run it by hand");
    }
}
