//! Recorded peer inputs (`holdfastd --record DIR`) and their replay
//! (`holdfast replay FILE`).
//!
//! A recording is one file per neighbour, `DIR/<instance>_<address>.jsonl`,
//! of JSON lines. The first line is a [`Header`] with the schema version and
//! the neighbour's [`PeerParams`]; every other line is an [`Entry`]: the
//! time, one [`PeerInput`] exactly as it reached the core, and the
//! [`PeerOutput`]s the core answered. [`replay`] feeds the inputs through a
//! fresh [`PeerCore`] and reports the first output that differs, so a
//! session seen in production can be re-run, bisected and turned into a
//! test. The schema version is checked: a recording made by another schema
//! is refused rather than misread.
//!
//! Recording is off by default and then costs one branch per input.
//!
//! # Known issues
//! - The file grows without bound (every UPDATE body received and every
//!   RIB output sent is written twice, as input and as output, in hex: a
//!   session's whole Adj-RIB-Out at its start); record for a diagnosis,
//!   not permanently.
//! - A recording made by an earlier schema (1: before the RIB's bytes and
//!   the ROUTE-REFRESH queue were inputs) is refused, not converted.
//! - A peer task that ends with the process killed loses what was not
//!   flushed yet (flushes happen after every read and every other input).

use crate::core::{PeerCore, PeerInput, PeerOutput, PeerParams};
use holdfast_fsm::Time;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Version of the recording format; bumped on any change to the
/// serialized inputs or outputs. 2: the RIB's output bytes in
/// `RibSend`/`WriteRib`, the ROUTE-REFRESH queue (`RibRefreshed`,
/// `RefreshPending`, `Resume`'s `refresh`).
pub const RECORD_SCHEMA: u32 = 2;

/// First line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub schema: u32,
    pub instance: String,
    pub peer: IpAddr,
    pub params: PeerParams,
}

/// One recorded input with the outputs it produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Time since the daemon started, in nanoseconds.
    pub t_ns: u64,
    pub input: PeerInput,
    pub outputs: Vec<PeerOutput>,
}

/// Errors of recording and replay.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {source}")]
    Parse {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("{path}: recording schema {found}, this build reads schema {RECORD_SCHEMA}")]
    Schema { path: PathBuf, found: u32 },
    #[error("{path}: empty recording")]
    Empty { path: PathBuf },
}

/// Writes one neighbour's recording.
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<File>,
    failed: bool,
}

/// The file a neighbour's inputs are recorded in.
pub fn record_path(dir: &Path, instance: &str, peer: IpAddr) -> PathBuf {
    let peer = peer.to_string().replace(':', "-");
    dir.join(format!("{instance}_{peer}.jsonl"))
}

impl Recorder {
    /// Creates (truncates) the neighbour's file in `dir` and writes the header.
    pub fn create(
        dir: &Path,
        instance: &str,
        peer: IpAddr,
        params: &PeerParams,
    ) -> Result<Recorder, RecordError> {
        let path = record_path(dir, instance, peer);
        let io = |source| RecordError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = File::create(&path).map_err(io)?;
        let mut rec = Recorder {
            out: BufWriter::new(file),
            path: path.clone(),
            failed: false,
        };
        let header = Header {
            schema: RECORD_SCHEMA,
            instance: instance.to_string(),
            peer,
            params: params.clone(),
        };
        let line = serde_json::to_string(&header).map_err(|e| RecordError::Parse {
            path: path.clone(),
            line: 1,
            source: e,
        })?;
        writeln!(rec.out, "{line}").map_err(io)?;
        rec.out.flush().map_err(io)?;
        Ok(rec)
    }

    /// The start of an entry: the input, serialized before the core
    /// consumes it.
    pub fn input_line(&self, t: Time, input: &PeerInput) -> String {
        let t_ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
        let input = serde_json::to_string(input).unwrap_or_default();
        format!("{{\"t_ns\":{t_ns},\"input\":{input},\"outputs\":")
    }

    /// Completes the entry begun by [`Recorder::input_line`].
    pub fn write(&mut self, line: String, outputs: &[PeerOutput]) {
        if self.failed {
            return;
        }
        let outputs = serde_json::to_string(outputs).unwrap_or_default();
        if let Err(e) = writeln!(self.out, "{line}{outputs}}}") {
            self.fail(e);
        }
    }

    /// Flushes what was written so far.
    pub fn flush(&mut self) {
        if !self.failed {
            if let Err(e) = self.out.flush() {
                self.fail(e);
            }
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        tracing::error!(path = %self.path.display(), error = %e, "recording stopped");
        self.failed = true;
    }
}

/// The first output that differs in a replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// Line of the recording (1 is the header).
    pub line: usize,
    pub input: PeerInput,
    pub recorded: Vec<PeerOutput>,
    pub replayed: Vec<PeerOutput>,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayReport {
    pub path: PathBuf,
    pub instance: String,
    pub peer: IpAddr,
    /// Inputs fed through the core.
    pub inputs: usize,
    /// Outputs compared.
    pub outputs: usize,
    /// `None`: every output was identical.
    pub divergence: Option<Divergence>,
}

/// Feeds a recording through a fresh [`PeerCore`] and compares every
/// output with the recorded one, stopping at the first difference.
pub fn replay(path: &Path) -> Result<ReplayReport, RecordError> {
    let io = |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    };
    let parse = |line: usize, source| RecordError::Parse {
        path: path.to_path_buf(),
        line,
        source,
    };
    let mut lines = BufReader::new(File::open(path).map_err(io)?).lines();
    let first = lines.next().ok_or_else(|| RecordError::Empty {
        path: path.to_path_buf(),
    })?;
    let first = first.map_err(io)?;
    let schema = serde_json::from_str::<serde_json::Value>(&first)
        .map_err(|e| parse(1, e))?
        .get("schema")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    if schema != u64::from(RECORD_SCHEMA) {
        return Err(RecordError::Schema {
            path: path.to_path_buf(),
            found: u32::try_from(schema).unwrap_or(u32::MAX),
        });
    }
    let header: Header = serde_json::from_str(&first).map_err(|e| parse(1, e))?;
    let mut core = PeerCore::new(header.params);
    let mut report = ReplayReport {
        path: path.to_path_buf(),
        instance: header.instance,
        peer: header.peer,
        inputs: 0,
        outputs: 0,
        divergence: None,
    };
    for (i, line) in lines.enumerate() {
        let line = line.map_err(io)?;
        if line.is_empty() {
            continue;
        }
        let entry: Entry = serde_json::from_str(&line).map_err(|e| parse(i + 2, e))?;
        let replayed = core.handle(Duration::from_nanos(entry.t_ns), entry.input.clone());
        report.inputs += 1;
        if replayed != entry.outputs {
            report.divergence = Some(Divergence {
                line: i + 2,
                input: entry.input,
                recorded: entry.outputs,
                replayed,
            });
            break;
        }
        report.outputs += replayed.len();
    }
    Ok(report)
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
