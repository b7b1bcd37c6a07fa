//! FIX's section of a `[[venue]]` table (`protocol = "fix44"`): its keys, read and written
//! back, checked at start; and what FIX allows of the shared login keys.

use super::codec::{Limits, TAGS_CAP};
use crate::config::section::{FileConfigError, Out, Result, Section};
use crate::order::RejectReason;
use crate::session::rejects::{self, RejectTable};

/// How a FIX link reconciles after logon.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FixReconcile {
    /// An OrderMassStatusRequest (AF) for every order; its last ExecutionReport
    /// (LastRptRequested) reconciles (`"mass-status"`).
    #[default]
    MassStatus,
    /// For venues without AF: the venue's replay of what keel missed (ResendRequest), ended by
    /// the Heartbeat answering a TestRequest sent after it; orders in doubt are then queried
    /// one by one with OrderStatusRequest (`"replay"`).
    Replay,
}

impl FixReconcile {
    /// The `reconcile` key's value.
    pub fn name(self) -> &'static str {
        match self {
            Self::MassStatus => "mass-status",
            Self::Replay => "replay",
        }
    }
}

/// The settings of a `[[venue]]` with `protocol = "fix44"` (docs/config.md, "FIX").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixSettings {
    /// keel's CompID (`sender_comp_id`, tag 49 on what keel sends).
    pub sender_comp_id: String,
    /// The venue's CompID (`target_comp_id`, tag 56 on what keel sends).
    pub target_comp_id: String,
    /// Account (tag 1) on every order, if the venue wants one (`account`).
    pub account: String,
    /// Both sequence numbers start again at 1 at every Logon (`reset_on_logon`): nothing is
    /// replayed, so every order in doubt is queried.
    pub reset_on_logon: bool,
    /// How the link reconciles (`reconcile`).
    pub reconcile: FixReconcile,
    /// The codec's bounds (`message_max`, `tags_max`, `field_max`).
    pub limits: Limits,
    /// What the venue's OrdRejReason (103) codes mean (`reject_codes_*`).
    pub rejects: RejectTable,
    /// How far a message's SendingTime (52) may be from keel's clock, seconds
    /// (`sending_time_tolerance_s`, default 120; 0: not checked). Past it the message is
    /// rejected (SessionRejectReason 10) and the session ended: a stale or replayed stream,
    /// or a clock one side cannot trust.
    pub sending_time_tolerance_s: u32,
}

/// The default of `sending_time_tolerance_s`.
pub const SENDING_TIME_TOLERANCE_S: u32 = 120;

impl Default for FixSettings {
    fn default() -> Self {
        Self {
            sender_comp_id: "KEEL".into(),
            target_comp_id: "VENUE".into(),
            account: String::new(),
            reset_on_logon: false,
            reconcile: FixReconcile::MassStatus,
            limits: Limits::default(),
            rejects: keel_table(),
            sending_time_tolerance_s: SENDING_TIME_TOLERANCE_S,
        }
    }
}

impl FixSettings {
    /// A fingerprint of the session's CompIDs (FNV-1a): a journal of another session is
    /// refused at restore.
    pub fn fingerprint(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        let bytes = self
            .sender_comp_id
            .bytes()
            .chain([0])
            .chain(self.target_comp_id.bytes());
        for b in bytes {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        h
    }
}

/// keel's own OrdRejReason table: the standard codes, and 100/101 for the throttle and the
/// system failure keel's simulated venue writes (FIX 4.4 has no code for either; set
/// `reject_codes_*` from your venue's rules of engagement).
pub fn keel_table() -> RejectTable {
    let mut t = RejectTable::EMPTY;
    let codes = [
        (1, RejectReason::Invalid),      // Unknown symbol
        (2, RejectReason::MarketClosed), // Exchange closed
        (3, RejectReason::Invalid),      // Order exceeds limit
        (5, RejectReason::Invalid),      // Unknown order
        (6, RejectReason::DuplicateId),  // Duplicate order
        (11, RejectReason::Invalid),     // Unsupported order characteristic
        (13, RejectReason::Invalid),     // Incorrect quantity
        (100, RejectReason::VenueThrottle),
        (101, RejectReason::VenueSystem),
    ];
    for (code, reason) in codes {
        t.insert(code, reason).expect("keel's FIX table fits");
    }
    t
}

/// A CompID or account: 1 to 32 printable ASCII characters.
fn comp_id(s: &mut Section<'_>, key: &'static str, required: bool) -> Result<String> {
    let value = if required {
        s.required_string(key)?
    } else {
        match s.string(key)? {
            Some(v) => v,
            None => return Ok(String::new()),
        }
    };
    if value.is_empty() || value.len() > 32 || !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(FileConfigError::OutOfRange {
            key: s.key(key),
            value: format!("\"{value}\""),
            allowed: "1 to 32 printable ASCII characters",
        });
    }
    Ok(value.to_string())
}

/// An integer key within `range`.
fn bounded<T>(
    s: &mut Section<'_>,
    key: &'static str,
    field: &mut T,
    range: std::ops::RangeInclusive<i64>,
    allowed: &'static str,
) -> Result<()>
where
    T: TryFrom<i64> + Into<i64> + Copy,
{
    s.int(key, field)?;
    let value: i64 = (*field).into();
    if !range.contains(&value) {
        return Err(FileConfigError::OutOfRange {
            key: s.key(key),
            value: value.to_string(),
            allowed,
        });
    }
    Ok(())
}

/// Reads FIX's keys.
pub fn read(s: &mut Section<'_>) -> Result<FixSettings> {
    let mut settings = FixSettings {
        sender_comp_id: comp_id(s, "sender_comp_id", true)?,
        target_comp_id: comp_id(s, "target_comp_id", true)?,
        account: comp_id(s, "account", false)?,
        ..FixSettings::default()
    };
    s.bool("reset_on_logon", &mut settings.reset_on_logon)?;
    settings.reconcile = match s.string("reconcile")? {
        None | Some("mass-status") => FixReconcile::MassStatus,
        Some("replay") => FixReconcile::Replay,
        Some(other) => {
            return Err(FileConfigError::OutOfRange {
                key: s.key("reconcile"),
                value: format!("\"{other}\""),
                allowed: "\"mass-status\" or \"replay\"",
            })
        }
    };
    let l = &mut settings.limits;
    bounded(
        s,
        "message_max",
        &mut l.message_max,
        256..=65_535,
        "256 to 65535 bytes",
    )?;
    bounded(
        s,
        "tags_max",
        &mut l.tags_max,
        16..=TAGS_CAP as i64,
        "16 to 256 fields",
    )?;
    bounded(
        s,
        "field_max",
        &mut l.field_max,
        16..=4096,
        "16 to 4096 bytes",
    )?;
    let mut tolerance = i64::from(settings.sending_time_tolerance_s);
    bounded(
        s,
        "sending_time_tolerance_s",
        &mut tolerance,
        0..=86_400,
        "0 (not checked) to 86400 seconds",
    )?;
    settings.sending_time_tolerance_s = tolerance as u32;
    settings.rejects = rejects::read_codes(s, keel_table())?;
    Ok(settings)
}

/// FIX carries Username (553) and Password (554) as strings: printable ASCII, 1 to 64.
pub fn check_login(s: &Section<'_>, username: &str, password: &str) -> Result<()> {
    for (key, value) in [("username", username), ("password", password)] {
        if value.is_empty() || value.len() > 64 || !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: format!("\"{value}\""),
                allowed: "1 to 64 printable ASCII characters (FIX Username/Password)",
            });
        }
    }
    Ok(())
}

/// Writes FIX's keys (what `read` reads back to the same settings).
pub fn write(out: &mut Out, settings: &FixSettings) {
    out.string("sender_comp_id", &settings.sender_comp_id);
    out.string("target_comp_id", &settings.target_comp_id);
    if !settings.account.is_empty() {
        out.string("account", &settings.account);
    }
    out.bool("reset_on_logon", settings.reset_on_logon);
    out.string("reconcile", settings.reconcile.name());
    out.int("message_max", settings.limits.message_max);
    out.int("tags_max", settings.limits.tags_max);
    out.int("field_max", settings.limits.field_max);
    out.int(
        "sending_time_tolerance_s",
        settings.sending_time_tolerance_s,
    );
    rejects::write_codes(
        out,
        &settings.rejects,
        &keel_table(),
        "docs/protocol.md, FIX 4.4",
    );
}
