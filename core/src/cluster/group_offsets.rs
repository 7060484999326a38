//! A consumer group's committed offsets through librdkafka's Admin API
//! (`rd_kafka_ListConsumerGroupOffsets`), which rdkafka 0.39 does not wrap.
//!
//! The alternative, `Consumer::committed_offsets`, needs one client per group (librdkafka binds a
//! client to one `group.id`). The benchmark against MM2 showed what that costs on a cluster with
//! a few hundred groups: hundreds of clients and their threads, and a checkpoint round that
//! starved replication on 2 cores. The Admin API asks any client handle for any group, finding
//! each group's coordinator itself, so one handle serves every group. Like `topic_configs` and
//! `acls`, this calls librdkafka's C API directly, through the helpers in `ffi`.

use std::ffi::CString;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

use super::ffi::{c_array, c_text, AdminRequest, Owned};

/// One committed offset: topic, partition, offset, metadata.
pub type GroupOffset = (String, i32, i64, String);

/// Every committed offset of `group`, through the client handle of `client`.
pub fn list_group_offsets<C: ClientContext>(client: &Client<C>, group: &str, timeout: Duration) -> Result<Vec<GroupOffset>, String> {
    let group_c = CString::new(group).map_err(|_| format!("group name `{group}` contains a NUL byte"))?;
    let call = AdminRequest::new(client, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, timeout)?;
    // SAFETY: the request is owned by `request` and destroyed right after the call, as librdkafka
    // asks (it copies it). The result's strings and partition lists belong to `answer` and are
    // copied out while it lives.
    unsafe {
        let request = Owned::new(
            rd::rd_kafka_ListConsumerGroupOffsets_new(group_c.as_ptr(), std::ptr::null()),
            rd::rd_kafka_ListConsumerGroupOffsets_destroy,
        )
        .ok_or("librdkafka refused the request")?;
        let mut requests = [request.ptr()];
        rd::rd_kafka_ListConsumerGroupOffsets(call.rk(), requests.as_mut_ptr(), 1, call.options(), call.queue());
        drop(request);
        let answer = call.answer(rd::rd_kafka_event_ListConsumerGroupOffsets_result)?;
        read_result(answer.result())
    }
}

/// Copies the offsets out of a ListConsumerGroupOffsets result.
///
/// # Safety
/// `result` is a live ListConsumerGroupOffsets result.
unsafe fn read_result(result: *const rd::rd_kafka_ListConsumerGroupOffsets_result_t) -> Result<Vec<GroupOffset>, String> {
    let mut count = 0usize;
    let groups = rd::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count);
    let mut out = Vec::new();
    for &group in c_array(groups, count) {
        let error = rd::rd_kafka_group_result_error(group);
        if !error.is_null() {
            return Err(c_text(rd::rd_kafka_error_string(error)));
        }
        let list = rd::rd_kafka_group_result_partitions(group);
        if list.is_null() {
            continue;
        }
        let list = &*list;
        for e in c_array(list.elems, usize::try_from(list.cnt).unwrap_or(0)) {
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
