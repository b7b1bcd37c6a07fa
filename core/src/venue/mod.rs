//! The simulated exchange: price-time books, OUCH order handling per account with sequenced
//! outbound streams kept for replay, server-side rate limits, duplicate-id rejection, and
//! keel's order-status query. `exchange` and `flow` are sans-IO; `server` serves them over
//! SoupBinTCP on any transport, with a control port for faults, and bounds everything a
//! client can send it (see its module docs). `md_server` is the venue's market-data push server
//! over WebSocket (docs/market-data.md).
//!
//! The simulator is not part of the library an embedder links: it is built with the
//! `simulator` cargo feature, which the `keel` binary, the tests and the benchmarks turn on.

pub mod book;
pub mod bus;
pub mod exchange;
pub mod flow;
pub mod md_server;
pub mod rest;
pub mod server;
