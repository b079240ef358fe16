//! Mutual TLS for the control plane's gRPC (issue 30): who a certificate
//! names, what it may claim, and the files that configure it.
//!
//! # Identities
//! Every certificate `holdfast ctl certs init` issues ([`crate::certs`])
//! names one role and one name:
//!
//! - subject `CN=<role>:<name>, OU=<role>, O=holdfast`, e.g.
//!   `CN=agent:a` for host `a`'s agent, `CN=controller:c1`,
//!   `CN=operator:admin`, `CN=unit:edge-1`;
//! - subject alternative names (DNS) `<name>.<role>.holdfast` and
//!   `<role>.holdfast`. A client checks a server against the role's name
//!   (an agent dials `controller.holdfast`, a failsafe round
//!   `agent.holdfast`), so servers need no address in their certificate.
//!
//! The common name is what the servers read ([`Identity::from_cn`]); the
//! role then decides what the peer may claim ([`check_claim`]): an
//! agent's certificate names its host, and a certificate for `a` can
//! neither attach as `b` nor ask the failsafe round for `b`.
//!
//! # Files
//! [`TlsFiles`] is the `--tls-cert`, `--tls-key`, `--tls-ca` triple of the
//! controller and the agent; with it ([`Tls::load`]) their servers require
//! a client certificate from the CA ([`Tls::server`]) and their clients
//! present theirs ([`Tls::client`], [`connect`]). Without it everything is plaintext (and the
//! binaries log a warning at start).
//!
//! # Known issues
//! - No revocation list: a stolen key is answered by a new CA (docs/security.md,
//!   *Rotation*), not by revoking one certificate.
//! - The role is read from the common name only; the `OU` and the SANs are
//!   for other tools (and for the servers' names) and are not cross-checked.

use std::fmt;
use std::path::{Path, PathBuf};

/// The domain under which certificates carry their DNS names.
pub const DOMAIN: &str = "holdfast";

/// What a certificate's holder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// A controller replica (serves `Attach`).
    Controller,
    /// A host agent (attaches; serves the failsafe).
    Agent,
    /// A person or tool (`holdfast ctl`, the GoBGP API's clients).
    Operator,
    /// A routing unit's holdfastd (serves the GoBGP API).
    Unit,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Controller, Role::Agent, Role::Operator, Role::Unit];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Controller => "controller",
            Role::Agent => "agent",
            Role::Operator => "operator",
            Role::Unit => "unit",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The DNS name every certificate of this role carries
    /// (`agent.holdfast`): what a client checks a server against.
    pub fn server_name(self) -> String {
        format!("{}.{DOMAIN}", self.as_str())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The role and name a certificate was issued for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    pub role: Role,
    pub name: String,
}

/// Why a common name is not a Holdfast identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("common name `{0}` is not ROLE:NAME")]
    NotRoleName(String),
    #[error("unknown role `{0}` (controller, agent, operator, unit)")]
    Role(String),
    #[error(
        "name `{0}`: 1 to 63 letters, digits, `-` and `_`, not starting or ending with `-` or `_`"
    )]
    Name(String),
    #[error("the certificate has no common name")]
    NoCommonName,
    #[error("the certificate cannot be read: {0}")]
    Der(String),
}

/// Whether `name` may be a host, controller, unit or operator name in a
/// certificate (one DNS label).
/// `_` is allowed (unit names such as `edge_a` are); the certificate's DNS
/// name turns it into `-` ([`Identity::dns_name`]).
pub fn valid_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.starts_with(['-', '_'])
        && !name.ends_with(['-', '_'])
}

impl Identity {
    pub fn new(role: Role, name: &str) -> Result<Identity, IdentityError> {
        if !valid_name(name) {
            return Err(IdentityError::Name(name.to_string()));
        }
        Ok(Identity {
            role,
            name: name.to_string(),
        })
    }

    /// Reads `ROLE:NAME`.
    pub fn from_cn(cn: &str) -> Result<Identity, IdentityError> {
        let (role, name) = cn
            .split_once(':')
            .ok_or_else(|| IdentityError::NotRoleName(cn.to_string()))?;
        let role = Role::parse(role).ok_or_else(|| IdentityError::Role(role.to_string()))?;
        Identity::new(role, name)
    }

    /// Reads the common name of a DER certificate.
    pub fn from_der(der: &[u8]) -> Result<Identity, IdentityError> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| IdentityError::Der(e.to_string()))?;
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .ok_or(IdentityError::NoCommonName)?;
        let cn = cn.as_str().map_err(|e| IdentityError::Der(e.to_string()))?;
        Identity::from_cn(cn)
    }

    /// `ROLE:NAME`, the subject's common name.
    pub fn common_name(&self) -> String {
        format!("{}:{}", self.role, self.name)
    }

    /// `NAME.ROLE.holdfast` (a `_` of the name as `-`).
    pub fn dns_name(&self) -> String {
        format!("{}.{}.{DOMAIN}", self.name.replace('_', "-"), self.role)
    }

    /// The stem of its files in a certificate directory (`agent-a`).
    pub fn file_stem(&self) -> String {
        format!("{}-{}", self.role, self.name)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.role, self.name)
    }
}

/// Who is on the other end of a gRPC call, as far as TLS tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// The server runs without TLS: nobody is identified.
    Plaintext,
    /// A client certificate from the CA, naming this identity.
    Cert(Identity),
    /// TLS is on but the peer's certificate names no identity (or none
    /// reached the service).
    Unnamed(String),
}

impl Peer {
    /// Who a request came from: `tls` says whether the server requires
    /// client certificates.
    pub fn of<T>(req: &tonic::Request<T>, tls: bool) -> Peer {
        if !tls {
            return Peer::Plaintext;
        }
        let Some(certs) = req.peer_certs() else {
            return Peer::Unnamed("no client certificate".into());
        };
        let Some(leaf) = certs.first() else {
            return Peer::Unnamed("no client certificate".into());
        };
        match Identity::from_der(leaf) {
            Ok(id) => Peer::Cert(id),
            Err(e) => Peer::Unnamed(e.to_string()),
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Plaintext => f.write_str("plaintext"),
            Peer::Cert(id) => write!(f, "{id}"),
            Peer::Unnamed(why) => write!(f, "unnamed ({why})"),
        }
    }
}

/// Why a peer may not make a claim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("certificate {id} is not of role {want}")]
    Role { id: Identity, want: Role },
    #[error("certificate {id} may not act as {want} {claimed}")]
    Name {
        id: Identity,
        want: Role,
        claimed: String,
    },
    #[error("no identity: {0}")]
    Unnamed(String),
}

/// Whether `peer` may act as the `want` called `claimed` (an agent's
/// Hello naming its host, a failsafe ask naming the asking host). Without
/// TLS every claim passes (the plaintext mode has no identities).
pub fn check_claim(peer: &Peer, want: Role, claimed: &str) -> Result<(), Refusal> {
    match peer {
        Peer::Plaintext => Ok(()),
        Peer::Unnamed(why) => Err(Refusal::Unnamed(why.clone())),
        Peer::Cert(id) if id.role != want => Err(Refusal::Role {
            id: id.clone(),
            want,
        }),
        Peer::Cert(id) if id.name != claimed => Err(Refusal::Name {
            id: id.clone(),
            want,
            claimed: claimed.to_string(),
        }),
        Peer::Cert(_) => Ok(()),
    }
}

/// A binary's certificate, key and CA (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--tls-cert, --tls-key and --tls-ca go together (missing: {0})")]
    Incomplete(&'static str),
}

impl TlsFiles {
    /// The three flags: all or none.
    pub fn from_flags(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        ca: Option<PathBuf>,
    ) -> Result<Option<TlsFiles>, TlsError> {
        match (cert, key, ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => Ok(Some(TlsFiles { cert, key, ca })),
            (None, _, _) => Err(TlsError::Incomplete("--tls-cert")),
            (_, None, _) => Err(TlsError::Incomplete("--tls-key")),
            (_, _, None) => Err(TlsError::Incomplete("--tls-ca")),
        }
    }

    /// The certificate directory's files of `id` (`ca.pem`, `ROLE-NAME.pem`,
    /// `ROLE-NAME-key.pem`).
    pub fn in_dir(dir: &Path, id: &Identity) -> TlsFiles {
        TlsFiles {
            cert: dir.join(format!("{}.pem", id.file_stem())),
            key: dir.join(format!("{}-key.pem", id.file_stem())),
            ca: dir.join("ca.pem"),
        }
    }
}

fn read(p: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(p).map_err(|source| TlsError::Read {
        path: p.to_path_buf(),
        source,
    })
}

/// A binary's certificate, key and CA, read once ([`Tls::load`]).
#[derive(Debug, Clone)]
pub struct Tls {
    pub files: TlsFiles,
    identity: tonic::transport::Identity,
    ca: tonic::transport::Certificate,
}

impl Tls {
    /// Reads the three files.
    pub fn load(f: &TlsFiles) -> Result<Tls, TlsError> {
        Ok(Tls {
            files: f.clone(),
            identity: tonic::transport::Identity::from_pem(read(&f.cert)?, read(&f.key)?),
            ca: tonic::transport::Certificate::from_pem(read(&f.ca)?),
        })
    }

    /// A server that requires a client certificate from the CA.
    pub fn server(&self) -> tonic::transport::ServerTlsConfig {
        tonic::transport::ServerTlsConfig::new()
            .identity(self.identity.clone())
            .client_ca_root(self.ca.clone())
            .client_auth_optional(false)
    }

    /// A client presenting its certificate, which trusts only a server of
    /// the CA whose certificate names `server` (its role's name,
    /// [`Role::server_name`]).
    pub fn client(&self, server: Role) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .identity(self.identity.clone())
            .ca_certificate(self.ca.clone())
            .domain_name(server.server_name())
    }

    /// An etcd client (holdfast-etcd's `Store::with_tls`) presenting this
    /// certificate, whose common name etcd takes as the user under
    /// `--client-cert-auth`; it trusts a member of the CA whose
    /// certificate names the address or name of its `https://` URL.
    pub fn etcd_client(&self) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .identity(self.identity.clone())
            .ca_certificate(self.ca.clone())
    }
}

/// Connects to `url` (`http://ADDR:PORT` or `ADDR:PORT`), over TLS with
/// `tls` (the scheme is made `https`), else in plaintext.
pub async fn connect(
    url: &str,
    tls: Option<&tonic::transport::ClientTlsConfig>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let mut ep = tonic::transport::Endpoint::from_shared(url_for(url, tls.is_some()))?;
    if let Some(t) = tls {
        ep = ep.tls_config(t.clone())?;
    }
    ep.connect().await
}

/// `url` with the scheme TLS needs: `http://` becomes `https://`, a bare
/// `ADDR:PORT` gets one.
pub fn url_for(url: &str, tls: bool) -> String {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    if tls {
        format!("https://{rest}")
    } else {
        format!("http://{rest}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(role: Role, name: &str) -> Identity {
        Identity::new(role, name).unwrap()
    }

    #[test]
    fn common_names_round_trip() {
        for r in Role::ALL {
            let i = id(r, "edge-1");
            assert_eq!(Identity::from_cn(&i.common_name()), Ok(i.clone()));
        }
        assert_eq!(id(Role::Agent, "a").common_name(), "agent:a");
        assert_eq!(id(Role::Agent, "a").dns_name(), "a.agent.holdfast");
        assert_eq!(id(Role::Unit, "u1").file_stem(), "unit-u1");
        // A unit name with `_` (the lab's `edge_a`): a DNS label without it.
        let joint = id(Role::Unit, "edge_a");
        assert_eq!(Identity::from_cn(&joint.common_name()), Ok(joint.clone()));
        assert_eq!(joint.dns_name(), "edge-a.unit.holdfast");
        assert_eq!(joint.file_stem(), "unit-edge_a");
        assert_eq!(Role::Controller.server_name(), "controller.holdfast");
    }

    #[test]
    fn bad_common_names_are_refused() {
        assert_eq!(
            Identity::from_cn("a"),
            Err(IdentityError::NotRoleName("a".into()))
        );
        assert_eq!(
            Identity::from_cn("root:a"),
            Err(IdentityError::Role("root".into()))
        );
        assert_eq!(
            Identity::from_cn("agent:"),
            Err(IdentityError::Name(String::new()))
        );
        assert_eq!(
            Identity::from_cn("agent:a:b"),
            Err(IdentityError::Name("a:b".into()))
        );
        assert!(Identity::from_cn("agent:-a").is_err());
        assert!(Identity::from_cn("unit:_a").is_err());
        assert!(Identity::from_cn("unit:a_").is_err());
        assert!(Identity::from_cn("agent:a.b").is_err());
        assert!(Identity::from_cn(&format!("agent:{}", "x".repeat(64))).is_err());
        assert!(Identity::from_cn(&format!("agent:{}", "x".repeat(63))).is_ok());
    }

    #[test]
    fn an_agent_may_claim_only_its_own_host() {
        let a = Peer::Cert(id(Role::Agent, "a"));
        assert_eq!(check_claim(&a, Role::Agent, "a"), Ok(()));
        let e = check_claim(&a, Role::Agent, "b").unwrap_err();
        assert_eq!(
            e,
            Refusal::Name {
                id: id(Role::Agent, "a"),
                want: Role::Agent,
                claimed: "b".into()
            }
        );
        assert_eq!(e.to_string(), "certificate agent:a may not act as agent b");
    }

    #[test]
    fn other_roles_may_not_act_as_agents() {
        for r in [Role::Controller, Role::Operator, Role::Unit] {
            let p = Peer::Cert(id(r, "a"));
            assert!(
                matches!(check_claim(&p, Role::Agent, "a"), Err(Refusal::Role { .. })),
                "{r}"
            );
        }
        let e = check_claim(&Peer::Cert(id(Role::Unit, "a")), Role::Agent, "a").unwrap_err();
        assert_eq!(e.to_string(), "certificate unit:a is not of role agent");
    }

    #[test]
    fn plaintext_identifies_nobody_and_unnamed_is_refused() {
        assert_eq!(check_claim(&Peer::Plaintext, Role::Agent, "b"), Ok(()));
        assert!(matches!(
            check_claim(&Peer::Unnamed("x".into()), Role::Agent, "b"),
            Err(Refusal::Unnamed(_))
        ));
    }

    #[test]
    fn the_three_flags_go_together() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert!(TlsFiles::from_flags(None, None, None).unwrap().is_none());
        assert!(TlsFiles::from_flags(p("c"), p("k"), p("a"))
            .unwrap()
            .is_some());
        let e = TlsFiles::from_flags(p("c"), None, p("a")).unwrap_err();
        assert!(e.to_string().contains("missing: --tls-key"), "{e}");
        let e = TlsFiles::from_flags(None, p("k"), None).unwrap_err();
        assert!(e.to_string().contains("missing: --tls-cert"), "{e}");
    }

    #[test]
    fn urls_get_the_scheme_tls_needs() {
        assert_eq!(
            url_for("http://10.0.0.1:50051", true),
            "https://10.0.0.1:50051"
        );
        assert_eq!(url_for("10.0.0.1:50051", true), "https://10.0.0.1:50051");
        assert_eq!(url_for("10.0.0.1:50051", false), "http://10.0.0.1:50051");
        assert_eq!(url_for("https://h:1", false), "http://h:1");
    }
}
