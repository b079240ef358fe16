//! `holdfast-tester`: a small, fast BGP speaker used as the injector and
//! monitor of the benchmarks and as the raw peer of the integration tests.
//!
//! It speaks just enough BGP (RFC 4271 OPEN/KEEPALIVE/UPDATE/NOTIFICATION
//! with the multiprotocol, 4-octet AS and graceful-restart capabilities) to
//! establish a session with any daemon, stream pre-encoded UPDATEs at wire
//! speed, send deliberately malformed messages, and keep an exact view of
//! what the other side advertised: the routes, End-of-RIB markers,
//! NOTIFICATIONs, and the longest silence between received messages.
//!
//! Blocking sockets and plain threads: a reader thread, a keepalive thread,
//! and the caller. Whole messages are written under one lock, so KEEPALIVEs
//! never split an UPDATE.
//!
//! # Known issues
//! - No ADD-PATH, no route refresh sending, no collision handling: a tester
//!   session is always the only connection.

pub mod netns;
pub mod workload;

use holdfast_wire::{
    decode_notification, decode_open, decode_update, encode_attrs, encode_end_of_rib,
    encode_keepalive, encode_notification, encode_open, frame, msg_type, pack_announce,
    pack_withdraw, Afi, Capability, CodecCtx, Family, GracefulRestartCap, Notification, Open,
    PathAttrs, Prefix, HEADER_LEN,
};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum TesterError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("peer sent NOTIFICATION {}/{}", .0.code, .0.subcode)]
    Notification(Notification),
    #[error("timed out: {0}")]
    Timeout(String),
}

pub type Result<T> = std::result::Result<T, TesterError>;

/// Tester session settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub local_as: u32,
    pub router_id: Ipv4Addr,
    pub hold_time: u16,
    pub families: Vec<Family>,
    /// Advertise the graceful-restart capability with this restart time.
    pub graceful_restart: Option<u16>,
    /// Set the R bit (we are restarting).
    pub restarting: bool,
}

impl Config {
    pub fn new(local_as: u32, router_id: Ipv4Addr) -> Config {
        Config {
            local_as,
            router_id,
            hold_time: 90,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            graceful_restart: None,
            restarting: false,
        }
    }

    pub fn open(&self) -> Open {
        let mut caps: Vec<Capability> = self
            .families
            .iter()
            .map(|f| Capability::Multiprotocol(*f))
            .collect();
        caps.push(Capability::RouteRefresh);
        caps.push(Capability::FourOctetAs(self.local_as));
        if let Some(t) = self.graceful_restart {
            caps.push(Capability::GracefulRestart(GracefulRestartCap {
                restart_state: self.restarting,
                notification: false,
                restart_time: t,
                families: self.families.iter().map(|f| (*f, true)).collect(),
            }));
        }
        Open {
            version: 4,
            my_as: u16::try_from(self.local_as).unwrap_or(holdfast_wire::AS_TRANS),
            hold_time: self.hold_time,
            bgp_id: self.router_id,
            capabilities: caps,
        }
    }
}

/// What the tester has seen from the other side.
#[derive(Debug, Default)]
pub struct View {
    /// Current routes: prefix → index into `attrs`.
    pub routes: HashMap<Prefix, u32>,
    pub attrs: Vec<PathAttrs>,
    attr_index: HashMap<PathAttrs, u32>,
    pub updates: u64,
    pub keepalives: u64,
    pub announced: u64,
    pub withdrawn: u64,
    pub end_of_rib: Vec<Family>,
    pub notifications: Vec<Notification>,
    /// Decode errors (what a real speaker would have answered with a
    /// NOTIFICATION); kept so tests can assert there were none.
    pub errors: Vec<String>,
    pub first_update: Option<Instant>,
    pub last_change: Option<Instant>,
    pub last_message: Option<Instant>,
    /// Longest interval between two received messages after establishment.
    pub max_gap: Duration,
    pub closed: bool,
    /// Arrival times of the messages received since
    /// [`Peer::record_arrivals`], at most that many.
    pub arrivals: Vec<Instant>,
    arrivals_cap: usize,
}

impl View {
    pub fn route(&self, p: &Prefix) -> Option<&PathAttrs> {
        self.routes.get(p).map(|i| &self.attrs[*i as usize])
    }
}

struct Shared {
    view: Mutex<View>,
    changed: Condvar,
    stop: AtomicBool,
}

/// An established tester session.
pub struct Peer {
    writer: Arc<Mutex<TcpStream>>,
    shared: Arc<Shared>,
    pub remote_open: Open,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub ctx: CodecCtx,
    threads: Vec<JoinHandle<()>>,
}

fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Vec<u8>> {
    loop {
        match frame(buf).map_err(|e| TesterError::Protocol(e.to_string()))? {
            Some((_, len)) => {
                let msg = buf[..len].to_vec();
                buf.drain(..len);
                return Ok(msg);
            }
            None => {
                let mut chunk = [0u8; 65536];
                let n = s.read(&mut chunk)?;
                if n == 0 {
                    return Err(TesterError::Protocol("connection closed".into()));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

impl Peer {
    /// Connects to `remote` (optionally from `local`) and establishes.
    pub fn connect(
        remote: SocketAddr,
        local: Option<IpAddr>,
        cfg: &Config,
        timeout: Duration,
    ) -> Result<Peer> {
        let stream = match local {
            None => TcpStream::connect_timeout(&remote, timeout)?,
            Some(ip) => {
                let sock = socket2::Socket::new(
                    socket2::Domain::for_address(remote),
                    socket2::Type::STREAM,
                    None,
                )?;
                sock.bind(&SocketAddr::new(ip, 0).into())?;
                sock.connect_timeout(&remote.into(), timeout)?;
                sock.into()
            }
        };
        Peer::establish(stream, cfg, timeout)
    }

    /// Accepts one connection on `listener` and establishes.
    pub fn accept(listener: &TcpListener, cfg: &Config, timeout: Duration) -> Result<Peer> {
        listener.set_nonblocking(true)?;
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(TesterError::Timeout("no connection to accept".into()));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(e.into()),
            }
        };
        stream.set_nonblocking(false)?;
        Peer::establish(stream, cfg, timeout)
    }

    fn establish(mut stream: TcpStream, cfg: &Config, timeout: Duration) -> Result<Peer> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        let mut out = Vec::new();
        encode_open(&cfg.open(), &mut out);
        stream.write_all(&out)?;
        let mut buf = Vec::new();
        let msg = read_message(&mut stream, &mut buf)?;
        let remote_open = match msg[18] {
            msg_type::OPEN => {
                decode_open(&msg[HEADER_LEN..]).map_err(|e| TesterError::Protocol(e.to_string()))?
            }
            msg_type::NOTIFICATION => {
                return Err(TesterError::Notification(
                    decode_notification(&msg[HEADER_LEN..])
                        .map_err(|e| TesterError::Protocol(e.to_string()))?,
                ))
            }
            t => {
                return Err(TesterError::Protocol(format!(
                    "expected OPEN, got type {t}"
                )))
            }
        };
        out.clear();
        encode_keepalive(&mut out);
        stream.write_all(&out)?;
        let msg = read_message(&mut stream, &mut buf)?;
        match msg[18] {
            msg_type::KEEPALIVE => {}
            msg_type::NOTIFICATION => {
                return Err(TesterError::Notification(
                    decode_notification(&msg[HEADER_LEN..])
                        .map_err(|e| TesterError::Protocol(e.to_string()))?,
                ))
            }
            t => {
                return Err(TesterError::Protocol(format!(
                    "expected KEEPALIVE, got type {t}"
                )))
            }
        }
        stream.set_read_timeout(None)?;
        let four = remote_open
            .capabilities
            .iter()
            .any(|c| matches!(c, Capability::FourOctetAs(_)));
        let ctx = CodecCtx {
            four_octet_as: four,
            ibgp: remote_open.asn() == cfg.local_as,
        };
        let hold = cfg.hold_time.min(remote_open.hold_time);
        let shared = Arc::new(Shared {
            view: Mutex::new(View::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        shared.view.lock().expect("view").last_message = Some(Instant::now());
        let writer = Arc::new(Mutex::new(stream.try_clone()?));
        let local = stream.local_addr()?;
        let remote = stream.peer_addr()?;
        let mut threads = Vec::new();
        {
            let shared = shared.clone();
            threads.push(std::thread::spawn(move || reader(stream, buf, ctx, shared)));
        }
        if hold > 0 {
            let shared = shared.clone();
            let writer = writer.clone();
            let every = Duration::from_millis(hold as u64 * 1000 / 3);
            threads.push(std::thread::spawn(move || {
                keepalives(writer, shared, every)
            }));
        }
        Ok(Peer {
            writer,
            shared,
            remote_open,
            local,
            remote,
            ctx,
            threads,
        })
    }

    /// Writes raw bytes (one or more whole messages) atomically.
    pub fn send_raw(&self, bytes: &[u8]) -> Result<()> {
        let mut w = self.writer.lock().expect("writer");
        w.write_all(bytes)?;
        Ok(())
    }

    /// Streams a long run of whole messages, in chunks split at message
    /// boundaries so that KEEPALIVEs can interleave.
    pub fn send_stream(&self, bytes: &[u8]) -> Result<()> {
        let mut pos = 0;
        while pos < bytes.len() {
            let mut end = pos;
            while end < bytes.len() && end - pos < 256 * 1024 {
                let len = u16::from_be_bytes([bytes[end + 16], bytes[end + 17]]) as usize;
                end += len;
            }
            self.send_raw(&bytes[pos..end])?;
            pos = end;
        }
        Ok(())
    }

    /// Announces `prefixes` (one family) with `attrs`.
    pub fn announce(&self, attrs: &PathAttrs, prefixes: &[Prefix]) -> Result<()> {
        let mut out = Vec::new();
        encode_routes(&[(attrs.clone(), prefixes.to_vec())], &self.ctx, &mut out);
        self.send_stream(&out)
    }

    pub fn withdraw(&self, prefixes: &[Prefix]) -> Result<()> {
        let mut out = Vec::new();
        pack_withdraw(prefixes, &mut out);
        self.send_stream(&out)
    }

    pub fn end_of_rib(&self, family: Family) -> Result<()> {
        let mut out = Vec::new();
        encode_end_of_rib(family, &mut out);
        self.send_raw(&out)
    }

    pub fn notify(&self, n: &Notification) -> Result<()> {
        let mut out = Vec::new();
        encode_notification(n, &mut out);
        self.send_raw(&out)
    }

    /// Runs `f` on the current view.
    pub fn view<T>(&self, f: impl FnOnce(&View) -> T) -> T {
        f(&self.shared.view.lock().expect("view"))
    }

    /// From now on, records the arrival time of each received message in
    /// [`View::arrivals`] (cleared first), up to `cap` of them.
    pub fn record_arrivals(&self, cap: usize) {
        let mut v = self.shared.view.lock().expect("view");
        v.arrivals.clear();
        v.arrivals_cap = cap;
    }

    pub fn route_count(&self) -> usize {
        self.view(|v| v.routes.len())
    }

    /// Waits until `cond` holds on the view, or `timeout` passes.
    pub fn wait(
        &self,
        what: &str,
        timeout: Duration,
        mut cond: impl FnMut(&View) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut v = self.shared.view.lock().expect("view");
        loop {
            if cond(&v) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(TesterError::Timeout(format!(
                    "{what} (have {} routes, {} updates, closed={}, notifications={:?}, errors={:?})",
                    v.routes.len(),
                    v.updates,
                    v.closed,
                    v.notifications,
                    v.errors.first()
                )));
            }
            v = self
                .shared
                .changed
                .wait_timeout(v, (deadline - now).min(Duration::from_millis(200)))
                .expect("view")
                .0;
        }
    }

    /// Closes the TCP connection without a NOTIFICATION (like a crash).
    pub fn abort(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.writer.lock().expect("writer").shutdown(Shutdown::Both);
    }

    pub fn is_closed(&self) -> bool {
        self.view(|v| v.closed)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.abort();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Encodes a workload as UPDATE messages (one attribute encoding per set).
pub fn encode_routes(routes: &[(PathAttrs, Vec<Prefix>)], ctx: &CodecCtx, out: &mut Vec<u8>) {
    for (attrs, prefixes) in routes {
        let block = encode_attrs(attrs, ctx);
        let (v4, v6): (Vec<Prefix>, Vec<Prefix>) =
            prefixes.iter().partition(|p| matches!(p, Prefix::V4(_)));
        if !v4.is_empty() {
            pack_announce(&block, Afi::Ipv4, None, &v4, out);
        }
        if !v6.is_empty() {
            pack_announce(&block, Afi::Ipv6, attrs.mp_next_hop.as_ref(), &v6, out);
        }
    }
}

fn keepalives(writer: Arc<Mutex<TcpStream>>, shared: Arc<Shared>, every: Duration) {
    let mut ka = Vec::new();
    encode_keepalive(&mut ka);
    let step = Duration::from_millis(50);
    let mut next = Instant::now() + every;
    while !shared.stop.load(Ordering::SeqCst) {
        std::thread::sleep(step);
        if Instant::now() >= next {
            if writer.lock().expect("writer").write_all(&ka).is_err() {
                return;
            }
            next += every;
        }
    }
}

fn reader(mut s: TcpStream, mut buf: Vec<u8>, ctx: CodecCtx, shared: Arc<Shared>) {
    let mut chunk = vec![0u8; 256 * 1024];
    let mut pos = 0usize;
    loop {
        // Process every complete message already buffered.
        while let Ok(Some((t, len))) = frame(&buf[pos..]) {
            let msg = &buf[pos..pos + len];
            apply(&shared, t, &msg[HEADER_LEN..], &ctx);
            pos += len;
        }
        if let Err(e) = frame(&buf[pos..]) {
            let mut v = shared.view.lock().expect("view");
            v.errors.push(format!("framing: {e}"));
            v.closed = true;
            shared.changed.notify_all();
            return;
        }
        buf.drain(..pos);
        pos = 0;
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => {
                let mut v = shared.view.lock().expect("view");
                v.closed = true;
                shared.changed.notify_all();
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn apply(shared: &Shared, t: u8, body: &[u8], ctx: &CodecCtx) {
    let now = Instant::now();
    let mut v = shared.view.lock().expect("view");
    if let Some(last) = v.last_message {
        v.max_gap = v.max_gap.max(now - last);
    }
    v.last_message = Some(now);
    if v.arrivals.len() < v.arrivals_cap {
        v.arrivals.push(now);
    }
    match t {
        msg_type::KEEPALIVE => v.keepalives += 1,
        msg_type::NOTIFICATION => match decode_notification(body) {
            Ok(n) => v.notifications.push(n),
            Err(e) => v.errors.push(format!("notification: {e}")),
        },
        msg_type::UPDATE => {
            v.updates += 1;
            v.first_update.get_or_insert(now);
            match decode_update(body, ctx) {
                Err(e) => v.errors.push(format!("update: {e}")),
                Ok(out) => {
                    let u = out.update;
                    if let Some(f) = u.end_of_rib {
                        v.end_of_rib.push(f);
                    }
                    v.withdrawn += u.withdrawn.len() as u64;
                    for p in &u.withdrawn {
                        v.routes.remove(p);
                    }
                    if let Some(attrs) = u.attrs {
                        v.announced += u.announced.len() as u64;
                        let next = v.attrs.len() as u32;
                        let idx = *v.attr_index.entry(attrs.clone()).or_insert(next);
                        if idx == next {
                            v.attrs.push(attrs);
                        }
                        for p in u.announced {
                            v.routes.insert(p, idx);
                        }
                    }
                    v.last_change = Some(now);
                }
            }
        }
        _ => {}
    }
    shared.changed.notify_all();
}
