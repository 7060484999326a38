//! A consumer group's committed offsets through librdkafka's Admin API
//! (`rd_kafka_ListConsumerGroupOffsets`), which rdkafka 0.39 does not wrap.
//!
//! The alternative, `Consumer::committed_offsets`, needs one client per group (librdkafka binds a
//! client to one `group.id`). The benchmark against MM2 showed what that costs on a cluster with
//! a few hundred groups: hundreds of clients and their threads, and a checkpoint round that
//! starved replication on 2 cores. The Admin API asks any client handle for any group, finding
//! each group's coordinator itself, so one handle serves every group. This is the one place
//! strait calls librdkafka's C API directly; every pointer below is owned and released here.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

/// One committed offset: topic, partition, offset, metadata.
pub type GroupOffset = (String, i32, i64, String);

/// Every committed offset of `group`, through the client handle of `client`.
pub fn list_group_offsets<C: ClientContext>(client: &Client<C>, group: &str, timeout: Duration) -> Result<Vec<GroupOffset>, String> {
    let group_c = CString::new(group).map_err(|_| format!("group name `{group}` contains a NUL byte"))?;
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let rk = client.native_ptr();
    // SAFETY: `rk` is a live handle for the duration of `client`'s borrow. Every object created
    // here (request, options, queue, event) is destroyed before returning, on every path; the
    // result's strings and partition list belong to the event and are copied before it is
    // destroyed. librdkafka copies the request into its own operation, so destroying ours right
    // after the call is what its documentation asks for.
    unsafe {
        let mut request = rd::rd_kafka_ListConsumerGroupOffsets_new(group_c.as_ptr(), std::ptr::null());
        let options = rd::rd_kafka_AdminOptions_new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS);
        let mut errstr = [0 as std::os::raw::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(options, timeout_ms, errstr.as_mut_ptr(), errstr.len());
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_ListConsumerGroupOffsets(rk, &mut request, 1, options, queue);
        rd::rd_kafka_ListConsumerGroupOffsets_destroy(request);
        let event = rd::rd_kafka_queue_poll(queue, timeout_ms.saturating_add(1000));
        let result = read_result(event);
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        result
    }
}

/// Copies the offsets out of a ListConsumerGroupOffsets result event.
///
/// # Safety
/// `event` is null or a live event returned by `rd_kafka_queue_poll`.
unsafe fn read_result(event: *mut rd::rd_kafka_event_t) -> Result<Vec<GroupOffset>, String> {
    if event.is_null() {
        return Err("no answer within the timeout".into());
    }
    if rd::rd_kafka_event_error(event) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(c_text(rd::rd_kafka_event_error_string(event)));
    }
    let result = rd::rd_kafka_event_ListConsumerGroupOffsets_result(event);
    if result.is_null() {
        return Err("an unexpected event answered the request".into());
    }
    let mut count = 0usize;
    let groups = rd::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count);
    let mut out = Vec::new();
    for i in 0..count {
        let group = *groups.add(i);
        let error = rd::rd_kafka_group_result_error(group);
        if !error.is_null() {
            return Err(c_text(rd::rd_kafka_error_string(error)));
        }
        let list = rd::rd_kafka_group_result_partitions(group);
        if list.is_null() {
            continue;
        }
        let list = &*list;
        for j in 0..usize::try_from(list.cnt).unwrap_or(0) {
            let e = &*list.elems.add(j);
            if e.err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || e.offset < 0 || e.topic.is_null() {
                continue;
            }
            let metadata = if e.metadata.is_null() || e.metadata_size == 0 {
                String::new()
            } else {
                String::from_utf8_lossy(std::slice::from_raw_parts(e.metadata as *const u8, e.metadata_size)).into_owned()
            };
            out.push((c_text(e.topic), e.partition, e.offset, metadata));
        }
    }
    Ok(out)
}

/// # Safety
/// `s` is null or a NUL-terminated string that outlives the call.
unsafe fn c_text(s: *const std::os::raw::c_char) -> String {
    if s.is_null() {
        return "unknown error".into();
    }
    CStr::from_ptr(s).to_string_lossy().into_owned()
}
