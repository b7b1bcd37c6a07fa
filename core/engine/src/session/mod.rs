//! Venue sessions, engine side. [`link`] is the venue link every protocol shares: the
//! connection state machine ([`machine`]) with reconnect and backoff, the reconciliation gate,
//! heartbeats, read-only on a contradiction, and "a timeout means unknown: query, never
//! resend". [`protocol`] is the seam to the protocol a venue speaks ([`protocol::VenueProtocol`],
//! [`protocol::build_link`]); [`ouch`] is the sans-IO OUCH 5.0 / SoupBinTCP client behind it.

pub mod fix;
pub mod link;
pub mod machine;
pub mod ouch;
pub mod protocol;
pub mod registry;
pub mod rejects;

pub use protocol::VenueProtocol;
pub use registry::{build_link, AnyProtocol, EngineLink, ProtocolConfig, VenueLinkConfig};
