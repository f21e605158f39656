//! Shared data, shared queues and metrics: state that outlives one instance
//! and is seen by every instance and worker thread of the process, as in
//! Envoy. Data and queue names are scoped by VM id (`FilterConfig::vm_id`);
//! metrics by their full name.

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};

use tokio::sync::watch;

use crate::abi::Status;

static SHARED: LazyLock<Shared> = LazyLock::new(Shared::default);

/// The process's shared state.
pub fn shared() -> &'static Shared {
    &SHARED
}

/// A VM id and a key (or queue name) within it.
type Scoped = (String, Vec<u8>);

pub struct Shared {
    /// Value and CAS token per key.
    data: Mutex<HashMap<Scoped, (Vec<u8>, u32)>>,
    queues: Mutex<Queues>,
    /// Bumped on every enqueue: root contexts watch it to run
    /// `proxy_on_queue_ready` for the queues they registered.
    queue_changes: watch::Sender<u64>,
    metrics: Mutex<Metrics>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            data: Mutex::default(),
            queues: Mutex::default(),
            queue_changes: watch::channel(0).0,
            metrics: Mutex::default(),
        }
    }
}

#[derive(Default)]
struct Queues {
    ids: HashMap<Scoped, u32>,
    items: Vec<VecDeque<Vec<u8>>>,
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
        data.get(&(vm_id.to_string(), key.to_vec())).cloned()
    }

    /// Sets `key`; with a non-zero `cas` only if the value has not changed
    /// since that token was read.
    pub fn set(&self, vm_id: &str, key: &[u8], value: Vec<u8>, cas: u32) -> Status {
        let mut data = self.data.lock().unwrap();
        let entry = data.entry((vm_id.to_string(), key.to_vec()));
        use std::collections::hash_map::Entry;
        match entry {
            Entry::Occupied(mut e) => {
                if cas != 0 && cas != e.get().1 {
                    return Status::CasMismatch;
                }
                let next = e.get().1.wrapping_add(1).max(1);
                e.insert((value, next));
            }
            Entry::Vacant(e) => {
                if cas != 0 {
                    return Status::CasMismatch;
                }
                e.insert((value, 1));
            }
        }
        Status::Ok
    }

    /// The queue `name` of `vm_id`, created if needed.
    pub fn register_queue(&self, vm_id: &str, name: &[u8]) -> u32 {
        let mut queues = self.queues.lock().unwrap();
        let key = (vm_id.to_string(), name.to_vec());
        if let Some(&id) = queues.ids.get(&key) {
            return id;
        }
        let id = queues.items.len() as u32 + 1;
        queues.items.push(VecDeque::new());
        queues.ids.insert(key, id);
        id
    }

    pub fn resolve_queue(&self, vm_id: &str, name: &[u8]) -> Option<u32> {
        let queues = self.queues.lock().unwrap();
        queues.ids.get(&(vm_id.to_string(), name.to_vec())).copied()
    }

    pub fn enqueue(&self, id: u32, value: Vec<u8>) -> Status {
        let mut queues = self.queues.lock().unwrap();
        match queues.items.get_mut((id as usize).wrapping_sub(1)) {
            Some(queue) => {
                queue.push_back(value);
                drop(queues);
                self.queue_changes.send_modify(|n| *n = n.wrapping_add(1));
                Status::Ok
            }
            None => Status::NotFound,
        }
    }

    /// Items waiting in queue `id` (0 for an unknown queue).
    pub fn queue_len(&self, id: u32) -> usize {
        let queues = self.queues.lock().unwrap();
        queues
            .items
            .get((id as usize).wrapping_sub(1))
            .map_or(0, VecDeque::len)
    }

    /// Changes whenever an item is enqueued anywhere.
    pub fn queue_changes(&self) -> watch::Receiver<u64> {
        self.queue_changes.subscribe()
    }

    pub fn dequeue(&self, id: u32) -> Result<Vec<u8>, Status> {
        let mut queues = self.queues.lock().unwrap();
        match queues.items.get_mut((id as usize).wrapping_sub(1)) {
            Some(queue) => queue.pop_front().ok_or(Status::Empty),
            None => Err(Status::NotFound),
        }
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
