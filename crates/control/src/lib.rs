//! Holdfast's control plane as pure cores (issue 11).
pub mod model;
pub mod placement;
