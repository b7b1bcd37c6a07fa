//! Wire codecs, sans-IO: SoupBinTCP 4.0 framing and session packets, and OUCH 5.0 order
//! entry messages (with keel's documented extension for order-status queries), WebSocket
//! framing, and the market-data messages (`md`) that the feed handler and the simulated
//! venue's push server both speak.
//!
//! Decoders borrow from the caller's byte slice and never copy or allocate; encoders write into
//! a caller-provided buffer and report how many bytes they wrote. Malformed input is a typed
//! [`DecodeError`] naming the offending field and value; a decoder never panics and never
//! returns a half-built message. docs/protocol.md lists every message and field.

pub mod md;
pub mod ouch;
pub mod soupbin;
mod wire;
pub mod ws;

pub use wire::{DecodeError, EncodeError};
