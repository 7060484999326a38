//! The metrics listener: `/metrics` (Prometheus), `/healthz` and `/readyz`, served by one
//! thread. Scrapes and probes are small and seconds apart, so one connection at a time keeps
//! strait's thread count and dependencies down (no HTTP framework).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::{liveness, readiness, Verdict};

/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often histograms and idle series are tidied (the exporter's own listener does it on
/// each scrape and on a timer), and the process's RSS and CPU time read.
const UPKEEP: Duration = Duration::from_secs(5);

/// The metrics listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics and probes on {addr}: {reason}; pick a free port with `strait.metrics.listen` or --metrics-listen")]
pub struct ServeError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// What went wrong.
    pub reason: String,
}

/// Installs the Prometheus recorder and serves `/metrics`, `/healthz` and `/readyz` on `addr`
/// from a background thread.
pub fn serve(addr: SocketAddr) -> Result<(), ServeError> {
    let fail = |reason: String| ServeError { addr, reason };
    let listener = TcpListener::bind(addr).map_err(|e| fail(e.to_string()))?;
    let handle = PrometheusBuilder::new()
        .set_buckets(&[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0])
        .map_err(|e| fail(e.to_string()))?
        .install_recorder()
        .map_err(|e| fail(e.to_string()))?;
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics upkeep".into())
        .spawn(move || loop {
            super::process::record();
            std::thread::sleep(UPKEEP);
            upkeep.run_upkeep();
        })
        .map_err(|e| fail(e.to_string()))?;
    std::thread::Builder::new()
        .name("metrics http".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                // A client that goes away mid-answer costs it its answer, nothing else.
                let _ = answer(stream, &handle);
            }
        })
        .map_err(|e| fail(e.to_string()))?;
    Ok(())
}

fn answer(mut stream: TcpStream, metrics: &PrometheusHandle) -> std::io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let request = read_head(&mut stream)?;
    let mut words = request.lines().next().unwrap_or_default().split_whitespace();
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = path.split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (200, "text/plain; version=0.0.4", metrics.render()),
        ("GET", "/healthz") => probe(liveness()),
        ("GET", "/readyz") => probe(readiness()),
        ("GET", _) => (404, "text/plain", "strait serves /metrics, /healthz and /readyz\n".to_string()),
        _ => (405, "text/plain", "only GET\n".to_string()),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

fn probe(v: Verdict) -> (u16, &'static str, String) {
    (if v.ok { 200 } else { 503 }, "application/json", v.body + "\n")
}

/// Reads the request line and headers (the body of a GET is empty), up to 8 KiB.
fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}
