//! The command line's overrides of the node's own addresses, applied to
//! every reading of its file.

use crate::GatewayConfig;

/// Command-line overrides of the node's own addresses (`wasmgate run
/// --listen/--admin`). Set once at start-up and applied to every reading of
/// the file, reloads included, so a reload does not see the file's own
/// address as a change.
#[derive(Clone, Debug, Default)]
pub struct NodeOverrides {
    pub listen: Option<String>,
    pub admin: Option<String>,
}

static OVERRIDES: std::sync::OnceLock<NodeOverrides> = std::sync::OnceLock::new();

/// Sets the overrides for this process (the first call wins).
pub fn set_overrides(overrides: NodeOverrides) {
    let _ = OVERRIDES.set(overrides);
}

/// The overrides in force (none unless `set_overrides` was called).
pub fn overrides() -> NodeOverrides {
    OVERRIDES.get().cloned().unwrap_or_default()
}

pub(crate) fn apply_overrides(config: &mut GatewayConfig) {
    let Some(overrides) = OVERRIDES.get() else {
        return;
    };
    if let Some(listen) = &overrides.listen {
        config.listen = Some(listen.clone());
    }
    if let Some(admin) = &overrides.admin {
        config.admin = Some(admin.clone());
    }
}
