//! What the store of every instance holds. A leaf of the host: the engine links against it
//! and each instance fills one.

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What the store of an instance holds.
pub struct HostState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    pub(super) limits: Metered,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The store's limits, noting how much linear memory the instance has taken: an operator
/// choosing a language for a policy, or sizing a process, needs the figure.
pub struct Metered {
    pub(super) limits: StoreLimits,
    /// The most linear memory the instance's memories held together, in bytes.
    pub(super) memory_bytes: usize,
}

impl ResourceLimiter for Metered {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if allowed {
            self.memory_bytes += desired.saturating_sub(current);
        }
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}
