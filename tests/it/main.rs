//! The integration tests: one binary, a module per area, every test against real Kafka
//! clusters that `scripts/kafka.sh` starts (`scripts/test.sh` starts the shared stand; tests
//! that freeze, stop or secure a cluster start one of their own). `support/` holds what they
//! share, by role: the clusters, the strait processes, records and load, groups.
//!
//! Run one area with `cargo test --test it <area>::`, one test with its name.

mod support;

mod active_active;
mod assignment;
mod backpressure;
mod bad_input;
mod bounded_positions;
mod cluster_admin;
mod deploy;
mod dr;
mod drill;
mod exactly_once;
mod failover;
mod first_checkpoint;
mod flows;
mod heartbeats;
mod offset_syncs;
mod operator;
mod policy;
mod probes;
mod reload;
mod replication;
mod restart;
mod scale_out;
mod schemas;
mod security;
mod shutdown;
mod topic_sync;
mod topologies;
mod translate;
mod verify;
mod wan;
