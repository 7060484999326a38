//! Wall-clock time as Kafka counts it. A leaf: every layer may use it, and it uses nothing of
//! the engine.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, the unit of Kafka's record timestamps; 0 on a clock set
/// before 1970.
///
/// ```
/// assert!(strait_core::clock::now_millis() > 1_600_000_000_000);
/// ```
pub fn now_millis() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
