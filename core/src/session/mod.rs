//! Venue sessions, engine side. `ouch` is the sans-IO client of a SoupBinTCP/OUCH venue: it
//! turns dispatcher requests into OUCH messages and venue messages into dispatcher outcomes.
//! `link` drives it over the io_uring reactor. The connection state machine with reconnect,
//! reconciliation and ack timeouts is the next step (see the open issues).

pub mod link;
pub mod machine;
pub mod ouch;
/// The executor-loop watchdog lives with the runtime (dispatch and session both use it).
pub use crate::runtime::watchdog;
