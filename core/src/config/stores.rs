//! Java key and trust stores, turned into what librdkafka reads.
//!
//! An MM2 file names stores the Java way (`ssl.truststore.location`, `ssl.keystore.location`,
//! their `.type` and `.password`). librdkafka reads PEM files and PKCS#12 key stores, but no
//! PKCS#12 trust store and no JKS file. So, when a client is made:
//! - a PEM trust store becomes `ssl.ca.location`; a PKCS#12 one is opened with its password and
//!   its certificates handed over as `ssl.ca.pem`;
//! - a PKCS#12 key store passes through (`ssl.keystore.location` and `.password`); a PEM one
//!   becomes `ssl.certificate.location` and `ssl.key.location`;
//! - a JKS store is refused with the `keytool` command that converts it;
//! - a client certificate that expired (or is not valid yet) is refused before any broker is
//!   asked, since the broker's answer would only be "bad certificate".
//!
//! The store's kind comes from its bytes, as Java's own loader does since JDK 9: a `.type`
//! that says JKS over a PKCS#12 file is not an error.

use std::path::Path;

use openssl::asn1::Asn1Time;
use openssl::pkcs12::Pkcs12;
use openssl::x509::X509;

use super::client::{ClientSettings, Setting};

/// A store strait cannot use; the message names the key, its line and the fix.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A JKS file, which librdkafka cannot read.
    #[error(
        "`{key}` (line {line}) is the JKS store {path}, which librdkafka cannot read; convert it with \
         `keytool -importkeystore -srckeystore {path} -srcstoretype JKS -destkeystore {path}.p12 -deststoretype PKCS12` \
         and set `{key} = {path}.p12`"
    )]
    Jks {
        /// `ssl.truststore.location` or `ssl.keystore.location`.
        key: String,
        /// Where it was set.
        line: usize,
        /// The file.
        path: String,
    },
    /// The file could not be read or holds nothing usable.
    #[error("`{key}` (line {line}): cannot use {path}: {reason}")]
    Unusable {
        /// The key naming the file.
        key: String,
        /// Where it was set.
        line: usize,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A PKCS#12 store that its password does not open.
    #[error(
        "`{key}` (line {line}): the PKCS#12 store {path} does not open with `{password_key}`; check that password"
    )]
    Password {
        /// The key naming the file.
        key: String,
        /// Where it was set.
        line: usize,
        /// The file.
        path: String,
        /// The key whose value should open it.
        password_key: String,
    },
    /// The client certificate is outside its validity period.
    #[error("`{key}` (line {line}): the client certificate in {path} {when}; renew it (or fix this host's clock)")]
    Validity {
        /// The key naming the file.
        key: String,
        /// Where it was set.
        line: usize,
        /// The file.
        path: String,
        /// `expired on …` or `is not valid before …`.
        when: String,
    },
}

/// How a store file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// PEM text (`-----BEGIN …`).
    Pem,
    /// PKCS#12 (DER).
    Pkcs12,
    /// Java's own JKS (or JCEKS) format.
    Jks,
}

/// The kind of a store, from its first bytes.
///
/// ```
/// use strait_core::config::{store_kind, StoreKind};
/// assert_eq!(store_kind(b"\xfe\xed\xfe\xed\x00\x00\x00\x02"), StoreKind::Jks);
/// assert_eq!(store_kind(b"  -----BEGIN CERTIFICATE-----"), StoreKind::Pem);
/// assert_eq!(store_kind(b"\x30\x82\x0a\x1f"), StoreKind::Pkcs12);
/// ```
pub fn store_kind(bytes: &[u8]) -> StoreKind {
    // JKS and JCEKS magic numbers.
    if bytes.starts_with(&[0xfe, 0xed, 0xfe, 0xed]) || bytes.starts_with(&[0xce, 0xce, 0xce, 0xce]) {
        return StoreKind::Jks;
    }
    let text = bytes.iter().skip_while(|b| b.is_ascii_whitespace()).take(10).copied().collect::<Vec<u8>>();
    if text.starts_with(b"-----BEGIN") {
        StoreKind::Pem
    } else {
        StoreKind::Pkcs12
    }
}

/// librdkafka's settings for the stores `settings` name (none when they name none).
pub fn store_settings(settings: &ClientSettings) -> Result<Vec<Setting>, StoreError> {
    let mut out = Vec::new();
    let value = |key: &str| settings.get(key).map(|s| s.value.as_str());
    let put = |out: &mut Vec<Setting>, key: &str, value: String, line: usize| {
        out.push(Setting { key: key.into(), value, line })
    };
    if let Some(trust) = settings.get("ssl.truststore.location") {
        let (path, line) = (trust.value.trim(), trust.line);
        let bytes = read(trust)?;
        match store_kind(&bytes) {
            StoreKind::Jks => return Err(jks(trust)),
            StoreKind::Pem => put(&mut out, "ssl.ca.location", path.to_string(), line),
            StoreKind::Pkcs12 => {
                let password = value("ssl.truststore.password").unwrap_or("");
                let certs = open_pkcs12(trust, &bytes, password, "ssl.truststore.password")?;
                let pem = pem_of(trust, certs.iter())?;
                if pem.is_empty() {
                    return Err(unusable(trust, "it holds no certificate"));
                }
                put(&mut out, "ssl.ca.pem", pem, line);
            }
        }
    } else if let Some(certs) = settings.get("ssl.truststore.certificates") {
        put(&mut out, "ssl.ca.pem", certs.value.clone(), certs.line);
    }
    if let Some(keys) = settings.get("ssl.keystore.location") {
        let (path, line) = (keys.value.trim(), keys.line);
        let bytes = read(keys)?;
        match store_kind(&bytes) {
            StoreKind::Jks => return Err(jks(keys)),
            StoreKind::Pem => {
                let chain = X509::stack_from_pem(&bytes)
                    .map_err(|e| unusable(keys, &format!("not a PEM certificate chain ({e})")))?;
                check_validity(keys, chain.first())?;
                put(&mut out, "ssl.certificate.location", path.to_string(), line);
                put(&mut out, "ssl.key.location", path.to_string(), line);
                if let Some(p) = settings.get("ssl.key.password") {
                    put(&mut out, "ssl.key.password", p.value.clone(), p.line);
                }
            }
            StoreKind::Pkcs12 => {
                let password = value("ssl.keystore.password").unwrap_or("");
                let parsed = Pkcs12::from_der(&bytes)
                    .and_then(|p| p.parse2(password))
                    .map_err(|_| password_error(keys, "ssl.keystore.password"))?;
                if parsed.pkey.is_none() {
                    return Err(unusable(keys, "it holds no private key"));
                }
                check_validity(keys, parsed.cert.as_ref())?;
                put(&mut out, "ssl.keystore.location", path.to_string(), line);
                put(
                    &mut out,
                    "ssl.keystore.password",
                    password.to_string(),
                    settings.get("ssl.keystore.password").map_or(line, |s| s.line),
                );
            }
        }
    } else if let (Some(key), Some(chain)) =
        (settings.get("ssl.keystore.key"), settings.get("ssl.keystore.certificate.chain"))
    {
        put(&mut out, "ssl.key.pem", key.value.clone(), key.line);
        put(&mut out, "ssl.certificate.pem", chain.value.clone(), chain.line);
        if let Some(p) = settings.get("ssl.key.password") {
            put(&mut out, "ssl.key.password", p.value.clone(), p.line);
        }
    }
    Ok(out)
}

fn read(setting: &Setting) -> Result<Vec<u8>, StoreError> {
    std::fs::read(Path::new(setting.value.trim())).map_err(|e| unusable(setting, &e.to_string()))
}

fn jks(setting: &Setting) -> StoreError {
    StoreError::Jks { key: setting.key.clone(), line: setting.line, path: setting.value.trim().to_string() }
}

fn unusable(setting: &Setting, reason: &str) -> StoreError {
    StoreError::Unusable {
        key: setting.key.clone(),
        line: setting.line,
        path: setting.value.trim().to_string(),
        reason: reason.to_string(),
    }
}

fn password_error(setting: &Setting, password_key: &str) -> StoreError {
    StoreError::Password {
        key: setting.key.clone(),
        line: setting.line,
        path: setting.value.trim().to_string(),
        password_key: password_key.into(),
    }
}

/// Every certificate of a PKCS#12 store (a Java trust store holds only certificates).
fn open_pkcs12(setting: &Setting, der: &[u8], password: &str, password_key: &str) -> Result<Vec<X509>, StoreError> {
    let parsed =
        Pkcs12::from_der(der).and_then(|p| p.parse2(password)).map_err(|_| password_error(setting, password_key))?;
    let mut certs: Vec<X509> = parsed.cert.into_iter().collect();
    certs.extend(parsed.ca.into_iter().flatten());
    Ok(certs)
}

fn pem_of<'a>(setting: &Setting, certs: impl Iterator<Item = &'a X509>) -> Result<String, StoreError> {
    let mut pem = String::new();
    for cert in certs {
        let text = cert.to_pem().map_err(|e| unusable(setting, &e.to_string()))?;
        pem.push_str(&String::from_utf8_lossy(&text));
    }
    Ok(pem)
}

/// Refuses a client certificate outside its validity period.
fn check_validity(setting: &Setting, cert: Option<&X509>) -> Result<(), StoreError> {
    let Some(cert) = cert else {
        return Err(unusable(setting, "it holds no certificate"));
    };
    let Ok(now) = Asn1Time::days_from_now(0) else { return Ok(()) };
    let when = if cert.not_after() < now {
        format!("expired on {}", cert.not_after())
    } else if cert.not_before() > now {
        format!("is not valid before {}", cert.not_before())
    } else {
        return Ok(());
    };
    Err(StoreError::Validity {
        key: setting.key.clone(),
        line: setting.line,
        path: setting.value.trim().to_string(),
        when,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::hash::MessageDigest;
    use openssl::pkey::PKey;
    use openssl::rsa::Rsa;
    use openssl::x509::{X509Builder, X509NameBuilder};

    /// A self-signed certificate valid from `from` to `to` days from now, in a PKCS#12 key store.
    fn key_store(from: i64, to: i64, password: &str) -> Vec<u8> {
        let key = PKey::from_rsa(Rsa::generate(2048).expect("rsa")).expect("pkey");
        let mut name = X509NameBuilder::new().expect("name");
        name.append_entry_by_text("CN", "strait").expect("cn");
        let name = name.build();
        let mut b = X509Builder::new().expect("builder");
        let day = |d: i64| {
            Asn1Time::from_unix(
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs() as i64
                    + d * 86_400,
            )
            .expect("time")
        };
        b.set_not_before(&day(from)).expect("not before");
        b.set_not_after(&day(to)).expect("not after");
        b.set_subject_name(&name).expect("subject");
        b.set_issuer_name(&name).expect("issuer");
        b.set_pubkey(&key).expect("pubkey");
        b.sign(&key, MessageDigest::sha256()).expect("sign");
        let cert = b.build();
        Pkcs12::builder().name("strait").pkey(&key).cert(&cert).build2(password).expect("pkcs12").to_der().expect("der")
    }

    fn settings(dir: &Path, pairs: &[(&str, &str)]) -> ClientSettings {
        let mut s = ClientSettings::default();
        for (i, (k, v)) in pairs.iter().enumerate() {
            s.put_if_absent(Setting {
                key: k.to_string(),
                value: v.replace("$DIR", &dir.display().to_string()),
                line: i + 1,
            });
        }
        s
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("strait-stores-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn a_jks_store_is_refused_with_the_keytool_command_that_converts_it() {
        let dir = temp_dir("jks");
        std::fs::write(dir.join("trust.jks"), b"\xfe\xed\xfe\xed\x00\x00\x00\x02rest").expect("write");
        let s =
            settings(&dir, &[("ssl.truststore.location", "$DIR/trust.jks"), ("ssl.truststore.password", "changeit")]);
        let e = store_settings(&s).expect_err("JKS must be refused").to_string();
        let path = dir.join("trust.jks").display().to_string();
        assert!(
            e.contains(&format!(
                "keytool -importkeystore -srckeystore {path} -srcstoretype JKS -destkeystore {path}.p12 -deststoretype PKCS12"
            )),
            "{e}"
        );
        assert!(e.contains("line 1") && !e.contains("changeit"), "{e}");
    }

    #[test]
    fn a_pkcs12_key_store_passes_through_and_its_password_is_checked() {
        let dir = temp_dir("p12");
        std::fs::write(dir.join("client.p12"), key_store(-1, 30, "s3cret")).expect("write");
        let good = settings(
            &dir,
            &[
                ("ssl.keystore.location", "$DIR/client.p12"),
                ("ssl.keystore.password", "s3cret"),
                ("ssl.keystore.type", "PKCS12"),
            ],
        );
        let out = store_settings(&good).expect("a valid key store");
        let keys: Vec<(&str, &str)> = out.iter().map(|s| (s.key.as_str(), s.value.as_str())).collect();
        assert!(
            keys.contains(&("ssl.keystore.password", "s3cret"))
                && keys.iter().any(|(k, v)| *k == "ssl.keystore.location" && v.ends_with("client.p12")),
            "{keys:?}"
        );
        let bad = settings(&dir, &[("ssl.keystore.location", "$DIR/client.p12"), ("ssl.keystore.password", "wrong")]);
        let e = store_settings(&bad).expect_err("a wrong password").to_string();
        assert!(e.contains("does not open with `ssl.keystore.password`") && !e.contains("wrong"), "{e}");
    }

    #[test]
    fn an_expired_client_certificate_is_refused_naming_the_day_it_expired() {
        let dir = temp_dir("expired");
        std::fs::write(dir.join("old.p12"), key_store(-60, -30, "pw")).expect("write");
        let s = settings(&dir, &[("ssl.keystore.location", "$DIR/old.p12"), ("ssl.keystore.password", "pw")]);
        let e = store_settings(&s).expect_err("expired").to_string();
        assert!(e.contains("expired on") && e.contains("renew it"), "{e}");
    }

    #[test]
    fn a_pem_trust_store_becomes_ca_location_and_a_missing_file_names_its_key() {
        let dir = temp_dir("pem");
        std::fs::write(dir.join("ca.pem"), "-----BEGIN CERTIFICATE-----\n").expect("write");
        let out = store_settings(&settings(
            &dir,
            &[("ssl.truststore.location", "$DIR/ca.pem"), ("ssl.truststore.type", "PEM")],
        ))
        .expect("pem");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].key, "ssl.ca.location");
        let e = store_settings(&settings(&dir, &[("ssl.truststore.location", "$DIR/none.p12")]))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("`ssl.truststore.location` (line 1)") && e.contains("none.p12"), "{e}");
    }
}
