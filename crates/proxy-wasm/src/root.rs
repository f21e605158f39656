//! The root context of a plugin that asked for ticks or registered shared
//! queues: a dedicated instance, driven by a task for as long as the plugin
//! lives, that receives `proxy_on_tick`, `proxy_on_queue_ready`, the
//! answers to the calls it dispatches and its gRPC streams' events.
//! (Streams paused on a pooled instance get that instance's ticks while they
//! wait: see `stream.rs`.)

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::callout::CallsInFlight;
use crate::error::FilterError;
use crate::exchange::HttpExchange;
use crate::instance::{FilterInstance, ROOT_CONTEXT_ID};
use crate::plugin::FilterPlugin;
use crate::shared::shared;

/// How long a crashed root instance waits before it is replaced.
const RESTART_DELAY: Duration = Duration::from_secs(1);

pub(crate) fn spawn(plugin: &Arc<FilterPlugin>, root: FilterInstance, stop: Arc<Notify>) {
    let plugin = Arc::downgrade(plugin);
    tokio::spawn(async move {
        let mut root = Some(root);
        loop {
            let instance = match root.take() {
                Some(instance) => instance,
                None => match replace(&plugin, &stop).await {
                    Some(instance) => instance,
                    None => return,
                },
            };
            match drive(instance, &stop).await {
                Ok(()) => return,
                Err(error) => tracing::warn!(%error, "root context crashed; replacing it"),
            }
        }
    });
}

/// A fresh root instance after a crash; None once the plugin is gone.
async fn replace(plugin: &Weak<FilterPlugin>, stop: &Notify) -> Option<FilterInstance> {
    loop {
        tokio::select! {
            _ = stop.notified() => return None,
            _ = tokio::time::sleep(RESTART_DELAY) => {}
        }
        let plugin = plugin.upgrade()?;
        match plugin.instantiate().await {
            Ok(instance) => return Some(instance),
            Err(error) => {
                tracing::warn!(plugin = plugin.name(), %error, "root context restart failed")
            }
        }
    }
}

/// Runs the root's callbacks until the plugin stops (Ok) or a callback fails.
async fn drive(mut root: FilterInstance, stop: &Notify) -> Result<(), FilterError> {
    let mut calls = CallsInFlight::default();
    let mut queue_changes = shared().queue_changes();
    // Items enqueued before the root existed are waiting too.
    queue_changes.mark_changed();
    // Root callbacks see an exchange with no request.
    let mut exchange = Box::<HttpExchange>::default();
    // What `proxy_on_vm_start` and `proxy_on_configure` dispatched (a gRPC
    // stream a root keeps open, say) starts now, not after the first tick.
    root.start_dispatched_calls(&mut calls);
    loop {
        let tick = root.tick_period();
        let watches_queues = !root.store().data().registered_queues.is_empty();
        tokio::select! {
            _ = stop.notified() => return Ok(()),
            _ = tokio::time::sleep(tick.unwrap_or_default()), if tick.is_some() => {
                root.tick(&mut exchange).await?;
            }
            changed = queue_changes.changed(), if watches_queues => {
                if changed.is_err() {
                    return Ok(());
                }
                notify_ready_queues(&mut root, &mut exchange).await?;
            }
            (token, answer) = calls.next() => {
                root.deliver_answer(&mut exchange, token, answer).await?;
            }
        }
        root.start_dispatched_calls(&mut calls);
    }
}

async fn notify_ready_queues(
    root: &mut FilterInstance,
    exchange: &mut Box<HttpExchange>,
) -> Result<(), FilterError> {
    let Some(f) = root.exports.queue_ready.clone() else {
        return Ok(());
    };
    let queues = root.store().data().registered_queues.clone();
    for queue in queues {
        if shared().queue_len(queue) == 0 {
            continue;
        }
        root.run_with(
            exchange,
            "proxy_on_queue_ready",
            (f.clone(), (ROOT_CONTEXT_ID, queue)),
        )
        .await?;
    }
    Ok(())
}
