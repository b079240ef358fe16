//! Failure detection the way a controller sees it (TENSOR §3.3, Table 1's "failure
//! detection" column): probes repeated at a fixed interval until enough consecutive
//! ones miss.
//!
//! * [`Probe::ControlSocket`]: connect to a holdfastd unit's control socket. A live
//!   process accepts (its listener's backlog answers even when it is busy); a dead one
//!   leaves a socket file nobody listens on, and the connect is refused at once. This
//!   is the host-local liveness check for the application and container kinds.
//! * [`Probe::Tcp`]: from another host's namespace (the lab uses the store's host, where
//!   a controller would sit), a TCP connect to a closed port of the watched host. A
//!   live host answers with a RST ("refused"); a host that is down or cut off does not
//!   answer before the timeout. This is the check for the host and host-network kinds.
//!
//! Known issues: a SIGSTOPped process still passes the control-socket probe (a hang is
//! not one of Table 1's kinds); a probe thread joins the namespace per probe.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{LabError, Result};
use crate::nsr::in_netns;

/// What to probe.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A unit's control socket.
    ControlSocket(PathBuf),
    /// A TCP connect from namespace `netns` to `addr` (a port nobody listens on).
    Tcp {
        /// Namespace the probe runs in.
        netns: String,
        /// The watched host's address and a closed port.
        addr: SocketAddr,
    },
}

/// Probe timing.
#[derive(Debug, Clone, Copy)]
pub struct ProbePolicy {
    /// Between the starts of two probes.
    pub interval: Duration,
    /// How long one probe waits for an answer.
    pub timeout: Duration,
    /// Consecutive misses that declare the target failed.
    pub misses: u32,
    /// Give up (an error) after this long.
    pub deadline: Duration,
}

impl Probe {
    /// The policy the lab uses for this probe: every 10 ms; a refused control socket
    /// is definitive (1 miss); a silent host needs 3 misses of 30 ms.
    pub fn policy(&self) -> ProbePolicy {
        match self {
            Probe::ControlSocket(_) => ProbePolicy {
                interval: Duration::from_millis(10),
                timeout: Duration::from_millis(100),
                misses: 1,
                deadline: Duration::from_secs(10),
            },
            Probe::Tcp { .. } => ProbePolicy {
                interval: Duration::from_millis(10),
                timeout: Duration::from_millis(30),
                misses: 3,
                deadline: Duration::from_secs(10),
            },
        }
    }

    /// One probe: `Ok(true)` when the target answered.
    pub fn once(&self, timeout: Duration) -> Result<bool> {
        match self {
            Probe::ControlSocket(path) => Ok(UnixStream::connect(path).is_ok()),
            Probe::Tcp { netns, addr } => {
                let addr = *addr;
                let r = in_netns(netns, move || TcpStream::connect_timeout(&addr, timeout))
                    .map_err(|e| LabError::Invalid(format!("probe in {netns}: {e}")))?;
                Ok(match r {
                    Ok(_) => true,
                    Err(e) => e.kind() == ErrorKind::ConnectionRefused,
                })
            }
        }
    }

    /// One line naming the probe.
    pub fn describe(&self) -> String {
        let p = self.policy();
        match self {
            Probe::ControlSocket(path) => format!(
                "control socket {} every {:?}, {} refused connect",
                path.display(),
                p.interval,
                p.misses
            ),
            Probe::Tcp { netns, addr } => format!(
                "TCP connect {addr} from {netns} every {:?}, {} misses of {:?}",
                p.interval, p.misses, p.timeout
            ),
        }
    }
}

/// A detected failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Detection {
    /// From the call until the last missed probe ended.
    pub after: Duration,
    /// Probes sent.
    pub probes: u32,
}

/// Probes until [`ProbePolicy::misses`] consecutive probes miss; an error if the target
/// still answers at the deadline.
pub fn detect(probe: &Probe) -> Result<Detection> {
    let policy = probe.policy();
    let t0 = Instant::now();
    let mut missed = 0;
    let mut probes = 0;
    loop {
        let start = Instant::now();
        probes += 1;
        if probe.once(policy.timeout)? {
            missed = 0;
        } else {
            missed += 1;
            if missed >= policy.misses {
                return Ok(Detection {
                    after: t0.elapsed(),
                    probes,
                });
            }
        }
        if t0.elapsed() >= policy.deadline {
            return Err(LabError::Invalid(format!(
                "no failure detected within {:?} ({})",
                policy.deadline,
                probe.describe()
            )));
        }
        if let Some(rest) = policy.interval.checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn control_socket_probe_sees_a_listener_go_away() {
        let path = std::env::temp_dir().join(format!("hf-detect-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).unwrap();
        let probe = Probe::ControlSocket(path.clone());
        assert!(probe.once(Duration::from_millis(10)).unwrap());
        drop(l);
        let d = detect(&probe).unwrap();
        assert_eq!(d.probes, 1);
        assert!(d.after < Duration::from_secs(1));
        std::fs::remove_file(&path).unwrap();
    }
}
