//! Which topic ACLs of the source a flow creates on the target, by MM2's rules
//! (`MirrorSourceConnector.syncTopicAcls`): ALLOW WRITE is never copied (only the replicator
//! writes remote topics), ALLOW ALL becomes ALLOW READ, and the binding moves to the remote
//! topic. MM2 copies literal bindings only; strait also copies a prefixed binding when the
//! remote names of every replicated topic under the prefix share one remote prefix that differs
//! from the source's (as `us-east.` + prefix does): with names kept (identity naming), the same
//! prefix on the target would also cover the target's own topics.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::{AclOperation, TopicAcl};

/// The bindings the target should hold for the replicated topics (`replicated`: source topic →
/// remote topic). Topics the flow does not replicate get nothing.
pub fn remote_acls(source: &[TopicAcl], replicated: &BTreeMap<String, String>) -> BTreeSet<TopicAcl> {
    let mut out = BTreeSet::new();
    for acl in source {
        if acl.allow && acl.operation == AclOperation::Write {
            continue;
        }
        let remote =
            if acl.prefixed { remote_prefix(&acl.topic, replicated) } else { replicated.get(&acl.topic).cloned() };
        let Some(remote) = remote else { continue };
        let operation =
            if acl.allow && acl.operation == AclOperation::All { AclOperation::Read } else { acl.operation };
        out.insert(TopicAcl { topic: remote, operation, ..acl.clone() });
    }
    out
}

/// The remote prefix that covers exactly the remote names of the replicated topics under
/// `prefix`: each remote name must be one shared head followed by what its source name has
/// after the prefix (true of MM2's default naming). `None` when no replicated topic is under the
/// prefix, the naming does not keep prefixes, or it keeps names unchanged.
fn remote_prefix(prefix: &str, replicated: &BTreeMap<String, String>) -> Option<String> {
    let mut head: Option<&str> = None;
    for (topic, remote) in replicated.range(prefix.to_string()..).take_while(|(t, _)| t.starts_with(prefix)) {
        let rest = &topic[prefix.len()..];
        let this = remote.strip_suffix(rest)?;
        match head {
            None => head = Some(this),
            Some(h) if h == this => {}
            Some(_) => return None,
        }
    }
    head.filter(|h| *h != prefix).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(topic: &str, prefixed: bool, operation: AclOperation, allow: bool) -> TopicAcl {
        TopicAcl { topic: topic.into(), prefixed, principal: "User:alice".into(), host: "*".into(), operation, allow }
    }

    fn replicated(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn mm2_rules_no_allow_write_all_becomes_read_and_only_replicated_topics() {
        let r = replicated(&[("orders", "us-east.orders")]);
        let source = vec![
            acl("orders", false, AclOperation::Read, true),
            acl("orders", false, AclOperation::Write, true),
            acl("orders", false, AclOperation::All, true),
            acl("orders", false, AclOperation::Write, false),
            acl("orders", false, AclOperation::All, false),
            acl("payments", false, AclOperation::Read, true),
        ];
        let got: Vec<TopicAcl> = remote_acls(&source, &r).into_iter().collect();
        let want: BTreeSet<TopicAcl> = [
            acl("us-east.orders", false, AclOperation::Read, true),
            acl("us-east.orders", false, AclOperation::Write, false),
            acl("us-east.orders", false, AclOperation::All, false),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn a_prefix_moves_to_the_remote_prefix_only_when_the_naming_keeps_it() {
        let r = replicated(&[
            ("sales.eu", "us-east.sales.eu"),
            ("sales.us", "us-east.sales.us"),
            ("stock", "us-east.stock"),
        ]);
        let got = remote_acls(
            &[acl("sales.", true, AclOperation::Describe, true), acl("hr.", true, AclOperation::Read, true)],
            &r,
        );
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            vec![acl("us-east.sales.", true, AclOperation::Describe, true)]
        );
        let identity = replicated(&[("sales.eu", "sales.eu")]);
        assert_eq!(remote_prefix("sales.", &identity), None, "the same prefix would cover the target's own topics");
        let scrambled = replicated(&[("sales.eu", "x.sales.eu"), ("sales.us", "y.sales.us")]);
        assert_eq!(remote_prefix("sales.", &scrambled), None);
        let renamed = replicated(&[("sales.eu", "eu-sales")]);
        assert_eq!(remote_prefix("sales.", &renamed), None);
    }
}
