//! `holdfast-bench` (what `make bench` and `holdfast bench` run): the TENSOR
//! evaluation (SIGCOMM 2023, §4.1–4.2) side by side with bird2, frr and
//! gobgpd from Debian's packages, in one invocation. It writes
//! `docs/benchmarks.md`, one PNG per figure (gnuplot) and, on request, the
//! results as JSON.
//!
//! What each figure measures (every DUT runs in its own lab network
//! namespace; the testers are `holdfast-tester` sessions held by this
//! process; no packet captures):
//!
//! - **Fig. 6(a)** ([`learn`]): receive, learn and re-advertise N routes
//!   (10k … 1M), packed, realistic and dfz workloads; holdfastd with NSR on
//!   (Redis store, PROTECTED before the clock starts) and off, bird2, frr,
//!   gobgpd. Time from the injector's first write until the monitor holds
//!   all N; peak RSS.
//! - **Fig. 6(b)** ([`originate`]): the DUT originates N routes and sends them to
//!   one peer; time from the monitor's connect until it holds all N (the
//!   DUT's own table is full before the monitor connects).
//! - **Fig. 6(c)** ([`fanout`]): update packing; 100 routes re-advertised to P
//!   peers (P = 50 … 700), all P sessions in one tester process; time from
//!   the injector's first write until every monitor holds all routes.
//! - **Fig. 6(d)** ([`units`]): K units of one daemon on one host (one
//!   namespace each), each learning 10k routes; RSS per unit in a steady
//!   window, CPU per unit while learning (and at rest) against K.
//! - **Fig. 5(b)** ([`store`]): holdfastd's Redis store, time per write and
//!   per read call against the number of records per call.
//! - **Takeover** ([`takeover`]): holdfastd NSR on, primary killed, backup
//!   takes over; BGP resume and all-state-resumed times against table size,
//!   beside the other daemons' restart to a full table ([`learn::restart_recovery`]).
//! - **Scaling** ([`figures::scaling`]): holdfastd with 1 and 2 workers.
//! - **Kernel FIB** ([`fib`], `--fib N`, run alone): N routes installed
//!   into a kernel table of the DUT's namespace, holdfastd `[kernel]`
//!   against bird2's `kernel` protocol. [`fib_reload`] (`--fib-reload N`):
//!   holdfastd's routes moved to a new metric, then a new protocol, by a
//!   SIGHUP reload with N installed.
//!
//! Every cell is the median of `--runs` runs with the min–max spread; a run
//! slower than `--slow` seconds is not repeated ("1 run"); a run over
//! `--timeout` reports "timeout" and larger sizes of that daemon are skipped.
//! Every loop is bounded in count and time; every lab is torn down.
//!
//! # Known issues
//!
//! - The testers and the DUT share the machine's cores; on a 2-core machine
//!   the monitor's decoding is part of every daemon's time.
//! - frr re-advertises every route to the injector that sent it; the extra
//!   output counts in frr's time.
//! - Fig. 6(b) loads the routes differently per daemon (configuration,
//!   `vtysh -f`, `gobgp mrt inject`); that loading is reported but not timed
//!   as part of the figure.
//! - Fig. 6(d) puts each unit in its own namespace (bird2, frr and gobgpd
//!   cannot share one listening port 179 per namespace as the lab starts
//!   them); in the steady window a unit is idle but for timers and keepalives.
//! - The takeover figure compares a takeover (sessions kept) with the other
//!   daemons' restart (sessions reset); the restart's time leaves out
//!   failure detection, and the testers reconnect every 50 ms.
//! - Fig. 5(b) runs Redis on loopback in the same machine (TENSOR used
//!   another host), so it has no network round trip.

pub mod dut;
pub mod fanout;
pub mod fib;
pub mod fib_reload;
pub mod figures;
pub mod learn;
pub mod many;
pub mod many_learn;
pub mod mrt;
pub mod originate;
pub mod plane_unit;
pub mod report;
pub mod store;
pub mod takeover;
pub mod units;
pub mod util;
