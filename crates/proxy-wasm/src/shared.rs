//! Shared data, shared queues and metrics: state that outlives one instance
//! and is seen by every instance and worker thread of the process, as in
//! Envoy. Data and queues are scoped by VM id (`FilterConfig::vm_id`):
//! a filter reaches only its own VM id's (where Envoy lets any VM resolve,
//! fill and drain another's queue), within the caps of `limits.rs`, and
//! they go when the last plugin of that VM id does (as Envoy's host deletes
//! a VM id's data and queues with its last VM). Metrics are scoped by their
//! plugin and name.

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};

use tokio::sync::watch;

use crate::abi::Status;
use crate::limits::{HostLimits, Limit};

static SHARED: LazyLock<Shared> = LazyLock::new(Shared::default);

/// The process's shared state.
pub fn shared() -> &'static Shared {
    &SHARED
}

pub struct Shared {
    /// Each VM id's data.
    data: Mutex<HashMap<String, VmData>>,
    queues: Mutex<Queues>,
    /// Bumped on every enqueue: root contexts watch it to run
    /// `proxy_on_queue_ready` for the queues they registered.
    queue_changes: watch::Sender<u64>,
    metrics: Mutex<Metrics>,
    /// Loaded plugins per VM id: a VM id's data and queues are dropped when
    /// its last plugin is.
    users: Mutex<HashMap<String, usize>>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            data: Mutex::default(),
            queues: Mutex::default(),
            queue_changes: watch::channel(0).0,
            metrics: Mutex::default(),
            users: Mutex::default(),
        }
    }
}

/// One VM id's shared data: value and CAS token per key, and what the
/// keys and values weigh together (counted against `shared_data_bytes`).
#[derive(Default)]
struct VmData {
    entries: HashMap<Vec<u8>, (Vec<u8>, u32)>,
    bytes: usize,
}

#[derive(Default)]
struct Queues {
    /// By VM id and name.
    ids: HashMap<(String, Vec<u8>), u32>,
    by_id: HashMap<u32, Queue>,
    /// Ids are not reused: an id a filter kept after its queue went must
    /// not reach a new one.
    last_id: u32,
}

struct Queue {
    vm_id: String,
    items: VecDeque<Vec<u8>>,
    bytes: usize,
}

/// Why a call into the store did not happen: a status of the ABI, or a cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    Status(Status),
    Limit(Limit),
}

/// What one VM id holds, for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmUsage {
    pub vm_id: String,
    pub data_keys: usize,
    /// Keys and values.
    pub data_bytes: usize,
    pub queues: usize,
    pub queue_items: usize,
    pub queue_bytes: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric a plugin defined, for the Prometheus endpoint.
#[derive(Clone, Debug)]
pub struct Metric {
    /// The plugin that defined it (metrics are per plugin: one plugin cannot
    /// read, change or pose as another's).
    pub plugin: String,
    /// The name as the plugin gave it.
    pub name: String,
    pub kind: MetricKind,
    /// Counter and gauge value; for histograms, the last recorded value.
    pub value: i64,
    /// Histograms: every recorded value since the last scrape would be too
    /// much; count and sum are kept instead.
    pub count: u64,
    pub sum: i64,
}

#[derive(Default)]
struct Metrics {
    /// By (plugin, name, kind): as in Envoy, a name is a counter, a gauge
    /// and a histogram apart.
    ids: HashMap<(String, String, MetricKind), u32>,
    all: Vec<Metric>,
}

impl Shared {
    /// The value under `key` in `vm_id`'s data, with its CAS token.
    pub fn get(&self, vm_id: &str, key: &[u8]) -> Option<(Vec<u8>, u32)> {
        let data = self.data.lock().unwrap();
        data.get(vm_id)?.entries.get(key).cloned()
    }

    /// Sets `key`; with a non-zero `cas` only if the value has not changed
    /// since that token was read. Without caps: the embedder's own writes.
    pub fn set(&self, vm_id: &str, key: &[u8], value: Vec<u8>, cas: u32) -> Status {
        match self.set_within(vm_id, key, value, cas, &HostLimits::unlimited()) {
            Ok(()) => Status::Ok,
            Err(Refused::Status(status)) => status,
            Err(Refused::Limit(_)) => unreachable!("no limit is set"),
        }
    }

    /// [`Shared::set`] within `limits`: an entry over
    /// `shared_data_value_bytes`, a new key over `shared_data_keys` or a
    /// VM id's data grown over `shared_data_bytes` is refused. A stale CAS
    /// token is reported first, so a CAS loop reads again before it learns
    /// of a cap.
    pub fn set_within(
        &self,
        vm_id: &str,
        key: &[u8],
        value: Vec<u8>,
        cas: u32,
        limits: &HostLimits,
    ) -> Result<(), Refused> {
        let mut data = self.data.lock().unwrap();
        if !data.contains_key(vm_id) {
            data.insert(vm_id.to_string(), VmData::default());
        }
        let vm = data.get_mut(vm_id).expect("inserted above");
        let old = vm.entries.get(key);
        match old {
            Some((_, token)) if cas != 0 && cas != *token => {
                return Err(Refused::Status(Status::CasMismatch))
            }
            None if cas != 0 => return Err(Refused::Status(Status::CasMismatch)),
            _ => {}
        }
        let entry = key.len().saturating_add(value.len());
        if entry > limits.shared_data_value_bytes {
            return Err(Refused::Limit(Limit::SharedDataValueBytes));
        }
        let old_entry = old.map_or(0, |(v, _)| key.len() + v.len());
        if old.is_none() && vm.entries.len() >= limits.shared_data_keys {
            return Err(Refused::Limit(Limit::SharedDataKeys));
        }
        let bytes = vm.bytes - old_entry + entry;
        if bytes > limits.shared_data_bytes && entry > old_entry {
            return Err(Refused::Limit(Limit::SharedDataBytes));
        }
        vm.bytes = bytes;
        let next = old.map_or(1, |(_, token)| token.wrapping_add(1).max(1));
        match vm.entries.get_mut(key) {
            Some(slot) => *slot = (value, next),
            None => {
                vm.entries.insert(key.to_vec(), (value, next));
            }
        }
        Ok(())
    }

    /// The queue `name` of `vm_id`, created if needed. Without caps: the
    /// embedder's own.
    pub fn register_queue(&self, vm_id: &str, name: &[u8]) -> u32 {
        self.register_queue_within(vm_id, name, &HostLimits::unlimited())
            .expect("no limit is set")
    }

    /// [`Shared::register_queue`] within `limits`: a new queue beyond
    /// `shared_queues` of its VM id is refused.
    pub fn register_queue_within(
        &self,
        vm_id: &str,
        name: &[u8],
        limits: &HostLimits,
    ) -> Result<u32, Limit> {
        let mut queues = self.queues.lock().unwrap();
        let key = (vm_id.to_string(), name.to_vec());
        if let Some(&id) = queues.ids.get(&key) {
            return Ok(id);
        }
        let registered = queues.by_id.values().filter(|q| q.vm_id == vm_id).count();
        if registered >= limits.shared_queues {
            return Err(Limit::SharedQueues);
        }
        queues.last_id = queues.last_id.wrapping_add(1).max(1);
        let id = queues.last_id;
        queues.by_id.insert(
            id,
            Queue {
                vm_id: vm_id.to_string(),
                items: VecDeque::new(),
                bytes: 0,
            },
        );
        queues.ids.insert(key, id);
        Ok(id)
    }

    pub fn resolve_queue(&self, vm_id: &str, name: &[u8]) -> Option<u32> {
        let queues = self.queues.lock().unwrap();
        queues.ids.get(&(vm_id.to_string(), name.to_vec())).copied()
    }

    /// Adds `value` to queue `id`, whoever owns it: the embedder's own.
    pub fn enqueue(&self, id: u32, value: Vec<u8>) -> Status {
        match self.enqueue_within(None, id, value, &HostLimits::unlimited()) {
            Ok(()) => Status::Ok,
            Err(Refused::Status(status)) => status,
            Err(Refused::Limit(_)) => unreachable!("no limit is set"),
        }
    }

    /// Adds `value` to queue `id` of `vm_id` (of any VM id for `None`), if
    /// it stays within `shared_queue_items` and `shared_queue_bytes`.
    /// Another VM id's queue is not found.
    pub fn enqueue_within(
        &self,
        vm_id: Option<&str>,
        id: u32,
        value: Vec<u8>,
        limits: &HostLimits,
    ) -> Result<(), Refused> {
        let mut queues = self.queues.lock().unwrap();
        let queue = match queues.by_id.get_mut(&id) {
            Some(queue) if vm_id.is_none_or(|vm| vm == queue.vm_id) => queue,
            _ => return Err(Refused::Status(Status::NotFound)),
        };
        if queue.items.len() >= limits.shared_queue_items {
            return Err(Refused::Limit(Limit::SharedQueueItems));
        }
        if queue.bytes.saturating_add(value.len()) > limits.shared_queue_bytes {
            return Err(Refused::Limit(Limit::SharedQueueBytes));
        }
        queue.bytes += value.len();
        queue.items.push_back(value);
        drop(queues);
        self.queue_changes.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    /// Items waiting in queue `id` (0 for an unknown queue).
    pub fn queue_len(&self, id: u32) -> usize {
        let queues = self.queues.lock().unwrap();
        queues.by_id.get(&id).map_or(0, |q| q.items.len())
    }

    /// Changes whenever an item is enqueued anywhere.
    pub fn queue_changes(&self) -> watch::Receiver<u64> {
        self.queue_changes.subscribe()
    }

    /// The first item of queue `id`, whoever owns it: the embedder's own.
    pub fn dequeue(&self, id: u32) -> Result<Vec<u8>, Status> {
        self.dequeue_as(None, id)
    }

    /// The first item of queue `id` of `vm_id` (of any VM id for `None`);
    /// another VM id's queue is not found.
    pub fn dequeue_as(&self, vm_id: Option<&str>, id: u32) -> Result<Vec<u8>, Status> {
        let mut queues = self.queues.lock().unwrap();
        match queues.by_id.get_mut(&id) {
            Some(queue) if vm_id.is_none_or(|vm| vm == queue.vm_id) => {
                let item = queue.items.pop_front().ok_or(Status::Empty)?;
                queue.bytes -= item.len();
                Ok(item)
            }
            _ => Err(Status::NotFound),
        }
    }

    /// A plugin of `vm_id` was loaded: its VM id's data and queues stay
    /// until [`Shared::release_vm`] for the last of them.
    pub fn attach_vm(&self, vm_id: &str) {
        *self
            .users
            .lock()
            .unwrap()
            .entry(vm_id.to_string())
            .or_default() += 1;
    }

    /// A plugin of `vm_id` is gone; if it was the last, the VM id's data and
    /// queues go too (a reload that drops a VM id frees what it held, once
    /// the requests still on the old plugins are over).
    pub fn release_vm(&self, vm_id: &str) {
        let mut users = self.users.lock().unwrap();
        let Some(count) = users.get_mut(vm_id) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        users.remove(vm_id);
        // Under `users`' lock, so a plugin of this VM id loading now
        // attaches after the VM's state is gone, not before.
        self.data.lock().unwrap().remove(vm_id);
        let mut queues = self.queues.lock().unwrap();
        queues.ids.retain(|(vm, _), _| vm != vm_id);
        queues.by_id.retain(|_, q| q.vm_id != vm_id);
    }

    /// What each VM id holds, by VM id.
    pub fn usage(&self) -> Vec<VmUsage> {
        let mut by_vm: std::collections::BTreeMap<String, VmUsage> = Default::default();
        for (vm_id, vm) in self.data.lock().unwrap().iter() {
            let usage = by_vm.entry(vm_id.clone()).or_default();
            usage.data_keys = vm.entries.len();
            usage.data_bytes = vm.bytes;
        }
        for queue in self.queues.lock().unwrap().by_id.values() {
            let usage = by_vm.entry(queue.vm_id.clone()).or_default();
            usage.queues += 1;
            usage.queue_items += queue.items.len();
            usage.queue_bytes += queue.bytes;
        }
        by_vm
            .into_iter()
            .map(|(vm_id, usage)| VmUsage { vm_id, ..usage })
            .collect()
    }

    /// Defines (or finds) plugin `plugin`'s metric `name`. The same plugin
    /// on several routes (or VMs) shares it, as in Envoy.
    pub fn define_metric(&self, kind: MetricKind, plugin: &str, name: &str) -> u32 {
        let mut metrics = self.metrics.lock().unwrap();
        let key = (plugin.to_string(), name.to_string(), kind);
        if let Some(&id) = metrics.ids.get(&key) {
            return id;
        }
        let id = metrics.all.len() as u32 + 1;
        metrics.all.push(Metric {
            plugin: plugin.to_string(),
            name: name.to_string(),
            kind,
            value: 0,
            count: 0,
            sum: 0,
        });
        metrics.ids.insert(key, id);
        id
    }

    /// Adds `offset` to plugin `plugin`'s counter or gauge (counters only grow).
    pub fn increment_metric(&self, id: u32, plugin: &str, offset: i64) -> Status {
        self.with_metric(id, plugin, |m| match m.kind {
            MetricKind::Counter if offset < 0 => Status::BadArgument,
            MetricKind::Counter | MetricKind::Gauge => {
                m.value = m.value.wrapping_add(offset);
                Status::Ok
            }
            MetricKind::Histogram => Status::BadArgument,
        })
    }

    /// Sets plugin `plugin`'s gauge or counter, or records a histogram sample.
    pub fn record_metric(&self, id: u32, plugin: &str, value: i64) -> Status {
        self.with_metric(id, plugin, |m| {
            if m.kind == MetricKind::Histogram {
                m.count += 1;
                m.sum = m.sum.wrapping_add(value);
            }
            m.value = value;
            Status::Ok
        })
    }

    pub fn metric(&self, id: u32) -> Option<Metric> {
        let metrics = self.metrics.lock().unwrap();
        metrics.all.get((id as usize).wrapping_sub(1)).cloned()
    }

    /// Every metric defined so far.
    pub fn metrics(&self) -> Vec<Metric> {
        self.metrics.lock().unwrap().all.clone()
    }

    /// Runs `f` on metric `id` if plugin `plugin` defined it (another
    /// plugin's id is not found).
    fn with_metric(&self, id: u32, plugin: &str, f: impl FnOnce(&mut Metric) -> Status) -> Status {
        let mut metrics = self.metrics.lock().unwrap();
        match metrics.all.get_mut((id as usize).wrapping_sub(1)) {
            Some(m) if m.plugin == plugin => f(m),
            _ => Status::NotFound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_and_swap() {
        let s = Shared::default();
        assert_eq!(s.get("vm", b"k"), None);
        assert_eq!(s.set("vm", b"k", b"1".to_vec(), 7), Status::CasMismatch);
        assert_eq!(s.set("vm", b"k", b"1".to_vec(), 0), Status::Ok);
        let (value, cas) = s.get("vm", b"k").unwrap();
        assert_eq!(value, b"1");
        assert_eq!(s.set("vm", b"k", b"2".to_vec(), cas), Status::Ok);
        assert_eq!(
            s.set("vm", b"k", b"3".to_vec(), cas),
            Status::CasMismatch,
            "stale token"
        );
        assert_eq!(s.get("other-vm", b"k"), None, "scoped by VM id");
    }

    #[test]
    fn queues_are_fifo_and_named_per_vm() {
        let s = Shared::default();
        let q = s.register_queue("vm", b"jobs");
        assert_eq!(s.register_queue("vm", b"jobs"), q);
        assert_eq!(s.resolve_queue("vm", b"jobs"), Some(q));
        assert_eq!(s.resolve_queue("vm2", b"jobs"), None);
        assert_eq!(s.dequeue(q), Err(Status::Empty));
        s.enqueue(q, b"a".to_vec());
        s.enqueue(q, b"b".to_vec());
        assert_eq!(s.dequeue(q).unwrap(), b"a");
        assert_eq!(s.dequeue(q).unwrap(), b"b");
        assert_eq!(s.enqueue(999, vec![]), Status::NotFound);
        assert_eq!(s.dequeue(0), Err(Status::NotFound));
    }

    fn small() -> HostLimits {
        HostLimits {
            shared_data_value_bytes: 8,
            shared_data_bytes: 12,
            shared_data_keys: 2,
            shared_queues: 1,
            shared_queue_items: 2,
            shared_queue_bytes: 5,
            ..HostLimits::default()
        }
    }

    #[test]
    fn shared_data_is_capped_per_entry_key_count_and_vm() {
        let s = Shared::default();
        let l = small();
        let refused = |limit| Err(Refused::Limit(limit));
        assert_eq!(
            s.set_within("vm", b"k", b"12345678".to_vec(), 0, &l),
            refused(Limit::SharedDataValueBytes),
            "key and value: 9 bytes, over 8"
        );
        assert_eq!(
            s.set_within("edge", b"k", b"1234567".to_vec(), 0, &l),
            Ok(()),
            "8 bytes: at the cap, not over it"
        );
        assert_eq!(s.set_within("vm", b"a", b"123456".to_vec(), 0, &l), Ok(()));
        assert_eq!(
            s.set_within("vm", b"b", b"123456".to_vec(), 0, &l),
            refused(Limit::SharedDataBytes),
            "14 bytes in all"
        );
        assert_eq!(s.set_within("vm", b"b", b"1".to_vec(), 0, &l), Ok(()));
        assert_eq!(
            s.set_within("vm", b"c", Vec::new(), 0, &l),
            refused(Limit::SharedDataKeys)
        );
        let (_, cas) = s.get("vm", b"a").unwrap();
        assert_eq!(
            s.set_within("vm", b"a", b"12345678".to_vec(), cas + 1, &l),
            Err(Refused::Status(Status::CasMismatch)),
            "a stale token first, never a cap as a mismatch"
        );
        assert_eq!(s.set_within("vm", b"a", b"1".to_vec(), cas, &l), Ok(()));
        assert_eq!(s.set_within("vm", b"b", b"12345".to_vec(), 0, &l), Ok(()));
        assert_eq!(s.set_within("vm2", b"a", b"123456".to_vec(), 0, &l), Ok(()));
        let usage = s.usage();
        let vm = usage.iter().find(|u| u.vm_id == "vm").unwrap();
        assert_eq!((vm.data_keys, vm.data_bytes), (2, 8));
    }

    #[test]
    fn queues_are_capped_and_another_vms_queue_is_not_found() {
        let s = Shared::default();
        let l = small();
        let q = s.register_queue_within("vm", b"jobs", &l).unwrap();
        assert_eq!(s.register_queue_within("vm", b"jobs", &l), Ok(q));
        assert_eq!(
            s.register_queue_within("vm", b"more", &l),
            Err(Limit::SharedQueues)
        );
        assert_eq!(
            s.enqueue_within(Some("vm"), q, b"123456".to_vec(), &l),
            Err(Refused::Limit(Limit::SharedQueueBytes))
        );
        assert_eq!(s.enqueue_within(Some("vm"), q, b"12".to_vec(), &l), Ok(()));
        assert_eq!(s.enqueue_within(Some("vm"), q, b"34".to_vec(), &l), Ok(()));
        assert_eq!(
            s.enqueue_within(Some("vm"), q, b"5".to_vec(), &l),
            Err(Refused::Limit(Limit::SharedQueueItems))
        );
        assert_eq!(
            s.enqueue_within(Some("other"), q, b"5".to_vec(), &l),
            Err(Refused::Status(Status::NotFound))
        );
        assert_eq!(s.dequeue_as(Some("other"), q), Err(Status::NotFound));
        assert_eq!(s.dequeue_as(Some("vm"), q).unwrap(), b"12");
        assert_eq!(s.enqueue_within(Some("vm"), q, b"5".to_vec(), &l), Ok(()));
        let usage = s.usage();
        assert_eq!(
            (usage[0].queues, usage[0].queue_items, usage[0].queue_bytes),
            (1, 2, 3)
        );
    }

    #[test]
    fn a_vm_ids_state_goes_with_its_last_plugin() {
        let s = Shared::default();
        s.attach_vm("vm");
        s.attach_vm("vm");
        s.attach_vm("kept");
        s.set("vm", b"k", b"v".to_vec(), 0);
        s.set("kept", b"k", b"v".to_vec(), 0);
        let q = s.register_queue("vm", b"jobs");
        s.enqueue(q, b"item".to_vec());
        s.release_vm("vm");
        assert!(s.get("vm", b"k").is_some(), "one plugin of it is left");
        s.release_vm("vm");
        assert_eq!(s.get("vm", b"k"), None);
        assert_eq!(s.resolve_queue("vm", b"jobs"), None);
        assert_eq!(s.dequeue(q), Err(Status::NotFound));
        assert!(s.get("kept", b"k").is_some());
        let again = s.register_queue("vm", b"jobs");
        assert_ne!(again, q, "an old id never reaches a new queue");
        assert_eq!(s.usage().len(), 2);
        s.release_vm("never-attached");
    }

    #[test]
    fn metrics() {
        let s = Shared::default();
        let c = s.define_metric(MetricKind::Counter, "p", "requests");
        assert_eq!(s.define_metric(MetricKind::Counter, "p", "requests"), c);
        assert_ne!(s.define_metric(MetricKind::Counter, "q", "requests"), c);
        assert_eq!(s.increment_metric(c, "p", 2), Status::Ok);
        assert_eq!(s.increment_metric(c, "p", -1), Status::BadArgument);
        assert_eq!(s.increment_metric(c, "q", 1), Status::NotFound);
        let h = s.define_metric(MetricKind::Histogram, "p", "size");
        s.record_metric(h, "p", 10);
        s.record_metric(h, "p", 30);
        let h = s.metric(h).unwrap();
        assert_eq!((h.count, h.sum), (2, 40));
        assert_eq!(s.metric(c).unwrap().value, 2);
        assert_eq!(s.increment_metric(42, "p", 1), Status::NotFound);
    }
}
