//! A client of a Confluent-compatible schema registry's REST API: the calls schema sync makes,
//! each one request, blocking, with a bounded wait.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};

use crate::config::RegistryAccess;

/// How long one request may take, connecting included. A registry that does not answer in
/// time is retried by the caller.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Confluent's media type for requests with a body.
const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// What went wrong talking to a registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No answer: connection refused, timed out, TLS failed.
    #[error("the schema registry of `{alias}` at {url} cannot be reached: {cause}; check that it runs and `{alias}.schema.registry.url`")]
    Unreachable {
        /// The cluster whose registry it is.
        alias: String,
        /// The registry's URL.
        url: String,
        /// What the client saw.
        cause: String,
    },
    /// HTTP 401 or 403.
    #[error("the schema registry of `{alias}` at {url} refused strait's credentials (HTTP {status}) for {what}; check `{alias}.schema.registry.basic.auth.user.info` and that user's permissions")]
    Refused {
        /// The cluster whose registry it is.
        alias: String,
        /// The registry's URL.
        url: String,
        /// The status.
        status: u16,
        /// The request.
        what: String,
    },
    /// Any other answer than the one expected.
    #[error("the schema registry of `{alias}` answered {what} with HTTP {status}: {body}")]
    Status {
        /// The cluster whose registry it is.
        alias: String,
        /// The request.
        what: String,
        /// The status.
        status: u16,
        /// The registry's message.
        body: String,
    },
    /// A schema cannot be copied as the flow's settings ask.
    #[error("copying schemas to the registry of `{alias}`: {cause}")]
    Copy {
        /// The cluster whose registry it is.
        alias: String,
        /// What stands in the way and what would do.
        cause: String,
    },
    /// The TLS settings could not be used.
    #[error("`{alias}.schema.registry.ssl.ca.location` ({path}) cannot be used: {cause}")]
    Tls {
        /// The cluster whose registry it is.
        alias: String,
        /// The file named.
        path: String,
        /// Why.
        cause: String,
    },
}

impl RegistryError {
    /// Whether trying again later may help (the registry is down or busy), as opposed to an
    /// answer that will not change by itself.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Status { status, .. } => *status >= 500 || *status == 429,
            Self::Refused { .. } | Self::Copy { .. } | Self::Tls { .. } => false,
        }
    }
}

/// A reference from one schema to another, by subject and version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SchemaReference {
    /// The name the referring schema uses (an Avro type, a Protobuf import path).
    pub name: String,
    /// The subject of the referenced schema.
    pub subject: String,
    /// Its version.
    pub version: i32,
}

/// A schema as registered: text, type and references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schema {
    /// The schema text.
    pub schema: String,
    /// `AVRO` (left out by registries, as the default), `PROTOBUF` or `JSON`.
    #[serde(rename = "schemaType", default, skip_serializing_if = "Option::is_none")]
    pub schema_type: Option<String>,
    /// Schemas this one refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<SchemaReference>,
}

/// One version of a subject.
#[derive(Debug, Clone, Deserialize)]
pub struct SubjectVersion {
    /// The subject.
    pub subject: String,
    /// The version.
    pub version: i32,
    /// The schema's id in this registry.
    pub id: u32,
    /// The schema.
    #[serde(flatten)]
    pub schema: Schema,
}

/// A schema registered under a requested id and version (IMPORT mode).
#[derive(Debug, Serialize)]
struct Import<'a> {
    #[serde(flatten)]
    schema: &'a Schema,
    id: u32,
    version: i32,
}

#[derive(Deserialize)]
struct Registered {
    id: u32,
}

#[derive(Deserialize)]
struct SubjectAndVersion {
    subject: String,
    version: i32,
}

#[derive(Deserialize)]
struct CompatibilityLevel {
    #[serde(rename = "compatibilityLevel", alias = "compatibility")]
    level: String,
}

/// One cluster's registry.
pub struct Registry {
    alias: String,
    url: String,
    authorization: Option<String>,
    agent: ureq::Agent,
}

impl Registry {
    /// A client of the registry of cluster `alias`, as `access` says to reach it.
    pub fn new(alias: &str, access: &RegistryAccess) -> Result<Self, RegistryError> {
        let mut tls = TlsConfig::builder().provider(TlsProvider::NativeTls).root_certs(RootCerts::PlatformVerifier);
        if let Some(path) = &access.ca_location {
            let tls_error = |cause: String| RegistryError::Tls {
                alias: alias.to_string(),
                path: path.display().to_string(),
                cause,
            };
            let pem = std::fs::read(path).map_err(|e| tls_error(e.to_string()))?;
            let cert = Certificate::from_pem(&pem).map_err(|e| tls_error(format!("not a PEM certificate: {e}")))?;
            tls = tls.root_certs(RootCerts::new_with_certs(&[cert]));
        }
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .tls_config(tls.build())
            .build()
            .into();
        let authorization = access.user_info.as_deref().map(|u| format!("Basic {}", base64(u.as_bytes())));
        Ok(Self { alias: alias.to_string(), url: access.url.clone(), authorization, agent })
    }

    /// The cluster alias whose registry this is.
    pub fn alias(&self) -> &str {
        &self.alias
    }

    /// Every subject.
    pub fn subjects(&self) -> Result<Vec<String>, RegistryError> {
        self.get("/subjects".into(), "listing subjects").map(Option::unwrap_or_default)
    }

    /// The versions of `subject`, oldest first; empty if there is no such subject.
    pub fn versions(&self, subject: &str) -> Result<Vec<i32>, RegistryError> {
        let mut versions: Vec<i32> = self
            .get(format!("/subjects/{}/versions", encode(subject)), &format!("listing the versions of `{subject}`"))?
            .unwrap_or_default();
        versions.sort_unstable();
        Ok(versions)
    }

    /// Version `version` of `subject`, if it exists.
    pub fn version(&self, subject: &str, version: i32) -> Result<Option<SubjectVersion>, RegistryError> {
        self.get(
            format!("/subjects/{}/versions/{version}", encode(subject)),
            &format!("reading `{subject}` version {version}"),
        )
    }

    /// The schema with id `id`, if the registry knows it.
    pub fn schema(&self, id: u32) -> Result<Option<Schema>, RegistryError> {
        self.get(format!("/schemas/ids/{id}"), &format!("reading schema id {id}"))
    }

    /// Every (subject, version) registered with schema id `id`.
    pub fn subjects_of(&self, id: u32) -> Result<Vec<(String, i32)>, RegistryError> {
        let found: Vec<SubjectAndVersion> = self
            .get(format!("/schemas/ids/{id}/versions"), &format!("reading the subjects of schema id {id}"))?
            .unwrap_or_default();
        Ok(found.into_iter().map(|s| (s.subject, s.version)).collect())
    }

    /// `schema` as registered under `subject`, if it is: its id and version here, without
    /// registering anything.
    pub fn lookup(&self, subject: &str, schema: &Schema) -> Result<Option<SubjectVersion>, RegistryError> {
        self.send(
            "POST",
            format!("/subjects/{}", encode(subject)),
            schema,
            &format!("looking up a schema under `{subject}`"),
        )
    }

    /// Registers `schema` under `subject` (a no-op when it is there already); its id here.
    pub fn register(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let what = format!("registering a schema under `{subject}`");
        let r: Option<Registered> =
            self.send("POST", format!("/subjects/{}/versions", encode(subject)), schema, &what)?;
        r.map(|r| r.id).ok_or_else(|| self.status(&what, 404, "no such subject".into()))
    }

    /// Registers `schema` under `subject` with the source's `id` and `version` (the subject
    /// must be in IMPORT mode); the id the registry answers, which a registry that does not
    /// honour imports gives of its own.
    pub fn import(&self, subject: &str, schema: &Schema, id: u32, version: i32) -> Result<u32, RegistryError> {
        let what = format!("importing schema id {id} as `{subject}` version {version}");
        let body = Import { schema, id, version };
        let r: Option<Registered> =
            self.send("POST", format!("/subjects/{}/versions", encode(subject)), &body, &what)?;
        r.map(|r| r.id).ok_or_else(|| self.status(&what, 404, "no such subject".into()))
    }

    /// Puts `subject` in IMPORT mode.
    pub fn set_import_mode(&self, subject: &str) -> Result<(), RegistryError> {
        let body = serde_json::json!({ "mode": "IMPORT" });
        let _: Option<serde_json::Value> = self.send(
            "PUT",
            format!("/mode/{}", encode(subject)),
            &body,
            &format!("putting `{subject}` in IMPORT mode"),
        )?;
        Ok(())
    }

    /// `subject`'s own compatibility level, if it has one.
    pub fn compatibility(&self, subject: &str) -> Result<Option<String>, RegistryError> {
        let level: Option<CompatibilityLevel> =
            self.get(format!("/config/{}", encode(subject)), &format!("reading the compatibility of `{subject}`"))?;
        Ok(level.map(|l| l.level))
    }

    /// Sets `subject`'s compatibility level.
    pub fn set_compatibility(&self, subject: &str, level: &str) -> Result<(), RegistryError> {
        let body = serde_json::json!({ "compatibility": level });
        let _: Option<serde_json::Value> = self.send(
            "PUT",
            format!("/config/{}", encode(subject)),
            &body,
            &format!("setting the compatibility of `{subject}`"),
        )?;
        Ok(())
    }

    fn get<T: serde::de::DeserializeOwned>(&self, path: String, what: &str) -> Result<Option<T>, RegistryError> {
        let mut request = self.agent.get(format!("{}{path}", self.url));
        if let Some(a) = &self.authorization {
            request = request.header("Authorization", a);
        }
        self.answer(request.call(), what)
    }

    fn send<B: Serialize, T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: String,
        body: &B,
        what: &str,
    ) -> Result<Option<T>, RegistryError> {
        let url = format!("{}{path}", self.url);
        let mut request = if method == "PUT" { self.agent.put(url) } else { self.agent.post(url) };
        request = request.header("Content-Type", CONTENT_TYPE);
        if let Some(a) = &self.authorization {
            request = request.header("Authorization", a);
        }
        let body =
            serde_json::to_vec(body).map_err(|e| self.status(what, 0, format!("cannot encode the request: {e}")))?;
        self.answer(request.send(&body[..]), what)
    }

    /// The body of a 2xx answer; `None` for 404 (no such subject, version or id).
    fn answer<T: serde::de::DeserializeOwned>(
        &self,
        response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        what: &str,
    ) -> Result<Option<T>, RegistryError> {
        let mut response = response.map_err(|e| RegistryError::Unreachable {
            alias: self.alias.clone(),
            url: self.url.clone(),
            cause: e.to_string(),
        })?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        match status {
            200..=299 => serde_json::from_str(&body)
                .map(Some)
                .map_err(|e| self.status(what, status, format!("an answer strait cannot read ({e}): {}", clip(&body)))),
            404 => Ok(None),
            401 | 403 => Err(RegistryError::Refused {
                alias: self.alias.clone(),
                url: self.url.clone(),
                status,
                what: what.to_string(),
            }),
            _ => Err(self.status(what, status, clip(&body))),
        }
    }

    fn status(&self, what: &str, status: u16, body: String) -> RegistryError {
        RegistryError::Status { alias: self.alias.clone(), what: what.to_string(), status, body }
    }
}

/// The first 300 characters of a registry's message.
fn clip(body: &str) -> String {
    body.chars().take(300).collect()
}

/// A subject as one path segment: subjects may hold any character.
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Standard base64 with padding, for the basic auth header.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_auth_and_subjects_are_encoded_as_http_wants() {
        assert_eq!(base64(b"alice:secret"), "YWxpY2U6c2VjcmV0");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b""), "");
        assert_eq!(encode("us-east.orders-value"), "us-east.orders-value");
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn a_version_reads_as_registries_write_it() {
        let v: SubjectVersion = serde_json::from_str(
            r#"{"subject":"orders-value","version":2,"id":7,"schema":"{\"type\":\"string\"}","references":[{"name":"a.proto","subject":"a","version":1}]}"#,
        )
        .expect("read");
        assert_eq!(
            (v.subject.as_str(), v.version, v.id, v.schema.schema_type.as_deref()),
            ("orders-value", 2, 7, None)
        );
        assert_eq!(v.schema.references.len(), 1);
        let body = serde_json::to_string(&Import { schema: &v.schema, id: 7, version: 2 }).expect("write");
        assert!(
            body.contains(r#""id":7"#) && body.contains(r#""version":2"#) && !body.contains("schemaType"),
            "{body}"
        );
    }
}
