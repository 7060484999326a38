//! What strait's calls into librdkafka's C Admin API share (the calls rdkafka 0.39 does not wrap:
//! see `group_offsets`, `topic_configs` and `acls`): owning handles that destroy their object on
//! drop, one request's options and reply queue, and the reading of C strings, arrays and errors.
//!
//! Ownership rules these helpers rely on, from librdkafka's documentation: an Admin API call
//! copies its arguments into its own operation, so the caller destroys what it created right
//! after the call; a result event owns everything reached through it (strings, arrays, error
//! objects), which therefore must be copied out before the event is destroyed.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr::NonNull;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

/// librdkafka refuses request timeouts above one hour.
const MAX_TIMEOUT_MS: i32 = 3_600_000;

/// An object librdkafka created for this code, destroyed (once) when dropped.
pub(super) struct Owned<T> {
    ptr: NonNull<T>,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Owned<T> {
    /// Takes ownership of `ptr`; `None` when librdkafka returned null.
    ///
    /// # Safety
    /// `ptr` is null or a live object nothing else destroys, and `destroy` is its destructor.
    pub(super) unsafe fn new(ptr: *mut T, destroy: unsafe extern "C" fn(*mut T)) -> Option<Self> {
        NonNull::new(ptr).map(|ptr| Self { ptr, destroy })
    }

    /// The object, still owned here.
    pub(super) fn ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `new`'s contract: the object is live, owned here only, and `destroy` fits it.
        unsafe { (self.destroy)(self.ptr.as_ptr()) }
    }
}

/// The options and reply queue of one Admin API request on `client`'s handle.
pub(super) struct AdminRequest<'a> {
    rk: *mut rd::rd_kafka_t,
    options: Owned<rd::rd_kafka_AdminOptions_t>,
    queue: Owned<rd::rd_kafka_queue_t>,
    timeout_ms: i32,
    _client: PhantomData<&'a ()>,
}

impl<'a> AdminRequest<'a> {
    /// Options for the Admin API call `op` with `timeout` as its request timeout, and a new queue
    /// for its answer.
    pub(super) fn new<C: ClientContext>(
        client: &'a Client<C>,
        op: rd::rd_kafka_admin_op_t,
        timeout: Duration,
    ) -> Result<Self, String> {
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(MAX_TIMEOUT_MS).min(MAX_TIMEOUT_MS);
        let rk = client.native_ptr();
        // SAFETY: `rk` stays live while `client` is borrowed, which `'a` ties this value to. Both
        // objects are new and owned only by the returned value. The timeout is within librdkafka's
        // range, so setting it cannot fail.
        unsafe {
            let options = Owned::new(rd::rd_kafka_AdminOptions_new(rk, op), rd::rd_kafka_AdminOptions_destroy)
                .ok_or_else(|| format!("librdkafka has no admin options for {op:?}"))?;
            let mut errstr = [0 as c_char; 256];
            rd::rd_kafka_AdminOptions_set_request_timeout(options.ptr(), timeout_ms, errstr.as_mut_ptr(), errstr.len());
            let queue = Owned::new(rd::rd_kafka_queue_new(rk), rd::rd_kafka_queue_destroy)
                .ok_or("librdkafka could not create a queue")?;
            Ok(Self { rk, options, queue, timeout_ms, _client: PhantomData })
        }
    }

    /// The client handle, for the call itself.
    pub(super) fn rk(&self) -> *mut rd::rd_kafka_t {
        self.rk
    }

    /// The options, for the call itself.
    pub(super) fn options(&self) -> *const rd::rd_kafka_AdminOptions_t {
        self.options.ptr()
    }

    /// The reply queue, for the call itself.
    pub(super) fn queue(&self) -> *mut rd::rd_kafka_queue_t {
        self.queue.ptr()
    }

    /// Waits for the request's one answer (its timeout plus a second), checks the request-level
    /// error and that `view` (e.g. `rd_kafka_event_CreateAcls_result`) accepts the event. Per-item
    /// errors are in the result, for the caller to read.
    pub(super) fn answer(&self, view: ResultView) -> Result<Answer<'a>, String> {
        // SAFETY: the queue is live (owned by `self`); the event it returns is new and owned by the
        // returned value only; `view` only reads it.
        unsafe {
            let event = rd::rd_kafka_queue_poll(self.queue.ptr(), self.timeout_ms.saturating_add(1000));
            let event = Owned::new(event, rd::rd_kafka_event_destroy).ok_or("no answer within the timeout")?;
            if rd::rd_kafka_event_error(event.ptr()) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(c_text(rd::rd_kafka_event_error_string(event.ptr())));
            }
            let result = view(event.ptr());
            if result.is_null() {
                return Err("an unexpected event answered the request".into());
            }
            Ok(Answer { _event: event, result, _client: PhantomData })
        }
    }
}

/// A result accessor of an Admin API event, such as `rd_kafka_event_CreateAcls_result` (every
/// result type is an alias of the event type): null when the event is of another kind.
pub(super) type ResultView = unsafe extern "C" fn(*mut rd::rd_kafka_event_t) -> *const rd::rd_kafka_event_t;

/// The answer to an Admin API request: the event, destroyed on drop (while the client handle
/// still lives), and its typed result.
pub(super) struct Answer<'a> {
    _event: Owned<rd::rd_kafka_event_t>,
    result: *const rd::rd_kafka_event_t,
    _client: PhantomData<&'a ()>,
}

impl Answer<'_> {
    /// The result, for the `rd_kafka_*_result_*` accessors; it and everything reached through it
    /// live as long as `self`.
    pub(super) fn result(&self) -> *const rd::rd_kafka_event_t {
        self.result
    }
}

/// The text of a C string, or "unknown error" for null.
///
/// # Safety
/// `s` is null or a NUL-terminated string that outlives the call.
pub(super) unsafe fn c_text(s: *const c_char) -> String {
    if s.is_null() {
        return "unknown error".into();
    }
    CStr::from_ptr(s).to_string_lossy().into_owned()
}

/// A C array of `count` elements as a slice (empty for null).
///
/// # Safety
/// `items` is null or points to `count` initialised elements that outlive `'a`.
pub(super) unsafe fn c_array<'a, T>(items: *const T, count: usize) -> &'a [T] {
    if items.is_null() {
        return &[];
    }
    std::slice::from_raw_parts(items, count)
}

/// `message (ERROR_NAME)`: the broker's text and librdkafka's name of the error, which callers
/// match on (e.g. `TOPIC_AUTHORIZATION_FAILED`) to add a hint. The names are Kafka's except for a
/// few librdkafka shortened, e.g. `UNKNOWN_TOPIC_OR_PART`.
///
/// # Safety
/// `message` is null or a NUL-terminated string that outlives the call.
pub(super) unsafe fn error_text(code: rd::rd_kafka_resp_err_t, message: *const c_char) -> String {
    format!("{} ({})", c_text(message), c_text(rd::rd_kafka_err2name(code)))
}

/// `Err(error_text)` for an error object, `Ok` for null.
///
/// # Safety
/// `error` is null or a live error object that outlives the call.
pub(super) unsafe fn check_error(error: *const rd::rd_kafka_error_t) -> Result<(), String> {
    if error.is_null() {
        return Ok(());
    }
    Err(error_text(rd::rd_kafka_error_code(error), rd::rd_kafka_error_string(error)))
}
