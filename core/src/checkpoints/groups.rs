//! Consumer groups on one cluster, as a replicator sees them: which exist, whether anyone is in
//! them, where they committed, and committing for them while they are empty.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, DefaultConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use crate::cluster::{create_client, list_group_offsets, list_offsets_of_groups, ClusterError, GroupOffset};
use crate::config::{ClientSettings, ClusterConfig};
use crate::offsets::TargetExtent;
use crate::record::{SourceOffset, TargetOffset};

/// How long one group request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A group's committed offset of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The committed offset (the next record the group reads).
    pub offset: i64,
    /// The commit's metadata string.
    pub metadata: String,
}

/// Group operations on one cluster, through one client: listing, describing and reading
/// offsets of any group. Only a commit needs a client of the group's own (librdkafka binds a
/// client to one `group.id`); it is opened for the commit and never joins the group.
pub struct Groups {
    cluster: ClusterConfig,
    settings: ClientSettings,
    lister: Arc<BaseConsumer>,
}

impl Groups {
    /// Connects to `cluster` with `settings`, through a client of its own.
    pub fn connect(cluster: &ClusterConfig, settings: &ClientSettings) -> Result<Self, ClusterError> {
        Ok(Self::over(cluster, settings, Arc::new(Self::lister(cluster, settings)?)))
    }

    /// The client that lists and reads groups, which every alias of one cluster can share.
    pub fn lister(cluster: &ClusterConfig, settings: &ClientSettings) -> Result<BaseConsumer, ClusterError> {
        consumer(cluster, settings, "strait")
    }

    /// Group operations on `cluster` through `lister` (see [`Groups::lister`]); errors name
    /// `cluster`'s alias.
    pub fn over(cluster: &ClusterConfig, settings: &ClientSettings, lister: Arc<BaseConsumer>) -> Self {
        Self { cluster: cluster.clone(), settings: settings.clone(), lister }
    }

    fn fail(&self, what: String, reason: impl ToString) -> ClusterError {
        ClusterError::Client { alias: self.cluster.alias.to_string(), what, reason: reason.to_string() }
    }

    /// Every group the cluster knows.
    pub fn list(&self) -> Result<Vec<String>, ClusterError> {
        let list = self
            .lister
            .fetch_group_list(None, REQUEST_TIMEOUT)
            .map_err(|e| self.fail("listing consumer groups".into(), e))?;
        Ok(list.groups().iter().map(|g| g.name().to_string()).collect())
    }

    /// Whether `topic` exists on the cluster.
    pub fn topic_exists(&self, topic: &str) -> Result<bool, ClusterError> {
        let md = self
            .lister
            .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
            .map_err(|e| self.fail(format!("looking up topic {topic}"), e))?;
        Ok(md.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
    }

    /// How many members `group` has right now (0 for an empty or unknown group).
    pub fn members(&self, group: &str) -> Result<usize, ClusterError> {
        Ok(self.client_ids(group)?.len())
    }

    /// The client id of each member of `group` right now (none for an empty or unknown group).
    pub fn client_ids(&self, group: &str) -> Result<Vec<String>, ClusterError> {
        let list = self
            .lister
            .fetch_group_list(Some(group), REQUEST_TIMEOUT)
            .map_err(|e| self.fail(format!("describing group `{group}`"), e))?;
        Ok(list
            .groups()
            .iter()
            .filter(|g| g.name() == group)
            .flat_map(|g| g.members())
            .map(|m| m.client_id().to_string())
            .collect())
    }

    /// `group`'s committed offsets among `partitions`; partitions without a commit are left out.
    pub fn committed(&self, group: &str, partitions: &[(String, i32)]) -> Result<Vec<Committed>, ClusterError> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let all = list_group_offsets(self.lister.client(), group, REQUEST_TIMEOUT);
        self.among(group, all, &wanted(partitions))
    }

    /// The committed offsets among `partitions` of each of `groups`, asked for many groups at
    /// once; each group gets its own answer or error, in the order given.
    pub fn committed_by_group(
        &self,
        groups: &[String],
        partitions: &[(String, i32)],
    ) -> Vec<(String, Result<Vec<Committed>, ClusterError>)> {
        if partitions.is_empty() {
            return groups.iter().map(|g| (g.clone(), Ok(Vec::new()))).collect();
        }
        let wanted = wanted(partitions);
        list_offsets_of_groups(self.lister.client(), groups, REQUEST_TIMEOUT)
            .into_iter()
            .map(|(group, all)| {
                let committed = self.among(&group, all, &wanted);
                (group, committed)
            })
            .collect()
    }

    fn among(
        &self,
        group: &str,
        all: Result<Vec<GroupOffset>, String>,
        wanted: &HashSet<(&str, i32)>,
    ) -> Result<Vec<Committed>, ClusterError> {
        let all =
            all.map_err(|reason| self.fail(format!("reading the committed offsets of group `{group}`"), reason))?;
        Ok(all
            .into_iter()
            .filter(|(topic, partition, _, _)| wanted.contains(&(topic.as_str(), *partition)))
            .map(|(topic, partition, offset, metadata)| Committed { topic, partition, offset, metadata })
            .collect())
    }

    /// The log start offset (the oldest offset still readable) of each of `partitions`;
    /// partitions the cluster gave no answer for are left out.
    pub fn log_starts(
        &self,
        partitions: &[(String, i32)],
    ) -> Result<HashMap<(String, i32), SourceOffset>, ClusterError> {
        // ListOffsets reads the timestamp -2 (`Offset::Beginning`) as "the log start".
        Ok(self
            .list_offsets(partitions, Offset::Beginning, "log start")?
            .into_iter()
            .map(|(id, o)| (id, SourceOffset(o)))
            .collect())
    }

    /// The log start and end offsets of each of `partitions` on this cluster as a flow's
    /// target; the end is the last stable offset (the lister reads `read_committed`), so an
    /// open transaction is not counted. Partitions the cluster gave no answer for are left out;
    /// the caller says whether the flow stores its positions with its records.
    pub fn extents(&self, partitions: &[(String, i32)]) -> Result<HashMap<(String, i32), TargetExtent>, ClusterError> {
        // The end first: a log start read after it is never past it.
        let ends = self.list_offsets(partitions, Offset::End, "log end")?;
        let starts = self.list_offsets(partitions, Offset::Beginning, "log start")?;
        Ok(ends
            .into_iter()
            .filter_map(|(id, end)| {
                let start = *starts.get(&id)?;
                let extent =
                    TargetExtent { start: TargetOffset(start), end: TargetOffset(end), stored_with_records: false };
                Some((id, extent))
            })
            .collect())
    }

    fn list_offsets(
        &self,
        partitions: &[(String, i32)],
        at: Offset,
        what: &str,
    ) -> Result<HashMap<(String, i32), i64>, ClusterError> {
        if partitions.is_empty() {
            return Ok(HashMap::new());
        }
        let mut tpl = TopicPartitionList::new();
        for (topic, partition) in partitions {
            tpl.add_partition_offset(topic, *partition, at)
                .map_err(|e| self.fail(format!("asking for the {what} of {topic}-{partition}"), e))?;
        }
        let answer = self
            .lister
            .offsets_for_times(tpl, REQUEST_TIMEOUT)
            .map_err(|e| self.fail(format!("reading {what} offsets"), e))?;
        Ok(answer
            .elements()
            .iter()
            .filter(|e| e.error().is_ok())
            .filter_map(|e| {
                e.offset().to_raw().filter(|o| *o >= 0).map(|o| ((e.topic().to_string(), e.partition()), o))
            })
            .collect())
    }

    /// Commits `offsets` for `group`. The broker accepts a commit from outside the group only
    /// while the group has no members, so a group that became active meanwhile refuses it.
    pub fn commit(&self, group: &str, offsets: &[Committed]) -> Result<(), ClusterError> {
        let mut tpl = TopicPartitionList::new();
        for c in offsets {
            tpl.add_partition_offset(&c.topic, c.partition, Offset::Offset(c.offset))
                .map_err(|e| self.fail(format!("committing for group `{group}`"), e))?;
        }
        let alias = self.cluster.alias.to_string();
        consumer(&self.cluster, &self.settings, group)?.commit(&tpl, CommitMode::Sync).map_err(|e| {
            ClusterError::Client {
                alias,
                what: format!("committing offsets for group `{group}`"),
                reason: e.to_string(),
            }
        })
    }
}

fn wanted(partitions: &[(String, i32)]) -> HashSet<(&str, i32)> {
    partitions.iter().map(|(t, p)| (t.as_str(), *p)).collect()
}

fn consumer(cluster: &ClusterConfig, settings: &ClientSettings, group: &str) -> Result<BaseConsumer, ClusterError> {
    create_client(
        cluster,
        settings,
        "consumer",
        &[],
        &[("group.id", group), ("enable.auto.commit", "false")],
        DefaultConsumerContext,
    )
}
