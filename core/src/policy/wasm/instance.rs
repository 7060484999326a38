//! One instance of a component: its store (memory cap, no files, network or environment) and
//! typed calls, each under a deadline.

use wasmtime::component::ResourceTable;
use wasmtime::{Store, StoreLimitsBuilder, Trap};
use wasmtime_wasi::WasiCtx;

use super::bindings::strait::policy::types::{Batch, Incoming, KeyState, Property, Verdict};
use super::bindings::Policy;
use super::engine::{Hooks, PolicyComponent, TICK};
use super::error::PolicyError;
use super::host::{HostState, Metered};
use crate::config::FlowConfig;
use crate::record::HookError;

/// The clock a policy sees unless the config grants time: always zero, so a policy's decisions
/// depend on its input alone.
struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }
    fn now(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl PolicyComponent {
    /// A fresh instance, initialised with `flow`'s properties.
    pub fn instantiate(&self, flow: &FlowConfig) -> Result<PolicyInstance, PolicyError> {
        PolicyInstance::new(self, flow)
    }

    /// Which hooks the component implements (instantiates it once to ask).
    pub fn probe_hooks(&self, flow: &FlowConfig) -> Result<Hooks, PolicyError> {
        Ok(self.instantiate(flow)?.hooks())
    }
}

/// The newest version of a key that the target is known to hold, as the `conflicts` hook sees
/// it: the policy's own view, so the key table behind it can change without the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConflictVersion<'a> {
    /// When the version was written, in milliseconds.
    pub timestamp: i64,
    /// The cluster it was first written to.
    pub origin: &'a str,
}

/// A live instance, used by one thread at a time.
pub struct PolicyInstance {
    store: Store<HostState>,
    bindings: Policy,
    name: String,
    hooks: Hooks,
    call_ticks: u64,
    memory_mib: usize,
}

impl PolicyInstance {
    pub(crate) fn new(component: &PolicyComponent, flow: &FlowConfig) -> Result<Self, PolicyError> {
        let limits =
            StoreLimitsBuilder::new().memory_size(component.limits.memory_bytes).trap_on_grow_failure(true).build();
        // An empty WASI context: no preopened directories, environment, arguments or sockets,
        // and clocks frozen at zero unless `strait.policy.clock = true` grants real time.
        let mut wasi = WasiCtx::builder();
        if !flow.policy_clock {
            wasi.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
        }
        let state =
            HostState { wasi: wasi.build(), table: ResourceTable::new(), limits: Metered { limits, memory_bytes: 0 } };
        let mut store = Store::new(&component.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(component.limits.call_ticks);
        let bindings = component.pre.instantiate(&mut store).map_err(|e| PolicyError::Incompatible {
            plugin: component.name.clone(),
            reason: format!("instantiation failed: {e:#}"),
        })?;
        let mut instance = Self {
            store,
            bindings,
            name: component.name.clone(),
            hooks: Hooks::default(),
            call_ticks: component.limits.call_ticks,
            memory_mib: component.limits.memory_bytes >> 20,
        };
        let properties: Vec<Property> = flow
            .policy_properties
            .iter()
            .map(|(key, value)| Property { key: key.clone(), value: value.clone() })
            .collect();
        let (source, target) = (flow.source.to_string(), flow.target.to_string());
        instance
            .call("init", |b, s| b.strait_policy_lifecycle().call_init(s, &source, &target, &properties))?
            .map_err(|message| PolicyError::Refused { plugin: instance.name.clone(), message })?;
        let set = instance.call("hooks", |b, s| b.strait_policy_lifecycle().call_hooks(s))?;
        instance.hooks = Hooks::from_set(set);
        Ok(instance)
    }

    /// The hooks the component said it implements.
    pub fn hooks(&self) -> Hooks {
        self.hooks
    }

    /// The linear memory the instance holds, in bytes (it never gives any back).
    pub fn memory_bytes(&self) -> usize {
        self.store.data().limits.memory_bytes
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls `hook` under the call deadline and turns traps into [`PolicyError::Hook`].
    pub(crate) fn call<T>(
        &mut self,
        hook: &'static str,
        f: impl FnOnce(&Policy, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, PolicyError> {
        Ok(self.call_hook(hook, f)?)
    }

    /// [`Self::call`] for the hooks on the data path, whose failures are the record level's.
    fn call_hook<T>(
        &mut self,
        hook: &'static str,
        f: impl FnOnce(&Policy, &mut Store<HostState>) -> wasmtime::Result<T>,
    ) -> Result<T, HookError> {
        self.store.set_epoch_deadline(self.call_ticks);
        f(&self.bindings, &mut self.store).map_err(|e| {
            let cause = match e.downcast_ref::<Trap>() {
                Some(Trap::Interrupt) => {
                    format!(
                        "ran longer than the {} ms a call may take (an endless loop?) and was stopped",
                        (TICK * self.call_ticks.saturating_sub(1) as u32).as_millis()
                    )
                }
                _ if format!("{e:#}").contains("growing memory") => {
                    format!("tried to grow its memory past the {} MiB limit and was stopped", self.memory_mib)
                }
                _ => format!("trapped: {}", format!("{e:#}").lines().next().unwrap_or_default()),
            };
            HookError { plugin: format!("policy {}", self.name), hook, cause }
        })
    }

    /// `records.on-batch`.
    pub(crate) fn on_batch(&mut self, batch: &Batch) -> Result<Verdict, HookError> {
        let verdict = self.call_hook("records.on-batch", |b, s| b.strait_policy_records().call_on_batch(s, batch))?;
        verdict.map_err(|message| HookError {
            plugin: format!("policy {}", self.name),
            hook: "records.on-batch",
            cause: message,
        })
    }

    /// `conflicts.resolve`: whether a record of `key` stamped `timestamp`, first written on
    /// `origin`, is written to a target where `known` is the newest version of the key;
    /// `headers` are packed as in the record's batch.
    pub(crate) fn resolve(
        &mut self,
        key: &[u8],
        timestamp: i64,
        origin: &str,
        headers: &[u8],
        known: Option<ConflictVersion<'_>>,
    ) -> Result<bool, HookError> {
        let arriving = Incoming { key: key.to_vec(), timestamp, origin: origin.to_string(), headers: headers.to_vec() };
        let known = known.map(|v| KeyState { timestamp: v.timestamp, origin: v.origin.to_string() });
        self.call_hook("conflicts.resolve", |b, s| {
            b.strait_policy_conflicts().call_resolve(s, &arriving, known.as_ref())
        })
    }
}
