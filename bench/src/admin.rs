//! The one admin call the bench tools make themselves: creating their topics. They have no
//! async runtime, so rdkafka's admin futures (woken by rdkafka's own thread) are run to
//! completion on the calling thread.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use anyhow::{bail, Context as _};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::types::RDKafkaErrorCode;

/// Creates `topics` on `bootstrap` with `partitions` each and one replica; a topic that already
/// exists is kept as it is.
pub fn create_topics(bootstrap: &str, topics: &[String], partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap).create().context("admin client")?;
    let new: Vec<NewTopic> = topics.iter().map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1))).collect();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(60)));
    for r in block_on(admin.create_topics(&new, &options))? {
        if let Err((name, e)) = r {
            if e != RDKafkaErrorCode::TopicAlreadyExists {
                bail!("creating {name}: {e}");
            }
        }
    }
    Ok(())
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `f` until it is ready, parking between polls.
fn block_on<F: Future>(f: F) -> F::Output {
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
