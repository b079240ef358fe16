//! holdfast-linux's integration tests, one binary (root: each test enters
//! network namespaces of its own): the ACK gate, addresses, announcements, TCP
//! repair and sockets, each a module; the namespaces in `netns`.

mod ack_gate;
mod address;
mod announce;
mod netns;
mod repair;
mod sockets;
