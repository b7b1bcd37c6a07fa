//! keel's simulated venue. The exchange: price-time books, OUCH order handling per account with sequenced
//! outbound streams kept for replay, server-side rate limits, duplicate-id rejection, and
//! keel's order-status query. `exchange` and `flow` are sans-IO; `server` serves them over
//! SoupBinTCP on any transport, with a control port for faults, and bounds everything a
//! client can send it (see its module docs). `md_server` is the venue's market-data push server
//! over WebSocket (docs/market-data.md).
//!
//! Around it: `simnet`, an in-memory network (a transport behind keel's seam) for
//! deterministic tests; `demo`, the main job; `bus`, the market-data bus over NATS; and `cmd`,
//! the `keel venue` and `keel gateway` commands. None of it is part of the engine library an
//! embedder links (`keel`): the `keel` binary takes it with its `simulator` feature, and the
//! tests and the benchmarks depend on it.

#![deny(unsafe_code)]

pub mod book;
pub mod bus;
pub mod cmd;
pub mod demo;
pub mod exchange;
pub mod flow;
pub mod md_server;
pub mod rest;
pub mod server;
pub mod simnet;
