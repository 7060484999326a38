//! `filters.topic`, `filters.group` and `filters.topic-config` of a component, each answer
//! cached per name for the life of the instance: a round of discovery, checkpoints or config
//! sync asks the component only about names it has not seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::engine::{PolicyComponent, PolicyEngine};
use super::error::PolicyError;
use super::instance::PolicyInstance;
use super::reload::ReloadWatch;
use crate::config::FlowConfig;
use crate::events::{PolicyReloadFailed, PolicyReloaded};

/// How often a filter looks at its file for a replacement: names are asked in rounds, seconds
/// apart, so a stat per call would buy nothing.
const RELOAD_CHECK: Duration = Duration::from_secs(1);
/// Answers kept per kind before the cache starts over: group names can come and go for ever.
const CACHE_LIMIT: usize = 100_000;

#[derive(Default)]
struct Cache {
    topics: HashMap<String, bool>,
    groups: HashMap<String, bool>,
    configs: HashMap<String, bool>,
}

struct Loaded {
    /// The component and flow to instantiate (again after a failed call, whose instance may be
    /// unusable); `None`: no component filters this flow, every name is kept.
    component: Option<(Arc<PolicyComponent>, FlowConfig)>,
    instance: Option<PolicyInstance>,
    cache: Cache,
    reload: Option<(ReloadWatch, Instant)>,
    /// Questions that reached the component (not answered from the cache).
    asked: u64,
}

/// The topic, group and config filters of a flow, shared by the threads that ask them.
pub struct WasmFilters {
    loaded: Mutex<Loaded>,
}

impl WasmFilters {
    /// Filters answered by an instance of `component` for `flow`, loaded again from the flow's
    /// `replication.policy.wasm` when the file changes or on SIGHUP (which drops every cached
    /// answer).
    pub fn new(component: Arc<PolicyComponent>, flow: &FlowConfig) -> Result<Self, PolicyError> {
        let instance = component.instantiate(flow)?;
        let reload = flow.policy_wasm.as_ref().map(|path| (ReloadWatch::new(path), Instant::now()));
        let loaded = Loaded {
            component: Some((component, flow.clone())),
            instance: Some(instance),
            cache: Cache::default(),
            reload,
            asked: 0,
        };
        Ok(Self { loaded: Mutex::new(loaded) })
    }

    /// Filters that keep every topic, group and config key (the built-in policies').
    pub fn keep_all() -> Self {
        Self {
            loaded: Mutex::new(Loaded {
                component: None,
                instance: None,
                cache: Cache::default(),
                reload: None,
                asked: 0,
            }),
        }
    }

    /// `filters.topic`: whether a source topic that passed `topics` / `topics.exclude` is replicated.
    pub fn topic(&self, topic: &str) -> Result<bool, PolicyError> {
        self.ask(
            topic,
            |i| i.hooks().topic_filter,
            |c| &mut c.topics,
            |i| i.call("filters.topic", |b, s| b.strait_policy_filters().call_topic(s, topic)),
        )
    }

    /// `filters.group`: whether a group that passed `groups` / `groups.exclude` is checkpointed.
    pub fn group(&self, group: &str) -> Result<bool, PolicyError> {
        self.ask(
            group,
            |i| i.hooks().group_filter,
            |c| &mut c.groups,
            |i| i.call("filters.group", |b, s| b.strait_policy_filters().call_group(s, group)),
        )
    }

    /// `filters.topic-config`: whether a config key that passed `config.properties.exclude` is synced.
    pub fn topic_config(&self, key: &str) -> Result<bool, PolicyError> {
        self.ask(
            key,
            |i| i.hooks().config_filter,
            |c| &mut c.configs,
            |i| i.call("filters.topic-config", |b, s| b.strait_policy_filters().call_topic_config(s, key)),
        )
    }

    /// How many questions reached the component since the filters were made; the rest were
    /// answered from the cache.
    pub fn asked(&self) -> u64 {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner()).asked
    }

    fn ask(
        &self,
        name: &str,
        implements: impl Fn(&PolicyInstance) -> bool,
        cache: impl Fn(&mut Cache) -> &mut HashMap<String, bool>,
        call: impl FnOnce(&mut PolicyInstance) -> Result<bool, PolicyError>,
    ) -> Result<bool, PolicyError> {
        let mut guard = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        guard.reload_if_changed();
        let loaded = &mut *guard;
        if loaded.instance.is_none() {
            let Some((component, flow)) = &loaded.component else { return Ok(true) };
            loaded.instance = Some(component.instantiate(flow)?);
        }
        let Some(instance) = loaded.instance.as_mut().filter(|i| implements(i)) else {
            return Ok(true);
        };
        if let Some(answer) = cache(&mut loaded.cache).get(name) {
            return Ok(*answer);
        }
        loaded.asked += 1;
        let answer = match call(instance) {
            Ok(answer) => answer,
            Err(e) => {
                // A trap can leave the instance unusable: the next question gets a fresh one.
                loaded.instance = None;
                return Err(e);
            }
        };
        let answers = cache(&mut loaded.cache);
        if answers.len() >= CACHE_LIMIT {
            answers.clear();
        }
        answers.insert(name.to_string(), answer);
        Ok(answer)
    }
}

impl Loaded {
    /// Loads the component again when its file changed or a reload was asked for. Compiling
    /// happens on the asking thread (a periodic one, never a stage); a file that does not load
    /// keeps the running instance and its answers.
    fn reload_if_changed(&mut self) {
        let (Some((watch, checked)), Some((component, flow))) = (self.reload.as_mut(), self.component.as_mut()) else {
            return;
        };
        if checked.elapsed() < RELOAD_CHECK {
            return;
        }
        *checked = Instant::now();
        if !watch.changed() {
            return;
        }
        let (flow_name, plugin) = (flow.name(), watch.path.display().to_string());
        let loaded =
            PolicyEngine::shared().and_then(|e| e.load_file(&watch.path)).and_then(|c| Ok((c.instantiate(flow)?, c)));
        match loaded {
            Ok((instance, reloaded)) => {
                *component = reloaded;
                self.instance = Some(instance);
                self.cache = Cache::default();
                PolicyReloaded { flow: &flow_name, plugin: &plugin }.emit();
            }
            Err(e) => PolicyReloadFailed { flow: &flow_name, plugin: &plugin, error: &e.to_string() }.emit(),
        }
    }
}
