//! Placeholder; replaced by the crate owner.
