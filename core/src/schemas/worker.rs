//! The schema worker of one flow, on a thread of its own: it copies subjects of the source's
//! registry to the target's every `schema.sync.interval.seconds`, and at once any schema a
//! batch waits for. Registry calls block, so they stay off the stage threads.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use super::ids::{IdTable, Resolved};
use super::registry::{Registry, RegistryError, Schema};
use super::subjects::target_subject;
use crate::config::{IdMode, SchemaSync, TopicFilter};
use crate::events::{FlowRetrying, SchemaCopied, SchemaIdNotCopied};
use crate::policy::{ReplicationPolicy, WasmFilters};

/// How long a request for ids that failed on an unreachable registry waits before trying again.
const RETRY_WAIT: Duration = Duration::from_secs(1);

/// References deeper than this are refused: a cycle, or a registry answering nonsense.
const MAX_REFERENCE_DEPTH: usize = 32;

/// Lists the source cluster's topics.
pub type SourceTopics = Box<dyn Fn() -> Result<Vec<String>, String> + Send>;

/// A source version as it is on the target.
#[derive(Debug, Clone)]
struct Copied {
    subject: String,
    version: i32,
    id: u32,
}

/// Everything the worker needs.
pub struct SchemaWorker {
    /// `source->target`.
    pub flow: String,
    /// The source alias, for naming remote topics.
    pub source_alias: String,
    /// The flow's schema settings.
    pub config: SchemaSync,
    /// The source's registry.
    pub source: Registry,
    /// The target's registry.
    pub target: Registry,
    /// The flow's naming policy.
    pub naming: Box<dyn ReplicationPolicy>,
    /// The flow's `topics` filter.
    pub topics: TopicFilter,
    /// The policy's topic filter.
    pub filters: Arc<WasmFilters>,
    /// The source's topics.
    pub source_topics: SourceTopics,
    /// What records' ids became.
    pub table: Arc<IdTable>,
}

/// The worker's memory between calls.
#[derive(Default)]
struct State {
    /// Source (subject, version) → (source id, as on the target).
    copied: HashMap<(String, i32), (u32, Copied)>,
    /// Target subjects whose compatibility and mode were set.
    prepared: HashSet<String>,
    topics: Vec<String>,
}

impl SchemaWorker {
    /// Runs until `wanted` closes (the flow's transform is gone) or `stop` is set.
    pub fn run(self, wanted: Receiver<Vec<u32>>, stop: Arc<AtomicBool>) {
        let mut state = State::default();
        let mut pending: BTreeSet<u32> = BTreeSet::new();
        let mut next_round = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next_round {
                if let Err(e) = self.round(&mut state) {
                    FlowRetrying { flow: &self.flow, what: &format!("schema sync: {e}") }.emit();
                }
                next_round = Instant::now() + self.config.interval;
            }
            let wait =
                if pending.is_empty() { next_round.saturating_duration_since(Instant::now()) } else { RETRY_WAIT };
            match wanted.recv_timeout(wait.min(Duration::from_millis(500))) {
                Ok(ids) => pending.extend(ids),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            pending.extend(wanted.try_iter().flatten());
            pending.retain(|id| !self.table.has(*id));
            let ids: Vec<u32> = pending.iter().copied().collect();
            for id in ids {
                match self.resolve(&mut state, id) {
                    Ok(()) => {
                        pending.remove(&id);
                    }
                    Err(e) if e.is_transient() => {
                        let what = format!("records carrying schema id {id} wait for it to reach the target: {e}");
                        FlowRetrying { flow: &self.flow, what: &what }.emit();
                        // The rest would meet the same registry.
                        break;
                    }
                    Err(e) => {
                        self.table.set(id, Resolved::Failed(e.to_string()));
                        pending.remove(&id);
                    }
                }
            }
        }
    }

    /// One periodic round: every version of every subject of a replicated topic (or named
    /// after no topic), as the filter allows, that the target does not have yet. A subject that
    /// cannot be copied is reported and the others go on; a registry that does not answer ends
    /// the round.
    fn round(&self, state: &mut State) -> Result<(), RegistryError> {
        self.refresh_topics(state);
        for subject in self.source.subjects()? {
            if !self.config.subjects.matches(&subject) || self.target_name(state, &subject).is_none() {
                continue;
            }
            match self.copy_subject(state, &subject) {
                Err(e) if e.is_transient() => return Err(e),
                Err(e) => FlowRetrying { flow: &self.flow, what: &format!("schema sync of `{subject}`: {e}") }.emit(),
                Ok(()) => {}
            }
        }
        Ok(())
    }

    /// Every version of `subject` (or the latest, with `schema.versions = latest`).
    fn copy_subject(&self, state: &mut State, subject: &str) -> Result<(), RegistryError> {
        let mut versions = self.source.versions(subject)?;
        if self.config.latest_only {
            versions = versions.split_off(versions.len().saturating_sub(1));
        }
        for version in versions {
            let (id, copied) = self.copy(state, subject, version, 0)?;
            self.table.set(id, Resolved::On(copied.id));
        }
        Ok(())
    }

    fn refresh_topics(&self, state: &mut State) {
        match (self.source_topics)() {
            Ok(topics) => state.topics = topics,
            Err(e) => {
                FlowRetrying { flow: &self.flow, what: &format!("schema sync: listing source topics: {e}") }.emit()
            }
        }
    }

    /// Whether the flow replicates `topic`.
    fn replicates(&self, topic: &str) -> bool {
        // A filter that fails now leaves the subject for a later round.
        self.topics.matches(topic) && self.filters.topic(topic).unwrap_or(false)
    }

    /// `subject`'s name on the target, if the flow copies it.
    fn target_name(&self, state: &State, subject: &str) -> Option<String> {
        target_subject(subject, state.topics.iter().map(String::as_str), |topic| {
            self.replicates(topic).then(|| self.naming.format_remote_topic(&self.source_alias, topic).ok()).flatten()
        })
    }

    /// Puts the schema with source id `id` on the target, as the version of a subject the flow
    /// copies.
    fn resolve(&self, state: &mut State, id: u32) -> Result<(), RegistryError> {
        if self.source.schema(id)?.is_none() {
            SchemaIdNotCopied { flow: &self.flow, id, reason: "the source registry does not know it" }.emit();
            self.table.set(id, Resolved::Unknown);
            return Ok(());
        }
        if state.topics.is_empty() {
            self.refresh_topics(state);
        }
        let mut subjects = self.source.subjects_of(id)?;
        subjects.sort();
        let Some((subject, version)) =
            subjects.into_iter().find(|(s, _)| self.config.subjects.matches(s) && self.target_name(state, s).is_some())
        else {
            let reason = "its subjects are left out by schema.subjects or belong to topics the flow does not replicate";
            SchemaIdNotCopied { flow: &self.flow, id, reason }.emit();
            self.table.set(id, Resolved::Excluded);
            return Ok(());
        };
        let (_, copied) = self.copy(state, &subject, version, 0)?;
        self.table.set(id, Resolved::On(copied.id));
        Ok(())
    }

    /// Copies version `version` of `subject`, its references first; (source id, as copied).
    fn copy(
        &self,
        state: &mut State,
        subject: &str,
        version: i32,
        depth: usize,
    ) -> Result<(u32, Copied), RegistryError> {
        let key = (subject.to_string(), version);
        if let Some(done) = state.copied.get(&key) {
            return Ok(done.clone());
        }
        let Some(v) = self.source.version(subject, version)? else {
            return Err(self.refused(format!("`{subject}` version {version} is gone from the source registry")));
        };
        if depth > MAX_REFERENCE_DEPTH {
            return Err(self.refused(format!("`{subject}` has references more than {MAX_REFERENCE_DEPTH} deep")));
        }
        let mut schema: Schema = v.schema.clone();
        for r in &mut schema.references {
            let (_, referenced) = self.copy(state, &r.subject.clone(), r.version, depth + 1)?;
            r.subject = referenced.subject;
            r.version = referenced.version;
        }
        let target = self.target_name(state, subject).unwrap_or_else(|| subject.to_string());
        self.prepare(state, subject, &target)?;
        let copied = match self.target.lookup(&target, &schema)? {
            Some(found) => Copied { subject: target.clone(), version: found.version, id: found.id },
            None => {
                let id = match self.config.ids {
                    IdMode::Translate => self.target.register(&target, &schema)?,
                    IdMode::Keep => self.target.import(&target, &schema, v.id, v.version)?,
                };
                let version = self.target.lookup(&target, &schema)?.map_or(v.version, |found| found.version);
                SchemaCopied { flow: &self.flow, subject, version, target_subject: &target, id: v.id, target_id: id }
                    .emit();
                Copied { subject: target.clone(), version, id }
            }
        };
        if self.config.ids == IdMode::Keep && copied.id != v.id {
            return Err(self.refused(format!(
                "the registry of `{}` holds `{target}` under id {} where the source has id {} (schema.ids = keep): it did not keep the source's id; use `schema.ids = translate`, or a target registry that honours IMPORT mode",
                self.target.alias(),
                copied.id,
                v.id
            )));
        }
        state.copied.insert(key, (v.id, copied.clone()));
        Ok((v.id, copied))
    }

    /// Before the first version lands in `target`: its compatibility as the source subject's,
    /// and IMPORT mode when ids are kept.
    fn prepare(&self, state: &mut State, subject: &str, target: &str) -> Result<(), RegistryError> {
        if state.prepared.contains(target) {
            return Ok(());
        }
        if let Some(level) = self.source.compatibility(subject)? {
            self.target.set_compatibility(target, &level)?;
        }
        if self.config.ids == IdMode::Keep {
            self.target.set_import_mode(target)?;
        }
        state.prepared.insert(target.to_string());
        Ok(())
    }

    fn refused(&self, cause: String) -> RegistryError {
        RegistryError::Copy { alias: self.target.alias().to_string(), cause }
    }
}
