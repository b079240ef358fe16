//! Failure detection the way a controller sees it (TENSOR §3.3, Table 1's "failure
//! detection" column): probes repeated at a fixed interval until enough consecutive
//! ones miss.
//!
//! * [`Probe::ControlSocket`]: connect to a holdfastd unit's control socket. A live
//!   process accepts (its listener's backlog answers even when it is busy); a dead one
//!   leaves a socket file nobody listens on, and the connect is refused at once. This
//!   is the host-local liveness check for the application and container kinds.
//! * [`Probe::Tcp`]: from another host (the lab uses the store's host, where a
//!   controller would sit), a TCP connect to a closed port of the watched host. A live
//!   host answers with a RST ("refused"); a host that is down or cut off does not
//!   answer before the timeout. This is the check for the host and host-network kinds.
//!
//! Where a TCP probe is sent from is up to the caller: [`detect`] takes a [`ProbeSite`]
//! that runs the connect there. The lab's runs it in a network namespace (with
//! `holdfast_linux::netns::in_netns`); [`Local`] runs it in this process, as a
//! controller on its own host would.
//!
//! # Known issues
//! * A SIGSTOPped process still passes the control-socket probe (a hang is not one of
//!   Table 1's kinds).
//! * The lab's site joins the namespace on a new thread per probe.

use std::io::{self, ErrorKind};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A TCP connect, to be run by a [`ProbeSite`].
pub type Connect = Box<dyn FnOnce() -> io::Result<TcpStream> + Send>;

/// Runs a [`Probe::Tcp`]'s connect from where the probe is sent (`from`). The outer
/// `Err` means it could not run there at all; the inner result is the connect's.
///
/// Closures of the same signature are sites, e.g. the lab's
/// `|ns: &str, c: Connect| holdfast_linux::netns::in_netns(ns, c)`.
pub trait ProbeSite {
    /// Runs `connect` at `from`.
    fn run(&self, from: &str, connect: Connect) -> io::Result<io::Result<TcpStream>>;
}

impl<F> ProbeSite for F
where
    F: Fn(&str, Connect) -> io::Result<io::Result<TcpStream>>,
{
    fn run(&self, from: &str, connect: Connect) -> io::Result<io::Result<TcpStream>> {
        self(from, connect)
    }
}

/// The site of a controller probing from its own host: the connect runs in this
/// process, `from` only names it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Local;

impl ProbeSite for Local {
    fn run(&self, _from: &str, connect: Connect) -> io::Result<io::Result<TcpStream>> {
        Ok(connect())
    }
}

/// What to probe.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A unit's control socket.
    ControlSocket(PathBuf),
    /// A TCP connect from `from` to `addr` (a port nobody listens on).
    Tcp {
        /// Where the probe is sent from (the lab: a network namespace), for the
        /// [`ProbeSite`].
        from: String,
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

    /// One probe, a TCP one sent by `site`: `Ok(true)` when the target answered.
    pub fn once(&self, timeout: Duration, site: &dyn ProbeSite) -> Result<bool> {
        match self {
            Probe::ControlSocket(path) => Ok(UnixStream::connect(path).is_ok()),
            Probe::Tcp { from, addr } => {
                let addr = *addr;
                let r = site
                    .run(
                        from,
                        Box::new(move || TcpStream::connect_timeout(&addr, timeout)),
                    )
                    .map_err(|source| Error::ProbeSite {
                        from: from.clone(),
                        source,
                    })?;
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
            Probe::Tcp { from, addr } => format!(
                "TCP connect {addr} from {from} every {:?}, {} misses of {:?}",
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
/// still answers at the deadline. TCP probes are sent by `site`.
pub fn detect(probe: &Probe, site: &dyn ProbeSite) -> Result<Detection> {
    let policy = probe.policy();
    let t0 = Instant::now();
    let mut missed = 0;
    let mut probes = 0;
    loop {
        let start = Instant::now();
        probes += 1;
        if probe.once(policy.timeout, site)? {
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
            return Err(Error::NotDetected {
                deadline: policy.deadline,
                probe: probe.describe(),
            });
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
        assert!(probe.once(Duration::from_millis(10), &Local).unwrap());
        drop(l);
        let d = detect(&probe, &Local).unwrap();
        assert_eq!(d.probes, 1);
        assert!(d.after < Duration::from_secs(1));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn tcp_probe_counts_a_refused_connect_as_an_answer() {
        // A port of loopback nobody listens on: bind one, note it, close it.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let probe = Probe::Tcp {
            from: "here".into(),
            addr,
        };
        assert!(probe.once(Duration::from_millis(100), &Local).unwrap());
        assert!(
            probe.describe().contains("from here"),
            "{}",
            probe.describe()
        );
    }

    #[test]
    fn a_site_that_cannot_run_the_probe_is_an_error() {
        let probe = Probe::Tcp {
            from: "nowhere".into(),
            addr: "127.0.0.1:9".parse().unwrap(),
        };
        let site = |_: &str, _: Connect| -> io::Result<io::Result<TcpStream>> {
            Err(io::Error::from(ErrorKind::NotFound))
        };
        let e = detect(&probe, &site).unwrap_err();
        assert!(
            matches!(e, Error::ProbeSite { ref from, .. } if from == "nowhere"),
            "{e}"
        );
    }
}
