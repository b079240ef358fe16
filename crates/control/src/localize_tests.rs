//! Table-driven tests of the localization, over a simulated cluster.

use super::*;
use crate::model::{Host, Unit};

const PROBE: Millis = 100;

fn h(n: &str) -> HostId {
    HostId::new(n)
}

fn u(n: &str) -> UnitId {
    UnitId::new(n)
}

/// A fault in the simulated world, from `start` until `end`.
#[derive(Debug, Clone)]
enum Fault {
    App(UnitId),
    /// The unit's process hung and its agent killed it at `start` (while
    /// frozen, before, it answered every handshake).
    Hung(UnitId),
    Container(UnitId),
    ContainerNet(UnitId),
    Host(HostId),
    HostNet(HostId),
    /// The controller loses a host's agent (management path only).
    ControllerCut(HostId),
    /// One probe of this path is lost, the one sent at `start`.
    LoseOne(Vantage, Target),
    /// Only the agent server stops reaching a unit.
    AgentServerBlind(UnitId),
}

#[derive(Debug, Clone)]
struct Timed {
    fault: Fault,
    start: Millis,
    end: Millis,
}

/// Hosts a, b, c, d; units a0, a1, b0, b1, c0, d0.
struct World {
    hosts: Vec<HostId>,
    units: Vec<(UnitId, HostId)>,
    faults: Vec<Timed>,
    /// The agent server's probes of the units check their service, and the
    /// controller sends no heartbeat to them (issue 29).
    agents_check_service: bool,
}

impl World {
    fn new(faults: Vec<Timed>) -> Self {
        let hosts = ["a", "b", "c", "d"].map(h).to_vec();
        let units = [
            ("a0", "a"),
            ("a1", "a"),
            ("b0", "b"),
            ("b1", "b"),
            ("c0", "c"),
            ("d0", "d"),
        ]
        .map(|(x, y)| (u(x), h(y)))
        .to_vec();
        Self {
            hosts,
            units,
            faults,
            agents_check_service: false,
        }
    }

    fn state(&self) -> DesiredState {
        DesiredState::new(
            self.hosts.iter().map(|x| Host::healthy(x.0.clone(), 10)),
            self.units
                .iter()
                .map(|(x, y)| Unit::new(x.0.clone(), y, None)),
        )
    }

    fn active(&self, t: Millis) -> impl Iterator<Item = &Fault> {
        self.faults
            .iter()
            .filter(move |f| f.start <= t && t < f.end)
            .map(|f| &f.fault)
    }

    fn any(&self, t: Millis, p: impl Fn(&Fault) -> bool) -> bool {
        self.active(t).any(p)
    }

    fn host_alive(&self, t: Millis, x: &HostId) -> bool {
        !self.any(t, |f| matches!(f, Fault::Host(y) if y == x))
    }

    fn data_ok(&self, t: Millis, x: &HostId) -> bool {
        self.host_alive(t, x) && !self.any(t, |f| matches!(f, Fault::HostNet(y) if y == x))
    }

    fn host_of(&self, unit: &UnitId) -> &HostId {
        &self.units.iter().find(|(x, _)| x == unit).expect("unit").1
    }

    fn unit_net_ok(&self, t: Millis, unit: &UnitId) -> bool {
        self.data_ok(t, self.host_of(unit))
            && !self.any(
                t,
                |f| matches!(f, Fault::Container(x) | Fault::ContainerNet(x) if x == unit),
            )
    }

    fn app_ok(&self, t: Millis, unit: &UnitId) -> bool {
        !self.any(
            t,
            |f| matches!(f, Fault::App(x) | Fault::Hung(x) if x == unit),
        )
    }

    fn lost(&self, t: Millis, from: &Vantage, to: &Target) -> bool {
        self.faults.iter().any(|f| {
            matches!(&f.fault, Fault::LoseOne(v, x) if v == from && x == to)
                && f.start <= t
                && t < f.start + PROBE
        })
    }

    /// Every measurement up to `end`, in time order.
    fn measurements(&self, end: Millis) -> Vec<(Millis, Measurement)> {
        let mut out = Vec::new();
        let mut t = 0;
        while t < end {
            // Controller heartbeats.
            for x in &self.hosts {
                let ok = self.host_alive(t, x)
                    && !self.any(t, |f| matches!(f, Fault::ControllerCut(y) if y == x));
                out.push((
                    t,
                    Measurement::Heartbeat {
                        to: Target::Host(x.clone()),
                        ok,
                    },
                ));
            }
            for (x, _) in self.units.iter().filter(|_| !self.agents_check_service) {
                let ok = self.unit_net_ok(t, x) && self.app_ok(t, x);
                out.push((
                    t,
                    Measurement::Heartbeat {
                        to: Target::Unit(x.clone()),
                        ok,
                    },
                ));
            }
            // The agent server's IP SLA probes.
            let ts = t + 10;
            for x in &self.hosts {
                let to = Target::Host(x.clone());
                let ok = self.data_ok(ts, x) && !self.lost(ts, &Vantage::AgentServer, &to);
                out.push((
                    ts,
                    Measurement::Probe {
                        from: Vantage::AgentServer,
                        to,
                        ok,
                    },
                ));
            }
            for (x, _) in &self.units {
                let to = Target::Unit(x.clone());
                let blind = self.any(ts, |f| matches!(f, Fault::AgentServerBlind(y) if y == x));
                let ok = self.unit_net_ok(ts, x) && !blind;
                out.push((
                    ts,
                    Measurement::Probe {
                        from: Vantage::AgentServer,
                        to,
                        ok,
                    },
                ));
                if self.agents_check_service {
                    out.push((
                        ts,
                        Measurement::Service {
                            from: Vantage::AgentServer,
                            unit: x.clone(),
                            answers: ok && self.app_ok(ts, x),
                        },
                    ));
                }
            }
            // The agents' probes of each other's hosts.
            for (i, x) in self.hosts.iter().enumerate() {
                let ta = t + 20 + 5 * i as Millis;
                if !self.host_alive(ta, x) {
                    continue;
                }
                let from = Vantage::Agent(x.clone());
                for y in self.hosts.iter().filter(|y| *y != x) {
                    let to = Target::Host(y.clone());
                    let ok =
                        self.data_ok(ta, x) && self.data_ok(ta, y) && !self.lost(ta, &from, &to);
                    out.push((
                        ta,
                        Measurement::Probe {
                            from: from.clone(),
                            to,
                            ok,
                        },
                    ));
                }
            }
            // With the agents checking the service: each unit probed by the
            // agent of the next host too (its backup's, as the probe plan
            // has it).
            for (i, (x, home)) in self.units.iter().enumerate() {
                if !self.agents_check_service {
                    break;
                }
                let k = self.hosts.iter().position(|y| y == home).unwrap_or(0);
                let by = &self.hosts[(k + 1) % self.hosts.len()];
                let ta = t + 40 + 3 * i as Millis;
                if !self.host_alive(ta, by) {
                    continue;
                }
                let from = Vantage::Agent(by.clone());
                let to = Target::Unit(x.clone());
                let ok =
                    self.data_ok(ta, by) && self.unit_net_ok(ta, x) && !self.lost(ta, &from, &to);
                out.push((
                    ta,
                    Measurement::Probe {
                        from: from.clone(),
                        to,
                        ok,
                    },
                ));
                out.push((
                    ta,
                    Measurement::Service {
                        from,
                        unit: x.clone(),
                        answers: ok && self.app_ok(ta, x),
                    },
                ));
            }
            t += PROBE;
        }
        // The agents' pidfd reports, at once.
        for f in &self.faults {
            let state = match &f.fault {
                Fault::App(_) => ProcessState::Exited,
                Fault::Hung(_) => ProcessState::Hung,
                Fault::Container(_) => ProcessState::ContainerGone,
                _ => continue,
            };
            let (Fault::App(x) | Fault::Hung(x) | Fault::Container(x)) = &f.fault else {
                continue;
            };
            out.push((
                f.start,
                Measurement::Process {
                    unit: x.clone(),
                    state,
                },
            ));
            if f.end < end {
                let state = ProcessState::Running;
                out.push((
                    f.end,
                    Measurement::Process {
                        unit: x.clone(),
                        state,
                    },
                ));
            }
        }
        out.sort_by_key(|(t, _)| *t);
        out
    }
}

/// Runs `world` through a fresh localizer until `end`, polling at its
/// deadlines.
fn run(world: &World, cfg: LocalizeConfig, end: Millis) -> (Localizer, Vec<Verdict>) {
    let mut l = Localizer::new(cfg);
    l.sync(&world.state());
    let out = feed(&mut l, world.measurements(end));
    (l, out)
}

/// Feeds `ms` in order, polling as the controller does: at each deadline
/// the localizer names, and once per probe interval (a result that repeats
/// a fresh path's state is evaluated there, not when it comes).
fn feed(l: &mut Localizer, ms: Vec<(Millis, Measurement)>) -> Vec<Verdict> {
    let every = l.config().probe_interval_ms.max(1);
    let mut out = Vec::new();
    let mut sweep: Option<Millis> = None;
    for (t, m) in ms {
        loop {
            let d = l.next_deadline().filter(|d| *d < t);
            let s = sweep.filter(|s| *s < t);
            let at = match (d, s) {
                (Some(d), Some(s)) => d.min(s),
                (Some(d), None) => d,
                (None, Some(s)) => s,
                (None, None) => break,
            };
            if s == Some(at) {
                sweep = Some(at + every);
            }
            out.extend(l.poll(at));
        }
        sweep.get_or_insert(t + every);
        out.extend(l.handle(t, m));
    }
    out
}

fn acting(vs: &[Verdict]) -> Vec<&Verdict> {
    vs.iter().filter(|v| v.finding.acts()).collect()
}

fn fault(fault: Fault, start: Millis, end: Millis) -> Timed {
    Timed { fault, start, end }
}

const START: Millis = 1_000;

struct Case {
    name: &'static str,
    faults: Vec<Timed>,
    /// The one acting verdict expected, or none.
    expect: Option<Finding>,
    /// The bound on (verdict − fault start), for an expected verdict.
    bar: Millis,
    /// A note that must appear.
    note: Option<fn(&Finding) -> bool>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "application",
            faults: vec![fault(Fault::App(u("a0")), START, 10_000)],
            expect: Some(Finding::Application {
                unit: u("a0"),
                host: h("a"),
            }),
            bar: 300,
            note: None,
        },
        Case {
            name: "hung",
            faults: vec![fault(Fault::Hung(u("a1")), START, 10_000)],
            expect: Some(Finding::Hung {
                unit: u("a1"),
                host: h("a"),
            }),
            bar: 300,
            note: None,
        },
        Case {
            name: "container",
            faults: vec![fault(Fault::Container(u("b1")), START, 10_000)],
            expect: Some(Finding::Container {
                unit: u("b1"),
                host: h("b"),
            }),
            bar: 300,
            note: None,
        },
        Case {
            name: "container network",
            faults: vec![fault(Fault::ContainerNet(u("c0")), START, 10_000)],
            expect: Some(Finding::ContainerNetwork {
                unit: u("c0"),
                host: h("c"),
            }),
            bar: 1_000,
            note: None,
        },
        Case {
            name: "host",
            faults: vec![fault(Fault::Host(h("b")), START, 10_000)],
            expect: Some(Finding::Host { host: h("b") }),
            bar: 1_000 + 3_000,
            note: Some(|f| {
                matches!(
                    f,
                    Finding::Suspect {
                        kind: FailureKind::Host,
                        ..
                    }
                )
            }),
        },
        Case {
            name: "host network, 4 s outage",
            faults: vec![fault(Fault::HostNet(h("d")), START, START + 4_000)],
            expect: Some(Finding::HostNetwork { host: h("d") }),
            bar: 1_000 + 3_000,
            note: Some(|f| {
                matches!(
                    f,
                    Finding::Suspect {
                        kind: FailureKind::HostNetwork,
                        ..
                    }
                )
            }),
        },
        Case {
            name: "host network, 1 s blip",
            faults: vec![fault(Fault::HostNet(h("d")), START, START + 1_000)],
            expect: None,
            bar: 0,
            note: Some(|f| matches!(f, Finding::Recovered { host } if host.0 == "d")),
        },
        Case {
            name: "a single lost probe",
            faults: vec![fault(
                Fault::LoseOne(Vantage::AgentServer, Target::Host(h("a"))),
                START,
                START + PROBE,
            )],
            expect: None,
            bar: 0,
            note: Some(|f| matches!(f, Finding::LostProbe { missed: 1, .. })),
        },
        Case {
            name: "controller cut off from a healthy host",
            faults: vec![fault(Fault::ControllerCut(h("c")), START, 10_000)],
            expect: None,
            bar: 0,
            note: Some(|f| matches!(f, Finding::ControllerCutOff { host } if host.0 == "c")),
        },
        Case {
            name: "one vantage point only",
            faults: vec![fault(Fault::AgentServerBlind(u("a1")), START, 10_000)],
            expect: None,
            bar: 0,
            note: None,
        },
    ]
}

#[test]
fn localizes_every_kind_and_ignores_the_non_failures() {
    for case in cases() {
        let world = World::new(case.faults.clone());
        let (_, out) = run(&world, LocalizeConfig::default(), 10_000);
        let acts = acting(&out);
        match &case.expect {
            Some(expect) => {
                assert_eq!(acts.len(), 1, "{}: {acts:#?}", case.name);
                let v = acts[0];
                assert_eq!(&v.finding, expect, "{}", case.name);
                assert!(v.vantages().len() >= 2, "{}: {:?}", case.name, v.evidence);
                let after = v.at - START;
                assert!(
                    after <= case.bar,
                    "{}: {after} ms after the fault",
                    case.name
                );
                assert!(v.detection_ms() <= after, "{}", case.name);
                assert!(v.first_bad >= START, "{}", case.name);
            }
            None => assert!(acts.is_empty(), "{}: {acts:#?}", case.name),
        }
        if let Some(note) = case.note {
            assert!(
                out.iter().any(|v| note(&v.finding)),
                "{}: {out:#?}",
                case.name
            );
            assert!(out
                .iter()
                .filter(|v| note(&v.finding))
                .all(|v| !v.finding.acts()));
        }
    }
}

#[test]
fn the_agents_service_probes_stand_in_for_the_controllers_unit_heartbeat() {
    for case in cases() {
        let mut world = World::new(case.faults.clone());
        world.agents_check_service = true;
        let (_, out) = run(&world, LocalizeConfig::default(), 10_000);
        let acts = acting(&out);
        match &case.expect {
            Some(expect) => {
                assert_eq!(acts.len(), 1, "{}: {acts:#?}", case.name);
                assert_eq!(&acts[0].finding, expect, "{}", case.name);
                assert!(acts[0].vantages().len() >= 2, "{}", case.name);
                assert!(acts[0].at - START <= case.bar, "{}", case.name);
            }
            None => assert!(acts.is_empty(), "{}: {acts:#?}", case.name),
        }
    }
    // Who checks the units' service: the agents here (the controller need
    // not), nobody but the controller in the plain world.
    let mut world = World::new(Vec::new());
    world.agents_check_service = true;
    let (l, _) = run(&world, LocalizeConfig::default(), 2_000);
    assert!(l.service_checked(&u("b0"), 2_000));
    assert!(!l.service_checked(&u("b0"), 5_000), "stale by then");
    let (l, _) = run(&World::new(Vec::new()), LocalizeConfig::default(), 2_000);
    assert!(!l.service_checked(&u("b0"), 2_000));
    // Negative control: with neither, an exited process has no second
    // vantage point and no verdict.
    let app = cases()
        .into_iter()
        .find(|c| matches!(c.expect, Some(Finding::Application { .. })))
        .expect("an application case");
    let world = World::new(app.faults.clone());
    let ms: Vec<(Millis, Measurement)> = world
        .measurements(10_000)
        .into_iter()
        .filter(|(_, m)| {
            !matches!(
                m,
                Measurement::Heartbeat {
                    to: Target::Unit(_),
                    ..
                }
            )
        })
        .collect();
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&world.state());
    assert!(acting(&feed(&mut l, ms)).is_empty());
}

#[test]
fn detection_times_meet_the_bars_with_100_ms_probes() {
    // Fault starts at every phase of the probe period.
    for offset in [0, 1, 25, 50, 75, 99] {
        let start = START + offset;
        let bars: [(Fault, Millis, Millis); 5] = [
            (Fault::App(u("a0")), 0, 300),
            (Fault::Container(u("a0")), 0, 300),
            (Fault::ContainerNet(u("a0")), 0, 1_000),
            (Fault::Host(h("a")), 3_000, 4_000),
            (Fault::HostNet(h("a")), 3_000, 4_000),
        ];
        for (f, least, most) in bars {
            let world = World::new(vec![fault(f.clone(), start, 10_000)]);
            let (_, out) = run(&world, LocalizeConfig::default(), 10_000);
            let acts = acting(&out);
            assert_eq!(acts.len(), 1, "{f:?} at {start}: {acts:#?}");
            let after = acts[0].at - start;
            assert!(
                (least..=most).contains(&after),
                "{f:?} at {start}: {after} ms"
            );
            assert!(acts[0].detection_ms() <= most, "{f:?}");
        }
    }
}

#[test]
fn host_network_confirmation_is_configurable() {
    let world = World::new(vec![fault(Fault::HostNet(h("d")), START, START + 1_500)]);
    // The 1.5 s outage is a blip under the 3 s default...
    let (_, out) = run(&world, LocalizeConfig::default(), 6_000);
    assert!(acting(&out).is_empty());
    // ...and permanent under a 1 s confirmation (negative control).
    let cfg = LocalizeConfig {
        host_network_confirm_ms: 1_000,
        ..LocalizeConfig::default()
    };
    let (_, out) = run(&world, cfg, 6_000);
    let acts = acting(&out);
    assert_eq!(acts.len(), 1);
    assert_eq!(acts[0].finding, Finding::HostNetwork { host: h("d") });
}

#[test]
fn one_vantage_point_would_act_if_the_rule_were_dropped() {
    // Negative control of the two-vantage rule: the agent server alone loses
    // the unit; with one vantage point enough, it would be moved.
    let world = World::new(vec![fault(Fault::AgentServerBlind(u("a1")), START, 10_000)]);
    let cfg = LocalizeConfig {
        min_vantages: 1,
        ..LocalizeConfig::default()
    };
    let (_, out) = run(&world, cfg, 5_000);
    let acts = acting(&out);
    assert_eq!(acts.len(), 1, "{acts:#?}");
    assert_eq!(
        acts[0].finding,
        Finding::ContainerNetwork {
            unit: u("a1"),
            host: h("a")
        }
    );
}

#[test]
fn a_hung_report_alone_does_not_act_and_shows_as_hung() {
    // The agent says the unit hung, but the controller still completes
    // handshakes with it (not killed yet, or another process answers): one
    // vantage point, no verdict.
    let world = World::new(Vec::new());
    let mut ms = world.measurements(3_000);
    ms.push((
        START,
        Measurement::Process {
            unit: u("c0"),
            state: ProcessState::Hung,
        },
    ));
    ms.sort_by_key(|(t, _)| *t);
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&world.state());
    assert!(acting(&feed(&mut l, ms)).is_empty());
    // With the kill confirmed by the heartbeat: a verdict named `hung`.
    let world = World::new(vec![fault(Fault::Hung(u("c0")), START, 10_000)]);
    let (_, out) = run(&world, LocalizeConfig::default(), 3_000);
    let acts = acting(&out);
    assert_eq!(acts.len(), 1);
    assert_eq!(acts[0].finding.failure_kind(), Some(FailureKind::Hung));
    assert!(acts[0]
        .evidence
        .iter()
        .any(|e| e.what == Observation::Hung && e.from == Vantage::Agent(h("c"))));
    let json = serde_json::to_value(&acts[0].finding).unwrap();
    assert!(json.get("hung").is_some(), "{json}");
    assert_eq!(
        serde_json::to_value(FailureKind::Hung).unwrap(),
        serde_json::json!("hung")
    );
}

#[test]
fn a_pidfd_report_alone_does_not_act() {
    // The agent says the process exited, but the controller still gets its
    // heartbeats: one vantage point, no verdict.
    let world = World::new(Vec::new());
    let mut ms = world.measurements(3_000);
    ms.push((
        START,
        Measurement::Process {
            unit: u("b0"),
            state: ProcessState::Exited,
        },
    ));
    ms.sort_by_key(|(t, _)| *t);
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&world.state());
    assert!(acting(&feed(&mut l, ms)).is_empty());
}

#[test]
fn lost_probes_below_the_threshold_only_note() {
    let cfg = LocalizeConfig::default();
    let mut l = Localizer::new(cfg);
    l.sync(&World::new(Vec::new()).state());
    let to = Target::Host(h("a"));
    let probe = |ok| Measurement::Probe {
        from: Vantage::AgentServer,
        to: to.clone(),
        ok,
    };
    assert!(l.handle(0, probe(true)).is_empty());
    assert!(l.handle(100, probe(false)).is_empty());
    assert!(l.handle(200, probe(false)).is_empty());
    let out = l.handle(300, probe(true));
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].finding,
        Finding::LostProbe {
            from: Vantage::AgentServer,
            to: to.clone(),
            missed: 2
        }
    );
    assert_eq!(out[0].detection_ms(), 200);
}

#[test]
fn a_failed_host_is_never_judged_again_until_reset() {
    // b fails for 5 s, comes back, fails again: one verdict.
    let faults = vec![
        fault(Fault::Host(h("b")), START, 6_000),
        fault(Fault::Host(h("b")), 8_000, 20_000),
    ];
    let world = World::new(faults);
    let (mut l, out) = run(&world, LocalizeConfig::default(), 14_000);
    let acts = acting(&out);
    assert_eq!(acts.len(), 1, "{acts:#?}");
    assert!(l.is_failed(&h("b")));
    // After the reset, the same failure is judged again.
    l.reset(&h("b"));
    assert!(!l.is_failed(&h("b")));
    let later: Vec<_> = world
        .measurements(20_000)
        .into_iter()
        .filter(|(t, _)| *t >= 14_000)
        .collect();
    let again = feed(&mut l, later);
    let acts = acting(&again);
    assert_eq!(acts.len(), 1, "{acts:#?}");
    assert_eq!(acts[0].finding, Finding::Host { host: h("b") });
}

#[test]
fn a_synced_failed_host_stays_failed() {
    let world = World::new(vec![fault(Fault::Host(h("c")), START, 10_000)]);
    let mut state = world.state();
    if let Some(x) = state.hosts.get_mut(&h("c")) {
        x.state = crate::model::HostState::Failed {
            kind: FailureKind::Host,
            since: 0,
        };
    }
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&state);
    assert!(l.is_failed(&h("c")));
    assert!(feed(&mut l, world.measurements(10_000))
        .iter()
        .all(|v| !v.finding.acts()));
}

#[test]
fn a_unit_gets_one_verdict_per_episode() {
    let faults = vec![
        fault(Fault::App(u("a0")), START, 3_000),
        fault(Fault::App(u("a0")), 5_000, 10_000),
    ];
    let (_, out) = run(&World::new(faults), LocalizeConfig::default(), 10_000);
    let acts = acting(&out);
    assert_eq!(acts.len(), 2, "{acts:#?}");
    assert!(acts.iter().all(|v| v.finding
        == Finding::Application {
            unit: u("a0"),
            host: h("a")
        }));
}

#[test]
fn a_unit_settling_after_a_restart_is_no_container_network_failure() {
    // The process restarts at 3 s (a takeover in place), and its BGP port
    // answers nobody for the next second (the takeover's guard).
    let faults = vec![
        fault(Fault::App(u("a0")), START, 3_000),
        fault(Fault::ContainerNet(u("a0")), 3_000, 4_000),
    ];
    let world = World::new(faults);
    let (_, out) = run(&world, LocalizeConfig::default(), 8_000);
    let kinds: Vec<_> = acting(&out)
        .iter()
        .map(|v| v.finding.failure_kind())
        .collect();
    assert_eq!(kinds, vec![Some(FailureKind::Application)], "{out:#?}");
    // Without the settling time the guard looks like a container-network
    // failure.
    assert_unsettled_is_container_network(&world, 8_000);
}

/// Without the settling time (`settle_ms` 0), `world` gives a
/// container-network verdict.
fn assert_unsettled_is_container_network(world: &World, end: Millis) {
    let cfg = LocalizeConfig {
        settle_ms: 0,
        ..LocalizeConfig::default()
    };
    let (_, out) = run(world, cfg, end);
    assert!(
        acting(&out)
            .iter()
            .any(|v| v.finding.failure_kind() == Some(FailureKind::ContainerNetwork)),
        "{out:#?}"
    );
}

#[test]
fn a_host_blip_that_reaches_the_units_probes_first_is_no_container_network_failure() {
    // The unit's probes (agent server, agent c) miss from t=0; the host's
    // last answer came at 150 and its probes miss from 250 on: the host is
    // going down, not the unit's network.
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&World::new(vec![]).state());
    let unit = Target::Unit(u("b0"));
    let host = Target::Host(h("b"));
    let mut ms = Vec::new();
    for t in [1_000, 1_100, 1_200, 1_300] {
        for from in [Vantage::AgentServer, Vantage::Agent(h("c"))] {
            ms.push((
                t,
                Measurement::Probe {
                    from: from.clone(),
                    to: unit.clone(),
                    ok: false,
                },
            ));
        }
    }
    for (t, ok) in [(1_050, true), (1_150, true), (1_250, false), (1_350, false)] {
        for from in [Vantage::AgentServer, Vantage::Agent(h("c"))] {
            ms.push((
                t,
                Measurement::Probe {
                    from,
                    to: host.clone(),
                    ok,
                },
            ));
        }
    }
    ms.sort_by_key(|(t, _)| *t);
    let out = feed(&mut l, ms);
    assert!(acting(&out).is_empty(), "{out:#?}");
}

#[test]
fn a_container_network_verdict_does_not_wait_on_the_sweeps_phase() {
    // b0's container is cut off from 1,000: its two probers' misses arrive
    // on the hundreds, and their answers of host b 50 ms after each; the
    // sweep (every 100 ms from the first measurement) always lands just
    // after a miss, when the host's latest answer is older than it.
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&World::new(vec![]).state());
    let mut ms = Vec::new();
    for k in 0..20 {
        for from in [Vantage::AgentServer, Vantage::Agent(h("c"))] {
            ms.push((
                1_000 + k * 100,
                Measurement::Probe {
                    from: from.clone(),
                    to: Target::Unit(u("b0")),
                    ok: false,
                },
            ));
            ms.push((
                1_050 + k * 100,
                Measurement::Probe {
                    from,
                    to: Target::Host(h("b")),
                    ok: true,
                },
            ));
        }
    }
    ms.sort_by_key(|(t, _)| *t);
    let out = feed(&mut l, ms);
    let v = acting(&out);
    assert_eq!(v.len(), 1, "{out:#?}");
    assert_eq!(
        v[0].finding.failure_kind(),
        Some(FailureKind::ContainerNetwork)
    );
    // The host's first answer after the third miss (at 1,200).
    assert_eq!(v[0].at, 1_250, "{v:#?}");
}

#[test]
fn a_unit_that_comes_back_after_its_host_from_a_blip_settles() {
    // b's network blips for 1 s; b0 answers 500 ms after b does.
    let faults = vec![
        fault(Fault::HostNet(h("b")), START, 2_000),
        fault(Fault::ContainerNet(u("b0")), 2_000, 2_500),
    ];
    let world = World::new(faults);
    let (_, out) = run(&world, LocalizeConfig::default(), 6_000);
    assert!(acting(&out).is_empty(), "{out:#?}");
    assert_unsettled_is_container_network(&world, 6_000);
}

#[test]
fn verdicts_serialize() {
    let world = World::new(vec![fault(Fault::Container(u("d0")), START, 10_000)]);
    let (_, out) = run(&world, LocalizeConfig::default(), 3_000);
    let json = serde_json::to_string(&out).expect("encode");
    let back: Vec<Verdict> = serde_json::from_str(&json).expect("decode");
    assert_eq!(back, out);
}

#[test]
fn a_unit_whose_migration_ends_starts_afresh() {
    // A new leader's first topology lacks b0 (its migration is in flight):
    // the probes of b0 miss meanwhile (its service address is not moved
    // yet) while its host answers. The migration ends: those misses were of
    // a unit in transit, not a container-network failure of b0 on b.
    let world = World::new(vec![]);
    let mut in_flight = world.state();
    in_flight.units.remove(&u("b0"));
    let unit = Target::Unit(u("b0"));
    let host = Target::Host(h("b"));
    let probes = |from: u64, to: u64, unit_ok: bool| {
        let mut ms = Vec::new();
        for t in (from..to).step_by(PROBE as usize) {
            for v in [Vantage::AgentServer, Vantage::Agent(h("a"))] {
                ms.push((
                    t,
                    Measurement::Probe {
                        from: v.clone(),
                        to: unit.clone(),
                        ok: unit_ok,
                    },
                ));
                ms.push((
                    t + 1,
                    Measurement::Probe {
                        from: v,
                        to: host.clone(),
                        ok: true,
                    },
                ));
            }
        }
        ms
    };
    let run_with = |l: &mut Localizer| {
        l.sync(&in_flight);
        let mut out = feed(l, probes(1_000, 1_600, false));
        l.sync(&world.state());
        out.extend(feed(l, probes(1_600, 1_700, false)));
        out.extend(feed(l, probes(1_700, 2_500, true)));
        out
    };
    let out = run_with(&mut Localizer::new(LocalizeConfig::default()));
    assert!(acting(&out).is_empty(), "{out:#?}");
    // Negative control: the same measurements about a unit placed on b all
    // along are a container-network failure.
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&world.state());
    let out = feed(&mut l, probes(1_000, 1_700, false));
    assert!(
        acting(&out)
            .iter()
            .any(|v| v.finding.failure_kind() == Some(FailureKind::ContainerNetwork)),
        "{out:#?}"
    );
}

#[test]
fn an_answer_after_answers_gone_stale_is_left_to_the_sweep() {
    let w = World::new(Vec::new());
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&w.state());
    let probe = |ok| Measurement::Probe {
        from: Vantage::Agent(h("b")),
        to: Target::Host(h("a")),
        ok,
    };
    l.handle(0, probe(true));
    assert_eq!(l.evaluations(), 1, "a new path is evaluated");
    l.handle(500, probe(true));
    assert_eq!(l.evaluations(), 1, "a fresh repeat is not");
    // A leader that fell behind: the next answer comes after the path
    // went stale (1 s). It repeats the state: no evaluation (a late
    // refresh each evaluated a host and its units, 16 us a measurement
    // at 1,000 hosts against 2.5 us).
    l.handle(2_500, probe(true));
    assert_eq!(l.evaluations(), 1);
    // A miss changes the path: evaluated at once.
    l.handle(2_600, probe(false));
    assert_eq!(l.evaluations(), 2);
    // The first answer after it too.
    l.handle(2_700, probe(true));
    assert_eq!(l.evaluations(), 3);
}

#[test]
fn an_answer_dated_before_the_failure_does_not_withdraw_a_suspicion() {
    let w = World::new(Vec::new());
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&w.state());
    let probe = |from: Vantage, ok| Measurement::Probe {
        from,
        to: Target::Host(h("a")),
        ok,
    };
    let (b, c, s) = (
        Vantage::Agent(h("b")),
        Vantage::Agent(h("c")),
        Vantage::AgentServer,
    );
    for v in [&b, &c, &s] {
        l.handle(0, probe(v.clone(), true));
    }
    // a fails at 1,000 ms; b's and c's misses come first.
    let mut found = Vec::new();
    for t in [1_000, 1_100, 1_200] {
        found.extend(l.handle(t, probe(b.clone(), false)));
        found.extend(l.handle(t, probe(c.clone(), false)));
    }
    assert!(l.is_suspect(&h("a")), "{found:?}");
    // The agent server's answer from before the failure, taken late (a
    // leader behind its reports): it does not withdraw the suspicion.
    found.extend(l.handle(950, probe(s.clone(), true)));
    assert!(l.is_suspect(&h("a")), "{found:?}");
    // Its misses come; the window ends with every path down: a verdict.
    for t in [1_050, 1_150, 1_250] {
        found.extend(l.handle(t, probe(s.clone(), false)));
    }
    for t in (1_300..=4_400).step_by(100) {
        for v in [&b, &c, &s] {
            found.extend(l.handle(t, probe(v.clone(), false)));
        }
        found.extend(l.poll(t));
    }
    assert!(
        !found
            .iter()
            .any(|v| matches!(v.finding, Finding::Recovered { .. })),
        "{found:?}"
    );
    assert!(
        found.iter().any(|v| matches!(
            v.finding,
            Finding::Host { .. } | Finding::HostNetwork { .. }
        )),
        "{found:?}"
    );
    // An answer after the first bad measurement does withdraw one.
    let mut l = Localizer::new(LocalizeConfig::default());
    l.sync(&w.state());
    for t in [1_000, 1_100, 1_200] {
        l.handle(t, probe(b.clone(), false));
        l.handle(t, probe(c.clone(), false));
    }
    assert!(l.is_suspect(&h("a")));
    let v = l.handle(1_300, probe(b.clone(), true));
    assert!(!l.is_suspect(&h("a")), "{v:?}");
    assert!(v
        .iter()
        .any(|v| matches!(v.finding, Finding::Recovered { .. })));
}
