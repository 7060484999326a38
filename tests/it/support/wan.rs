//! A cluster behind a real fault proxy (`scripts/kafka.sh start --wan`, `scripts/wan.sh`): every
//! client connection to it crosses a link with a round trip, and faults on demand.

use super::*;

/// The WAN cluster's base port: its broker on 14092, PLAINTEXT for the tests' own tools on
/// 14142, the proxy's end of the link on 14292.
const BASE_PORT: u16 = 14092;

/// A 1-broker cluster of a test's own behind the proxy, stopped (proxy and all) when dropped.
/// One at a time: the proxy and the cluster's name are shared.
pub struct WanCluster {
    pub name: String,
    /// What strait connects to: the proxy's end of the link.
    pub bootstrap: String,
    /// The broker itself, for the tests' own readers and writers.
    pub internal: String,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl WanCluster {
    /// Starts the proxy and cluster `name`, with a link of `rtt_ms` round trip and `jitter_ms`.
    pub fn start(name: &str, rtt_ms: u32, jitter_ms: u32) -> Self {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let serial = ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        wan_sh(&["start"]);
        let bootstrap = kafka_sh(&["start", "--fresh", "--wan", name, "1", &BASE_PORT.to_string()]);
        let internal = kafka_sh(&["internal", name]);
        wan_sh(&["link", name]);
        wan_sh(&["shape", name, &rtt_ms.to_string(), &jitter_ms.to_string()]);
        Self { name: name.to_string(), bootstrap, internal, _serial: serial }
    }

    /// Adds a fault to the link (`wan.sh fault NAME ARGS`): `blackhole`, `reset MS`, `rate KBPS`.
    pub fn fault(&self, args: &[&str]) {
        let mut all = vec!["fault", self.name.as_str()];
        all.extend_from_slice(args);
        wan_sh(&all);
    }

    /// Removes the faults; the link keeps its round trip.
    pub fn heal(&self) {
        wan_sh(&["heal", &self.name]);
    }
}

impl Drop for WanCluster {
    fn drop(&mut self) {
        // Not wan_sh/kafka_sh: a panic while a failed test unwinds would abort the test binary.
        for (script, args) in [("wan.sh", vec!["stop"]), ("kafka.sh", vec!["stop", &self.name])] {
            let _ = Command::new("bash").arg(repo_root().join("scripts").join(script)).args(args).output();
        }
    }
}

/// Runs `scripts/wan.sh`; panics with its output on failure.
fn wan_sh(args: &[&str]) -> String {
    script("wan.sh", args, "this test needs the fault proxy (Go builds it once)")
}
