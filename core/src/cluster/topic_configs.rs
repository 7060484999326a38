//! Config changes and reads through librdkafka's Admin API: `rd_kafka_IncrementalAlterConfigs`,
//! which rdkafka 0.39 does not wrap, and `rd_kafka_DescribeConfigs` of one broker (rdkafka wraps
//! it only on its `AdminClient`, while strait's calls take any client handle).
//!
//! IncrementalAlterConfigs changes only the keys it names; the older AlterConfigs that rdkafka
//! wraps replaces a topic's whole set of overrides, so every key it does not repeat falls back to
//! the broker's default.

use std::ffi::CString;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

use super::ffi::{c_array, c_text, check_error, error_text, AdminRequest, Owned, ResultView};

/// One change of a topic config key (IncrementalAlterConfigs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set the key to this value.
    Set(String),
    /// Remove the topic's own value: the key falls back to the broker's default.
    Delete,
}

/// Applies `ops` to `topic`'s configs through IncrementalAlterConfigs. Keys not named keep their
/// value. An error carries the broker's text and librdkafka's error name, e.g. `Invalid value x for
/// configuration retention.bytes: Not a number of type LONG (INVALID_CONFIG)` or
/// `... (TOPIC_AUTHORIZATION_FAILED)`. Empty `ops`: `Ok` without a request.
pub fn incremental_alter_topic_configs<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    ops: &[(String, ConfigOp)],
    timeout: Duration,
) -> Result<(), String> {
    if ops.is_empty() {
        return Ok(());
    }
    let resource = new_resource(rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC, topic)?;
    for (key, op) in ops {
        let key_c = CString::new(key.as_str()).map_err(|_| format!("config key `{key}` contains a NUL byte"))?;
        let (op_type, value) = match op {
            ConfigOp::Set(v) => (rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET, Some(v)),
            ConfigOp::Delete => (rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE, None),
        };
        let value_c = value
            .map(|v| CString::new(v.as_str()))
            .transpose()
            .map_err(|_| format!("the value of config `{key}` contains a NUL byte"))?;
        // SAFETY: `resource` is live and owned here; the strings outlive the call, which copies
        // them. The returned error object (if any) is ours and destroyed after it is read.
        unsafe {
            let value_ptr = value_c.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
            let error =
                rd::rd_kafka_ConfigResource_add_incremental_config(resource.ptr(), key_c.as_ptr(), op_type, value_ptr);
            if let Some(error) = Owned::new(error, rd::rd_kafka_error_destroy) {
                check_error(error.ptr()).map_err(|e| format!("config `{key}`: {e}"))?;
            }
        }
    }
    config_request(client, resource, &INCREMENTAL_ALTER, timeout, |_| ())
}

/// The value of broker config `key` on broker `broker_id` (DescribeConfigs of that broker); `None`
/// when the broker does not list the key or hides its value (a sensitive key).
pub(super) fn broker_config<C: ClientContext>(
    client: &Client<C>,
    broker_id: i32,
    key: &str,
    timeout: Duration,
) -> Result<Option<String>, String> {
    let resource = new_resource(rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_BROKER, &broker_id.to_string())?;
    config_request(client, resource, &DESCRIBE, timeout, |answered| {
        // SAFETY: `config_request` hands over resources of a live result event; the entries and
        // their strings belong to it and are copied here.
        unsafe {
            for &res in answered {
                let mut n = 0usize;
                let entries = rd::rd_kafka_ConfigResource_configs(res, &mut n);
                for &entry in c_array(entries, n) {
                    if c_text(rd::rd_kafka_ConfigEntry_name(entry)) == key {
                        let value = rd::rd_kafka_ConfigEntry_value(entry);
                        return (!value.is_null()).then(|| c_text(value));
                    }
                }
            }
            None
        }
    })
}

/// One of the Admin API calls that take an array of config resources.
struct ConfigApi {
    op: rd::rd_kafka_admin_op_t,
    call: unsafe extern "C" fn(
        *mut rd::rd_kafka_t,
        *mut *mut rd::rd_kafka_ConfigResource_t,
        usize,
        *const rd::rd_kafka_AdminOptions_t,
        *mut rd::rd_kafka_queue_t,
    ),
    view: ResultView,
    resources:
        unsafe extern "C" fn(*const rd::rd_kafka_event_t, *mut usize) -> *mut *const rd::rd_kafka_ConfigResource_t,
}

const INCREMENTAL_ALTER: ConfigApi = ConfigApi {
    op: rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
    call: rd::rd_kafka_IncrementalAlterConfigs,
    view: rd::rd_kafka_event_IncrementalAlterConfigs_result,
    resources: rd::rd_kafka_IncrementalAlterConfigs_result_resources,
};

const DESCRIBE: ConfigApi = ConfigApi {
    op: rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS,
    call: rd::rd_kafka_DescribeConfigs,
    view: rd::rd_kafka_event_DescribeConfigs_result,
    resources: rd::rd_kafka_DescribeConfigs_result_resources,
};

/// Sends `resource` through `api` and passes the answered resources to `read`, unless one of them
/// carries an error: then that error's text (`message (ERROR_NAME)`).
fn config_request<C: ClientContext, T>(
    client: &Client<C>,
    resource: Owned<rd::rd_kafka_ConfigResource_t>,
    api: &ConfigApi,
    timeout: Duration,
    read: impl FnOnce(&[*const rd::rd_kafka_ConfigResource_t]) -> T,
) -> Result<T, String> {
    let call = AdminRequest::new(client, api.op, timeout)?;
    // SAFETY: librdkafka copies `resource` into its operation; ours is destroyed on return. The
    // answered resources belong to `answer`, which outlives `read`.
    unsafe {
        let mut resources = [resource.ptr()];
        (api.call)(call.rk(), resources.as_mut_ptr(), 1, call.options(), call.queue());
        let answer = call.answer(api.view)?;
        let mut count = 0usize;
        let answered = c_array((api.resources)(answer.result(), &mut count), count);
        for &res in answered {
            let err = rd::rd_kafka_ConfigResource_error(res);
            if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(error_text(err, rd::rd_kafka_ConfigResource_error_string(res)));
            }
        }
        Ok(read(answered))
    }
}

/// A new config resource of type `restype` named `name`, owned by the caller.
fn new_resource(
    restype: rd::rd_kafka_ResourceType_t,
    name: &str,
) -> Result<Owned<rd::rd_kafka_ConfigResource_t>, String> {
    let name_c = CString::new(name).map_err(|_| format!("`{name}` contains a NUL byte"))?;
    // SAFETY: the name outlives the call, which copies it; the new resource is owned only by the
    // returned value.
    unsafe {
        Owned::new(rd::rd_kafka_ConfigResource_new(restype, name_c.as_ptr()), rd::rd_kafka_ConfigResource_destroy)
    }
    .ok_or_else(|| format!("librdkafka refused the config resource `{name}`"))
}
