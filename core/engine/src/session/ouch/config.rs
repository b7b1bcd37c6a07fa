//! OUCH's section of a `[[venue]]` table (`protocol = "ouch"`): its keys, read and written
//! back, checked at start; and the limits SoupBinTCP puts on the shared login keys.

use toml::Value;

use super::{ReconcileMode, RejectTable, RejectTableError};
use crate::config::section::{FileConfigError, Out, Result, Section};
use crate::order::RejectReason;
use crate::proto::ouch::Dialect;
use crate::proto::soupbin::{PASSWORD_LEN, USERNAME_LEN};

/// The settings of a `[[venue]]` with `protocol = "ouch"` (docs/config.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OuchSettings {
    /// Wire layout (`dialect`).
    pub dialect: Dialect,
    /// How reconciliation is done (`reconcile`).
    pub reconcile: ReconcileMode,
    /// What the venue's reject codes mean (`reject_codes_*`).
    pub rejects: RejectTable,
}

impl Default for OuchSettings {
    fn default() -> Self {
        Self {
            dialect: Dialect::SPEC,
            reconcile: ReconcileMode::default(),
            rejects: RejectTable::keel(),
        }
    }
}

/// The reject-code keys, each with the meaning its codes get.
const REJECT_CLASSES: [(&str, RejectReason); 5] = [
    ("reject_codes_throttled", RejectReason::VenueThrottle),
    ("reject_codes_system", RejectReason::VenueSystem),
    ("reject_codes_duplicate_id", RejectReason::DuplicateId),
    ("reject_codes_invalid", RejectReason::Invalid),
    ("reject_codes_market_closed", RejectReason::MarketClosed),
];

/// Reads OUCH's keys.
pub fn read(s: &mut Section<'_>) -> Result<OuchSettings> {
    let dialect = match s.string("dialect")? {
        None | Some("spec") => Dialect::SPEC,
        Some("ouch-connect") => Dialect::OUCH_CONNECT,
        Some(other) => {
            return Err(FileConfigError::OutOfRange {
                key: s.key("dialect"),
                value: format!("\"{other}\""),
                allowed: "\"spec\" or \"ouch-connect\"",
            })
        }
    };
    let reconcile = match s.string("reconcile")? {
        None | Some("keel-extension") => ReconcileMode::KeelExtension,
        Some("account-query") => ReconcileMode::AccountQueryBarrier,
        Some(other) => {
            return Err(FileConfigError::OutOfRange {
                key: s.key("reconcile"),
                value: format!("\"{other}\""),
                allowed: "\"keel-extension\" or \"account-query\"",
            })
        }
    };
    let rejects = read_reject_codes(s)?;
    Ok(OuchSettings {
        dialect,
        reconcile,
        rejects,
    })
}

/// The venue's reject codes by meaning (`reject_codes_throttled = [..]`, ...). Absent: keel's
/// own table. Any present: exactly the codes listed (the venue's table replaces keel's).
fn read_reject_codes(s: &mut Section<'_>) -> Result<RejectTable> {
    let mut table = RejectTable::EMPTY;
    let mut any = false;
    for (key, reason) in REJECT_CLASSES {
        let present = s.table.contains_key(key);
        for value in s.array(key)? {
            let code = match value {
                Value::Integer(i) => {
                    u16::try_from(*i).map_err(|_| FileConfigError::OutOfRange {
                        key: s.key(key),
                        value: i.to_string(),
                        allowed: "codes 0..=65535",
                    })?
                }
                other => return Err(s.wrong(key, other, "an array of reject codes (integers)")),
            };
            table
                .insert(code, reason)
                .map_err(|e| FileConfigError::OutOfRange {
                    key: s.key(key),
                    value: code.to_string(),
                    allowed: match e {
                        RejectTableError::Full => "at most 64 reject codes in all",
                        RejectTableError::Duplicate { .. } => "each code in one class only",
                    },
                })?;
        }
        any |= present;
    }
    Ok(if any { table } else { RejectTable::keel() })
}

/// SoupBinTCP's login fields are fixed width: a longer value would be cut on the wire, and two
/// venues configured as "trader01" and "trader02" would log in as the same account.
pub fn check_login(s: &Section<'_>, username: &str, password: &str) -> Result<()> {
    let fields = [
        (
            "username",
            username,
            USERNAME_LEN,
            "1 to 6 printable ASCII characters (SoupBinTCP)",
        ),
        (
            "password",
            password,
            PASSWORD_LEN,
            "1 to 10 printable ASCII characters (SoupBinTCP)",
        ),
    ];
    for (key, value, width, allowed) in fields {
        let printable = value.bytes().all(|b| b.is_ascii_graphic());
        if value.is_empty() || value.len() > width || !printable {
            return Err(FileConfigError::OutOfRange {
                key: s.key(key),
                value: format!("\"{value}\""),
                allowed,
            });
        }
    }
    Ok(())
}

/// Writes OUCH's keys (what `read` reads back to the same settings).
pub fn write(out: &mut Out, settings: &OuchSettings) {
    match settings.dialect.name() {
        Some(name) => out.string("dialect", name),
        None => out.comment("dialect: built in code, not one the file can name"),
    }
    out.string("reconcile", settings.reconcile.name());
    if settings.rejects == RejectTable::keel() {
        out.comment(
            "reject codes: keel's own table (docs/protocol.md); set reject_codes_* from your \
             venue's specification",
        );
        return;
    }
    // Every class, empty ones too: any key present replaces keel's table, so an empty table
    // must still be written as one.
    for (key, reason) in REJECT_CLASSES {
        let codes: Vec<Value> = settings
            .rejects
            .entries()
            .iter()
            .filter(|(_, r)| *r == reason)
            .map(|(code, _)| Value::Integer(i64::from(*code)))
            .collect();
        out.line(format_args!("{key} = {}", Value::Array(codes)));
    }
}
