//! The Prometheus endpoint.

use std::net::SocketAddr;

use metrics_exporter_prometheus::PrometheusBuilder;

/// The metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {reason}; pick a free port with `strait.metrics.listen` or --metrics-listen")]
pub struct MetricsError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// What the exporter said.
    pub reason: String,
}

/// Serves every metric at `http://<addr>/metrics` from a background thread.
pub fn install_prometheus(addr: SocketAddr) -> Result<(), MetricsError> {
    // Bind first so a taken port is reported here, not swallowed by the exporter's thread.
    std::net::TcpListener::bind(addr).map_err(|e| MetricsError { addr, reason: e.to_string() })?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0])
        .map_err(|e| MetricsError { addr, reason: e.to_string() })?
        .install()
        .map_err(|e| MetricsError { addr, reason: e.to_string() })
}
