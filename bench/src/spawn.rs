//! Starting strait and MirrorMaker 2 the one way every bench tool starts them.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::Context;

/// A replicator's process, killed (and reaped) when dropped, so a failed run leaves none behind.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `strait run` (the binary at `bin`) on `config`, logging warnings to `log`, with its
/// metrics on a free port, which it returns.
pub fn strait(bin: &Path, config: &Path, log: File) -> anyhow::Result<(Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = Command::new(bin)
        .args(["run", "--config"])
        .arg(config)
        .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
        .env("STRAIT_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting strait (build it with `cargo build --release`)")?;
    Ok((child, port))
}

/// Starts MirrorMaker 2 in dedicated mode on `config` through `scripts/kafka.sh mm2` under
/// `root`, which execs the JVM: the child is MirrorMaker itself.
pub fn mm2(root: &Path, config: &Path, log: File) -> anyhow::Result<Child> {
    Command::new("bash")
        .current_dir(root)
        .args(["scripts/kafka.sh", "mm2"])
        .arg(config)
        .env("STRAIT_LOG_LEVEL", "WARN")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting MirrorMaker 2")
}
