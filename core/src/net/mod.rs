//! Networking drivers. `uring` is keel's TCP transport over io_uring: one ring per event-loop
//! thread, connection slots and registered buffers allocated at start, no allocation per
//! message. There is no epoll fallback: when io_uring is unavailable, [`uring::Reactor::new`]
//! fails with [`NetError::Unavailable`] naming the cause (see docs/operations.md).

pub mod uring;

pub use uring::{
    CloseReason, ConnId, ListenerId, NetError, NetEvent, Reactor, ReactorConfig, WaitMode,
};
