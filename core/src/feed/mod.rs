//! Market data: the venue's WebSocket push server ([`server`]), the message formats
//! ([`msg`]), the engine's feed handler with its local books ([`handler`], [`book`]) and the
//! conflating fan-out to strategies ([`fanout`]). docs/market-data.md describes the protocol.

pub mod book;
pub mod fanout;
pub mod handler;
pub mod levels;
pub mod msg;
pub mod server;
