//! Several strait processes as one replicator, through Kafka's own group coordinator.
//!
//! Each flow has a fixed set of *tasks* (`tasks.max`, MM2's key): task `t` replicates every
//! source partition `p` with `p % tasks.max == t`, of every replicated topic (Kafka Streams
//! splits work the same way). Every process running the flow joins the consumer group
//! `strait.<source>-><target>` on the **target** cluster and subscribes to
//! `strait-tasks.<source>.<target>.internal`, a topic with one partition per task that holds no
//! record: the partitions the coordinator assigns a member are the tasks it runs. The group is
//! on the target because that is where everything a flow writes lives, and a process that
//! cannot reach the target could not replicate anyway.
//!
//! Assignment is cooperative-sticky: a member that joins or leaves moves only the tasks that
//! must move. A member losing tasks stops its flow, storing the positions of everything the
//! target acknowledged, before it lets the coordinator hand them on, so the new owner resumes
//! where it stopped. A member that dies (`kill -9`, a lost network) is dropped after the
//! session timeout and its tasks resume from its last stored positions: records it had sent
//! since are sent again, none is lost.
//!
//! Fencing: a process that lost its tasks without knowing it (frozen past its session, cut off
//! from the coordinator) must not overwrite what the new owner stored. Positions are written in
//! transactions that carry the membership's member id and generation ([`GroupSession`]), which
//! the coordinator refuses once the member is gone; in exactly-once mode each task's
//! `transactional.id` fences its previous owner as well.
//!
//! Work that must be done once per flow (heartbeats, checkpoints, group offset sync) is done by
//! the owner of task 0.

mod agreement;
mod membership;
mod session;

pub use agreement::{agreement, by_settings, Agreement, Stamp};
pub use membership::{group_id, GroupEvent, Membership, Tasks};
pub use session::GroupSession;
