//! Topic ACLs through librdkafka's Admin API (`rd_kafka_DescribeAcls`, `rd_kafka_CreateAcls`),
//! which rdkafka 0.39 does not wrap.
//!
//! librdkafka 2.12 drops the top-level error of a DescribeAcls response: a broker without an
//! authorizer answers SECURITY_DISABLED, and librdkafka reports that as an empty list. So an empty
//! answer is checked against the broker's `authorizer.class.name` before it is believed. The same
//! loss hides CLUSTER_AUTHORIZATION_FAILED (a principal without DESCRIBE on the cluster); that check
//! catches it only when the principal may not describe broker configs either.

use std::ffi::CString;
use std::fmt;
use std::os::raw::c_char;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

use super::ffi::{c_array, c_text, check_error, AdminRequest, Owned};
use super::topic_configs::broker_config;

/// What a cluster without an authorizer means for ACL sync, in one line.
const NO_AUTHORIZER: &str =
    "the cluster has no authorizer (SECURITY_DISABLED): set `authorizer.class.name` on its brokers or turn off `sync.topic.acls.enabled`";

/// An ACL operation (Kafka's AclOperation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AclOperation {
    /// Matches any operation (filters only).
    Any,
    /// Every operation.
    All,
    /// READ.
    Read,
    /// WRITE.
    Write,
    /// CREATE.
    Create,
    /// DELETE.
    Delete,
    /// ALTER.
    Alter,
    /// DESCRIBE.
    Describe,
    /// CLUSTER_ACTION.
    ClusterAction,
    /// DESCRIBE_CONFIGS.
    DescribeConfigs,
    /// ALTER_CONFIGS.
    AlterConfigs,
    /// IDEMPOTENT_WRITE.
    IdempotentWrite,
    /// An operation this librdkafka does not know.
    Unknown,
}

impl fmt::Display for AclOperation {
    /// Kafka's name: `READ`, `WRITE`, `ALL`, `DESCRIBE_CONFIGS`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(OPERATIONS.iter().find(|(op, ..)| op == self).map_or("UNKNOWN", |&(.., name)| name))
    }
}

/// Every operation with librdkafka's value and Kafka's name for it.
const OPERATIONS: [(AclOperation, rd::rd_kafka_AclOperation_t, &str); 13] = {
    use rd::rd_kafka_AclOperation_t as R;
    [
        (AclOperation::Any, R::RD_KAFKA_ACL_OPERATION_ANY, "ANY"),
        (AclOperation::All, R::RD_KAFKA_ACL_OPERATION_ALL, "ALL"),
        (AclOperation::Read, R::RD_KAFKA_ACL_OPERATION_READ, "READ"),
        (AclOperation::Write, R::RD_KAFKA_ACL_OPERATION_WRITE, "WRITE"),
        (AclOperation::Create, R::RD_KAFKA_ACL_OPERATION_CREATE, "CREATE"),
        (AclOperation::Delete, R::RD_KAFKA_ACL_OPERATION_DELETE, "DELETE"),
        (AclOperation::Alter, R::RD_KAFKA_ACL_OPERATION_ALTER, "ALTER"),
        (AclOperation::Describe, R::RD_KAFKA_ACL_OPERATION_DESCRIBE, "DESCRIBE"),
        (AclOperation::ClusterAction, R::RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION, "CLUSTER_ACTION"),
        (AclOperation::DescribeConfigs, R::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS, "DESCRIBE_CONFIGS"),
        (AclOperation::AlterConfigs, R::RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS, "ALTER_CONFIGS"),
        (AclOperation::IdempotentWrite, R::RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE, "IDEMPOTENT_WRITE"),
        (AclOperation::Unknown, R::RD_KAFKA_ACL_OPERATION_UNKNOWN, "UNKNOWN"),
    ]
};

/// An ACL binding on a topic, literal or prefixed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicAcl {
    /// The topic name, or the name prefix when `prefixed`.
    pub topic: String,
    /// PREFIXED pattern (every topic whose name starts with `topic`) rather than LITERAL.
    pub prefixed: bool,
    /// The principal, e.g. `User:alice`.
    pub principal: String,
    /// The host, `*` for any.
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// ALLOW rather than DENY.
    pub allow: bool,
}

impl fmt::Display for TopicAcl {
    /// `ALLOW User:alice from * READ on topic orders` (`on topics orders*` when prefixed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let permission = if self.allow { "ALLOW" } else { "DENY" };
        let (topics, star) = if self.prefixed { ("topics", "*") } else { ("topic", "") };
        write!(
            f,
            "{permission} {} from {} {} on {topics} {}{star}",
            self.principal, self.host, self.operation, self.topic
        )
    }
}

/// Every LITERAL and PREFIXED ACL on TOPIC resources of the cluster (DescribeAcls with resource
/// TOPIC, any name, pattern type ANY, any principal/host/operation/permission). Bindings the types
/// cannot express (operation UNKNOWN or ANY, permission other than ALLOW/DENY) are skipped.
///
/// An empty answer is confirmed with a DescribeConfigs of one broker (see the module doc): a
/// cluster without an authorizer gives the SECURITY_DISABLED error, and a principal that may not
/// describe broker configs gets an error rather than an unconfirmed empty list.
pub fn describe_topic_acls<C: ClientContext>(client: &Client<C>, timeout: Duration) -> Result<Vec<TopicAcl>, String> {
    let call = AdminRequest::new(client, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS, timeout)?;
    // SAFETY: the filter is copied by the call and ours destroyed on return; the result's bindings
    // and their strings belong to `answer` and are copied while it lives.
    let acls = unsafe {
        let mut errstr = [0 as c_char; 256];
        let filter = rd::rd_kafka_AclBindingFilter_new(
            rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
            std::ptr::null(),
            rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_ANY,
            std::ptr::null(),
            std::ptr::null(),
            rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ANY,
            rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let filter = Owned::new(filter, rd::rd_kafka_AclBinding_destroy).ok_or_else(|| c_text(errstr.as_ptr()))?;
        rd::rd_kafka_DescribeAcls(call.rk(), filter.ptr(), call.options(), call.queue());
        let answer = call.answer(rd::rd_kafka_event_DescribeAcls_result)?;
        let mut count = 0usize;
        let bindings = rd::rd_kafka_DescribeAcls_result_acls(answer.result(), &mut count);
        c_array(bindings, count).iter().filter_map(|&b| read_binding(b)).collect::<Vec<_>>()
    };
    if acls.is_empty() {
        confirm_authorizer(client, timeout)?;
    }
    Ok(acls)
}

/// Creates `acls` (CreateAcls); creating one that exists is not an error. Empty: `Ok`, no request.
/// A cluster without an authorizer gives the SECURITY_DISABLED error; any other refusal names the
/// binding and carries librdkafka's error name (e.g. `CLUSTER_AUTHORIZATION_FAILED`).
pub fn create_topic_acls<C: ClientContext>(
    client: &Client<C>,
    acls: &[TopicAcl],
    timeout: Duration,
) -> Result<(), String> {
    if acls.is_empty() {
        return Ok(());
    }
    let bindings = acls.iter().map(new_binding).collect::<Result<Vec<_>, _>>()?;
    let call = AdminRequest::new(client, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS, timeout)?;
    // SAFETY: the bindings are copied by the call and ours destroyed on return; the per-binding
    // results belong to `answer` and are read while it lives.
    unsafe {
        let mut ptrs: Vec<_> = bindings.iter().map(Owned::ptr).collect();
        rd::rd_kafka_CreateAcls(call.rk(), ptrs.as_mut_ptr(), ptrs.len(), call.options(), call.queue());
        let answer = call.answer(rd::rd_kafka_event_CreateAcls_result)?;
        let mut count = 0usize;
        let results = rd::rd_kafka_CreateAcls_result_acls(answer.result(), &mut count);
        // Kafka answers in the order of the request.
        for (acl, &result) in acls.iter().zip(c_array(results, count)) {
            let error = rd::rd_kafka_acl_result_error(result);
            if !error.is_null()
                && rd::rd_kafka_error_code(error) == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_SECURITY_DISABLED
            {
                return Err(NO_AUTHORIZER.into());
            }
            check_error(error).map_err(|e| format!("creating ACL `{acl}`: {e}"))?;
        }
    }
    Ok(())
}

/// Errs with [`NO_AUTHORIZER`] when the brokers have no `authorizer.class.name` (any broker will
/// do: the setting is cluster-wide in practice, and DescribeAcls is answered by any broker).
fn confirm_authorizer<C: ClientContext>(client: &Client<C>, timeout: Duration) -> Result<(), String> {
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the handle is live while `client` is borrowed; the call only reads metadata.
    let broker = unsafe { rd::rd_kafka_controllerid(client.native_ptr(), timeout_ms) };
    let unconfirmed = |why: String| {
        format!("the cluster listed no topic ACLs, and whether it has an authorizer could not be checked: {why}")
    };
    if broker < 0 {
        return Err(unconfirmed("no broker answered a metadata request".into()));
    }
    match broker_config(client, broker, "authorizer.class.name", timeout).map_err(unconfirmed)? {
        Some(class) if !class.trim().is_empty() => Ok(()),
        _ => Err(NO_AUTHORIZER.into()),
    }
}

/// A new binding for `acl`, owned by the caller.
fn new_binding(acl: &TopicAcl) -> Result<Owned<rd::rd_kafka_AclBinding_t>, String> {
    let text = |s: &str| CString::new(s).map_err(|_| format!("ACL `{acl}` contains a NUL byte"));
    let (topic, principal, host) = (text(&acl.topic)?, text(&acl.principal)?, text(&acl.host)?);
    let mut errstr = [0 as c_char; 256];
    // SAFETY: the strings outlive the call, which copies them; the new binding is owned only by
    // the returned value. On failure librdkafka wrote a NUL-terminated reason into `errstr`.
    unsafe {
        let binding = rd::rd_kafka_AclBinding_new(
            rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
            topic.as_ptr(),
            pattern_to_rd(acl.prefixed),
            principal.as_ptr(),
            host.as_ptr(),
            operation_to_rd(acl.operation),
            permission_to_rd(acl.allow),
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        Owned::new(binding, rd::rd_kafka_AclBinding_destroy)
            .ok_or_else(|| format!("ACL `{acl}`: {}", c_text(errstr.as_ptr())))
    }
}

/// The topic ACL a described binding is, if the types can express it.
///
/// # Safety
/// `b` is a live binding of a result event.
unsafe fn read_binding(b: *const rd::rd_kafka_AclBinding_t) -> Option<TopicAcl> {
    if rd::rd_kafka_AclBinding_restype(b) != rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC {
        return None;
    }
    let operation = operation_from_rd(rd::rd_kafka_AclBinding_operation(b));
    if matches!(operation, AclOperation::Any | AclOperation::Unknown) {
        return None;
    }
    let text = |s: *const c_char| (!s.is_null()).then(|| c_text(s));
    Some(TopicAcl {
        topic: text(rd::rd_kafka_AclBinding_name(b))?,
        prefixed: pattern_from_rd(rd::rd_kafka_AclBinding_resource_pattern_type(b))?,
        principal: text(rd::rd_kafka_AclBinding_principal(b))?,
        host: text(rd::rd_kafka_AclBinding_host(b))?,
        operation,
        allow: permission_from_rd(rd::rd_kafka_AclBinding_permission_type(b))?,
    })
}

fn operation_to_rd(op: AclOperation) -> rd::rd_kafka_AclOperation_t {
    OPERATIONS
        .iter()
        .find(|(o, ..)| *o == op)
        .map_or(rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_UNKNOWN, |&(_, r, _)| r)
}

/// The operation for librdkafka's value; `Unknown` for values outside the table.
fn operation_from_rd(r: rd::rd_kafka_AclOperation_t) -> AclOperation {
    OPERATIONS.iter().find(|(_, x, _)| *x == r).map_or(AclOperation::Unknown, |&(op, ..)| op)
}

fn permission_to_rd(allow: bool) -> rd::rd_kafka_AclPermissionType_t {
    if allow {
        rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW
    } else {
        rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_DENY
    }
}

/// `Some(allow)` for ALLOW and DENY; `None` for UNKNOWN and ANY.
fn permission_from_rd(permission: rd::rd_kafka_AclPermissionType_t) -> Option<bool> {
    match permission {
        rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW => Some(true),
        rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_DENY => Some(false),
        _ => None,
    }
}

fn pattern_to_rd(prefixed: bool) -> rd::rd_kafka_ResourcePatternType_t {
    if prefixed {
        rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_PREFIXED
    } else {
        rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_LITERAL
    }
}

/// `Some(prefixed)` for PREFIXED and LITERAL; `None` for the filter-only and unknown types.
fn pattern_from_rd(pattern: rd::rd_kafka_ResourcePatternType_t) -> Option<bool> {
    match pattern {
        rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_PREFIXED => Some(true),
        rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_LITERAL => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rd::rd_kafka_AclOperation_t as R;
    use std::collections::HashSet;

    #[test]
    fn every_operation_maps_to_its_own_librdkafka_value_and_back() {
        let ops: HashSet<_> = OPERATIONS.iter().map(|&(op, ..)| op).collect();
        let values: HashSet<_> = OPERATIONS.iter().map(|&(_, r, _)| r as u32).collect();
        // 13 variants, and every librdkafka value below its count, each once.
        assert_eq!(ops.len(), 13);
        assert_eq!(values, (0..R::RD_KAFKA_ACL_OPERATION__CNT as u32).collect());
        for &(op, r, _) in &OPERATIONS {
            assert_eq!(operation_to_rd(op), r);
            assert_eq!(operation_from_rd(r), op);
        }
        assert_eq!(operation_from_rd(R::RD_KAFKA_ACL_OPERATION__CNT), AclOperation::Unknown);
    }

    #[test]
    fn operation_display_is_kafkas_name() {
        for &(op, r, _) in &OPERATIONS {
            // SAFETY: librdkafka returns a static string for every valid operation.
            let name = unsafe { c_text(rd::rd_kafka_AclOperation_name(r)) };
            assert_eq!(op.to_string(), name);
        }
        assert_eq!(AclOperation::DescribeConfigs.to_string(), "DESCRIBE_CONFIGS");
        assert_eq!(AclOperation::All.to_string(), "ALL");
    }

    #[test]
    fn permissions_map_both_ways_and_filters_are_refused() {
        for allow in [true, false] {
            assert_eq!(permission_from_rd(permission_to_rd(allow)), Some(allow));
        }
        assert_eq!(permission_to_rd(true), rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW);
        assert_eq!(permission_to_rd(false), rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_DENY);
        assert_eq!(permission_from_rd(rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_UNKNOWN), None);
        assert_eq!(permission_from_rd(rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ANY), None);
    }

    #[test]
    fn patterns_map_both_ways_and_filters_are_refused() {
        use rd::rd_kafka_ResourcePatternType_t as P;
        for prefixed in [true, false] {
            assert_eq!(pattern_from_rd(pattern_to_rd(prefixed)), Some(prefixed));
        }
        assert_eq!(pattern_to_rd(true), P::RD_KAFKA_RESOURCE_PATTERN_PREFIXED);
        assert_eq!(pattern_to_rd(false), P::RD_KAFKA_RESOURCE_PATTERN_LITERAL);
        for other in
            [P::RD_KAFKA_RESOURCE_PATTERN_UNKNOWN, P::RD_KAFKA_RESOURCE_PATTERN_ANY, P::RD_KAFKA_RESOURCE_PATTERN_MATCH]
        {
            assert_eq!(pattern_from_rd(other), None);
        }
    }

    #[test]
    fn acl_display_names_every_field() {
        let acl = TopicAcl {
            topic: "orders".into(),
            prefixed: true,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Read,
            allow: false,
        };
        assert_eq!(acl.to_string(), "DENY User:alice from * READ on topics orders*");
        assert_eq!(
            TopicAcl { prefixed: false, allow: true, ..acl }.to_string(),
            "ALLOW User:alice from * READ on topic orders"
        );
    }
}
