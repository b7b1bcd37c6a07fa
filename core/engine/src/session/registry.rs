//! The registry of venue protocols: every protocol keel speaks, by name, and the one place a
//! venue link is built from its `[[venue]]` table. Adding a protocol adds one line to the
//! `protocols!` list here (docs/architecture.md, "How to add a venue protocol"); the trait and
//! its shared types are in [`super::protocol`], which knows no protocol.

use std::net::SocketAddr;

use super::link::{LinkConfig, VenueLink};
use super::ouch::{ClientConfig, OuchClient, ReconcileMode, RejectTable};
use super::protocol::{
    ClientStats, Message, ProtocolState, RequestError, ResumeRefused, StateError, VenueProtocol,
};
use crate::order::{NewOrder, Outcome, SymbolName, VenueId, VenueRequest};
use crate::proto::{DecodeError, EncodeError};
use crate::ring::VenueHandle;

/// A venue link as the engine builds it: over any registered protocol.
pub type EngineLink = VenueLink<AnyProtocol>;

/// The settings of the protocol a `[[venue]]` speaks (`protocol = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolConfig {
    /// OUCH 5.0 over SoupBinTCP 4.0 (`protocol = "ouch"`, the default).
    Ouch {
        /// Wire layout.
        dialect: crate::proto::ouch::Dialect,
        /// How reconciliation is done.
        reconcile: ReconcileMode,
        /// What the venue's reject codes mean.
        rejects: RejectTable,
    },
}

impl ProtocolConfig {
    /// The `protocol` key's value.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ouch { .. } => "ouch",
        }
    }
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self::Ouch {
            dialect: crate::proto::ouch::Dialect::SPEC,
            reconcile: ReconcileMode::default(),
            rejects: RejectTable::keel(),
        }
    }
}

/// One venue link as configured (a `[[venue]]` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VenueLinkConfig {
    /// Name used in logs and reports.
    pub name: String,
    /// Order-entry address.
    pub address: SocketAddr,
    /// Login username.
    pub username: String,
    /// Login password.
    pub password: String,
    /// The protocol spoken and its settings.
    pub protocol: ProtocolConfig,
    /// A request unanswered this long makes its order Unknown.
    pub ack_timeout_ns: u64,
    /// Orders whose wire reference the session keeps.
    pub orders_max: u32,
    /// Session timing, backoff and limits.
    pub link: LinkConfig,
}

/// Declares [`AnyProtocol`] and its [`VenueProtocol`] implementation from one list of
/// `Variant(Client)`: adding a protocol adds one line here.
macro_rules! protocols {
    ($($variant:ident($client:ty)),+ $(,)?) => {
        /// Every registered protocol's name and the tag its persisted state carries
        /// (`ProtocolState::protocol`; each client declares its `STATE_TAG`, never reused).
        pub const STATE_TAGS: &[(&str, u8)] = &[$((stringify!($variant), <$client>::STATE_TAG)),+];

        /// A journaled protocol state as text (`keel journal dump`): the protocol that wrote it
        /// reads it, or the tag is named as unknown.
        pub fn describe_state(state: &ProtocolState) -> String {
            $(
                if state.protocol == <$client>::STATE_TAG {
                    return <$client>::describe_state(state);
                }
            )+
            format!("unknown protocol tag {} (version {}, {} bytes)", state.protocol, state.version, state.bytes().len())
        }

        /// Every protocol keel speaks: what the engine's links are generic over.
        #[derive(Debug)]
        pub enum AnyProtocol {
            $(
                #[doc = concat!("A [`", stringify!($client), "`].")]
                $variant($client),
            )+
        }

        impl VenueProtocol for AnyProtocol {
            fn encode_login(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
                match self { $(Self::$variant(p) => p.encode_login(out),)+ }
            }
            fn encode_heartbeat(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
                match self { $(Self::$variant(p) => p.encode_heartbeat(out),)+ }
            }
            fn encode_reconcile_query(&mut self, out: &mut [u8]) -> Result<usize, EncodeError> {
                match self { $(Self::$variant(p) => p.encode_reconcile_query(out),)+ }
            }
            fn encode_request(
                &mut self,
                request: &VenueRequest,
                out: &mut [u8],
            ) -> Result<usize, RequestError> {
                match self { $(Self::$variant(p) => p.encode_request(request, out),)+ }
            }
            fn decode(
                &mut self,
                now_ns: u64,
                received: &[u8],
                max_len: u16,
                emit: &mut impl FnMut(Outcome),
            ) -> Result<Option<Message>, DecodeError> {
                match self { $(Self::$variant(p) => p.decode(now_ns, received, max_len, emit),)+ }
            }
            fn expire(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) {
                match self { $(Self::$variant(p) => p.expire(now_ns, emit),)+ }
            }
            fn mark_in_flight_unknown(
                &mut self,
                now_ns: u64,
                emit: &mut impl FnMut(Outcome),
            ) -> u64 {
                match self { $(Self::$variant(p) => p.mark_in_flight_unknown(now_ns, emit),)+ }
            }
            fn clear_contradictions(&mut self, now_ns: u64, emit: &mut impl FnMut(Outcome)) -> u32 {
                match self { $(Self::$variant(p) => p.clear_contradictions(now_ns, emit),)+ }
            }
            fn resume_after(&mut self, seq: u64) {
                match self { $(Self::$variant(p) => p.resume_after(seq),)+ }
            }
            fn restore_state(&mut self, state: &ProtocolState) -> Result<(), StateError> {
                match self { $(Self::$variant(p) => p.restore_state(state),)+ }
            }
            fn refused_resume(&self) -> Option<ResumeRefused> {
                match self { $(Self::$variant(p) => p.refused_resume(),)+ }
            }
            fn restore_order(
                &mut self,
                order: &NewOrder,
                wire_ref: u32,
                executed: u32,
                accepted: bool,
            ) -> Result<(), RequestError> {
                match self {
                    $(Self::$variant(p) => p.restore_order(order, wire_ref, executed, accepted),)+
                }
            }
            fn restore_position(
                &mut self,
                symbol: crate::order::SymbolId,
                position: crate::order::Position,
            ) -> Result<(), RequestError> {
                match self { $(Self::$variant(p) => p.restore_position(symbol, position),)+ }
            }
            fn applied_through(&self) -> u64 {
                match self { $(Self::$variant(p) => p.applied_through(),)+ }
            }
            fn stats(&self) -> ClientStats {
                match self { $(Self::$variant(p) => p.stats(),)+ }
            }
        }
    };
}

protocols! {
    Ouch(OuchClient),
}

impl AnyProtocol {
    /// The OUCH client, if this link speaks OUCH (its UserRefNum mapping, for tests and the
    /// demo's checks against the simulated venue).
    pub fn as_ouch(&self) -> Option<&OuchClient> {
        match self {
            Self::Ouch(c) => Some(c),
        }
    }
}

/// The one place a venue link is built from its configuration: every caller (the engine, the
/// demo, the tests, the benchmarks) uses it. `symbols` are the engine's, in `SymbolId` order.
pub fn build_link(
    config: &VenueLinkConfig,
    venue: VenueId,
    symbols: &[SymbolName],
    handle: VenueHandle,
) -> VenueLink<AnyProtocol> {
    let protocol = match config.protocol {
        ProtocolConfig::Ouch {
            dialect,
            reconcile,
            rejects,
        } => AnyProtocol::Ouch(OuchClient::new(
            ClientConfig {
                username: config.username.clone(),
                password: config.password.clone(),
                dialect,
                orders_max: config.orders_max,
                symbols: symbols.to_vec(),
                reconcile,
                rejects,
                ack_timeout_ns: config.ack_timeout_ns,
            },
            venue,
        )),
    };
    VenueLink::with_config(config.address, venue, protocol, handle, config.link)
}

/// Bytes the link's protocol state needs for `config` (counted in the engine's memory need).
pub fn protocol_memory_bytes(config: &VenueLinkConfig) -> u64 {
    match config.protocol {
        ProtocolConfig::Ouch { .. } => OuchClient::memory_bytes(config.orders_max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a journal's protocol state is never read by the wrong protocol: every registered
    // protocol has its own tag, and 0 is never one (a zeroed record names no protocol).
    #[test]
    fn protocol_state_tags_are_distinct_and_not_zero() {
        for (i, (name, tag)) in STATE_TAGS.iter().enumerate() {
            assert_ne!(*tag, 0, "{name}");
            for (other, t) in &STATE_TAGS[i + 1..] {
                assert_ne!(tag, t, "{name} and {other} share a state tag");
            }
        }
    }
}
