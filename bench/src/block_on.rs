//! Runs one future to completion on the calling thread: the bench tools have no async runtime
//! and need one only for rdkafka's admin calls, whose futures are woken by rdkafka's own thread.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` until it is ready, parking between polls.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        // A wake-up that came before the park is not lost (park returns at once), and the
        // timeout covers a waker that was never called.
        std::thread::park_timeout(Duration::from_millis(50));
    }
}
