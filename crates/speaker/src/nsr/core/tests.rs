//! One test per transition of [`ReplCore`], with no store, no gate and no
//! clock: inputs in, decisions out.
//!
//! # Known issues
//! - None known.

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn batch(ops: &[Option<u64>]) -> ReplInput {
    let mut b = BatchInfo::default();
    for g in ops {
        b.add(*g);
    }
    ReplInput::Batch(b)
}

fn unavailable() -> StoreFailure {
    StoreFailure::Unavailable("connection refused".into())
}

/// A core started with the store up at `epoch`.
fn protected(epoch: u64) -> ReplCore {
    let mut c = ReplCore::new(epoch, true);
    c.handle(ms(0), ReplInput::Start { hold: false });
    c
}

fn status(state: ReplState, epoch: u64, store_epoch: u64, gen: u64) -> ReplOutput {
    ReplOutput::Publish(ReplStatus {
        state,
        epoch,
        store_epoch,
        gen,
    })
}

/// A protected core that lost the store at `at` (gen 1).
fn unprotected(epoch: u64, at: Duration) -> ReplCore {
    let mut c = protected(epoch);
    c.handle(at, batch(&[Some(0)]));
    c.handle(at, ReplInput::WriteFailed(unavailable()));
    assert_eq!(c.state(), ReplState::Unprotected);
    c
}

/// An unprotected core that reconnected at `at`, the store at our epoch.
fn resynchronising(epoch: u64, lost_at: Duration, at: Duration) -> ReplCore {
    let mut c = unprotected(epoch, lost_at);
    assert_eq!(
        c.handle(at, ReplInput::Tick),
        [ReplOutput::Store(StoreCall::Reconnect)]
    );
    c.handle(at, ReplInput::Reconnected);
    c.handle(at, ReplInput::EpochRead { epoch });
    assert_eq!(c.state(), ReplState::Resynchronising);
    c
}

#[test]
fn start_with_the_store_up_is_protected() {
    let mut c = ReplCore::new(3, true);
    assert_eq!(c.state(), ReplState::Protected);
    assert_eq!(
        c.handle(ms(0), ReplInput::Start { hold: false }),
        [
            status(ReplState::Protected, 3, 3, 0),
            ReplOutput::Gate(GateCommand::Protect)
        ]
    );
    assert_eq!(c.next_wake(), Some(IDLE_CHECK));
}

#[test]
fn start_with_the_store_down_is_unprotected_at_gen_1() {
    let mut c = ReplCore::new(0, false);
    assert_eq!(
        c.handle(ms(0), ReplInput::Start { hold: false }),
        [
            status(ReplState::Unprotected, 0, 0, 1),
            ReplOutput::Gate(GateCommand::Bypass)
        ]
    );
    assert_eq!(c.next_wake(), Some(RETRY));
}

#[test]
fn takeover_start_holds_the_gate() {
    let mut c = ReplCore::new(4, true);
    assert_eq!(
        c.handle(ms(0), ReplInput::Start { hold: true }),
        [
            status(ReplState::Protected, 4, 4, 0),
            ReplOutput::Gate(GateCommand::DropAll)
        ]
    );
}

#[test]
fn protected_batch_is_written_then_released() {
    let mut c = protected(3);
    assert_eq!(
        c.handle(ms(1), batch(&[Some(0), None, Some(0)])),
        [ReplOutput::Write {
            epoch: 3,
            gen: 0,
            ops: 2
        }]
    );
    assert_eq!(
        c.handle(ms(2), ReplInput::Written { latency_us: 900 }),
        [
            ReplOutput::WriteDone { latency_us: 900 },
            ReplOutput::Release { batches: 1 }
        ]
    );
    assert_eq!(c.state(), ReplState::Protected);
    // The write proved our epoch: the idle check waits from there.
    assert_eq!(c.next_wake(), Some(ms(2) + IDLE_CHECK));
}

#[test]
fn pipelined_writes_release_in_queue_order() {
    let mut c = protected(3);
    let w = ReplOutput::Write {
        epoch: 3,
        gen: 0,
        ops: 1,
    };
    // Three writes in flight, and a batch with nothing to write behind them.
    assert_eq!(c.handle(ms(1), batch(&[Some(0)])), std::slice::from_ref(&w));
    assert_eq!(c.handle(ms(1), batch(&[Some(0)])), std::slice::from_ref(&w));
    assert_eq!(c.handle(ms(1), batch(&[None])), []);
    assert_eq!(c.handle(ms(1), batch(&[Some(0)])), std::slice::from_ref(&w));
    assert_eq!(c.in_flight(), 3);
    // No epoch check while writes are in flight, however long they take.
    assert_eq!(c.handle(ms(1) + IDLE_CHECK, ReplInput::Tick), []);
    assert_eq!(
        c.handle(ms(300), ReplInput::Written { latency_us: 1 }),
        [
            ReplOutput::WriteDone { latency_us: 1 },
            ReplOutput::Release { batches: 1 }
        ]
    );
    // The second write's result also frees the unwritten batch behind it.
    assert_eq!(
        c.handle(ms(301), ReplInput::Written { latency_us: 2 }),
        [
            ReplOutput::WriteDone { latency_us: 2 },
            ReplOutput::Release { batches: 2 }
        ]
    );
    assert_eq!(
        c.handle(ms(302), ReplInput::Written { latency_us: 3 }),
        [
            ReplOutput::WriteDone { latency_us: 3 },
            ReplOutput::Release { batches: 1 }
        ]
    );
    assert_eq!(c.in_flight(), 0);
    // Nothing in flight: a batch with nothing to write goes at once.
    assert_eq!(
        c.handle(ms(303), batch(&[None])),
        [ReplOutput::Release { batches: 1 }]
    );
    assert_eq!(c.handle(ms(304), ReplInput::Written { latency_us: 4 }), []);
}

#[test]
fn a_failed_write_in_a_pipeline_releases_everything_unprotected() {
    let mut c = protected(3);
    for _ in 0..3 {
        c.handle(ms(1), batch(&[Some(0)]));
    }
    c.handle(ms(1), batch(&[None]));
    let out = c.handle(ms(2), ReplInput::WriteFailed(unavailable()));
    assert!(out.contains(&ReplOutput::Gate(GateCommand::Bypass)));
    assert_eq!(out.last(), Some(&ReplOutput::Release { batches: 4 }));
    assert_eq!(c.state(), ReplState::Unprotected);
    assert_eq!(c.in_flight(), 0);
    // The abandoned writes' results, were any to come, change nothing.
    let before = c.clone();
    assert_eq!(c.handle(ms(3), ReplInput::Written { latency_us: 1 }), []);
    assert_eq!(c, before);
    // Unprotected: batches go at once, and the store is retried.
    assert_eq!(
        c.handle(ms(4), batch(&[Some(0)])),
        [ReplOutput::Release { batches: 1 }]
    );
    assert_eq!(
        c.handle(ms(2) + RETRY, ReplInput::Tick),
        [ReplOutput::Store(StoreCall::Reconnect)]
    );
}

#[test]
fn a_fence_in_a_pipeline_releases_nothing() {
    let mut c = protected(3);
    c.handle(ms(1), batch(&[Some(0)]));
    c.handle(ms(1), batch(&[Some(0)]));
    let out = c.handle(
        ms(2),
        ReplInput::WriteFailed(StoreFailure::Fenced {
            current: 4,
            ours: 3,
        }),
    );
    assert!(!out.iter().any(|o| matches!(o, ReplOutput::Release { .. })));
    assert_eq!(
        out.last(),
        Some(&ReplOutput::Fence(Fence {
            current: 4,
            ours: 3
        }))
    );
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn batch_with_nothing_at_the_current_generation_is_released_unwritten() {
    let mut c = resynchronising(3, ms(0), ms(600));
    // gen is 2 now: operations of gen 0 and 1 are stale.
    assert_eq!(
        c.handle(ms(601), batch(&[Some(0), Some(1), None])),
        [ReplOutput::Release { batches: 1 }]
    );
    assert_eq!(
        c.handle(ms(602), batch(&[Some(1), Some(2), Some(2)])),
        [ReplOutput::Write {
            epoch: 3,
            gen: 2,
            ops: 2
        }]
    );
}

#[test]
fn failed_write_goes_unprotected_and_releases() {
    let mut c = protected(3);
    c.handle(ms(10), batch(&[Some(0)]));
    assert_eq!(
        c.handle(ms(11), ReplInput::WriteFailed(unavailable())),
        [
            ReplOutput::WriteError,
            ReplOutput::Transition {
                from: ReplState::Protected,
                to: ReplState::Unprotected,
                why: Why::WriteFailed(unavailable()),
            },
            status(ReplState::Unprotected, 3, 3, 1),
            ReplOutput::Gate(GateCommand::Bypass),
            ReplOutput::Release { batches: 1 },
        ]
    );
    assert_eq!(c.next_wake(), Some(ms(11) + RETRY));
}

#[test]
fn unprotected_batches_are_released_without_a_write() {
    let mut c = unprotected(3, ms(0));
    assert_eq!(
        c.handle(ms(5), batch(&[Some(0), Some(1), None])),
        [ReplOutput::Release { batches: 1 }]
    );
    // Not yet time to retry.
    assert_eq!(c.handle(ms(5), ReplInput::Tick), []);
}

#[test]
fn unreachable_store_is_retried_every_500_ms() {
    let mut c = unprotected(3, ms(0));
    assert_eq!(c.handle(ms(499), ReplInput::Tick), []);
    assert_eq!(
        c.handle(ms(500), ReplInput::Tick),
        [ReplOutput::Store(StoreCall::Reconnect)]
    );
    assert_eq!(
        c.handle(ms(501), ReplInput::CallFailed(unavailable())),
        [ReplOutput::Note(Note::StillUnavailable(unavailable()))]
    );
    assert_eq!(c.state(), ReplState::Unprotected);
    assert_eq!(c.next_wake(), Some(ms(1000)));
    assert_eq!(c.handle(ms(999), ReplInput::Tick), []);
    assert_eq!(
        c.handle(ms(1000), ReplInput::Tick),
        [ReplOutput::Store(StoreCall::Reconnect)]
    );
    // The epoch read after a reconnect may fail too.
    assert_eq!(
        c.handle(ms(1001), ReplInput::Reconnected),
        [ReplOutput::Store(StoreCall::ReadEpoch)]
    );
    c.handle(ms(1002), ReplInput::CallFailed(unavailable()));
    assert_eq!(c.state(), ReplState::Unprotected);
}

#[test]
fn store_back_at_our_epoch_resynchronises_every_session() {
    let mut c = unprotected(3, ms(0));
    c.handle(ms(500), ReplInput::Tick);
    assert_eq!(
        c.handle(ms(501), ReplInput::Reconnected),
        [ReplOutput::Store(StoreCall::ReadEpoch)]
    );
    assert_eq!(
        c.handle(ms(502), ReplInput::EpochRead { epoch: 3 }),
        [
            ReplOutput::Transition {
                from: ReplState::Unprotected,
                to: ReplState::Resynchronising,
                why: Why::StoreBack,
            },
            status(ReplState::Resynchronising, 3, 3, 2),
            ReplOutput::Resync { gen: 2 },
        ]
    );
    assert!(c.status().store_up());
}

#[test]
fn resynchronising_is_protected_once_every_session_caught_up() {
    let mut c = resynchronising(3, ms(0), ms(500));
    assert_eq!(
        c.handle(
            ms(510),
            ReplInput::SessionsSynced {
                lowest_gen: Some(1)
            }
        ),
        []
    );
    assert_eq!(c.state(), ReplState::Resynchronising);
    assert_eq!(
        c.handle(
            ms(520),
            ReplInput::SessionsSynced {
                lowest_gen: Some(2)
            }
        ),
        [
            ReplOutput::Gate(GateCommand::Protect),
            ReplOutput::Transition {
                from: ReplState::Resynchronising,
                to: ReplState::Protected,
                why: Why::AllSynced,
            },
            status(ReplState::Protected, 3, 3, 2),
        ]
    );
}

#[test]
fn resynchronising_without_sessions_is_protected_at_once() {
    let mut c = resynchronising(3, ms(0), ms(500));
    let out = c.handle(ms(500), ReplInput::SessionsSynced { lowest_gen: None });
    assert_eq!(out[0], ReplOutput::Gate(GateCommand::Protect));
    assert_eq!(c.state(), ReplState::Protected);
    // Reported while protected, it changes nothing.
    assert_eq!(
        c.handle(ms(501), ReplInput::SessionsSynced { lowest_gen: None }),
        []
    );
}

#[test]
fn resynchronising_loses_the_store_again() {
    let mut c = resynchronising(3, ms(0), ms(500));
    c.handle(ms(510), batch(&[Some(2)]));
    let out = c.handle(ms(511), ReplInput::WriteFailed(unavailable()));
    assert!(out.contains(&ReplOutput::Transition {
        from: ReplState::Resynchronising,
        to: ReplState::Unprotected,
        why: Why::WriteFailed(unavailable()),
    }));
    assert_eq!(c.status().gen, 3);
    assert_eq!(out.last(), Some(&ReplOutput::Release { batches: 1 }));
}

#[test]
fn write_refused_by_a_newer_epoch_fences_and_releases_nothing() {
    let mut c = protected(3);
    c.handle(ms(1), batch(&[Some(0)]));
    let out = c.handle(
        ms(2),
        ReplInput::WriteFailed(StoreFailure::Fenced {
            current: 4,
            ours: 3,
        }),
    );
    let f = Fence {
        current: 4,
        ours: 3,
    };
    assert_eq!(
        out,
        [
            ReplOutput::Gate(GateCommand::DropAll),
            ReplOutput::Transition {
                from: ReplState::Protected,
                to: ReplState::Fenced,
                why: Why::Fenced(f),
            },
            status(ReplState::Fenced, 3, 4, 0),
            ReplOutput::Fence(f),
        ]
    );
    assert_eq!(c.next_wake(), None);
    // Terminal: nothing is ever written or released again.
    assert_eq!(c.handle(ms(3), batch(&[Some(0)])), []);
    assert_eq!(c.handle(ms(900), ReplInput::Tick), []);
    assert_eq!(c.handle(ms(900), ReplInput::Start { hold: false }), []);
}

#[test]
fn idle_primary_checks_its_epoch_every_250_ms() {
    let mut c = protected(3);
    assert_eq!(c.handle(ms(249), ReplInput::Tick), []);
    assert_eq!(
        c.handle(ms(250), ReplInput::Tick),
        [ReplOutput::Store(StoreCall::ReadEpoch)]
    );
    // Still ours: nothing to do, next check 250 ms later.
    assert_eq!(c.handle(ms(251), ReplInput::EpochRead { epoch: 3 }), []);
    assert_eq!(c.next_wake(), Some(ms(501)));
    c.handle(ms(501), ReplInput::Tick);
    let out = c.handle(ms(502), ReplInput::EpochRead { epoch: 5 });
    assert_eq!(out[0], ReplOutput::Gate(GateCommand::DropAll));
    assert_eq!(
        out.last(),
        Some(&ReplOutput::Fence(Fence {
            current: 5,
            ours: 3
        }))
    );
    assert_eq!(c.state(), ReplState::Fenced);
}

#[test]
fn idle_check_that_fails_goes_unprotected() {
    let mut c = protected(3);
    c.handle(ms(250), ReplInput::Tick);
    let out = c.handle(ms(251), ReplInput::CallFailed(unavailable()));
    assert_eq!(out[0], ReplOutput::WriteError);
    assert!(out.contains(&ReplOutput::Transition {
        from: ReplState::Protected,
        to: ReplState::Unprotected,
        why: Why::CheckFailed(unavailable()),
    }));
    assert_eq!(out.last(), Some(&ReplOutput::Gate(GateCommand::Bypass)));
    assert_eq!(c.status().gen, 1);
}

#[test]
fn busy_queue_without_writes_still_checks_the_epoch() {
    let mut c = protected(3);
    for t in (0..250).step_by(50) {
        assert_eq!(
            c.handle(ms(t), batch(&[None])),
            [ReplOutput::Release { batches: 1 }]
        );
        assert_eq!(c.handle(ms(t), ReplInput::Tick), []);
    }
    c.handle(ms(250), batch(&[None]));
    assert_eq!(
        c.handle(ms(250), ReplInput::Tick),
        [ReplOutput::Store(StoreCall::ReadEpoch)]
    );
}

#[test]
fn idle_check_sees_a_store_that_lost_its_data() {
    let mut c = protected(3);
    c.handle(ms(250), ReplInput::Tick);
    let out = c.handle(ms(251), ReplInput::EpochRead { epoch: 0 });
    assert!(out.contains(&ReplOutput::Transition {
        from: ReplState::Protected,
        to: ReplState::Unprotected,
        why: Why::StoreWentBack {
            current: 0,
            ours: 3
        },
    }));
    assert_eq!(c.status().store_epoch, 0);
}

/// Redis restarted empty: the next write is refused with epoch 0; at the
/// next retry the instance is claimed back up to our epoch, one claim at a
/// time, and every session is written anew.
#[test]
fn store_that_lost_its_data_is_reclaimed_and_resynchronised() {
    let mut c = protected(3);
    c.handle(ms(10), batch(&[Some(0), None]));
    let lost = StoreFailure::Fenced {
        current: 0,
        ours: 3,
    };
    let out = c.handle(ms(11), ReplInput::WriteFailed(lost));
    assert!(out.contains(&ReplOutput::Transition {
        from: ReplState::Protected,
        to: ReplState::Unprotected,
        why: Why::StoreWentBack {
            current: 0,
            ours: 3
        },
    }));
    // The batch's ACKs and messages still go (unprotected).
    assert_eq!(out.last(), Some(&ReplOutput::Release { batches: 1 }));
    assert_eq!(
        c.handle(ms(511), ReplInput::Tick),
        [ReplOutput::Store(StoreCall::Reconnect)]
    );
    c.handle(ms(512), ReplInput::Reconnected);
    assert_eq!(
        c.handle(ms(513), ReplInput::EpochRead { epoch: 0 }),
        [
            ReplOutput::Note(Note::Reclaiming {
                current: 0,
                ours: 3
            }),
            ReplOutput::Store(StoreCall::Claim)
        ]
    );
    for e in 1..3 {
        assert_eq!(
            c.handle(ms(514), ReplInput::Claimed { epoch: e }),
            [
                ReplOutput::Note(Note::Reclaiming {
                    current: e,
                    ours: 3
                }),
                ReplOutput::Store(StoreCall::Claim)
            ]
        );
    }
    let out = c.handle(ms(515), ReplInput::Claimed { epoch: 3 });
    assert_eq!(out.last(), Some(&ReplOutput::Resync { gen: 2 }));
    assert_eq!(c.state(), ReplState::Resynchronising);
    assert_eq!(c.status().epoch, 3);
}

#[test]
fn reclaim_overtaken_by_another_speaker_fences() {
    let mut c = unprotected(3, ms(0));
    c.handle(ms(500), ReplInput::Tick);
    c.handle(ms(500), ReplInput::Reconnected);
    c.handle(ms(500), ReplInput::EpochRead { epoch: 2 });
    let out = c.handle(ms(501), ReplInput::Claimed { epoch: 4 });
    assert_eq!(
        out.last(),
        Some(&ReplOutput::Fence(Fence {
            current: 4,
            ours: 3
        }))
    );
}

#[test]
fn store_back_with_a_newer_epoch_fences() {
    let mut c = unprotected(3, ms(0));
    c.handle(ms(500), ReplInput::Tick);
    c.handle(ms(500), ReplInput::Reconnected);
    let out = c.handle(ms(501), ReplInput::EpochRead { epoch: 9 });
    assert_eq!(out[0], ReplOutput::Gate(GateCommand::DropAll));
    assert_eq!(c.state(), ReplState::Fenced);
}

#[test]
fn started_without_a_store_claims_the_instance_when_it_answers() {
    let mut c = ReplCore::new(0, false);
    c.handle(ms(0), ReplInput::Start { hold: false });
    assert_eq!(
        c.handle(ms(100), batch(&[Some(1)])),
        [ReplOutput::Release { batches: 1 }]
    );
    c.handle(ms(500), ReplInput::Tick);
    assert_eq!(
        c.handle(ms(501), ReplInput::Reconnected),
        [ReplOutput::Store(StoreCall::Claim)]
    );
    let out = c.handle(ms(502), ReplInput::Claimed { epoch: 7 });
    assert!(out.contains(&status(ReplState::Resynchronising, 7, 7, 2)));
    assert_eq!(out.last(), Some(&ReplOutput::Resync { gen: 2 }));
}

#[test]
fn results_nobody_asked_for_are_ignored() {
    let mut c = protected(3);
    let before = c.clone();
    for input in [
        ReplInput::Written { latency_us: 1 },
        ReplInput::WriteFailed(unavailable()),
        ReplInput::Reconnected,
        ReplInput::Claimed { epoch: 9 },
        ReplInput::EpochRead { epoch: 9 },
        ReplInput::CallFailed(unavailable()),
    ] {
        assert_eq!(c.handle(ms(1), input), []);
    }
    assert_eq!(c, before);
    // A write's result is not taken for an epoch read's.
    c.handle(ms(2), batch(&[Some(0)]));
    assert_eq!(c.handle(ms(3), ReplInput::EpochRead { epoch: 9 }), []);
    assert_eq!(c.handle(ms(3), ReplInput::Tick), []);
    assert_eq!(
        c.handle(ms(4), ReplInput::Written { latency_us: 5 }),
        [
            ReplOutput::WriteDone { latency_us: 5 },
            ReplOutput::Release { batches: 1 }
        ]
    );
}

#[test]
fn inputs_outputs_and_the_core_serialise() {
    let mut c = protected(3);
    c.handle(ms(1), batch(&[Some(0)]));
    let json = serde_json::to_string(&c).expect("core");
    let back: ReplCore = serde_json::from_str(&json).expect("core back");
    assert_eq!(back, c);
    let inputs = vec![
        batch(&[Some(0), None]),
        ReplInput::WriteFailed(StoreFailure::Fenced {
            current: 1,
            ours: 2,
        }),
        ReplInput::SessionsSynced {
            lowest_gen: Some(4),
        },
    ];
    let json = serde_json::to_string(&inputs).expect("inputs");
    assert_eq!(
        serde_json::from_str::<Vec<ReplInput>>(&json).expect("inputs back"),
        inputs
    );
    let out = c.handle(ms(2), ReplInput::WriteFailed(unavailable()));
    let json = serde_json::to_string(&out).expect("outputs");
    assert_eq!(
        serde_json::from_str::<Vec<ReplOutput>>(&json).expect("outputs back"),
        out
    );
}
