//! The simulated exchange: price-time books, OUCH order handling per account with sequenced
//! outbound streams kept for replay, server-side rate limits, duplicate-id rejection, and
//! keel's order-status query. `exchange` and `flow` are sans-IO; `server` serves them over
//! SoupBinTCP on any transport, with a control port for faults, and bounds everything a
//! client can send it (see its module docs).

pub mod book;
pub mod exchange;
pub mod flow;
pub mod server;
