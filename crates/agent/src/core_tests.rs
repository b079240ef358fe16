//! The agent core's tests.

use super::*;
use holdfast_control_api::v1::{FenceUnit, Heartbeat, LeaderBeat, StartUnit, Takeover};

const MS: Duration = Duration::from_millis(1);

/// How many reports in `o` match `is`.
fn reports(o: &[AgentOutput], is: impl Fn(&agent_report::Body) -> bool) -> usize {
    o.iter()
        .filter(|x| matches!(x, AgentOutput::Report(AgentReport { body: Some(b) }) if is(b)))
        .count()
}

fn core() -> AgentCore {
    AgentCore::new(AgentConfig {
        host: "b".into(),
        agent_server: false,
        watchdog: WatchdogConfig::DEFAULT,
        heartbeat: 100 * MS,
        unix_origin_ms: 1_000_000,
        version: "test".into(),
        probe_plans: true,
    })
}

/// A core holding a lease granted at time zero.
fn leased() -> AgentCore {
    let mut c = core();
    c.handle(
        Duration::ZERO,
        AgentInput::LeaseGranted {
            sent: Duration::ZERO,
        },
    );
    c
}

fn cmd(token: u64, id: u64, body: command::Body) -> AgentInput {
    AgentInput::Command(Command {
        token,
        id,
        body: Some(body),
    })
}

fn results(o: &[AgentOutput]) -> Vec<(u64, bool)> {
    o.iter()
        .filter_map(|o| match o {
            AgentOutput::Report(AgentReport {
                body: Some(agent_report::Body::Result(r)),
            }) => Some((r.id, r.ok)),
            _ => None,
        })
        .collect()
}

fn fences(o: &[AgentOutput]) -> Vec<(Option<u64>, String)> {
    o.iter()
        .filter_map(|o| match o {
            AgentOutput::Fence { id, unit } => Some((*id, unit.clone())),
            _ => None,
        })
        .collect()
}

fn fence_unit(u: &str) -> command::Body {
    command::Body::FenceUnit(FenceUnit { unit: u.into() })
}

#[test]
fn a_deposed_leader_cannot_act() {
    let mut c = leased();
    // Leader with token 10 fences unit x.
    let o = c.handle(MS, cmd(10, 1, fence_unit("x")));
    assert_eq!(fences(&o), vec![(Some(1), "x".into())]);
    // A new leader (token 12) is seen.
    let o = c.handle(2 * MS, cmd(12, 1, fence_unit("y")));
    assert_eq!(fences(&o), vec![(Some(1), "y".into())]);
    // The old one's next command is refused and does nothing.
    let o = c.handle(3 * MS, cmd(10, 2, fence_unit("z")));
    assert!(fences(&o).is_empty());
    assert_eq!(results(&o), vec![(2, false)]);
    assert_eq!(c.highest_token(), 12);
    // Token 0 (none) is refused too.
    assert_eq!(
        results(&c.handle(4 * MS, cmd(0, 3, fence_unit("z")))),
        vec![(3, false)]
    );
}

#[test]
fn the_watchdog_fences_every_unit_and_blocks_starts_until_a_new_lease() {
    let mut c = core();
    let o = c.handle(Duration::ZERO, AgentInput::Tick);
    assert!(o.contains(&AgentOutput::RenewLease), "no lease yet");
    c.handle(
        Duration::ZERO,
        AgentInput::LeaseGranted {
            sent: Duration::ZERO,
        },
    );
    for (u, pid) in [("edge-1", 10), ("edge-2", 11)] {
        c.handle(
            MS,
            AgentInput::UnitStarted {
                unit: u.into(),
                pid,
                role: "primary".into(),
                epoch: 3,
            },
        );
    }
    c.handle(500 * MS, AgentInput::LeaseRenewalSent);
    // etcd stops answering; at 1.5 s the lease (granted at 0, 3 s) is
    // within the 1.5 s margin: fence both units, once.
    assert!(fences(&c.handle(1499 * MS, AgentInput::Tick)).is_empty());
    let o = c.handle(1500 * MS, AgentInput::Tick);
    assert_eq!(
        fences(&o),
        vec![(None, "edge-1".into()), (None, "edge-2".into())]
    );
    assert!(c.fenced());
    assert!(fences(&c.handle(1600 * MS, AgentInput::Tick)).is_empty());
    // While fenced, nothing starts; fencing is still allowed.
    let start = command::Body::StartUnit(StartUnit {
        unit: "edge-1".into(),
        config: String::new(),
        standby: false,
        ..Default::default()
    });
    let o = c.handle(1700 * MS, cmd(5, 1, start.clone()));
    assert_eq!(results(&o), vec![(1, false)]);
    let take = command::Body::Takeover(Takeover {
        unit: "edge-3".into(),
        config: String::new(),
        epoch: 4,
        primary_fenced: false,
        ..Default::default()
    });
    assert_eq!(
        results(&c.handle(1701 * MS, cmd(5, 2, take))),
        vec![(2, false)]
    );
    assert_eq!(
        fences(&c.handle(1702 * MS, cmd(5, 3, fence_unit("edge-2")))).len(),
        1
    );
    // A new lease: starts are allowed again.
    c.handle(5000 * MS, AgentInput::LeaseGranted { sent: 5000 * MS });
    let o = c.handle(5001 * MS, cmd(5, 4, start));
    assert!(matches!(o[0], AgentOutput::Start { id: 4, .. }), "{o:?}");
}

#[test]
fn hello_heartbeats_and_events() {
    let mut c = leased();
    c.handle(
        MS,
        AgentInput::UnitStarted {
            unit: "edge-1".into(),
            pid: 10,
            role: "primary".into(),
            epoch: 3,
        },
    );
    c.handle(2 * MS, cmd(9, 1, fence_unit("nothing")));
    let o = c.handle(10 * MS, AgentInput::Connected);
    let AgentOutput::Report(AgentReport {
        body: Some(agent_report::Body::Hello(h)),
    }) = &o[0]
    else {
        panic!("{o:?}")
    };
    assert_eq!(
        (
            h.host.as_str(),
            h.units.len(),
            h.highest_token,
            h.schema,
            h.version.as_str()
        ),
        ("b", 1, 9, SCHEMA, "test")
    );
    // The running unit's state again, for a new leader.
    assert!(matches!(
        &o[1],
        AgentOutput::Report(AgentReport {
            body: Some(agent_report::Body::UnitEvent(UnitEvent {
                kind: 1,
                pid: 10,
                ..
            }))
        })
    ));
    assert!(matches!(
        &o[2],
        AgentOutput::Report(AgentReport {
            body: Some(agent_report::Body::Heartbeat(Heartbeat {
                seq: 1,
                sent_unix_ms: 1_000_010,
                ..
            }))
        })
    ));
    assert_eq!(c.next_deadline(), Some(110 * MS));
    let beats = |o: &[AgentOutput]| reports(o, |b| matches!(b, agent_report::Body::Heartbeat(_)));
    assert_eq!(beats(&c.handle(109 * MS, AgentInput::Tick)), 0);
    assert_eq!(beats(&c.handle(110 * MS, AgentInput::Tick)), 1);
    let o = c.handle(
        120 * MS,
        AgentInput::UnitExited(Exit {
            unit: "edge-1".into(),
            pid: 10,
            code: None,
            signal: Some(9),
            fenced: false,
            container_gone: false,
        }),
    );
    assert!(
        matches!(
            &o[0],
            AgentOutput::Report(AgentReport {
                body: Some(agent_report::Body::UnitEvent(UnitEvent {
                    kind: 2,
                    code: -1,
                    signal: 9,
                    ..
                }))
            })
        ),
        "{o:?}"
    );
    let o = c.handle(
        130 * MS,
        AgentInput::Measured(Measurement {
            from: "b".into(),
            target: "host:a".into(),
            seq: 4,
            sent_at: 125 * MS,
            ok: true,
            refused: false,
            rtt: Some(Duration::from_micros(250)),
        }),
    );
    assert!(matches!(
        &o[0],
        AgentOutput::Report(AgentReport {
            body: Some(agent_report::Body::Measurement(m))
        }) if m.sent_unix_ms == 1_000_125 && m.rtt_us == 250 && m.ok
    ));
    assert_eq!(
        results(&c.handle(
            140 * MS,
            AgentInput::Done {
                id: 1,
                result: Ok(())
            }
        )),
        vec![(1, true)]
    );
}

#[test]
fn a_hung_unit_is_fenced_then_reported_hung_until_fenced_by_command() {
    let mut c = core();
    c.handle(Duration::ZERO, AgentInput::Connected);
    c.handle(
        MS,
        AgentInput::UnitStarted {
            unit: "edge-1".into(),
            pid: 10,
            role: PRIMARY.into(),
            epoch: 1,
        },
    );
    let hung = |pid| AgentInput::UnitHung {
        unit: "edge-1".into(),
        pid,
        silent: 500 * MS,
    };
    // Another pid (an old process): nothing.
    assert!(!c
        .handle(2 * MS, hung(9))
        .iter()
        .any(|o| matches!(o, AgentOutput::FenceHung { .. })));
    let o = c.handle(3 * MS, hung(10));
    assert!(o.contains(&AgentOutput::FenceHung {
        unit: "edge-1".into()
    }));
    let gone = AgentInput::UnitExited(Exit {
        unit: "edge-1".into(),
        pid: 10,
        code: None,
        signal: Some(9),
        fenced: true,
        container_gone: false,
    });
    let kinds = |o: &[AgentOutput]| -> Vec<i32> {
        o.iter()
            .filter_map(|x| match x {
                AgentOutput::Report(AgentReport {
                    body: Some(agent_report::Body::UnitEvent(e)),
                }) => Some(e.kind),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        kinds(&c.handle(4 * MS, gone.clone())),
        vec![unit_event::Kind::Hung as i32]
    );
    // A new leader's stream hears of it again, until a command fences it.
    assert_eq!(
        kinds(&c.handle(5 * MS, AgentInput::Connected)),
        vec![unit_event::Kind::Hung as i32]
    );
    c.handle(6 * MS, cmd(3, 1, fence_unit("edge-1")));
    assert!(kinds(&c.handle(7 * MS, AgentInput::Connected)).is_empty());
    // An ordinary fence afterwards is reported FENCED.
    c.handle(
        8 * MS,
        AgentInput::UnitStarted {
            unit: "edge-1".into(),
            pid: 10,
            role: PRIMARY.into(),
            epoch: 2,
        },
    );
    assert_eq!(
        kinds(&c.handle(9 * MS, gone)),
        vec![unit_event::Kind::Fenced as i32]
    );
}

#[test]
fn a_beat_or_etcd_tells_the_new_leaders_token_and_the_old_one_is_refused() {
    let mut c = core();
    let beat = |token| {
        AgentInput::Command(Command {
            token,
            id: 0,
            body: Some(command::Body::Beat(LeaderBeat::default())),
        })
    };
    // The old leader (token 5) ran a command; a beat asks for nothing.
    c.handle(MS, cmd(5, 1, fence_unit("x")));
    assert!(results(&c.handle(2 * MS, beat(5))).is_empty());
    // The new leader's first beat on its stream: token 9.
    assert!(results(&c.handle(3 * MS, beat(9))).is_empty());
    assert_eq!(c.highest_token(), 9);
    assert_eq!(
        results(&c.handle(4 * MS, cmd(5, 2, fence_unit("edge-1")))),
        vec![(2, false)]
    );
    // A deposed leader's beat changes nothing.
    assert!(results(&c.handle(5 * MS, beat(5))).is_empty());
    assert_eq!(c.highest_token(), 9);
    // etcd names a newer leader before its stream is open.
    c.handle(6 * MS, AgentInput::LeaderToken(12));
    assert_eq!(c.highest_token(), 12);
    c.handle(7 * MS, AgentInput::LeaderToken(11));
    assert_eq!(c.highest_token(), 12);
    assert_eq!(
        results(&c.handle(8 * MS, cmd(9, 3, fence_unit("edge-1")))),
        vec![(3, false)]
    );
}

#[test]
fn an_exit_is_reported_again_on_a_new_stream_until_fenced_or_restarted() {
    let mut c = core();
    c.handle(Duration::ZERO, AgentInput::Connected);
    let exit = AgentInput::UnitExited(Exit {
        unit: "edge-1".into(),
        pid: 10,
        code: None,
        signal: Some(9),
        fenced: false,
        container_gone: false,
    });
    c.handle(MS, exit);
    let events = |o: &[AgentOutput]| reports(o, |b| matches!(b, agent_report::Body::UnitEvent(_)));
    // A new leader's stream hears of it again.
    assert_eq!(events(&c.handle(2 * MS, AgentInput::Connected)), 1);
    // Once the unit is fenced by a command, no more.
    let fence = Command {
        token: 5,
        id: 1,
        body: Some(command::Body::FenceUnit(FenceUnit {
            unit: "edge-1".into(),
        })),
    };
    c.handle(3 * MS, AgentInput::Command(fence));
    assert_eq!(events(&c.handle(4 * MS, AgentInput::Connected)), 0);
}

fn answers(o: &[AgentOutput]) -> Vec<(u64, bool)> {
    o.iter()
        .filter_map(|o| match o {
            AgentOutput::FailsafeAnswer { id, agree, .. } => Some((*id, *agree)),
            _ => None,
        })
        .collect()
}

fn asked(o: &[AgentOutput]) -> Option<Vec<String>> {
    o.iter().find_map(|o| match o {
        AgentOutput::AskFailsafe { units } => Some(units.clone()),
        _ => None,
    })
}

#[test]
fn failsafe_keeps_units_through_an_etcd_outage_every_agent_agrees_to() {
    // `a` runs edge-1; etcd stops answering after the grant at 0.
    let mut a = core();
    a.handle(
        Duration::ZERO,
        AgentInput::LeaseGranted {
            sent: Duration::ZERO,
        },
    );
    a.handle(
        MS,
        AgentInput::UnitStarted {
            unit: "edge-1".into(),
            pid: 10,
            role: "primary".into(),
            epoch: 1,
        },
    );
    assert_eq!(asked(&a.handle(999 * MS, AgentInput::Tick)), None);
    let o = a.handle(1000 * MS, AgentInput::Tick);
    assert_eq!(asked(&o), Some(vec!["edge-1".to_string()]), "{o:?}");
    // `b`, asked: healthy (renewed at 900 ms) it disagrees and promises
    // nothing; late itself it agrees and then refuses to start edge-1
    // for one TTL, while other units start.
    let mut b = core();
    b.handle(900 * MS, AgentInput::LeaseGranted { sent: 900 * MS });
    let ask = |id| AgentInput::FailsafeAsked {
        id,
        from: "a".into(),
        units: vec!["edge-1".into()],
    };
    assert_eq!(answers(&b.handle(1000 * MS, ask(1))), vec![(1, false)]);
    let take = |u: &str| {
        command::Body::Takeover(Takeover {
            unit: u.into(),
            config: String::new(),
            epoch: 2,
            primary_fenced: false,
            ..Default::default()
        })
    };
    assert!(matches!(
        b.handle(1001 * MS, cmd(3, 1, take("edge-1")))[0],
        AgentOutput::Start { .. }
    ));
    // Its own renewals late (none acknowledged since 900 ms), it agrees.
    assert_eq!(answers(&b.handle(1900 * MS, ask(2))), vec![(2, true)]);
    assert_eq!(
        results(&b.handle(1901 * MS, cmd(3, 2, take("edge-1")))),
        vec![(2, false)]
    );
    assert!(matches!(
        b.handle(1902 * MS, cmd(3, 3, take("edge-9")))[0],
        AgentOutput::Start { .. }
    ));
    // etcd answers `b` again; the promise still holds until 4.9 s.
    for t in [2000, 3000, 4000] {
        b.handle(t * MS, AgentInput::LeaseRenewed { sent: t * MS });
    }
    assert_eq!(
        results(&b.handle(4899 * MS, cmd(3, 4, take("edge-1")))),
        vec![(4, false)]
    );
    // A takeover whose old primary's agent acknowledged its fence: the
    // promise is moot.
    let fenced = command::Body::Takeover(Takeover {
        unit: "edge-1".into(),
        config: String::new(),
        epoch: 2,
        primary_fenced: true,
        ..Default::default()
    });
    assert!(matches!(
        b.handle(4899 * MS, cmd(3, 9, fenced))[0],
        AgentOutput::Start { .. }
    ));
    assert!(matches!(
        b.handle(4900 * MS, cmd(3, 5, take("edge-1")))[0],
        AgentOutput::Start { .. }
    ));
    // Back at `a`: every agent agreed to the round sent at 1 s: edge-1 is
    // kept past 1.5 s (until 1 s + 3 s - 1.5 s), and rounds go on.
    a.handle(1010 * MS, AgentInput::FailsafeConfirmed { sent: 1000 * MS });
    assert!(a.in_failsafe());
    let o = a.handle(1500 * MS, AgentInput::Tick);
    assert!(fences(&o).is_empty(), "{o:?}");
    assert!(asked(&o).is_some());
    a.handle(1510 * MS, AgentInput::FailsafeConfirmed { sent: 1500 * MS });
    assert!(fences(&a.handle(2999 * MS, AgentInput::Tick)).is_empty());
    // The next rounds are refused: fenced at 1.5 s + 1.5 s.
    assert_eq!(fences(&a.handle(3000 * MS, AgentInput::Tick)).len(), 1);
    // etcd back: a new lease, renewals on time, no more rounds.
    a.handle(4000 * MS, AgentInput::LeaseGranted { sent: 4000 * MS });
    assert!(!a.in_failsafe());
    assert_eq!(asked(&a.handle(4100 * MS, AgentInput::Tick)), None);
}

#[test]
fn a_takeover_goes_through_the_standby_running_here() {
    let mut c = leased();
    let o = c.handle(
        MS,
        AgentInput::UnitStarted {
            unit: "edge-1".into(),
            pid: 42,
            role: STANDBY.into(),
            epoch: 0,
        },
    );
    assert!(
        matches!(&o[0], AgentOutput::Report(AgentReport { body: Some(agent_report::Body::UnitEvent(e)) }) if e.role == STANDBY),
        "{o:?}"
    );
    let take = |u: &str| {
        command::Body::Takeover(Takeover {
            unit: u.into(),
            config: String::new(),
            epoch: 9,
            primary_fenced: false,
            ..Default::default()
        })
    };
    let o = c.handle(2 * MS, cmd(9, 1, take("edge-1")));
    assert_eq!(
        o[0],
        AgentOutput::Promote {
            id: 1,
            unit: "edge-1".into(),
            epoch: 9
        }
    );
    // Another unit without a standby here: a cold start.
    let o = c.handle(3 * MS, cmd(9, 2, take("edge-2")));
    assert!(
        matches!(
            o[0],
            AgentOutput::Start {
                takeover: Some(9),
                ..
            }
        ),
        "{o:?}"
    );
    // Ready: the standby is the primary now (its own pid, reported).
    let o = c.handle(
        4 * MS,
        AgentInput::Done {
            id: 1,
            result: Ok(()),
        },
    );
    assert!(
        matches!(&o[0], AgentOutput::Report(AgentReport { body: Some(agent_report::Body::UnitEvent(e)) })
            if e.pid == 42 && e.role == PRIMARY && e.kind == unit_event::Kind::Started as i32),
        "{o:?}"
    );
    assert_eq!(results(&o), vec![(1, true)]);
    // A second takeover of it here is no longer through a standby.
    let o = c.handle(5 * MS, cmd(9, 3, take("edge-1")));
    assert!(matches!(o[0], AgentOutput::Start { .. }), "{o:?}");
}

/// A takeover that names the unit's service addresses adds them the moment
/// holdfastd is ready for them, and answers the command once they are
/// here; a failure to add them leaves them to the controller's address
/// step and does not fail the takeover.
#[test]
fn a_takeover_adds_its_addresses_once_ready() {
    let mut c = leased();
    let ready = |id, result| AgentInput::TakeoverReady { id, result };
    let done = |id, result| AgentInput::Done { id, result };
    let take = |u: &str, addresses: &[&str]| {
        command::Body::Takeover(Takeover {
            unit: u.into(),
            epoch: 9,
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            interface: "eth1".into(),
            ..Default::default()
        })
    };
    let o = c.handle(MS, cmd(9, 1, take("edge-1", &["198.18.0.10/32"])));
    assert!(matches!(o[0], AgentOutput::Start { id: 1, .. }), "{o:?}");
    // Ready: the addresses, and no answer yet.
    let o = c.handle(2 * MS, ready(1, Ok(())));
    assert_eq!(
        o,
        vec![AgentOutput::Address {
            id: 1,
            unit: "edge-1".into(),
            addresses: vec!["198.18.0.10/32".into()],
            add: true,
            interface: "eth1".into(),
        }]
    );
    // Added: the takeover is done.
    let o = c.handle(3 * MS, done(1, Ok(())));
    assert_eq!(results(&o), vec![(1, true)]);
    // Not added: done all the same.
    c.handle(4 * MS, cmd(9, 2, take("edge-2", &["198.18.0.11/32"])));
    let o = c.handle(5 * MS, ready(2, Ok(())));
    assert!(matches!(o[0], AgentOutput::Address { id: 2, .. }), "{o:?}");
    let o = c.handle(6 * MS, done(2, Err("no such device".into())));
    assert_eq!(results(&o), vec![(2, true)]);
    // Never ready: the takeover fails and nothing is added.
    c.handle(7 * MS, cmd(9, 3, take("edge-3", &["198.18.0.12/32"])));
    let o = c.handle(8 * MS, ready(3, Err("exited before it was ready".into())));
    assert_eq!(results(&o), vec![(3, false)]);
    assert!(!o.iter().any(|x| matches!(x, AgentOutput::Address { .. })));
    // No addresses named (a controller of an earlier build): answered at
    // once, the address step adds them.
    c.handle(9 * MS, cmd(9, 4, take("edge-4", &[])));
    let o = c.handle(10 * MS, ready(4, Ok(())));
    assert_eq!(results(&o), vec![(4, true)]);
}

#[test]
fn an_upgrades_start_names_its_binary_and_waits_for_a_standby_only() {
    let mut c = leased();
    let start = |standby, caught_up| {
        command::Body::StartUnit(StartUnit {
            unit: "edge-1".into(),
            config: String::new(),
            standby,
            binary: "/opt/holdfast/2/holdfastd".into(),
            caught_up,
            running_binary: "/opt/holdfast/1/holdfastd".into(),
        })
    };
    let o = c.handle(MS, cmd(1, 1, start(true, true)));
    assert!(
        matches!(&o[0], AgentOutput::Start { binary, caught_up: true, standby: true, running_binary, .. }
            if binary == "/opt/holdfast/2/holdfastd" && running_binary == "/opt/holdfast/1/holdfastd"),
        "{o:?}"
    );
    // A primary is never held back waiting to catch up.
    let o = c.handle(2 * MS, cmd(1, 2, start(false, true)));
    assert!(
        matches!(
            &o[0],
            AgentOutput::Start {
                caught_up: false,
                standby: false,
                ..
            }
        ),
        "{o:?}"
    );
    // A cold takeover runs the binary it names.
    let take = command::Body::Takeover(Takeover {
        unit: "edge-2".into(),
        epoch: 3,
        binary: "/opt/holdfast/2/holdfastd".into(),
        ..Default::default()
    });
    let o = c.handle(3 * MS, cmd(1, 3, take));
    assert!(
        matches!(&o[0], AgentOutput::Start { binary, takeover: Some(3), .. } if binary == "/opt/holdfast/2/holdfastd"),
        "{o:?}"
    );
}

#[test]
fn a_probe_plan_is_taken_from_the_current_leader_only() {
    let plan = |token: u64, name: &str| {
        cmd(
            token,
            0,
            command::Body::ProbeTargets(holdfast_control_api::v1::ProbeTargets {
                targets: vec![holdfast_control_api::v1::ProbeTarget {
                    name: name.into(),
                    addr: "198.18.0.3:7".into(),
                }],
            }),
        )
    };
    let taken = |o: &[AgentOutput]| -> Vec<Vec<(String, String)>> {
        o.iter()
            .filter_map(|o| match o {
                AgentOutput::ProbeTargets(t) => Some(t.clone()),
                _ => None,
            })
            .collect()
    };
    let mut c = leased();
    let o = c.handle(MS, plan(5, "host:a"));
    assert_eq!(
        taken(&o),
        vec![vec![("host:a".to_string(), "198.18.0.3:7".to_string())]]
    );
    assert!(results(&o).is_empty(), "a plan asks for no result");
    // A deposed leader's plan is ignored.
    assert!(taken(&c.handle(2 * MS, plan(4, "host:c"))).is_empty());
    // With --static-probes every plan is ignored, the token still learnt.
    let mut s = AgentCore::new(AgentConfig {
        probe_plans: false,
        ..core().cfg
    });
    assert!(taken(&s.handle(MS, plan(9, "host:a"))).is_empty());
    assert!(taken(&s.handle(2 * MS, plan(8, "host:a"))).is_empty());
}

#[test]
fn outcomes_ride_in_heartbeats_once_an_accepted_leader_takes_them() {
    let mut c = core();
    c.handle(MS, cmd(5, 1, fence_unit("x")));
    c.handle(2 * MS, AgentInput::Connected);
    let measured = |ok| {
        AgentInput::Measured(Measurement {
            from: "b".into(),
            target: "host:a".into(),
            seq: 1,
            sent_at: 3 * MS,
            ok,
            refused: false,
            rtt: ok.then_some(Duration::from_micros(250)),
        })
    };
    let single =
        |o: &[AgentOutput]| reports(o, |b| matches!(b, agent_report::Body::Measurement(_)));
    let carried = |o: &[AgentOutput]| {
        o.iter()
            .filter_map(|x| match x {
                AgentOutput::Report(AgentReport {
                    body: Some(agent_report::Body::Heartbeat(h)),
                }) => Some(h.measurements.len()),
                _ => None,
            })
            .sum::<usize>()
    };
    // Until the leader's beat says so, each outcome is a report.
    assert_eq!(single(&c.handle(4 * MS, measured(true))), 1);
    let beat = |token, takes_measurements| {
        AgentInput::Command(Command {
            token,
            id: 0,
            body: Some(command::Body::Beat(LeaderBeat { takes_measurements })),
        })
    };
    // A deposed leader's beat does not switch the stream.
    c.handle(5 * MS, beat(4, true));
    assert_eq!(single(&c.handle(6 * MS, measured(true))), 1);
    c.handle(7 * MS, beat(5, true));
    let o = c.handle(8 * MS, measured(true));
    assert_eq!((single(&o), carried(&o)), (0, 0), "an answer waits");
    // A miss goes at once, after what waited.
    let o = c.handle(9 * MS, measured(false));
    assert_eq!((single(&o), carried(&o)), (0, 2));
    c.handle(10 * MS, measured(true));
    let o = c.handle(200 * MS, AgentInput::Tick);
    assert_eq!(carried(&o), 1, "the next heartbeat carries the answer");
    // A new stream: one by one again until its leader's beat.
    c.handle(210 * MS, AgentInput::Connected);
    assert_eq!(single(&c.handle(211 * MS, measured(true))), 1);
}
