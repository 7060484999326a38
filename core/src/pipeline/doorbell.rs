//! Waking a pool thread when one of its stages has work. A thread that runs the stages of
//! several flows cannot block in any one stage's input; it parks instead, and whatever gives a
//! stage work rings that stage's doorbell: the stage before it handing on a batch, the stage
//! after it taking one (room for a batch it held back), librdkafka queueing fetched records,
//! the flow being asked to stop. So an idle flow costs its thread almost nothing, and a record
//! after a quiet spell does not wait for the thread's next look.

use std::sync::{Arc, OnceLock};
use std::thread::Thread;

/// The doorbell of one stage: rings the pool thread the stage runs on. Made before the stage
/// has a thread, hung on it when the pool places the stage; a ring before that is lost, which
/// costs nothing, because a stage's first step comes after it is placed.
#[derive(Debug, Clone, Default)]
pub struct Doorbell(Arc<OnceLock<Thread>>);

impl Doorbell {
    /// Wakes the stage's thread if it is parked, or makes its next park return at once.
    pub fn ring(&self) {
        if let Some(thread) = self.0.get() {
            thread.unpark();
        }
    }

    /// Ties the doorbell to the thread its stage runs on; a stage never moves.
    pub(crate) fn hang(&self, thread: Thread) {
        // Already hung means already on this thread: a stage is placed once.
        let _ = self.0.set(thread);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_ring_wakes_a_parked_thread_long_before_its_timeout() {
        let bell = Doorbell::default();
        let (parked_tx, parked_rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            parked_tx.send(()).expect("the test waits for this");
            let started = Instant::now();
            std::thread::park_timeout(Duration::from_secs(30));
            started.elapsed()
        });
        bell.hang(sleeper.thread().clone());
        parked_rx.recv().expect("the sleeper starts");
        bell.ring();
        let slept = sleeper.join().expect("the sleeper does not panic");
        assert!(slept < Duration::from_secs(10), "the ring did not wake the thread: it slept {slept:?}");
    }

    #[test]
    fn a_bell_not_yet_hung_rings_nothing_and_does_not_panic() {
        Doorbell::default().ring();
    }
}
