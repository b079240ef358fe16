//! The takeover contract: what an [`Orchestrator`] does when the primary of a pair of
//! speakers failed, and in which order ([`run_takeover`]).
//!
//! Before a takeover the orchestrator decides that the primary failed
//! ([`Orchestrator::detect`], by default the probes of [`crate::detect()`] sent from this
//! process). The takeover order: 1. fence the old primary ([`Fence`]); 2. start
//! `holdfastd --takeover --takeover-ready-file F` on the new host and wait for `F`;
//! 3. move the service address (delete it on the other host when reachable, add it on
//! the new one, announce it with a gratuitous ARP / unsolicited NA); 4. wait until the
//! new unit reports every session Established.
//!
//! The contract knows nothing of where units run: an orchestrator names its
//! environment (`Env`, e.g. the lab), its units (`Unit`, a running holdfastd) and its
//! hosts (`Host`).
//!
//! # Known issues
//! * Fencing is trusted: nothing here checks that a fenced primary stays fenced; the
//!   state store's epoch is what keeps a primary that was cut off rather than stopped
//!   from writing (see docs/nsr.md).

use std::time::{Duration, Instant};

use crate::detect::{detect, Detection, Local, Probe};

/// How the orchestrator fences the old primary before a takeover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// SIGKILL, and wait until the pid is gone.
    Kill,
    /// SIGSTOP (a hung primary that still holds its sockets), and wait until stopped.
    Stop,
    /// Leave it as it is (already dead, or SIGSTOPped by the test).
    None,
}

/// Wall-clock phases of a takeover.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TakeoverTimes {
    /// Fencing the old primary.
    pub fence: Duration,
    /// From the end of fencing until the new unit created its ready file.
    pub ready: Duration,
    /// Moving and announcing the service address.
    pub address: Duration,
    /// From the address move until the new unit reports every session Established.
    pub established: Duration,
    /// From the start of fencing until every session is Established at the new unit.
    pub total: Duration,
}

/// Deadlines of [`run_takeover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakeoverDeadlines {
    /// For fencing (the old process to be gone or stopped).
    pub fence: Duration,
    /// For the ready file, from the start of the new unit.
    pub ready: Duration,
    /// For every session to be Established at the new unit, after the address moved.
    pub established: Duration,
}

impl Default for TakeoverDeadlines {
    fn default() -> Self {
        TakeoverDeadlines {
            fence: Duration::from_secs(5),
            ready: Duration::from_secs(30),
            established: Duration::from_secs(30),
        }
    }
}

/// The controller of a pair of speakers. The lab's is `holdfast_lab::LabOrchestrator`;
/// a production controller implements the same contract (see the module doc for the
/// order).
pub trait Orchestrator {
    /// Where the units run (the lab; a controller's view of its hosts).
    type Env: ?Sized;
    /// A running holdfastd.
    type Unit;
    /// A host a unit can run on.
    type Host: Copy;
    /// The orchestrator's errors; detection's convert into them.
    type Error: From<crate::Error>;

    /// Decide that the primary failed, by repeating `probe` ([`crate::detect()`]). By
    /// default TCP probes are sent from this process ([`Local`]); the lab sends them
    /// from a namespace, a controller from where it sits.
    fn detect(&mut self, probe: &Probe) -> Result<Detection, Self::Error> {
        Ok(detect(probe, &Local)?)
    }

    /// Fence the old primary `old` (see [`Fence`]), within `deadline`.
    fn fence(
        &mut self,
        env: &mut Self::Env,
        old: &Self::Unit,
        how: Fence,
        deadline: Duration,
    ) -> Result<(), Self::Error>;

    /// Start `holdfastd --takeover --takeover-ready-file F` with `config` as unit
    /// `name` on `host`, and return it once it created `F` (within `ready`).
    fn start_takeover(
        &mut self,
        env: &mut Self::Env,
        host: Self::Host,
        name: &str,
        config: &str,
        ready: Duration,
    ) -> Result<Self::Unit, Self::Error>;

    /// Move the service address to `to`: delete it on the other speaker host if that
    /// host is reachable and has it, add it on `to`, and announce it there (gratuitous
    /// ARP, unsolicited NA).
    fn move_address(&mut self, env: &mut Self::Env, to: Self::Host) -> Result<(), Self::Error>;

    /// Wait until `unit` reports every session Established (within `deadline`).
    fn wait_established(
        &mut self,
        env: &mut Self::Env,
        unit: &Self::Unit,
        deadline: Duration,
    ) -> Result<(), Self::Error>;

    /// Take over from `old` on `new_host`: fence, start `holdfastd --takeover` with
    /// `config` as unit `name`, wait for its ready file, move the address, wait until
    /// every session is Established at the new unit ([`run_takeover`] with the default
    /// [`TakeoverDeadlines`]). Returns the new unit and the phase times.
    fn takeover(
        &mut self,
        env: &mut Self::Env,
        old: &Self::Unit,
        new_host: Self::Host,
        name: &str,
        config: &str,
        fence: Fence,
    ) -> Result<(Self::Unit, TakeoverTimes), Self::Error> {
        let deadlines = TakeoverDeadlines::default();
        run_takeover(self, env, old, new_host, name, config, fence, &deadlines)
    }
}

/// The takeover sequence of the contract, on top of an orchestrator's steps
/// ([`Orchestrator::fence`], [`Orchestrator::start_takeover`],
/// [`Orchestrator::move_address`], [`Orchestrator::wait_established`]).
#[allow(clippy::too_many_arguments)]
pub fn run_takeover<O: Orchestrator + ?Sized>(
    orch: &mut O,
    env: &mut O::Env,
    old: &O::Unit,
    new_host: O::Host,
    name: &str,
    config: &str,
    fence: Fence,
    deadlines: &TakeoverDeadlines,
) -> Result<(O::Unit, TakeoverTimes), O::Error> {
    let t0 = Instant::now();
    orch.fence(env, old, fence, deadlines.fence)?;
    let t_fenced = Instant::now();
    let new = orch.start_takeover(env, new_host, name, config, deadlines.ready)?;
    let t_ready = Instant::now();
    orch.move_address(env, new_host)?;
    let t_moved = Instant::now();
    orch.wait_established(env, &new, deadlines.established)?;
    let t_up = Instant::now();
    let times = TakeoverTimes {
        fence: t_fenced - t0,
        ready: t_ready - t_fenced,
        address: t_moved - t_ready,
        established: t_up - t_moved,
        total: t_up - t0,
    };
    Ok((new, times))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the steps; units are names, hosts numbers.
    #[derive(Default)]
    struct Recorder {
        fail_at: Option<&'static str>,
    }

    #[derive(Debug)]
    struct Failed(String);

    impl From<crate::Error> for Failed {
        fn from(e: crate::Error) -> Self {
            Failed(e.to_string())
        }
    }

    impl Recorder {
        fn step(
            &self,
            log: &mut Vec<String>,
            what: &'static str,
            line: String,
        ) -> Result<(), Failed> {
            log.push(line);
            if self.fail_at == Some(what) {
                return Err(Failed(what.into()));
            }
            Ok(())
        }
    }

    impl Orchestrator for Recorder {
        type Env = Vec<String>;
        type Unit = String;
        type Host = u8;
        type Error = Failed;

        fn fence(
            &mut self,
            log: &mut Vec<String>,
            old: &String,
            how: Fence,
            _: Duration,
        ) -> Result<(), Failed> {
            self.step(log, "fence", format!("fence {old} {how:?}"))
        }

        fn start_takeover(
            &mut self,
            log: &mut Vec<String>,
            host: u8,
            name: &str,
            config: &str,
            _: Duration,
        ) -> Result<String, Failed> {
            self.step(
                log,
                "start",
                format!("start {name} on {host} with {config}"),
            )?;
            Ok(name.to_string())
        }

        fn move_address(&mut self, log: &mut Vec<String>, to: u8) -> Result<(), Failed> {
            self.step(log, "move", format!("move to {to}"))
        }

        fn wait_established(
            &mut self,
            log: &mut Vec<String>,
            unit: &String,
            _: Duration,
        ) -> Result<(), Failed> {
            self.step(log, "established", format!("established {unit}"))
        }
    }

    #[test]
    fn takeover_runs_the_steps_in_the_contract_order() {
        let mut log = Vec::new();
        let (new, times) = Recorder::default()
            .takeover(&mut log, &"hf0".to_string(), 2, "hf1", "cfg", Fence::Kill)
            .unwrap();
        assert_eq!(new, "hf1");
        assert_eq!(
            log,
            [
                "fence hf0 Kill",
                "start hf1 on 2 with cfg",
                "move to 2",
                "established hf1"
            ]
        );
        assert!(times.total >= times.fence + times.ready + times.address + times.established);
    }

    #[test]
    fn a_failed_step_stops_the_takeover() {
        let mut log = Vec::new();
        let mut orch = Recorder {
            fail_at: Some("start"),
        };
        let e = orch
            .takeover(&mut log, &"hf0".to_string(), 2, "hf1", "cfg", Fence::None)
            .unwrap_err();
        assert_eq!(e.0, "start");
        assert_eq!(log, ["fence hf0 None", "start hf1 on 2 with cfg"]);
    }
}
