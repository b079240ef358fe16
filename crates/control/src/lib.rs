//! Holdfast's control plane as pure cores (issue 11).
pub mod localize;
pub mod model;
pub mod placement;
pub mod plan;
