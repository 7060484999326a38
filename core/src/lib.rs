//! strait's engine: replicates Kafka topics between independent clusters, reading MirrorMaker
//! 2's `mm2.properties`.
//!
//! The data path of one flow (`source->target`):
//!
//! ```text
//!  source cluster                                                          target cluster
//!  ──────────────► fetch ──batch──► filter ──batch──► transform ──batch──► produce ──────►
//!                    ▲                                                        │ acks
//!                    └──── resume position ◄── progress (acked prefix) ◄──────┘
//! ```
//!
//! The stages of every flow share a small pool of threads (see [`pipeline`]); bounded channels
//! carry batches, so a slow target back-pressures the fetcher instead of growing memory. Each
//! flow is supervised on its own ([`flows`]): one that fails is restarted or parked while the
//! others keep replicating. A partition's position advances only
//! over the contiguous prefix of records the target acknowledged, and is stored on the target.

pub mod active_active;
pub mod checkpoints;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod delivery;
pub mod events;
pub mod flows;
pub mod group;
pub mod health;
pub mod heartbeats;
pub mod offsets;
pub mod operator;
pub mod pipeline;
pub mod policy;
pub mod record;
pub mod schemas;
pub mod site;
pub mod slot_vec;
pub mod topics;
