//! Why a cluster did not answer, in words an operator can act on.
//!
//! librdkafka tells of a refused login or a failed TLS handshake only in its log and error
//! events, which a client hands over only while it is polled (an admin client never is), and of
//! an untrusted broker certificate only as "certificate verify failed". So when a cluster does
//! not answer, [`why_refused`] connects once more with a polled client that records those
//! events, [`explain`] turns them into one cause, and for a certificate strait does not trust it
//! repeats the handshake with OpenSSL to read why (expired, unknown CA, wrong host).

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openssl::ssl::{HandshakeError, SslConnector, SslMethod};
use openssl::x509::{X509VerifyResult, X509};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;

use super::{create_client, librdkafka_settings};
use crate::config::{ClientSettings, ClusterConfig, Setting};

/// How many distinct reports a client keeps (the newest win).
const KEPT: usize = 8;
/// How long the TLS check may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A client context that keeps the errors librdkafka reported, for [`explain`].
#[derive(Default)]
struct Recorder {
    reports: Mutex<Vec<String>>,
}

impl ConsumerContext for Recorder {}

/// Connects to `cluster` with `settings` for at most `wait` and says why it refuses them, if
/// librdkafka's reports tell (see [`explain`]).
pub(crate) fn why_refused(cluster: &ClusterConfig, settings: &ClientSettings, wait: Duration) -> Option<String> {
    let translated = librdkafka_settings(cluster, settings, "admin").ok()?;
    let probe: BaseConsumer<Recorder> =
        create_client(cluster, settings, "admin", &[], &[("group.id", "strait-probe")], Recorder::default()).ok()?;
    let _ = probe.fetch_metadata(None, wait);
    // The reports wait in the client's queue until it is polled.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        let _ = probe.poll(Duration::from_millis(100));
    }
    explain(&cluster.bootstrap_servers, &probe.context().reports(), &translated)
}

impl Recorder {
    /// What librdkafka reported so far, oldest first.
    fn reports(&self) -> Vec<String> {
        self.reports.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Recorder {
    fn record(&self, report: &str) {
        let mut reports = self.reports.lock().unwrap_or_else(|p| p.into_inner());
        if !reports.iter().any(|r| r == report) {
            if reports.len() == KEPT {
                reports.remove(0);
            }
            reports.push(report.to_string());
        }
    }
}

impl ClientContext for Recorder {
    // Connection failures reach the log callback from librdkafka's own threads; the error
    // callback only when someone polls the client, which an admin client's user does not.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Debug | RDKafkaLogLevel::Info | RDKafkaLogLevel::Notice => {
                tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            _ => {
                self.record(message);
                tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", %error, reason, "client error");
        self.record(reason);
    }
}

/// What went wrong between strait and a cluster, as far as the reports tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The SASL login was refused.
    Login(String),
    /// No OAuth token could be fetched from the identity provider.
    Token(String),
    /// strait did not trust the broker's certificate.
    BrokerCertificate(String),
    /// The broker refused strait's client certificate (or demanded one).
    ClientCertificate(String),
    /// Another TLS failure.
    Tls(String),
}

/// Which cause librdkafka's reports point to, if any.
///
/// ```
/// use strait_core::cluster::{cause_of, Cause};
/// let report = "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 3ms in state AUTH_REQ)";
/// assert!(matches!(cause_of(&[report.to_string()]), Some(Cause::Login(_))));
/// ```
pub fn cause_of(reports: &[String]) -> Option<Cause> {
    let find = |needles: &[&str]| reports.iter().rev().find(|r| needles.iter().any(|n| r.contains(n))).cloned();
    if let Some(r) = find(&["Authentication failed", "SASL authentication error", "invalid credentials"]) {
        return Some(Cause::Login(r));
    }
    if let Some(r) = find(&["Failed to retrieve OIDC token", "OIDC token"]) {
        return Some(Cause::Token(r));
    }
    if let Some(r) = find(&["certificate verify failed"]) {
        return Some(Cause::BrokerCertificate(r));
    }
    if let Some(r) = find(&[
        "alert certificate",
        "alert bad certificate",
        "alert unknown ca",
        "certificate required",
        "alert handshake failure",
    ]) {
        return Some(Cause::ClientCertificate(r));
    }
    find(&["SSL handshake failed", "SSL transport error"]).map(Cause::Tls)
}

/// One line saying why `bootstrap` refused strait, from the client's `reports` and its
/// librdkafka `settings` (for the trust anchors of the TLS check); `None` when the reports do
/// not tell.
pub fn explain(bootstrap: &str, reports: &[String], settings: &[Setting]) -> Option<String> {
    Some(match cause_of(reports)? {
        Cause::Login(r) => format!(
            "the SASL login was refused: wrong user name or password, or no such user on the cluster; check `sasl.jaas.config` and `sasl.mechanism` (librdkafka: {r})"
        ),
        Cause::Token(r) => format!(
            "no OAuth token could be fetched; check `sasl.oauthbearer.token.endpoint.url` and the client id and secret in `sasl.jaas.config` (librdkafka: {r})"
        ),
        Cause::BrokerCertificate(r) => match broker_certificate_problem(bootstrap, settings) {
            Some(why) => format!(
                "strait does not trust the broker's TLS certificate: {why}; check `ssl.truststore.location` (it must hold the CA that signed the brokers' certificates) and the brokers' certificate dates"
            ),
            None => format!("strait does not trust the broker's TLS certificate; check `ssl.truststore.location` (librdkafka: {r})"),
        },
        Cause::ClientCertificate(r) => format!(
            "the broker refused strait's client certificate: it must be signed by a CA the brokers trust and be within its dates; check `ssl.keystore.location` (librdkafka: {r})"
        ),
        Cause::Tls(r) => format!("the TLS handshake failed; check `security.protocol` and the `ssl.*` settings (librdkafka: {r})"),
    })
}

/// Why OpenSSL does not trust the certificate the first broker of `bootstrap` presents, with
/// the trust anchors librdkafka was given (`ssl.ca.location`, `ssl.ca.pem`, or the system's).
fn broker_certificate_problem(bootstrap: &str, settings: &[Setting]) -> Option<String> {
    let get = |key: &str| settings.iter().find(|s| s.key == key).map(|s| s.value.as_str());
    let address = bootstrap.split(',').next()?.trim();
    let address = address.rsplit_once("://").map_or(address, |(_, a)| a);
    let (host, _) = address.rsplit_once(':')?;
    let mut builder = SslConnector::builder(SslMethod::tls_client()).ok()?;
    if let Some(file) = get("ssl.ca.location") {
        builder.set_ca_file(file).ok()?;
    } else if let Some(pem) = get("ssl.ca.pem") {
        for cert in X509::stack_from_pem(pem.as_bytes()).ok()? {
            builder.cert_store_mut().add_cert(cert).ok()?;
        }
    }
    let connector = builder.build();
    let socket = address.to_socket_addrs().ok()?.next()?;
    let stream = TcpStream::connect_timeout(&socket, PROBE_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(PROBE_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(PROBE_TIMEOUT)).ok()?;
    let mut config = connector.configure().ok()?;
    if get("ssl.endpoint.identification.algorithm") == Some("none") {
        config.set_verify_hostname(false);
    }
    let verdict = match config.connect(host.trim_matches(['[', ']']), stream) {
        Ok(_) => return None,
        Err(HandshakeError::Failure(s) | HandshakeError::WouldBlock(s)) => s.ssl().verify_result(),
        Err(HandshakeError::SetupFailure(_)) => return None,
    };
    (verdict != X509VerifyResult::OK).then(|| verdict.error_string().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_sorted_into_causes() {
        let r = |s: &str| vec![s.to_string()];
        assert!(matches!(
            cause_of(&r(
                "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified"
            )),
            Some(Cause::BrokerCertificate(_))
        ));
        assert!(matches!(
            cause_of(&r("SSL transport error: error:0A000412:SSL routines::sslv3 alert bad certificate")),
            Some(Cause::ClientCertificate(_))
        ));
        assert!(matches!(
            cause_of(&r("SSL transport error: error:0A00045C:SSL routines::tlsv13 alert certificate required")),
            Some(Cause::ClientCertificate(_))
        ));
        assert!(matches!(
            cause_of(&r(
                "[thrd:background]: Failed to retrieve OIDC token from \"http://idp/token\": Could not connect to server"
            )),
            Some(Cause::Token(_))
        ));
        assert_eq!(cause_of(&r("Connect to ipv4#127.0.0.1:1 failed: Connection refused")), None);
    }
}
