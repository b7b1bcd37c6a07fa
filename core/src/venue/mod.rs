//! The simulated exchange: price-time books, OUCH order handling per account with sequenced
//! outbound streams kept for replay, server-side rate limits, duplicate-id rejection, and
//! keel's order-status query. `exchange` is sans-IO; the network side that serves it over
//! SoupBinTCP arrives with the transport.

pub mod book;
pub mod exchange;
pub mod flow;
pub mod server;
