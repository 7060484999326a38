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
                Translation::Many(pairs) => out.extend(pairs.into_iter().map(|(key, value)| Setting {
                    key: key.into(),
                    value,
                    line: s.line,
                })),
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
    Renamed(&'static str, String),
    Many(Vec<(&'static str, String)>),
    Drop(&'static str),
}

fn translate(s: &Setting) -> Translation {
    match s.key.as_str() {
        "sasl.mechanism" => Translation::Renamed("sasl.mechanisms", s.value.clone()),
        "sasl.jaas.config" => match jaas_credentials(&s.value) {
            Some((user, pass)) => Translation::Many(vec![("sasl.username", user), ("sasl.password", pass)]),
            None => Translation::Drop("only PlainLoginModule / ScramLoginModule with username and password are understood; set `sasl.username` and `sasl.password` instead"),
        },
        "ssl.endpoint.identification.algorithm" if s.value.is_empty() => {
            Translation::Renamed("ssl.endpoint.identification.algorithm", "none".into())
        }
        "ssl.truststore.location" => Translation::Renamed("ssl.ca.location", s.value.clone()),
        "ssl.truststore.type" | "ssl.truststore.password" | "ssl.keystore.type" | "ssl.keystore.location"
        | "ssl.keystore.password" | "ssl.key.password" | "ssl.protocol" | "ssl.enabled.protocols"
        | "ssl.trustmanager.algorithm" | "ssl.keymanager.algorithm" => Translation::Drop(
            "Java key stores are not readable by librdkafka; give PEM files with `ssl.ca.location`, `ssl.certificate.location` and `ssl.key.location`",
        ),
        "buffer.memory" => match s.value.trim().parse::<u64>() {
            Ok(bytes) => Translation::Renamed("queue.buffering.max.kbytes", (bytes / 1024).max(1).to_string()),
            Err(_) => Translation::Drop("not a number of bytes"),
        },
        "max.request.size" => Translation::Renamed("message.max.bytes", s.value.clone()),
        "key.serializer" | "value.serializer" | "key.deserializer" | "value.deserializer" | "interceptor.classes"
        | "partitioner.class" | "max.poll.records" | "max.block.ms" | "client.dns.lookup" | "metric.reporters"
        | "auto.include.jmx.reporter" | "allow.auto.create.topics" | "exclude.internal.topics"
        | "default.api.timeout.ms" | "retry.backoff.max.ms" | "socket.connection.setup.timeout.max.ms"
        | "connections.max.idle.ms" | "reconnect.backoff.ms" | "metadata.max.age.ms" => {
            Translation::Drop("it is a Java client setting with no librdkafka counterpart")
        }
        // `auto.offset.reset` is read by the flow (where a partition with no stored position
        // starts); out-of-range positions always reset to the beginning, so nothing is skipped.
        "enable.auto.commit" | "group.id" | "enable.idempotence" => {
            Translation::Drop("strait sets it itself to keep at-least-once delivery")
        }
        _ => Translation::Keep,
    }
}

/// Pulls `username="..." password="..."` out of a JAAS line.
fn jaas_credentials(jaas: &str) -> Option<(String, String)> {
    let field = |name: &str| -> Option<String> {
        let start = jaas.find(&format!("{name}="))? + name.len() + 1;
        let rest = jaas[start..].strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    };
    Some((field("username")?, field("password")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> Setting {
        Setting { key: key.into(), value: value.into(), line: 7 }
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
