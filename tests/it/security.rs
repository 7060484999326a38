//! Secured clusters, as operators run them: SASL_SSL with SCRAM-SHA-512 and mutual TLS, on real
//! listeners (`kafka.sh start --security`), configured the way MM2 users write it (a Java JAAS
//! line, Java trust and key stores).

use std::sync::OnceLock;
use std::time::Duration;

use crate::support::groups::{committed_offsets, consume_as_group, wait_for_group_sync_in};
use crate::support::*;

const RECORDS: usize = 10_000;
const PARTITIONS: i32 = 3;
/// How long a refused connection may take to be named in the log: the first metadata request
/// waits 15 s, then strait says why.
const NAMED_WITHIN: Duration = Duration::from_secs(60);

/// The two secured clusters, started once for the whole file (in parallel: each takes ~20 s).
fn secured() -> &'static (OwnCluster, OwnCluster) {
    static CLUSTERS: OnceLock<(OwnCluster, OwnCluster)> = OnceLock::new();
    CLUSTERS.get_or_init(|| {
        let sasl = std::thread::spawn(|| OwnCluster::start_secured("sec-sasl", 13092, "sasl_ssl"));
        let mtls = OwnCluster::start_secured("sec-mtls", 15092, "mtls");
        (sasl.join().expect("starting sec-sasl"), mtls)
    })
}

/// `<alias>.*` lines for the SASL_SSL cluster: SCRAM-SHA-512 in a Java JAAS line, and its CA in
/// a PKCS#12 trust store.
fn sasl_client(alias: &str, c: &OwnCluster, password: &str) -> String {
    format!(
        "{alias}.bootstrap.servers = {}\n{alias}.security.protocol = SASL_SSL\n{alias}.sasl.mechanism = SCRAM-SHA-512\n\
         {alias}.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username=\"strait\" password=\"{password}\";\n\
         {alias}.ssl.truststore.location = {}\n{alias}.ssl.truststore.type = PKCS12\n{alias}.ssl.truststore.password = {}\n",
        c.bootstrap,
        c.secret_path("truststore.p12"),
        c.secret("store.password")
    )
}

/// `<alias>.*` lines for the mTLS cluster: a PEM trust store and a PKCS#12 key store.
fn mtls_client(alias: &str, c: &OwnCluster, trust: &str, keys: &str) -> String {
    let password = c.secret("store.password");
    format!(
        "{alias}.bootstrap.servers = {}\n{alias}.security.protocol = SSL\n{alias}.ssl.truststore.location = {}\n{alias}.ssl.truststore.type = PEM\n\
         {alias}.ssl.keystore.location = {}\n{alias}.ssl.keystore.type = PKCS12\n{alias}.ssl.keystore.password = {password}\n{alias}.ssl.key.password = {password}\n",
        c.bootstrap,
        c.secret_path(trust),
        c.secret_path(keys)
    )
}

fn flow_lines(source: &str, target: &str, topic: &str, group: &str) -> String {
    format!(
        "{source}->{target}.enabled = true\n{source}->{target}.topics = {topic}\nreplication.factor = 1\nrefresh.topics.interval.seconds = 1\n\
         emit.checkpoints.interval.seconds = 1\nsync.group.offsets.interval.seconds = 1\ngroups = {group}\nsync.topic.acls.enabled = false\n"
    )
}

fn numbered(n: usize) -> Vec<TestRecord> {
    (0..n).map(|i| TestRecord::kv((i % PARTITIONS as usize) as i32, &format!("k{i}"), &format!("v{i}"))).collect()
}

/// Replicates 10,000 records from `source` to `target` (bootstraps the tests' own clients use),
/// then has a group consume 4,000 on the source and checks its offsets synced to the target.
fn replicates_and_syncs_the_group(
    config: &str,
    source: &str,
    target: &str,
    topic: &str,
    remote: &str,
    checkpoints: &str,
    group: &str,
) {
    let records = numbered(RECORDS);
    produce(source, topic, &records, &[]);
    let strait = Strait::start(config);
    assert!(
        wait_until(Duration::from_secs(120), || record_count(target, remote) >= RECORDS as i64),
        "{} of {RECORDS} records arrived in {remote}; log:\n{}",
        record_count(target, remote),
        strait.log_text()
    );
    let got: Vec<TestRecord> =
        read_all(target, remote, RECORDS, Duration::from_secs(60)).into_iter().flatten().collect();
    assert_eq!(got.len(), RECORDS, "exactly the records sent");
    let key_values = |rs: &[TestRecord]| {
        let mut kv: Vec<_> = rs.iter().map(|r| (r.key.clone(), r.value.clone())).collect();
        kv.sort();
        kv
    };
    let (want, have) = (key_values(&records), key_values(&got));
    assert!(want == have, "the target holds other records than the source");

    consume_as_group(source, topic, group, 4_000);
    let upstream = committed_offsets(source, group, topic, PARTITIONS as usize);
    assert!(upstream.iter().any(|&o| o > 0), "the group committed nothing: {upstream:?}");
    wait_for_group_sync_in(target, checkpoints, group, remote, &upstream, &strait);
    // A round that runs before the positions covering the group's offsets are stored
    // translates them short (never past a stored position); a later round brings the group to
    // the source's offsets.
    let same = wait_until(Duration::from_secs(90), || {
        committed_offsets(target, group, remote, PARTITIONS as usize) == upstream
    });
    assert!(
        same,
        "one-to-one replication translates offsets to themselves: the group has {:?} on the target, {upstream:?} on the source; log:\n{}",
        committed_offsets(target, group, remote, PARTITIONS as usize),
        strait.log_text()
    );
}

#[test]
fn plaintext_source_to_a_sasl_ssl_target_replicates_and_syncs_groups() {
    let s = stand();
    let (sasl, _) = secured();
    let topic = unique("to-sasl");
    let group = unique("g-to-sasl");
    create_topic(&s.east, &topic, PARTITIONS, 1, &[]);
    let config = format!(
        "clusters = us-east, sasl\nus-east.bootstrap.servers = {}\n{}{}",
        s.east,
        sasl_client("sasl", sasl, &sasl.secret("sasl.password")),
        flow_lines("us-east", "sasl", &topic, &group)
    );
    replicates_and_syncs_the_group(
        &config,
        &s.east,
        &sasl.internal(),
        &topic,
        &format!("us-east.{topic}"),
        "us-east.checkpoints.internal",
        &group,
    );
}

#[test]
fn sasl_ssl_source_to_an_mtls_target_replicates_and_syncs_groups() {
    let (sasl, mtls) = secured();
    let topic = unique("sasl-to-mtls");
    let group = unique("g-sasl-to-mtls");
    create_topic(&sasl.internal(), &topic, PARTITIONS, 1, &[]);
    let config = format!(
        "clusters = sasl, mtls\n{}{}{}",
        sasl_client("sasl", sasl, &sasl.secret("sasl.password")),
        mtls_client("mtls", mtls, "ca.pem", "client.p12"),
        flow_lines("sasl", "mtls", &topic, &group)
    );
    replicates_and_syncs_the_group(
        &config,
        &sasl.internal(),
        &mtls.internal(),
        &topic,
        &format!("sasl.{topic}"),
        "sasl.checkpoints.internal",
        &group,
    );
}

/// Starts strait on `client_lines` for cluster `bad` as the target of a flow from us-east,
/// waits for one log line naming the alias and `cause`, and checks that no secret is in the log.
fn refused_with_one_clear_line(bad: &str, client_lines: &str, cause: &str, secrets: &[String]) {
    let s = stand();
    let topic = unique("refused");
    create_topic(&s.east, &topic, 1, 1, &[]);
    let config = format!(
        "clusters = us-east, {bad}\nus-east.bootstrap.servers = {}\n{client_lines}{}",
        s.east,
        flow_lines("us-east", bad, &topic, "none")
    );
    let strait = Strait::start(&config);
    let named = |log: &str| {
        log.lines().find(|l| l.contains(&format!("cluster `{bad}`")) && l.contains(cause)).map(str::to_string)
    };
    assert!(
        wait_until(NAMED_WITHIN, || named(&strait.log_text()).is_some()),
        "no line names `{bad}` and \"{cause}\" within {NAMED_WITHIN:?}; log:\n{}",
        strait.log_text()
    );
    println!("{}", named(&strait.log_text()).unwrap_or_default());
    let log = strait.log_text();
    for secret in secrets {
        assert!(!log.contains(secret.as_str()), "a secret is in the log");
    }
}

#[test]
fn a_wrong_sasl_password_is_named_and_never_logged() {
    let (sasl, _) = secured();
    let wrong = format!("not-{}", sasl.secret("sasl.password"));
    let secrets = [wrong.clone(), sasl.secret("sasl.password"), sasl.secret("store.password")];
    refused_with_one_clear_line("sasl", &sasl_client("sasl", sasl, &wrong), "SASL login was refused", &secrets);
}

#[test]
fn a_broker_certificate_from_an_untrusted_ca_is_named() {
    let (_, mtls) = secured();
    let secrets = [mtls.secret("store.password")];
    // A trust store holding another CA than the one that signed the brokers' certificates.
    refused_with_one_clear_line(
        "mtls",
        &mtls_client("mtls", mtls, "other-ca.pem", "client.p12"),
        "does not trust the broker's TLS certificate",
        &secrets,
    );
}

#[test]
fn an_expired_client_certificate_is_named_with_the_day_it_expired() {
    let (_, mtls) = secured();
    let secrets = [mtls.secret("store.password")];
    refused_with_one_clear_line(
        "mtls",
        &mtls_client("mtls", mtls, "ca.pem", "expired.p12"),
        "expired on Feb  1 00:00:00 2020 GMT",
        &secrets,
    );
}

#[test]
fn a_jks_trust_store_is_refused_with_the_keytool_command_that_converts_it() {
    let (sasl, _) = secured();
    let lines = sasl_client("sasl", sasl, &sasl.secret("sasl.password"))
        .replace("truststore.p12", "truststore.jks")
        .replace("= PKCS12", "= JKS");
    let jks = sasl.secret_path("truststore.jks");
    let secrets = [sasl.secret("sasl.password"), sasl.secret("store.password")];
    refused_with_one_clear_line(
        "sasl",
        &lines,
        &format!("keytool -importkeystore -srckeystore {jks} -srcstoretype JKS"),
        &secrets,
    );
}
