//! Market data on the engine's side: the feed handler with its local books ([`handler`],
//! [`book`]) and the conflating fan-out to strategies ([`fanout`]). The messages are in
//! [`crate::proto::md`]; the simulated venue's push server is `venue::md_server` (feature
//! `simulator`). docs/market-data.md describes the protocol.

pub mod book;
pub mod fanout;
pub mod handler;
pub mod levels;
