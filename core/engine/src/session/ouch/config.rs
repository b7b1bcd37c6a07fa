//! OUCH's section of a `[[venue]]` table (`protocol = "ouch"`): its keys, read and written
//! back, checked at start; and the limits SoupBinTCP puts on the shared login keys.

use super::{ReconcileMode, RejectTable};
use crate::config::section::{FileConfigError, Out, Result, Section};
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
    let rejects = crate::session::rejects::read_codes(s, RejectTable::keel())?;
    Ok(OuchSettings {
        dialect,
        reconcile,
        rejects,
    })
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
    crate::session::rejects::write_codes(
        out,
        &settings.rejects,
        &RejectTable::keel(),
        "docs/protocol.md",
    );
}
