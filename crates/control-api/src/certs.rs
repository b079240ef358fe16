//! `holdfast ctl certs init`: a CA and one certificate per controller,
//! host agent, operator and unit, for a quick start (issue 30). The
//! subject and names of each certificate are [`crate::tls`]'s.
//!
//! Files in the directory (PEM; keys written 0600, the directory made
//! 0700 when it is created):
//!
//! - `ca.pem`, `ca-key.pem`: the CA (ECDSA P-256, 10 years);
//! - `ROLE-NAME.pem`, `ROLE-NAME-key.pem` per identity (ECDSA P-256,
//!   `--days`, both server and client authentication);
//! - with etcd members (`--etcd NAME=ADDR,...`): `etcd-NAME.pem` and its
//!   key per member (subject `CN=etcd:NAME`, names `NAME.etcd.holdfast`,
//!   `etcd.holdfast` and ADDR, which etcd's clients check), and
//!   `etcd-root.pem` (`CN=root`: etcd's administrator once authentication
//!   is on, [`ETCD_ROOT`]).
//!
//! A directory that already holds `ca.pem` and `ca-key.pem` keeps its CA:
//! the certificates asked for are issued (again) by it, which is how they
//! are renewed or added. `new_ca` makes a new CA instead (every
//! certificate must then be issued again: docs/security.md, *Rotation*).
//!
//! # Known issues
//! - The CA's key sits beside the certificates: a quick start, not a PKI.
//!   docs/security.md says how to keep it elsewhere or bring your own.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::tls::{Identity, IdentityError, Role, TlsFiles, DOMAIN};

const DAY: Duration = Duration::from_secs(86_400);

/// The common name (and etcd user) of etcd's administrator certificate,
/// `etcd-root.pem`.
pub const ETCD_ROOT: &str = "root";
const CA_DAYS: u64 = 3650;

/// What to issue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertPlan {
    pub controllers: Vec<String>,
    pub hosts: Vec<String>,
    pub operators: Vec<String>,
    pub units: Vec<String>,
    /// Extra subject alternative names (an IP address or a DNS name) for
    /// one identity, e.g. a unit's GoBGP API address for clients that
    /// check the address (`gobgp --tls`).
    pub sans: Vec<(Identity, String)>,
    /// etcd members: (name, address or DNS name), one server certificate
    /// each (and `etcd-root.pem` when there is any).
    pub etcd: Vec<(String, String)>,
    /// Validity of the issued certificates, in days.
    pub days: u64,
    /// Make a new CA even if the directory has one.
    pub new_ca: bool,
}

impl CertPlan {
    /// Every identity asked for, controllers first.
    pub fn identities(&self) -> Result<Vec<Identity>, IdentityError> {
        let mut out = Vec::new();
        for (role, names) in [
            (Role::Controller, &self.controllers),
            (Role::Agent, &self.hosts),
            (Role::Operator, &self.operators),
            (Role::Unit, &self.units),
        ] {
            for n in names {
                let id = Identity::new(role, n)?;
                if !out.contains(&id) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }
}

/// One certificate written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub identity: Identity,
    pub files: TlsFiles,
    pub names: Vec<String>,
}

/// One etcd certificate written (a member's, or the root's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdIssued {
    /// The subject's common name (`etcd:NAME`, `root`).
    pub common_name: String,
    pub files: TlsFiles,
    pub names: Vec<String>,
}

/// What [`init`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub ca: PathBuf,
    pub ca_key: PathBuf,
    /// Whether the directory's CA was kept.
    pub ca_kept: bool,
    pub issued: Vec<Issued>,
    /// The etcd members' certificates, then the root's.
    pub etcd: Vec<EtcdIssued>,
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Rcgen { what: String, source: rcgen::Error },
    #[error("--san {0}: no such identity in this run")]
    SanWithoutIdentity(String),
    #[error("nothing to issue: give --hosts, --controllers, --operators, --units or --etcd")]
    Nothing,
    #[error("--etcd {0}: a member's name is one DNS label, and not `root`")]
    EtcdName(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertError + '_ {
    move |source| CertError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn rc(what: impl Into<String>) -> impl FnOnce(rcgen::Error) -> CertError {
    let what = what.into();
    move |source| CertError::Rcgen { what, source }
}

/// Writes `text` to `path` (replacing it), with `mode`.
fn write(path: &Path, text: &str, mode: u32) -> Result<(), CertError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(io(path))?;
    // An existing file keeps its mode through `open`.
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io(path))?;
    f.write_all(text.as_bytes()).map_err(io(path))
}

fn ca_params() -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, "holdfast CA");
    p.distinguished_name
        .push(DnType::OrganizationName, DOMAIN.to_string());
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = (SystemTime::now() - DAY).into();
    p.not_after = (SystemTime::now() + DAY * CA_DAYS as u32).into();
    p
}

/// The names a certificate of `id` carries.
pub fn names_of(id: &Identity, extra: &[String]) -> Vec<String> {
    let mut names = vec![id.dns_name(), id.role.server_name()];
    names.extend(extra.iter().cloned());
    names
}

fn leaf_params(
    cn: &str,
    ou: &str,
    names: Vec<String>,
    days: u64,
) -> Result<CertificateParams, CertError> {
    let mut p = CertificateParams::new(names).map_err(rc(format!("names of {cn}")))?;
    p.distinguished_name.push(DnType::CommonName, cn);
    p.distinguished_name
        .push(DnType::OrganizationalUnitName, ou);
    p.distinguished_name
        .push(DnType::OrganizationName, DOMAIN.to_string());
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    p.not_before = (SystemTime::now() - DAY).into();
    p.not_after = (SystemTime::now() + DAY * days.clamp(1, 36_500) as u32).into();
    Ok(p)
}

/// Makes (or keeps) the CA in `dir` and issues `plan`'s certificates.
pub fn init(dir: &Path, plan: &CertPlan) -> Result<Report, CertError> {
    let ids = plan.identities()?;
    if ids.is_empty() && plan.etcd.is_empty() {
        return Err(CertError::Nothing);
    }
    if let Some((n, _)) = plan
        .etcd
        .iter()
        .find(|(n, _)| !crate::tls::valid_name(n) || n == ETCD_ROOT)
    {
        return Err(CertError::EtcdName(n.clone()));
    }
    if let Some((id, _)) = plan.sans.iter().find(|(id, _)| !ids.contains(id)) {
        return Err(CertError::SanWithoutIdentity(id.to_string()));
    }
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))?;
    }
    let ca_path = dir.join("ca.pem");
    let ca_key_path = dir.join("ca-key.pem");
    let kept = !plan.new_ca && ca_path.is_file() && ca_key_path.is_file();
    let issuer = if kept {
        let key_pem = std::fs::read_to_string(&ca_key_path).map_err(io(&ca_key_path))?;
        let cert_pem = std::fs::read_to_string(&ca_path).map_err(io(&ca_path))?;
        let key = KeyPair::from_pem(&key_pem).map_err(rc(ca_key_path.display().to_string()))?;
        Issuer::from_ca_cert_pem(&cert_pem, key).map_err(rc(ca_path.display().to_string()))?
    } else {
        let key = KeyPair::generate().map_err(rc("the CA's key"))?;
        let params = ca_params();
        let cert = params.self_signed(&key).map_err(rc("the CA"))?;
        write(&ca_key_path, &key.serialize_pem(), 0o600)?;
        write(&ca_path, &cert.pem(), 0o644)?;
        Issuer::new(params, key)
    };
    let mut issued = Vec::new();
    for id in ids {
        let extra: Vec<String> = plan
            .sans
            .iter()
            .filter(|(i, _)| *i == id)
            .map(|(_, s)| s.clone())
            .collect();
        let names = names_of(&id, &extra);
        let files = TlsFiles::in_dir(dir, &id);
        let cn = id.common_name();
        issue(&issuer, &files, &cn, id.role.as_str(), &names, plan.days)?;
        issued.push(Issued {
            identity: id,
            files,
            names,
        });
    }
    let mut etcd = Vec::new();
    let root = (!plan.etcd.is_empty()).then(|| (ETCD_ROOT.to_string(), None));
    let members = plan.etcd.iter().map(|(n, a)| (n.clone(), Some(a)));
    for (name, addr) in members.chain(root) {
        let (cn, names) = match addr {
            Some(a) => (
                format!("etcd:{name}"),
                vec![
                    format!("{name}.etcd.{DOMAIN}"),
                    format!("etcd.{DOMAIN}"),
                    a.clone(),
                ],
            ),
            None => (ETCD_ROOT.to_string(), vec![format!("root.etcd.{DOMAIN}")]),
        };
        let stem = format!("etcd-{name}");
        let files = TlsFiles {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}-key.pem")),
            ca: ca_path.clone(),
        };
        issue(&issuer, &files, &cn, "etcd", &names, plan.days)?;
        etcd.push(EtcdIssued {
            common_name: cn,
            files,
            names,
        });
    }
    Ok(Report {
        ca: ca_path,
        ca_key: ca_key_path,
        ca_kept: kept,
        issued,
        etcd,
    })
}

/// Issues one certificate and writes it and its key to `files`.
fn issue(
    issuer: &Issuer<'_, KeyPair>,
    files: &TlsFiles,
    cn: &str,
    ou: &str,
    names: &[String],
    days: u64,
) -> Result<(), CertError> {
    let key = KeyPair::generate().map_err(rc(format!("the key of {cn}")))?;
    let cert = leaf_params(cn, ou, names.to_vec(), days)?
        .signed_by(&key, issuer)
        .map_err(rc(format!("the certificate of {cn}")))?;
    write(&files.key, &key.serialize_pem(), 0o600)?;
    write(&files.cert, &cert.pem(), 0o644)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hf-certs-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn der(path: &Path) -> Vec<u8> {
        let pem = std::fs::read_to_string(path).unwrap();
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        decode_b64(&b64)
    }

    fn decode_b64(s: &str) -> Vec<u8> {
        let val = |c: u8| -> u32 {
            match c {
                b'A'..=b'Z' => u32::from(c - b'A'),
                b'a'..=b'z' => u32::from(c - b'a') + 26,
                b'0'..=b'9' => u32::from(c - b'0') + 52,
                b'+' => 62,
                _ => 63,
            }
        };
        let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
        let mut out = Vec::new();
        for chunk in bytes.chunks(4) {
            let mut n = 0u32;
            for (i, &c) in chunk.iter().enumerate() {
                n |= val(c) << (18 - 6 * i);
            }
            let b = n.to_be_bytes();
            out.extend_from_slice(&b[1..chunk.len()]);
        }
        out
    }

    fn plan() -> CertPlan {
        CertPlan {
            controllers: vec!["c1".into()],
            hosts: vec!["a".into(), "b".into()],
            operators: vec!["admin".into()],
            units: vec!["edge-1".into()],
            sans: vec![(
                Identity::new(Role::Unit, "edge-1").unwrap(),
                "10.0.0.1".into(),
            )],
            etcd: Vec::new(),
            days: 30,
            new_ca: false,
        }
    }

    #[test]
    fn each_certificate_names_its_role_and_name() {
        let d = tmp("names");
        let r = init(&d, &plan()).unwrap();
        assert!(!r.ca_kept);
        let stems: Vec<String> = r.issued.iter().map(|i| i.identity.file_stem()).collect();
        assert_eq!(
            stems,
            [
                "controller-c1",
                "agent-a",
                "agent-b",
                "operator-admin",
                "unit-edge-1"
            ]
        );
        for i in &r.issued {
            assert_eq!(
                Identity::from_der(&der(&i.files.cert)),
                Ok(i.identity.clone())
            );
            let mode = std::fs::metadata(&i.files.key)
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}", i.files.key.display());
        }
        let unit = &r.issued[4];
        assert_eq!(
            unit.names,
            ["edge-1.unit.holdfast", "unit.holdfast", "10.0.0.1"]
        );
        let mode = std::fs::metadata(&d).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_second_run_keeps_the_ca_unless_asked() {
        let d = tmp("keep");
        init(&d, &plan()).unwrap();
        let ca = std::fs::read(d.join("ca.pem")).unwrap();
        let mut p = plan();
        p.hosts = vec!["c".into()];
        let r = init(&d, &p).unwrap();
        assert!(r.ca_kept);
        assert_eq!(std::fs::read(d.join("ca.pem")).unwrap(), ca);
        assert!(d.join("agent-c.pem").is_file());
        p.new_ca = true;
        assert!(!init(&d, &p).unwrap().ca_kept);
        assert_ne!(std::fs::read(d.join("ca.pem")).unwrap(), ca);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn etcd_members_get_server_certificates_and_root_one() {
        let d = tmp("etcd");
        let p = CertPlan {
            etcd: vec![("c1".into(), "198.19.0.31".into())],
            ..CertPlan::default()
        };
        let r = init(&d, &p).unwrap();
        assert!(r.issued.is_empty());
        let cns: Vec<&str> = r.etcd.iter().map(|e| e.common_name.as_str()).collect();
        assert_eq!(cns, ["etcd:c1", "root"]);
        assert_eq!(
            r.etcd[0].names,
            ["c1.etcd.holdfast", "etcd.holdfast", "198.19.0.31"]
        );
        assert_eq!(r.etcd[1].files.cert, d.join("etcd-root.pem"));
        let root = der(&r.etcd[1].files.cert);
        let (_, cert) = x509_parser::parse_x509_certificate(&root).unwrap();
        let cn = cert.subject().iter_common_name().next().unwrap();
        assert_eq!(cn.as_str().unwrap(), "root");
        let bad = CertPlan {
            etcd: vec![("root".into(), "198.19.0.31".into())],
            ..CertPlan::default()
        };
        assert!(matches!(init(&d, &bad), Err(CertError::EtcdName(_))));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_plans_are_refused() {
        let d = tmp("bad");
        let e = init(&d, &CertPlan::default()).unwrap_err();
        assert!(matches!(e, CertError::Nothing), "{e}");
        let mut p = plan();
        p.hosts.push("a.b".into());
        assert!(matches!(init(&d, &p), Err(CertError::Identity(_))));
        let mut p = plan();
        p.sans = vec![(Identity::new(Role::Unit, "nope").unwrap(), "x".into())];
        assert!(matches!(
            init(&d, &p),
            Err(CertError::SanWithoutIdentity(_))
        ));
        let _ = std::fs::remove_dir_all(&d);
    }
}
