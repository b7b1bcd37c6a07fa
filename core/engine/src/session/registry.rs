//! The registry of venue protocols: every protocol keel speaks, by name, and the one place a
//! venue link is built from its `[[venue]]` table. Adding a protocol adds one line to the
//! `protocols!` list here (docs/architecture.md, "How to add a venue protocol"); the trait and
//! its shared types are in [`super::protocol`], which knows no protocol.

use std::net::SocketAddr;

use super::link::{LinkConfig, VenueLink};
use super::ouch::OuchClient;
use super::protocol::{
    ClientStats, LinkSetup, Message, ProtocolState, ProtocolStats, RegisteredProtocol,
    RequestError, ResumeRefused, StateError, VenueProtocol,
};
use crate::config::section::{FileConfigError, Out, Section};
use crate::order::{NewOrder, Outcome, SymbolName, VenueId, VenueRequest};
use crate::proto::{DecodeError, EncodeError};
use crate::ring::VenueHandle;

/// A venue link as the engine builds it: over any registered protocol.
pub type EngineLink = VenueLink<AnyProtocol>;

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
    ($($name:literal => $variant:ident($client:ty)),+ $(,)?) => {
        /// The settings of the protocol a `[[venue]]` speaks (`protocol = "..."`): the
        /// protocol's own, one variant per registered protocol.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum ProtocolConfig {
            $(
                #[doc = concat!("`protocol = \"", $name, "\"`.")]
                $variant(<$client as RegisteredProtocol>::Settings),
            )+
        }

        impl ProtocolConfig {
            /// The `protocol` key's value.
            pub fn name(&self) -> &'static str {
                match self { $(Self::$variant(_) => $name,)+ }
            }
        }

        /// Every registered protocol's `protocol` name.
        pub const PROTOCOL_NAMES: &[&str] = &[$($name),+];

        /// Reads the protocol's own keys of a `[[venue]]` table (`name`: the `protocol` key;
        /// absent, the default protocol) and checks the shared login keys against its wire.
        pub fn read_protocol(
            name: Option<&str>,
            s: &mut Section<'_>,
            username: &str,
            password: &str,
        ) -> Result<ProtocolConfig, FileConfigError> {
            let config = match name.unwrap_or(ProtocolConfig::default().name()) {
                $($name => ProtocolConfig::$variant(<$client as RegisteredProtocol>::read_settings(s)?),)+
                other => {
                    return Err(FileConfigError::OutOfRange {
                        key: s.key("protocol"),
                        value: format!("\"{other}\""),
                        allowed: concat!("one of:", $(" \"", $name, "\""),+),
                    })
                }
            };
            match &config {
                $(ProtocolConfig::$variant(_) => <$client as RegisteredProtocol>::check_login(s, username, password)?,)+
            }
            Ok(config)
        }

        /// Writes the protocol's own keys (what `read_protocol` reads back).
        pub fn write_protocol(out: &mut Out, config: &ProtocolConfig) {
            match config {
                $(ProtocolConfig::$variant(settings) => <$client as RegisteredProtocol>::write_settings(out, settings),)+
            }
        }

        /// The one place a venue link is built from its configuration: every caller (the
        /// engine, the demo, the tests, the benchmarks) uses it. `symbols` are the engine's,
        /// in `SymbolId` order.
        pub fn build_link(
            config: &VenueLinkConfig,
            venue: VenueId,
            symbols: &[SymbolName],
            handle: VenueHandle,
            unix_ns_at_origin: u64,
        ) -> EngineLink {
            let setup = LinkSetup {
                venue,
                username: &config.username,
                password: &config.password,
                orders_max: config.orders_max,
                ack_timeout_ns: config.ack_timeout_ns,
                symbols,
                heartbeat_interval_ns: config.link.heartbeat_interval_ns,
                unix_ns_at_origin,
            };
            let protocol = match &config.protocol {
                $(ProtocolConfig::$variant(settings) => {
                    AnyProtocol::$variant(<$client as RegisteredProtocol>::build(settings, &setup))
                })+
            };
            VenueLink::with_config(config.address, venue, protocol, handle, config.link)
        }

        /// Bytes the link's protocol state needs for `config` (counted in the engine's memory
        /// need).
        pub fn protocol_memory_bytes(config: &VenueLinkConfig) -> u64 {
            match &config.protocol {
                $(ProtocolConfig::$variant(settings) => {
                    <$client as RegisteredProtocol>::memory_bytes(settings, config.orders_max)
                })+
            }
        }

        /// Every registered protocol's name and the tag its persisted state carries.
        pub const STATE_TAGS: &[(&str, u8)] = &[$(($name, <$client as RegisteredProtocol>::STATE_TAG)),+];

        /// A journaled protocol state as text (`keel journal dump`): the protocol that wrote it
        /// reads it, or the tag is named as unknown.
        pub fn describe_state(state: &ProtocolState) -> String {
            $(
                if state.protocol == <$client as RegisteredProtocol>::STATE_TAG {
                    return <$client as RegisteredProtocol>::describe_state(state);
                }
            )+
            format!(
                "unknown protocol tag {} (version {}, {} bytes)",
                state.protocol,
                state.version,
                state.bytes().len()
            )
        }

        /// Every protocol keel speaks: what the engine's links are generic over. Each link
        /// holds one, built once and never moved on the hot path: a variant's size costs
        /// nothing a box would save, and a box would cost an indirection on every message.
        #[derive(Debug)]
        #[allow(clippy::large_enum_variant)]
        pub enum AnyProtocol {
            $(
                #[doc = concat!("A [`", stringify!($client), "`].")]
                $variant($client),
            )+
        }

        /// The counters of whichever protocol a link speaks.
        #[derive(Debug, Clone, Copy)]
        pub enum AnyStats {
            $(
                #[doc = concat!("Those of a [`", stringify!($client), "`].")]
                $variant(<$client as VenueProtocol>::Stats),
            )+
        }

        impl ProtocolStats for AnyStats {
            fn protocol(&self) -> &'static str {
                match self { $(Self::$variant(s) => s.protocol(),)+ }
            }
            fn each(&self, f: &mut dyn FnMut(&'static str, u64)) {
                match self { $(Self::$variant(s) => s.each(f),)+ }
            }
        }

        impl VenueProtocol for AnyProtocol {
            type Stats = AnyStats;
            fn protocol_stats(&self) -> AnyStats {
                match self { $(Self::$variant(p) => AnyStats::$variant(p.protocol_stats()),)+ }
            }
            fn encode_login(&mut self, now_ns: u64, out: &mut [u8]) -> Result<usize, EncodeError> {
                match self { $(Self::$variant(p) => VenueProtocol::encode_login(p, now_ns, out),)+ }
            }
            fn encode_heartbeat(
                &mut self,
                now_ns: u64,
                out: &mut [u8],
            ) -> Result<usize, EncodeError> {
                match self { $(Self::$variant(p) => VenueProtocol::encode_heartbeat(p, now_ns, out),)+ }
            }
            fn encode_reconcile_query(
                &mut self,
                now_ns: u64,
                out: &mut [u8],
            ) -> Result<usize, EncodeError> {
                match self { $(Self::$variant(p) => VenueProtocol::encode_reconcile_query(p, now_ns, out),)+ }
            }
            fn encode_session(&mut self, now_ns: u64, out: &mut [u8]) -> Option<usize> {
                match self { $(Self::$variant(p) => VenueProtocol::encode_session(p, now_ns, out),)+ }
            }
            fn begin_logout(&mut self) -> bool {
                match self { $(Self::$variant(p) => VenueProtocol::begin_logout(p),)+ }
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
    "ouch" => Ouch(OuchClient),
    "fix44" => Fix44(super::fix::FixClient),
}

/// The protocol a `[[venue]]` without a `protocol` key speaks.
impl Default for ProtocolConfig {
    fn default() -> Self {
        Self::Ouch(Default::default())
    }
}

impl AnyProtocol {
    /// The OUCH client, if this link speaks OUCH (its UserRefNum mapping, for tests and the
    /// demo's checks against the simulated venue).
    pub fn as_ouch(&self) -> Option<&OuchClient> {
        // The other arms come with the other protocols.
        #[allow(unreachable_patterns)]
        match self {
            Self::Ouch(c) => Some(c),
            _ => None,
        }
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
