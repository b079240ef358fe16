//! holdfast-config's integration tests, one binary: the configuration, BFD and
//! RPKI keys, each a module.

mod bfd;
mod config;
mod rpki;
