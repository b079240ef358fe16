//! Next-hop objects of ours (`RTM_NEWNEXTHOP`): which exist, which
//! resolution each stands for, creating one in a batch before the first
//! route that names it, adopting ours from a dump, and finding the unused
//! ones to delete (see the parent module's "Next-hop objects").

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::time::Instant;

use holdfast_linux::rtnl::codec::{self, KernelNexthop, AF_INET};

use super::{Core, Flight, Resolved, NH_BASE, NONE};

/// Our next-hop objects.
#[derive(Default)]
pub(super) struct Nexthops {
    /// Off before a dump showed the kernel has them, and when it refused one.
    pub(super) enabled: bool,
    /// Resolution id → the object routes are written with.
    pub(super) of_res: HashMap<u32, u32, ahash::RandomState>,
    /// Every object of ours → its resolution id.
    pub(super) res_of: HashMap<u32, u32, ahash::RandomState>,
    /// Every id in the kernel, anyone's.
    pub(super) taken: HashSet<u32, ahash::RandomState>,
    pub(super) next: u32,
    /// Resolutions the kernel refused an object for: written with gateways.
    pub(super) refused: HashSet<u32, ahash::RandomState>,
    /// Look for unused objects once the queue is empty.
    pub(super) gc_due: bool,
    pub(super) next_gc: Option<Instant>,
}

impl Nexthops {
    pub(super) fn alloc(&mut self) -> u32 {
        loop {
            self.next = self.next.wrapping_add(1).max(NH_BASE);
            if !self.taken.contains(&self.next) && !self.res_of.contains_key(&self.next) {
                return self.next;
            }
        }
    }
}

impl Core {
    /// A next-hop object from a dump (before the routes). The kernel has
    /// them, so routes are written with ours.
    pub fn dump_nexthop(&mut self, n: &KernelNexthop) {
        self.nh.enabled = true;
        self.nh.taken.insert(n.id);
        let ours =
            n.protocol == self.cfg.protocol || self.retired.iter().any(|(_, p)| *p == n.protocol);
        if !ours || n.special || n.family != AF_INET {
            return;
        }
        let Some(gw) = n.gateway else { return };
        let res = self.res.id(&Resolved::from_slice(&[(gw, n.oif)]));
        self.nh.res_of.insert(n.id, res);
        self.nh.of_res.entry(res).or_insert(n.id);
    }

    /// The kernel answered the next-hop dump without any (none exist, or
    /// it has no next-hop objects): `supported` says which.
    pub fn nexthops_dumped(&mut self, supported: bool) {
        self.nh.enabled |= supported;
    }

    /// The next-hop object to write a route to `target` with, created in
    /// this batch if need be; None: write the gateways.
    pub(super) fn nexthop_object(
        &mut self,
        target: u32,
        buf: &mut Vec<u8>,
        seq: u32,
    ) -> Option<u32> {
        if !self.nh.enabled || target == NONE || self.nh.refused.contains(&target) {
            return None;
        }
        if let Some(id) = self.nh.of_res.get(&target) {
            return Some(*id);
        }
        let (gw, oif) = match self.res.get(target).as_slice() {
            [(gw @ IpAddr::V4(_), oif)] => (*gw, *oif),
            _ => return None,
        };
        let id = self.nh.alloc();
        let sq = seq.wrapping_add(self.in_flight.len() as u32);
        codec::encode_nexthop_add(buf, sq, id, self.cfg.protocol, &gw, oif);
        self.in_flight.push(Flight::NhAdd { res: target, id });
        self.nh.of_res.insert(target, id);
        self.nh.res_of.insert(id, target);
        Some(id)
    }

    /// Our next-hop objects whose resolution no route has or is to get.
    pub(super) fn unused_nexthops(&self, now: Instant) -> Vec<u32> {
        if self.nh.res_of.is_empty() {
            return Vec::new();
        }
        let mut used = HashSet::<u32, ahash::RandomState>::default();
        for (_, e) in self.routes.live() {
            used.insert(e.kernel);
            used.insert(self.target(e, now));
        }
        let mut ids: Vec<u32> = self
            .nh
            .res_of
            .iter()
            .filter(|(_, r)| !used.contains(r))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    pub(super) fn nexthop_added(&mut self, res: u32, id: u32, err: Option<i32>) {
        let Some(code) = err else {
            self.nh.taken.insert(id);
            self.counters.nexthops_added += 1;
            return;
        };
        self.counters.errors += 1;
        self.nh.res_of.remove(&id);
        if self.nh.of_res.get(&res) == Some(&id) {
            self.nh.of_res.remove(&res);
        }
        match code {
            // Someone else's id: the next try picks another.
            libc::EEXIST => {
                self.nh.taken.insert(id);
            }
            // No next-hop objects in this kernel: gateways from now on.
            libc::EOPNOTSUPP | libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT => {
                self.nh.enabled = false;
            }
            _ => {
                self.nh.refused.insert(res);
            }
        }
    }
}
