//! holdfast-rib's integration tests, one binary: the decision process, the
//! engine, the FIB hand-over and RPKI validation, each a module; their helpers
//! in `common`.

mod common;
mod decision;
mod engine;
mod fib;
mod rpki;
