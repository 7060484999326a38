//! One wasmtime engine per process, with an epoch ticker that bounds every call, and the
//! compiled components.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use super::bindings::strait::policy::types::HookSet;
use super::bindings::PolicyPre;
use super::error::PolicyError;
use super::host::HostState;
use crate::config::PolicyKind;
use crate::policy::builtin;

/// How often the epoch advances; call deadlines are counted in these ticks. The deadline only
/// stops a runaway hook, so a tenth of a second is precision enough: a 10 ms tick woke the
/// process 100 times a second whether or not a hook ever ran.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// The version of the contract, for messages.
pub(crate) const CONTRACT: &str = "strait:policy@0.1.0";

/// Limits every instance runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Linear memory per instance, in bytes.
    pub memory_bytes: usize,
    /// Wall time per call, in epoch ticks ([`TICK`]): a call is stopped after between
    /// `call_ticks - 1` and `call_ticks` ticks, so the time it may take is `call_ticks - 1`.
    pub call_ticks: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self { memory_bytes: 64 << 20, call_ticks: 11 }
    }
}

/// The process's policy engine.
pub struct PolicyEngine {
    engine: Engine,
    linker: Linker<HostState>,
    limits: Limits,
    builtins: Mutex<HashMap<&'static str, Arc<PolicyComponent>>>,
}

/// A component compiled once and ready to instantiate on any thread.
pub struct PolicyComponent {
    pub(crate) name: String,
    pub(crate) pre: PolicyPre<HostState>,
    pub(crate) engine: Engine,
    pub(crate) limits: Limits,
}

/// Which hooks a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hooks {
    /// `naming.*`.
    pub naming: bool,
    /// `filters.topic`.
    pub topic_filter: bool,
    /// `filters.group`.
    pub group_filter: bool,
    /// `filters.topic-config`.
    pub config_filter: bool,
    /// `records.on-batch`.
    pub records: bool,
    /// `conflicts.resolve`.
    pub conflicts: bool,
}

impl Hooks {
    /// The hooks of a component's `hooks()` answer. Every flag of the contract maps to a hook
    /// the host calls; a test holds this against `wit/policy.wit`.
    pub(crate) fn from_set(set: HookSet) -> Self {
        Self {
            naming: set.contains(HookSet::NAMING),
            topic_filter: set.contains(HookSet::TOPIC_FILTER),
            group_filter: set.contains(HookSet::GROUP_FILTER),
            config_filter: set.contains(HookSet::CONFIG_FILTER),
            records: set.contains(HookSet::RECORDS),
            conflicts: set.contains(HookSet::CONFLICTS),
        }
    }

    /// The WIT names of the hooks implemented (`naming`, `topic-filter`, ...), in the contract's order.
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.naming, "naming"),
            (self.topic_filter, "topic-filter"),
            (self.group_filter, "group-filter"),
            (self.config_filter, "config-filter"),
            (self.records, "records"),
            (self.conflicts, "conflicts"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }

    /// Whether any of the three filters is implemented.
    pub fn filters(&self) -> bool {
        self.topic_filter || self.group_filter || self.config_filter
    }
}

impl PolicyEngine {
    /// The process-wide engine (created on first use, with default limits).
    pub fn shared() -> Result<&'static PolicyEngine, PolicyError> {
        static ENGINE: OnceLock<Result<PolicyEngine, String>> = OnceLock::new();
        ENGINE
            .get_or_init(|| PolicyEngine::new(Limits::default()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| PolicyError::Incompatible { plugin: "engine".into(), reason: e.clone() })
    }

    fn new(limits: Limits) -> Result<Self, wasmtime::Error> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // Async component features cost ~4x on an empty call and no hook needs them.
        config.concurrency_support(false);
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        let ticker = engine.weak();
        std::thread::Builder::new().name("policy epoch".into()).spawn(move || {
            while let Some(engine) = ticker.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
            }
        })?;
        Ok(Self { engine, linker, limits, builtins: Mutex::default() })
    }

    /// The embedded component for `replication.policy.class`.
    pub fn builtin(&self, kind: PolicyKind) -> Result<Arc<PolicyComponent>, PolicyError> {
        let (name, bytes) = match kind {
            PolicyKind::Default => ("built-in DefaultReplicationPolicy", builtin::DEFAULT),
            PolicyKind::Identity => ("built-in IdentityReplicationPolicy", builtin::IDENTITY),
        };
        let mut cache = self.builtins.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.get(name) {
            return Ok(c.clone());
        }
        let compiled = self.compile(name, bytes)?;
        cache.insert(name, compiled.clone());
        Ok(compiled)
    }

    /// Reads and compiles a user's component.
    pub fn load_file(&self, path: &Path) -> Result<Arc<PolicyComponent>, PolicyError> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| PolicyError::Read { plugin: name.clone(), source })?;
        self.compile(&name, &bytes)
    }

    /// Compiles `bytes` and checks them against the contract.
    pub fn compile(&self, name: &str, bytes: &[u8]) -> Result<Arc<PolicyComponent>, PolicyError> {
        let component = Component::from_binary(&self.engine, bytes).map_err(|e| PolicyError::NotAComponent {
            plugin: name.to_string(),
            reason: format!("{:#}", e).lines().next().unwrap_or_default().to_string(),
        })?;
        let incompatible = |reason: String| PolicyError::Incompatible { plugin: name.to_string(), reason };
        let exports: Vec<String> =
            component.component_type().exports(&self.engine).map(|(export, _)| export.to_string()).collect();
        if let Some(other) = exports.iter().find(|e| e.starts_with("strait:policy/") && !e.ends_with("@0.1.0")) {
            return Err(incompatible(format!(
                "it exports `{other}`, built against another version of the contract than {CONTRACT}"
            )));
        }
        let pre = self.linker.instantiate_pre(&component).map_err(|e| incompatible(format!("{e:#}")))?;
        let pre =
            PolicyPre::new(pre).map_err(|e| incompatible(format!("{e:#} (it exports: {})", exports.join(", "))))?;
        Ok(Arc::new(PolicyComponent { name: name.to_string(), pre, engine: self.engine.clone(), limits: self.limits }))
    }
}

impl PolicyComponent {
    /// The plugin's name in messages: its path, or which built-in it is.
    pub fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract's text, for checks that the host and the docs say what the WIT says.
    fn contract() -> String {
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/policy.wit")).expect("wit/policy.wit")
    }

    #[test]
    fn every_hook_flag_of_the_contract_is_a_hook_the_host_calls() {
        let wit = contract();
        let flags =
            wit.split("flags hook-set {").nth(1).and_then(|rest| rest.split('}').next()).expect("hook-set in the WIT");
        let names: Vec<&str> =
            flags.lines().map(str::trim).filter(|l| !l.starts_with("///") && !l.is_empty()).collect();
        assert_eq!(
            names,
            ["naming,", "topic-filter,", "group-filter,", "config-filter,", "records,", "conflicts,"],
            "a flag was added: map it in Hooks::from_set"
        );
        let all = Hooks::from_set(HookSet::all());
        let Hooks { naming, topic_filter, group_filter, config_filter, records, conflicts } = all;
        assert!(naming && topic_filter && group_filter && config_filter && records && conflicts, "{all:?}");
    }

    #[test]
    fn the_contract_and_the_plugin_guide_describe_the_same_init_keys() {
        let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/README.md"))
            .expect("plugins/README.md");
        for (name, text) in [("wit/policy.wit", contract()), ("plugins/README.md", guide)] {
            assert!(
                text.contains("every `replication.policy.*` key"),
                "{name} must say `init` gets every `replication.policy.*` key"
            );
            assert!(
                !text.contains("replication.policy.wasm.<name>"),
                "{name} describes a key scheme the host does not use"
            );
        }
    }
}
