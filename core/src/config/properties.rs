//! A reader for Java's `.properties` format, the format of MM2's `mm2.properties`.
//!
//! It keeps the line number of every key so that every later error can point the operator at
//! the line to fix.

use super::ConfigError;

/// One `key = value` entry and the line it started on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// The key, with escapes resolved and surrounding white space removed.
    pub key: String,
    /// The value, with escapes and line continuations resolved.
    pub value: String,
    /// 1-based line number of the first physical line of the entry.
    pub line: usize,
}

/// Parses the text of a properties file.
///
/// Follows `java.util.Properties::load`: `#` and `!` start comments, `=`, `:` or white space
/// separate key and value, a trailing odd backslash continues the line, and `\t \n \r \f \uXXXX`
/// escapes are resolved. A later duplicate key overrides an earlier one, as in Java.
///
/// ```
/// let props = strait_core::config::properties::parse("a = 1\n# note\nb: two \\\n  lines\n").unwrap();
/// assert_eq!(props[1].value, "two lines");
/// ```
pub fn parse(text: &str) -> Result<Vec<Property>, ConfigError> {
    let mut out: Vec<Property> = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((index, raw)) = lines.next() {
        let line_no = index + 1;
        let trimmed = raw.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('!') {
            continue;
        }
        let mut logical = String::from(trimmed);
        while ends_with_continuation(&logical) {
            logical.pop();
            match lines.next() {
                Some((_, next)) => logical.push_str(next.trim_start()),
                None => break,
            }
        }
        let (raw_key, raw_value) = split_key_value(&logical);
        let key = unescape(raw_key, line_no)?;
        if key.is_empty() {
            return Err(ConfigError::Malformed {
                line: line_no,
                reason: "the line has a value but no key; write `key = value`".into(),
            });
        }
        let value = unescape(raw_value, line_no)?.trim_end().to_string();
        out.retain(|p| p.key != key);
        out.push(Property { key, value, line: line_no });
    }
    Ok(out)
}

fn ends_with_continuation(line: &str) -> bool {
    let slashes = line.bytes().rev().take_while(|b| *b == b'\\').count();
    slashes % 2 == 1
}

/// Splits at the first unescaped `=`, `:` or white space, then skips the separator run.
fn split_key_value(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'=' | b':' | b' ' | b'\t' | b'\x0c' => break,
            _ => i += 1,
        }
    }
    let i = i.min(bytes.len());
    let key = &line[..i];
    let mut rest = line[i..].trim_start_matches([' ', '\t', '\x0c']);
    if let Some(stripped) = rest.strip_prefix(['=', ':']) {
        rest = stripped.trim_start_matches([' ', '\t', '\x0c']);
    }
    (key, rest)
}

fn unescape(text: &str, line: usize) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\x0c'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32).ok_or_else(|| {
                    ConfigError::Malformed { line, reason: format!("`\\u{hex}` is not a valid unicode escape") }
                })?;
                out.push(code);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_comments_and_continuations() {
        let text = "# c\n! c\nclusters = a, b\na.bootstrap.servers:h:1\nkey value\nmulti = x, \\\n   y\n\n";
        let p = parse(text).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!((p[0].key.as_str(), p[0].value.as_str(), p[0].line), ("clusters", "a, b", 3));
        assert_eq!(p[1].value, "h:1");
        assert_eq!((p[2].key.as_str(), p[2].value.as_str()), ("key", "value"));
        assert_eq!((p[3].value.as_str(), p[3].line), ("x, y", 6));
    }

    #[test]
    fn escaped_separator_in_key_and_later_duplicate_wins() {
        let p = parse("a\\=b = 1\nk = 1\nk = 2\n").unwrap();
        assert_eq!(p[0].key, "a=b");
        assert_eq!(p.iter().filter(|p| p.key == "k").count(), 1);
        assert_eq!(p.last().unwrap().value, "2");
    }

    #[test]
    fn malformed_lines_name_the_line() {
        let err = parse("ok = 1\n= value\n").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        let err = parse("k = \\uZZZZ\n").unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
