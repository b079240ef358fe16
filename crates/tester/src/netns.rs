//! Running tester code inside a network namespace created by the lab: the
//! one helper, [`holdfast_linux::netns::in_netns`].

pub use holdfast_linux::netns::in_netns;
