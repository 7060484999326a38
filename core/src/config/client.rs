//! Kafka client settings per cluster and role, with MM2's precedence, and their translation
//! from the Java client's names to librdkafka's.

use std::fmt;

/// Which Kafka client a setting is for, as in MM2's `<alias>.<role>.<key>` prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRole {
    /// The consumer reading the source cluster.
    Consumer,
    /// The producer writing the target cluster.
    Producer,
    /// An admin client on either cluster.
    Admin,
}

impl ClientRole {
    /// The prefix MM2 uses for this role: `consumer`, `producer` or `admin`.
    pub fn prefix(self) -> &'static str {
        match self {
            ClientRole::Consumer => "consumer",
            ClientRole::Producer => "producer",
            ClientRole::Admin => "admin",
        }
    }
}

/// One client setting and the line it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct Setting {
    /// The Java client's key, e.g. `sasl.jaas.config`.
    pub key: String,
    /// The value as written.
    pub value: String,
    /// 1-based line in the config file (0 when strait set it).
    pub line: usize,
}

/// The resolved settings of one client. Its `Debug` hides every secret value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientSettings {
    settings: Vec<Setting>,
}

impl ClientSettings {
    /// Whether both make the same client: the same keys and values in the same order,
    /// wherever in the file they were written.
    pub fn same_client(&self, other: &ClientSettings) -> bool {
        self.settings.len() == other.settings.len()
            && self.settings.iter().zip(&other.settings).all(|(a, b)| a.key == b.key && a.value == b.value)
    }

    /// Adds a setting unless one with the same key is already present (MM2's `putIfAbsent`).
    pub fn put_if_absent(&mut self, setting: Setting) {
        if self.get(&setting.key).is_none() {
            self.settings.push(setting);
        }
    }

    /// The value of a key.
    pub fn get(&self, key: &str) -> Option<&Setting> {
        self.settings.iter().find(|s| s.key == key)
    }

    /// Every setting in the order of precedence it was resolved in.
    pub fn iter(&self) -> impl Iterator<Item = &Setting> {
        self.settings.iter()
    }

    /// The settings in librdkafka's vocabulary, plus one warning per Java-only key that has
    /// no librdkafka equivalent and was left out.
    pub fn to_librdkafka(&self) -> (Vec<Setting>, Vec<String>) {
        let mut out = Vec::new();
        let mut warnings = Vec::new();
        for s in &self.settings {
            match translate(s) {
                Translation::Keep => out.push(s.clone()),
                Translation::Renamed(key, value) => out.push(Setting { key: key.into(), value, line: s.line }),
                Translation::Many(pairs) => {
                    out.extend(pairs.into_iter().map(|(key, value)| Setting { key: key.into(), value, line: s.line }))
                }
                Translation::Consumed => {}
                Translation::Drop(why) => {
                    warnings.push(format!("line {}: client setting `{}` is ignored: {why}", s.line, s.key))
                }
            }
        }
        (out, warnings)
    }
}

/// Whether a value must never be printed.
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "jaas", "token", "credential", "ssl.key.pem", "sasl.oauthbearer.config"]
        .iter()
        .any(|needle| key.contains(needle))
}

impl fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for s in &self.settings {
            if is_secret(&s.key) {
                map.entry(&s.key, &"<redacted>");
            } else {
                map.entry(&s.key, &s.value);
            }
        }
        map.finish()
    }
}

impl fmt::Debug for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = if is_secret(&self.key) { "<redacted>" } else { self.value.as_str() };
        write!(f, "{}={} (line {})", self.key, value, self.line)
    }
}

/// Whether MM2 shares this key from `<alias>.<key>` (and top-level `<key>`) with every client
/// of that cluster: the keys of Kafka's `CommonClientConfigs`.
pub(crate) fn is_common_client_key(key: &str) -> bool {
    key.starts_with("sasl.")
        || key.starts_with("ssl.")
        || matches!(
            key,
            "bootstrap.servers"
                | "security.protocol"
                | "client.dns.lookup"
                | "request.timeout.ms"
                | "retry.backoff.ms"
                | "reconnect.backoff.ms"
                | "reconnect.backoff.max.ms"
                | "metadata.max.age.ms"
                | "socket.connection.setup.timeout.ms"
                | "socket.connection.setup.timeout.max.ms"
                | "connections.max.idle.ms"
                | "send.buffer.bytes"
                | "receive.buffer.bytes"
        )
}

enum Translation {
    Keep,
    /// Read elsewhere: the key and trust stores, see [`super::stores`].
    Consumed,
    Renamed(&'static str, String),
    Many(Vec<(&'static str, String)>),
    Drop(&'static str),
}

fn translate(s: &Setting) -> Translation {
    match s.key.as_str() {
        "sasl.mechanism" => Translation::Renamed("sasl.mechanisms", s.value.clone()),
        "sasl.jaas.config" => match jaas(&s.value) {
            Some(pairs) => Translation::Many(pairs),
            None => Translation::Drop(
                "only the Plain, Scram, OAuthBearer and Krb5 login modules are understood; set librdkafka's `sasl.username`/`sasl.password`, `sasl.oauthbearer.*` or `sasl.kerberos.*` keys instead",
            ),
        },
        // librdkafka's OIDC support fetches and refreshes tokens itself.
        "sasl.login.callback.handler.class" if s.value.contains("OAuthBearer") => Translation::Consumed,
        "sasl.oauthbearer.scope.claim.name" | "sasl.oauthbearer.sub.claim.name" | "sasl.login.refresh.window.factor"
        | "sasl.login.refresh.window.jitter" | "sasl.login.refresh.min.period.seconds" | "sasl.login.refresh.buffer.seconds"
        | "sasl.login.connect.timeout.ms" | "sasl.login.read.timeout.ms" | "sasl.login.class" | "sasl.client.callback.handler.class" => {
            Translation::Drop("it is a Java client setting with no librdkafka counterpart")
        }
        "sasl.kerberos.service.name" => Translation::Keep,
        "sasl.kerberos.kinit.cmd" | "sasl.kerberos.min.time.before.relogin" => Translation::Keep,
        "sasl.kerberos.ticket.renew.window.factor" | "sasl.kerberos.ticket.renew.jitter" => {
            Translation::Drop("librdkafka renews Kerberos tickets with `sasl.kerberos.kinit.cmd`")
        }
        "ssl.endpoint.identification.algorithm" if s.value.is_empty() => {
            Translation::Renamed("ssl.endpoint.identification.algorithm", "none".into())
        }
        key if STORE_KEYS.contains(&key) => Translation::Consumed,
        "ssl.protocol" | "ssl.enabled.protocols" => Translation::Drop("librdkafka negotiates TLS 1.2 or 1.3 through OpenSSL"),
        "ssl.trustmanager.algorithm" | "ssl.keymanager.algorithm" | "ssl.provider" | "ssl.secure.random.implementation"
        | "ssl.engine.factory.class" => Translation::Drop("it names a Java security provider; librdkafka uses OpenSSL"),
        "ssl.cipher.suites" => Translation::Drop("Java cipher suite names differ from OpenSSL's; set librdkafka's `ssl.cipher.suites` in OpenSSL's syntax under a `<alias>.` prefix instead"),
        "buffer.memory" => match s.value.trim().parse::<u64>() {
            Ok(bytes) => Translation::Renamed("queue.buffering.max.kbytes", (bytes / 1024).max(1).to_string()),
            Err(_) => Translation::Drop("not a number of bytes"),
        },
        "max.request.size" => Translation::Renamed("message.max.bytes", s.value.clone()),
        // The Java client's name for the broker's long-poll wait; librdkafka's is the other way round.
        "fetch.max.wait.ms" => Translation::Renamed("fetch.wait.max.ms", s.value.clone()),
        // Java's -1 (the OS default) is librdkafka's 0.
        "receive.buffer.bytes" => Translation::Renamed("socket.receive.buffer.bytes", socket_buffer(&s.value)),
        "send.buffer.bytes" => Translation::Renamed("socket.send.buffer.bytes", socket_buffer(&s.value)),
        "key.serializer" | "value.serializer" | "key.deserializer" | "value.deserializer" | "interceptor.classes"
        | "partitioner.class" | "max.poll.records" | "max.block.ms" | "metric.reporters" | "metrics.num.samples"
        | "metrics.sample.window.ms" | "metrics.recording.level" | "security.providers" | "auto.include.jmx.reporter"
        | "exclude.internal.topics" | "default.api.timeout.ms" | "socket.connection.setup.timeout.max.ms" => {
            Translation::Drop("it is a Java client setting with no librdkafka counterpart")
        }
        "allow.auto.create.topics" => Translation::Drop("strait creates remote topics itself, with the source's partitions"),
        "partition.assignment.strategy" => {
            Translation::Drop("strait assigns partitions to its consumers itself; their groups are never joined")
        }
        // `auto.offset.reset` is read by the flow (where a partition with no stored position
        // starts); out-of-range positions always reset to the beginning, so nothing is skipped.
        "enable.auto.commit" | "group.id" | "enable.idempotence" => {
            Translation::Drop("strait sets it itself to keep at-least-once delivery")
        }
        _ => Translation::Keep,
    }
}

/// A Java socket buffer size in librdkafka's terms: both take bytes, but the OS default is -1
/// in Java and 0 in librdkafka.
fn socket_buffer(value: &str) -> String {
    if value.trim() == "-1" {
        "0".into()
    } else {
        value.to_string()
    }
}

/// librdkafka's settings for a JAAS line (`<LoginModule> required key="value" …;`), for the login
/// modules librdkafka has a counterpart of.
fn jaas(line: &str) -> Option<Vec<(&'static str, String)>> {
    let (module, options) = jaas_options(line)?;
    let get = |name: &str| options.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let class = module.rsplit('.').next().unwrap_or(&module);
    match class {
        "PlainLoginModule" | "ScramLoginModule" => {
            Some(vec![("sasl.username", get("username")?), ("sasl.password", get("password")?)])
        }
        "OAuthBearerLoginModule" => {
            // Kafka's unsecured development tokens, which librdkafka can make too.
            if let Some(subject) = get("unsecuredLoginStringClaim_sub") {
                return Some(vec![
                    ("enable.sasl.oauthbearer.unsecure.jwt", "true".into()),
                    ("sasl.oauthbearer.config", format!("principal={subject}")),
                ]);
            }
            let mut out = vec![
                ("sasl.oauthbearer.method", "oidc".to_string()),
                ("sasl.oauthbearer.client.id", get("clientId")?),
                ("sasl.oauthbearer.client.secret", get("clientSecret")?),
            ];
            if let Some(scope) = get("scope") {
                out.push(("sasl.oauthbearer.scope", scope));
            }
            Some(out)
        }
        "Krb5LoginModule" => {
            let mut out = Vec::new();
            if let Some(principal) = get("principal") {
                out.push(("sasl.kerberos.principal", principal));
            }
            if let Some(keytab) = get("keyTab") {
                out.push(("sasl.kerberos.keytab", keytab));
            }
            Some(out)
        }
        _ => None,
    }
}

/// A JAAS line's login module and its `key=value` options (values quoted or bare).
fn jaas_options(line: &str) -> Option<(String, Vec<(String, String)>)> {
    let line = line.trim().trim_end_matches(';');
    let mut words = line.splitn(3, char::is_whitespace);
    let module = words.next()?.to_string();
    let _flag = words.next()?;
    let mut rest = words.next().unwrap_or("").trim_start();
    let mut options = Vec::new();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = rest[..eq].trim().to_string();
        let after = &rest[eq + 1..];
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (quoted[..end].to_string(), &quoted[end + 1..])
            }
            None => {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                (after[..end].to_string(), &after[end..])
            }
        };
        options.push((key, value));
        rest = tail.trim_start();
    }
    Some((module, options))
}

/// The Java key and trust store keys that [`super::stores`] turns into librdkafka's; the
/// translation here only marks them consumed.
pub(crate) const STORE_KEYS: &[&str] = &[
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.key.password",
];

/// The keys under `<alias>.` that configure that cluster's schema registry client (see
/// `schemas.rs`).
const REGISTRY_KEYS: &[&str] = &[
    "schema.registry.url",
    "schema.registry.basic.auth.credentials.source",
    "schema.registry.basic.auth.user.info",
    "schema.registry.ssl.ca.location",
];

/// Whether `key` (after `<alias>.`) configures the cluster's schema registry client.
pub(super) fn is_registry_key(key: &str) -> bool {
    REGISTRY_KEYS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> Setting {
        Setting { key: key.into(), value: value.into(), line: 7 }
    }

    #[test]
    fn settings_written_on_other_lines_make_the_same_client() {
        let make = |line, servers: &str| {
            let mut c = ClientSettings::default();
            c.put_if_absent(Setting { key: "bootstrap.servers".into(), value: servers.into(), line });
            c
        };
        // Two aliases of one cluster, `a.bootstrap.servers` on line 2, `b.` on line 9.
        assert!(make(2, "k:9092").same_client(&make(9, "k:9092")));
        assert!(make(2, "k:9092") != make(9, "k:9092"), "equality still tells where each was written");
        assert!(!make(2, "k:9092").same_client(&make(2, "other:9092")));
        assert!(!make(2, "k:9092").same_client(&ClientSettings::default()));
    }

    #[test]
    fn jaas_becomes_username_and_password_and_debug_hides_them() {
        let mut c = ClientSettings::default();
        c.put_if_absent(set(
            "sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="s3cr3t";"#,
        ));
        c.put_if_absent(set("sasl.mechanism", "PLAIN"));
        let (out, warnings) = c.to_librdkafka();
        assert!(warnings.is_empty());
        let keys: Vec<_> = out.iter().map(|s| (s.key.as_str(), s.value.as_str())).collect();
        assert!(keys.contains(&("sasl.username", "alice")));
        assert!(keys.contains(&("sasl.password", "s3cr3t")));
        assert!(keys.contains(&("sasl.mechanisms", "PLAIN")));
        assert!(!format!("{c:?}").contains("s3cr3t"));
        assert!(!format!("{:?}", out).contains("s3cr3t"));
    }

    fn translated(jaas: &str) -> Vec<(String, String)> {
        let mut c = ClientSettings::default();
        c.put_if_absent(set("sasl.jaas.config", jaas));
        let (out, warnings) = c.to_librdkafka();
        assert!(warnings.is_empty(), "{warnings:?}");
        out.into_iter().map(|s| (s.key, s.value)).collect()
    }

    #[test]
    fn oauthbearer_and_kerberos_jaas_lines_become_librdkafkas_keys() {
        let oidc = translated(
            r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="strait" clientSecret="t0ps3cret" scope="kafka";"#,
        );
        let want = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert!(oidc.contains(&want("sasl.oauthbearer.method", "oidc")));
        assert!(oidc.contains(&want("sasl.oauthbearer.client.id", "strait")));
        assert!(oidc.contains(&want("sasl.oauthbearer.client.secret", "t0ps3cret")));
        assert!(oidc.contains(&want("sasl.oauthbearer.scope", "kafka")));
        let unsecured = translated(
            r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="alice";"#,
        );
        assert!(unsecured.contains(&want("sasl.oauthbearer.config", "principal=alice")));
        let krb = translated(
            r#"com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="/etc/strait.keytab" principal="strait@EXAMPLE.COM";"#,
        );
        assert!(krb.contains(&want("sasl.kerberos.keytab", "/etc/strait.keytab")));
        assert!(krb.contains(&want("sasl.kerberos.principal", "strait@EXAMPLE.COM")));
        let mut c = ClientSettings::default();
        c.put_if_absent(set("sasl.jaas.config", r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="a" clientSecret="t0ps3cret";"#));
        assert!(!format!("{c:?}").contains("t0ps3cret"));
    }

    #[test]
    fn java_consumer_keys_with_other_librdkafka_names_are_renamed() {
        let mut c = ClientSettings::default();
        c.put_if_absent(set("fetch.max.wait.ms", "250"));
        c.put_if_absent(set("receive.buffer.bytes", "-1"));
        c.put_if_absent(set("send.buffer.bytes", "131072"));
        c.put_if_absent(set("metadata.max.age.ms", "60000"));
        c.put_if_absent(set("partition.assignment.strategy", "org.apache.kafka.clients.consumer.RangeAssignor"));
        let (out, warnings) = c.to_librdkafka();
        let out: Vec<(&str, &str)> = out.iter().map(|s| (s.key.as_str(), s.value.as_str())).collect();
        assert_eq!(
            out,
            [
                ("fetch.wait.max.ms", "250"),
                ("socket.receive.buffer.bytes", "0"),
                ("socket.send.buffer.bytes", "131072"),
                ("metadata.max.age.ms", "60000"),
            ]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("partition.assignment.strategy"), "{warnings:?}");
    }

    #[test]
    fn first_put_wins_and_java_only_keys_warn_with_their_line() {
        let mut c = ClientSettings::default();
        c.put_if_absent(set("linger.ms", "10"));
        c.put_if_absent(set("linger.ms", "99"));
        c.put_if_absent(set("key.serializer", "x"));
        let (out, warnings) = c.to_librdkafka();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, "10");
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("line 7") && warnings[0].contains("key.serializer"));
    }
}
