//! keel: a low-latency order execution core.
//!
//! The crate is organised one folder per concern. State machines (`order`, `guard`,
//! `dispatch`) take `now_ns: u64` from their caller and write into caller-owned buffers; they
//! never read a clock, touch a socket or allocate after start-up. Drivers (threads, the io_uring
//! and epoll transports, files) wrap them; `engine` runs them in one loop. This package is the
//! engine library an embedder depends on; the simulated venue, the simulated network and the
//! demo are the `keel-venue` package, the command line is `keel-cli` (docs/architecture.md has
//! the map).

#![deny(unsafe_code)]

pub mod clock;
pub mod config;
pub mod dispatch;
pub mod engine;
pub mod feed;
pub mod guard;
pub mod hash;
pub mod http;
pub mod ipc;
pub mod journal;
pub mod log;
pub mod metrics;
pub mod monitor;
pub mod net;
pub mod order;
pub mod proto;
pub mod ring;
pub mod rng;
pub mod runtime;
mod say;
pub mod session;
pub mod strategy;
pub mod wirelog;
