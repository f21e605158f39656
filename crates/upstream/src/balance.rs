//! Which node a request goes to: smooth weighted round robin (nginx's
//! algorithm) or a consistent-hash ring, over the nodes in rotation, and
//! every node when none is ("panic mode", as Envoy).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::Ordering;
use std::time::Instant;

use wasmgate_config::Balance;

use super::{Node, Upstream};

/// Virtual points per unit of weight on the consistent-hash ring.
const RING_POINTS_PER_WEIGHT: u32 = 40;

/// The hash ring of `nodes`: (point, node index), sorted by point. Weights
/// count in proportion: `1000, 1000` makes the ring of `1, 1`.
pub(super) fn ring(nodes: &[Node]) -> Vec<(u64, usize)> {
    let common = nodes.iter().map(|n| n.weight).fold(0, gcd).max(1);
    let mut ring = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        for point in 0..node.weight / common * RING_POINTS_PER_WEIGHT {
            ring.push((hash(&(node.address.as_str(), point)), i));
        }
    }
    ring.sort_unstable();
    ring
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Upstream {
    pub(super) fn available(&self, i: usize) -> bool {
        let node = &self.nodes[i];
        if !node.healthy.load(Ordering::Relaxed) {
            return false;
        }
        let mut ejected = node.ejected_until.lock().unwrap();
        match *ejected {
            Some(until) if Instant::now() < until => false,
            Some(_) => {
                *ejected = None;
                true
            }
            None => true,
        }
    }

    /// True when nodes are picked by a request's hash key (consistent hashing).
    pub fn hashes(&self) -> bool {
        self.balance == Balance::ConsistentHash
    }

    /// The node for this attempt, skipping `tried`. When every node is down
    /// the gateway tries them anyway ("panic mode", as Envoy): a wrong health
    /// verdict must not take the whole upstream out.
    pub fn pick(&self, key: Option<u64>, tried: &[usize]) -> Option<usize> {
        if self.nodes.len() == 1 {
            // Healthy or not, the only node is the one (panic mode), and the
            // balancer has nothing to weigh: no lock, no list.
            return tried.is_empty().then_some(0);
        }
        let candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|i| !tried.contains(i) && self.available(*i))
            .collect();
        let candidates = if candidates.is_empty() {
            (0..self.nodes.len())
                .filter(|i| !tried.contains(i))
                .collect()
        } else {
            candidates
        };
        if candidates.is_empty() {
            return None;
        }
        match (self.balance, key) {
            (Balance::ConsistentHash, Some(key)) => self.on_ring(key, &candidates),
            _ => Some(self.round_robin(&candidates)),
        }
    }

    fn round_robin(&self, candidates: &[usize]) -> usize {
        let mut current = self.current_weights.lock().unwrap();
        let mut total = 0i64;
        let mut best = candidates[0];
        for &i in candidates {
            current[i] += self.nodes[i].weight as i64;
            total += self.nodes[i].weight as i64;
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        best
    }

    fn on_ring(&self, key: u64, candidates: &[usize]) -> Option<usize> {
        let start = self.ring.partition_point(|&(point, _)| point < key);
        (0..self.ring.len())
            .map(|k| self.ring[(start + k) % self.ring.len()].1)
            .find(|i| candidates.contains(i))
    }
}

pub fn hash(value: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Upstream;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use wasmgate_config::{Balance, HashOn, HealthCheckConfig, NodeConfig, UpstreamConfig};

    /// Weights count in proportion on the ring, and only a hashing
    /// upstream builds one (Kubernetes backends weigh 1000 per Service).
    #[tokio::test]
    async fn the_ring_scales_with_proportions_not_magnitudes() {
        let small = upstream(Balance::ConsistentHash, &[1, 2]);
        let large = upstream(Balance::ConsistentHash, &[1000, 2000]);
        assert_eq!(small.ring.len(), 3 * RING_POINTS_PER_WEIGHT as usize);
        assert_eq!(large.ring, small.ring);
        assert!(upstream(Balance::RoundRobin, &[1000]).ring.is_empty());
    }

    fn upstream(balance: Balance, weights: &[u32]) -> Arc<Upstream> {
        Upstream::new(
            &UpstreamConfig {
                name: "u".into(),
                nodes: weights
                    .iter()
                    .enumerate()
                    .map(|(i, &weight)| NodeConfig {
                        address: format!("127.0.0.1:{}", 1000 + i),
                        weight,
                    })
                    .collect(),
                balance,
                hash_on: HashOn::ClientIp,
                hash_header: None,
                connect_timeout_ms: 100,
                read_timeout_ms: 100,
                retries: 1,
                health_check: HealthCheckConfig::default(),
                tls: None,
                protocol: Default::default(),
            },
            std::path::Path::new("."),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn smooth_weighted_round_robin_interleaves() {
        let u = upstream(Balance::RoundRobin, &[5, 1, 1]);
        let picks: Vec<usize> = (0..7).map(|_| u.pick(None, &[]).unwrap()).collect();
        assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
    }

    #[tokio::test]
    async fn consistent_hash_is_stable_and_skips_down_nodes() {
        let u = upstream(Balance::ConsistentHash, &[1, 1, 1]);
        let key = hash(&"client-a");
        let first = u.pick(Some(key), &[]).unwrap();
        assert!((0..10).all(|_| u.pick(Some(key), &[]) == Some(first)));
        u.nodes[first].healthy.store(false, Ordering::Relaxed);
        let second = u.pick(Some(key), &[]).unwrap();
        assert_ne!(second, first);
        // Keys spread over the nodes.
        let mut seen = [0; 3];
        for k in 0..300 {
            seen[u.pick(Some(hash(&k)), &[]).unwrap()] += 1;
        }
        assert!(seen.iter().filter(|&&n| n > 0).count() >= 2);
    }

    #[tokio::test]
    async fn every_node_down_still_picks_one() {
        let u = upstream(Balance::RoundRobin, &[1, 1]);
        for node in &u.nodes {
            node.healthy.store(false, Ordering::Relaxed);
        }
        assert!(u.pick(None, &[]).is_some());
        assert_eq!(u.pick(None, &[0, 1]), None);
    }

    /// A single node is picked once per request, healthy, ejected or not,
    /// whatever the balance.
    #[tokio::test]
    async fn a_single_node_is_picked_once_whatever_its_state() {
        for balance in [Balance::RoundRobin, Balance::ConsistentHash] {
            let u = upstream(balance, &[3]);
            for healthy in [true, false] {
                u.nodes[0].healthy.store(healthy, Ordering::Relaxed);
                assert_eq!(u.pick(Some(7), &[]), Some(0));
                assert_eq!(u.pick(None, &[]), Some(0));
                assert_eq!(u.pick(None, &[0]), None);
            }
        }
    }
}
