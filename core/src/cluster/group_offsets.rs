//! A consumer group's committed offsets through librdkafka's Admin API
//! (`rd_kafka_ListConsumerGroupOffsets`), which rdkafka 0.39 does not wrap.
//!
//! The alternative, `Consumer::committed_offsets`, needs one client per group (librdkafka binds a
//! client to one `group.id`). The benchmark against MM2 showed what that costs on a cluster with
//! a few hundred groups: hundreds of clients and their threads, and a checkpoint round that
//! starved replication on 2 cores. The Admin API asks any client handle for any group, finding
//! each group's coordinator itself, so one handle serves every group. Like `topic_configs` and
//! `acls`, this calls librdkafka's C API directly, through the helpers in `ffi`.
//!
//! librdkafka 2.12 takes one group per ListConsumerGroupOffsets call, so many groups are read
//! as many calls in flight at once on one reply queue ([`list_offsets_of_groups`]): a round over
//! thousands of groups costs a few round trips per window, not one per group.

use std::collections::HashMap;
use std::ffi::CString;
use std::time::{Duration, Instant};

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

use super::ffi::{c_array, c_text, AdminRequest, Owned};

/// One committed offset: topic, partition, offset, metadata.
pub type GroupOffset = (String, i32, i64, String);

/// How many groups' offsets are asked for at once: enough to hide the round trip, few enough
/// that a window's answers (a few KiB each) stay small.
pub const GROUPS_IN_FLIGHT: usize = 64;

/// Every committed offset of `group`, through the client handle of `client`.
pub fn list_group_offsets<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    timeout: Duration,
) -> Result<Vec<GroupOffset>, String> {
    list_offsets_of_groups(client, &[group], timeout)
        .pop()
        .map_or_else(|| Err("no answer".into()), |(_, offsets)| offsets)
}

/// Every committed offset of each of `groups`, [`GROUPS_IN_FLIGHT`] calls at a time on one reply
/// queue; each group gets its own answer or error, in the order given.
pub fn list_offsets_of_groups<C: ClientContext, G: AsRef<str>>(
    client: &Client<C>,
    groups: &[G],
    timeout: Duration,
) -> Vec<(String, Result<Vec<GroupOffset>, String>)> {
    let mut out = Vec::with_capacity(groups.len());
    for window in groups.chunks(GROUPS_IN_FLIGHT) {
        let names: Vec<&str> = window.iter().map(AsRef::as_ref).collect();
        let mut answers = match ask_window(client, &names, timeout) {
            Ok(answers) => answers,
            Err(e) => names.iter().map(|g| (g.to_string(), Err(e.clone()))).collect(),
        };
        for name in names {
            let answer = answers.remove(name).unwrap_or_else(|| Err("no answer within the timeout".into()));
            out.push((name.to_string(), answer));
        }
    }
    out
}

/// Sends one call per group of `groups` on one queue, then reads as many answers.
fn ask_window<C: ClientContext>(
    client: &Client<C>,
    groups: &[&str],
    timeout: Duration,
) -> Result<HashMap<String, Result<Vec<GroupOffset>, String>>, String> {
    let call = AdminRequest::new(client, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, timeout)?;
    // Every call of the window was sent at once with the same timeout: once a read came back
    // empty at its end, none is left to wait for (each read would wait the whole timeout again).
    let deadline = Instant::now() + timeout;
    let mut answers = HashMap::with_capacity(groups.len());
    let mut sent = 0;
    for &group in groups {
        let Ok(group_c) = CString::new(group) else {
            answers.insert(group.to_string(), Err(format!("group name `{group}` contains a NUL byte")));
            continue;
        };
        // SAFETY: the request is owned by `request` and destroyed right after the call, as
        // librdkafka asks (it copies it, and the options).
        unsafe {
            let Some(request) = Owned::new(
                rd::rd_kafka_ListConsumerGroupOffsets_new(group_c.as_ptr(), std::ptr::null()),
                rd::rd_kafka_ListConsumerGroupOffsets_destroy,
            ) else {
                answers.insert(group.to_string(), Err("librdkafka refused the request".into()));
                continue;
            };
            let mut requests = [request.ptr()];
            rd::rd_kafka_ListConsumerGroupOffsets(call.rk(), requests.as_mut_ptr(), 1, call.options(), call.queue());
        }
        sent += 1;
    }
    for _ in 0..sent {
        // A request-level error (a timeout, say) does not say which group it was for: the
        // groups left unanswered are reported so by the caller.
        let Ok(answer) = call.answer(rd::rd_kafka_event_ListConsumerGroupOffsets_result) else {
            if Instant::now() >= deadline {
                break;
            }
            continue;
        };
        // SAFETY: the result's strings and partition lists belong to `answer` and are copied
        // out while it lives.
        for (group, offsets) in unsafe { read_result(answer.result()) } {
            answers.insert(group, offsets);
        }
    }
    Ok(answers)
}

/// Copies each group's offsets out of a ListConsumerGroupOffsets result.
///
/// # Safety
/// `result` is a live ListConsumerGroupOffsets result.
unsafe fn read_result(
    result: *const rd::rd_kafka_ListConsumerGroupOffsets_result_t,
) -> Vec<(String, Result<Vec<GroupOffset>, String>)> {
    let mut count = 0usize;
    let groups = rd::rd_kafka_ListConsumerGroupOffsets_result_groups(result, &mut count);
    c_array(groups, count)
        .iter()
        .map(|&group| (c_text(rd::rd_kafka_group_result_name(group)), read_group(group)))
        .collect()
}

/// Copies one group's offsets out of its result.
///
/// # Safety
/// `group` is a live group result.
unsafe fn read_group(group: *const rd::rd_kafka_group_result_t) -> Result<Vec<GroupOffset>, String> {
    let error = rd::rd_kafka_group_result_error(group);
    if !error.is_null() {
        return Err(c_text(rd::rd_kafka_error_string(error)));
    }
    let list = rd::rd_kafka_group_result_partitions(group);
    if list.is_null() {
        return Ok(Vec::new());
    }
    let list = &*list;
    let mut out = Vec::new();
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
    Ok(out)
}
