//! The schema registry keys: where each cluster's registry is and how to reach it
//! (`<alias>.schema.registry.*`, as Confluent's clients write them), and how a flow copies
//! schemas and the ids in its records (`schema.*`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::flow::FlowScope;
use super::{ConfigError, TopicFilter};

/// How one cluster's registry is reached.
#[derive(Clone, PartialEq, Eq)]
pub struct RegistryAccess {
    /// `<alias>.schema.registry.url`: the registry's Confluent-compatible API, e.g.
    /// `http://registry:8081` or Apicurio's `http://registry:8080/apis/ccompat/v7`.
    pub url: String,
    /// `<alias>.schema.registry.basic.auth.user.info` (`user:password`), when
    /// `basic.auth.credentials.source` is `USER_INFO`.
    pub user_info: Option<String>,
    /// `<alias>.schema.registry.ssl.ca.location`: a PEM file of the CA that signed an `https`
    /// registry's certificate (unset: the system's roots).
    pub ca_location: Option<PathBuf>,
    /// The line of the url key, for errors.
    pub line: usize,
}

impl std::fmt::Debug for RegistryAccess {
    /// The password never shows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAccess")
            .field("url", &self.url)
            .field("user", &self.user_info.as_deref().map(|u| u.split(':').next().unwrap_or_default()))
            .field("ca_location", &self.ca_location)
            .finish()
    }
}

/// What becomes of the schema id in each record's key and value (`schema.ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdMode {
    /// `translate` (the default): the target registry gives each schema its own id, and the id
    /// in every record in Confluent's wire format is rewritten to it.
    Translate,
    /// `keep`: the target registry, put in IMPORT mode, takes each schema under the source's
    /// id and version; records cross untouched. Needs a registry that honours imported ids.
    Keep,
}

/// A flow's schema sync.
#[derive(Debug, Clone)]
pub struct SchemaSync {
    /// The source cluster's registry.
    pub source: RegistryAccess,
    /// The target cluster's registry.
    pub target: RegistryAccess,
    /// `schema.ids`.
    pub ids: IdMode,
    /// `schema.subjects` / `schema.subjects.exclude`: whole-name regexes over source subjects
    /// (default: every subject).
    pub subjects: TopicFilter,
    /// `schema.versions = latest`: only a subject's latest version is copied by the periodic sync
    /// (older ones still follow when a record carries them). Default `all`.
    pub latest_only: bool,
    /// `schema.strict` (default false): a record whose schema id the source registry does not
    /// know stops the flow before it, instead of passing unchanged.
    pub strict: bool,
    /// `schema.sync.interval.seconds` (default 10): how often subjects are copied. A record whose
    /// schema is not on the target yet waits for it, whatever the interval.
    pub interval: Duration,
}

impl FlowScope<'_> {
    /// The flow's schema sync: on when both clusters name a registry and `schema.ids` is not
    /// `off`. A registry on one side only is a warning: there is nowhere to copy to or from.
    pub(super) fn schemas(&self, warnings: &mut BTreeMap<String, String>) -> Result<Option<SchemaSync>, ConfigError> {
        let (source, target) = (self.registry(true)?, self.registry(false)?);
        let ids = match self.get("schema.ids").map(|p| (p.value.trim(), p)) {
            None | Some(("translate", _)) => Some(IdMode::Translate),
            Some(("keep", _)) => Some(IdMode::Keep),
            Some(("off", _)) => None,
            Some((other, p)) => {
                return Err(ConfigError::BadValue {
                    line: p.line,
                    key: p.key.clone(),
                    reason: format!("is `{other}`; use `translate` (the default), `keep` or `off`"),
                })
            }
        };
        let (Some(source), Some(target), Some(ids)) = (source, target, ids) else {
            let (s, t) = self.aliases();
            if let Some((alias, other)) =
                match (self.cluster_get(true, "schema.registry.url"), self.cluster_get(false, "schema.registry.url")) {
                    (Some(_), None) => Some((s, t)),
                    (None, Some(_)) => Some((t, s)),
                    _ => None,
                }
            {
                warnings.entry(format!("{s}->{t}.schema")).or_insert_with(|| {
                    format!(
                        "flow {s}->{t}: `{alias}.schema.registry.url` is set but `{other}.schema.registry.url` is not, so schemas do not follow this flow's records; set both to copy them"
                    )
                });
            }
            return Ok(None);
        };
        let subjects = self.name_filter("schema.subjects", "")?;
        let latest_only = match self.get("schema.versions").map(|p| (p.value.trim(), p)) {
            None | Some(("all", _)) => false,
            Some(("latest", _)) => true,
            Some((other, p)) => {
                return Err(ConfigError::BadValue {
                    line: p.line,
                    key: p.key.clone(),
                    reason: format!("is `{other}`; use `all` (the default) or `latest`"),
                })
            }
        };
        let seconds: u64 = self.parse_or("schema.sync.interval.seconds", 10)?;
        if seconds == 0 {
            let p = self.get("schema.sync.interval.seconds").expect("only a configured value can be 0");
            return Err(ConfigError::BadValue {
                line: p.line,
                key: p.key.clone(),
                reason: "must be greater than 0".into(),
            });
        }
        Ok(Some(SchemaSync {
            source,
            target,
            ids,
            subjects,
            latest_only,
            strict: self.parse_or("schema.strict", false)?,
            interval: Duration::from_secs(seconds),
        }))
    }

    /// The registry of the flow's source (`source`) or target cluster, if it names one.
    fn registry(&self, source: bool) -> Result<Option<RegistryAccess>, ConfigError> {
        let Some(url) = self.cluster_get(source, "schema.registry.url") else { return Ok(None) };
        let value = url.value.trim().trim_end_matches('/');
        if !(value.starts_with("http://") || value.starts_with("https://")) {
            return Err(ConfigError::BadValue {
                line: url.line,
                key: url.key.clone(),
                reason: format!("is `{value}`, not an http:// or https:// URL of a Confluent-compatible registry API"),
            });
        }
        let user_info = self.cluster_get(source, "schema.registry.basic.auth.user.info");
        match self.cluster_get(source, "schema.registry.basic.auth.credentials.source").map(|p| (p.value.trim(), p)) {
            None | Some(("USER_INFO", _)) => {}
            Some((other, p)) => {
                return Err(ConfigError::BadValue {
                    line: p.line,
                    key: p.key.clone(),
                    reason: format!("is `{other}`; strait reads credentials from `USER_INFO` (set `schema.registry.basic.auth.user.info = user:password`)"),
                })
            }
        }
        if let Some(p) = user_info.filter(|p| !p.value.contains(':')) {
            return Err(ConfigError::BadValue {
                line: p.line,
                key: p.key.clone(),
                reason: "is not `user:password`".into(),
            });
        }
        Ok(Some(RegistryAccess {
            url: value.to_string(),
            user_info: user_info.map(|p| p.value.trim().to_string()),
            ca_location: self
                .cluster_get(source, "schema.registry.ssl.ca.location")
                .map(|p| PathBuf::from(p.value.trim())),
            line: url.line,
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, IdMode};

    const BASE: &str = "clusters = a, b\na.bootstrap.servers = h:1\nb.bootstrap.servers = h:2\na->b.enabled = true\n";

    #[test]
    fn schema_sync_needs_a_registry_on_both_sides() {
        let none = Config::parse(BASE).expect("config");
        assert!(none.flows[0].schemas.is_none());
        let one = Config::parse(&format!("{BASE}a.schema.registry.url = http://r:8081\n")).expect("config");
        assert!(one.flows[0].schemas.is_none());
        assert!(one.warnings.iter().any(|w| w.contains("b.schema.registry.url")), "{:?}", one.warnings);
        let both = Config::parse(&format!(
            "{BASE}a.schema.registry.url = http://r:8081/\nb.schema.registry.url = https://s/apis/ccompat/v7\nb.schema.registry.basic.auth.credentials.source = USER_INFO\nb.schema.registry.basic.auth.user.info = alice:secret\nschema.subjects = orders-.*\nschema.strict = true\n"
        ))
        .expect("config");
        let s = both.flows[0].schemas.as_ref().expect("on");
        assert_eq!((s.source.url.as_str(), s.target.url.as_str()), ("http://r:8081", "https://s/apis/ccompat/v7"));
        assert_eq!(s.target.user_info.as_deref(), Some("alice:secret"));
        assert!(!format!("{s:?}").contains("secret"), "the password never shows: {s:?}");
        assert_eq!((s.ids, s.strict, s.latest_only), (IdMode::Translate, true, false));
        assert!(s.subjects.matches("orders-value") && !s.subjects.matches("payments-value"));
        assert!(both.warnings.is_empty(), "{:?}", both.warnings);
    }

    #[test]
    fn bad_schema_keys_name_the_key_and_the_fix() {
        let regs = "a.schema.registry.url = http://r:1\nb.schema.registry.url = http://s:1\n";
        for (line, wants) in [
            ("schema.ids = rewrite", "translate"),
            ("schema.versions = some", "latest"),
            ("schema.sync.interval.seconds = 0", "greater than 0"),
            ("b.schema.registry.basic.auth.credentials.source = SASL_INHERIT", "USER_INFO"),
            ("b.schema.registry.basic.auth.user.info = alice", "user:password"),
        ] {
            let err = Config::parse(&format!("{BASE}{regs}{line}\n")).expect_err(line).to_string();
            let key = line.split(" = ").next().unwrap_or_default();
            assert!(err.contains(key) && err.contains(wants), "{line}: {err}");
        }
        let err = Config::parse(&format!("{BASE}a.schema.registry.url = r:8081\nb.schema.registry.url = http://s:1\n"))
            .expect_err("no scheme")
            .to_string();
        assert!(err.contains("a.schema.registry.url") && err.contains("http://"), "{err}");
    }
}
