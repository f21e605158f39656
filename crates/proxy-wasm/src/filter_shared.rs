//! What every instance of a filter plugin shares ([`FilterShared`]): its
//! configuration, its counters and its refusal log. Each instance's store
//! holds it (`state.rs`), so host functions reach it from any callback.

use std::sync::Arc;

use wasmgate_runtime::PluginStats;

use crate::config::FilterConfig;
use crate::limits::{Limit, RefusalLog};
use crate::shared::shared;

/// What every instance of a filter plugin shares.
pub(crate) struct FilterShared {
    pub config: FilterConfig,
    pub needs_wasi: bool,
    pub stats: Arc<PluginStats>,
    /// When each limit's refusal was last logged.
    pub refusals: RefusalLog,
}

impl FilterShared {
    pub(crate) fn new(config: FilterConfig, needs_wasi: bool) -> FilterShared {
        let stats = Arc::<PluginStats>::default();
        stats.track_refusals(&Limit::names());
        // The VM id's shared data and queues live as long as a plugin of
        // it does (this one is counted out when dropped, below).
        shared().attach_vm(&config.vm_id);
        FilterShared {
            config,
            needs_wasi,
            stats,
            refusals: RefusalLog::default(),
        }
    }
}

impl Drop for FilterShared {
    fn drop(&mut self) {
        shared().release_vm(&self.config.vm_id);
    }
}
