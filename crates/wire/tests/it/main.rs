//! Integration tests, one binary: fixtures, RFC 7606, round trips, the
//! differential oracle and the 1M-prefix sanity run.

mod common;
mod fixtures;
mod oracle;
mod perf;
mod rfc7606;
mod roundtrip;
