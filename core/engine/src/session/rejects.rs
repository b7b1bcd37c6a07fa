//! What a venue's reject codes mean, for every protocol: the table, and its keys in a
//! `[[venue]]` table (`reject_codes_throttled`, `reject_codes_system`, ...: docs/config.md).

use toml::Value;

use crate::config::section::{FileConfigError, Out, Result, Section};
use crate::order::RejectReason;

/// Reject codes a venue's table may list (a real venue's table is a few dozen at most).
pub const REJECT_CODES_MAX: usize = 64;

/// What a venue's reject codes mean: OUCH and FIX leave the codes' meaning to each venue, and
/// what the engine does with a reject depends on it (a throttle cools the rate limiter down, a
/// system failure counts against the breaker, a duplicate id is a bug to report). Each
/// protocol has a default table (the codes keel's simulated venue writes); a `[[venue]]` names
/// its venue's codes instead (docs/config.md). A code the table does not list is
/// `RejectReason::Other(code)` (codes above 255 are carried as 255).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RejectTable {
    entries: [(u16, RejectReason); REJECT_CODES_MAX],
    len: usize,
}

/// The table cannot take another code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RejectTableError {
    /// More codes than [`REJECT_CODES_MAX`].
    #[error("more than {REJECT_CODES_MAX} reject codes")]
    Full,
    /// The code already has a meaning.
    #[error("reject code {code} listed twice")]
    Duplicate {
        /// The code.
        code: u16,
    },
}

impl RejectTable {
    /// A table that lists nothing (every code is `Other`).
    pub const EMPTY: Self = Self {
        entries: [(0, RejectReason::Other(0)); REJECT_CODES_MAX],
        len: 0,
    };

    /// Gives `code` its meaning.
    pub fn insert(
        &mut self,
        code: u16,
        reason: RejectReason,
    ) -> std::result::Result<(), RejectTableError> {
        if self.entries[..self.len].iter().any(|(c, _)| *c == code) {
            return Err(RejectTableError::Duplicate { code });
        }
        let slot = self
            .entries
            .get_mut(self.len)
            .ok_or(RejectTableError::Full)?;
        *slot = (code, reason);
        self.len += 1;
        Ok(())
    }

    /// The codes listed, with their meanings.
    pub fn entries(&self) -> &[(u16, RejectReason)] {
        &self.entries[..self.len]
    }

    /// What `code` means.
    pub fn reason(&self, code: u16) -> RejectReason {
        self.entries[..self.len]
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(RejectReason::Other(code.min(255) as u8), |(_, r)| *r)
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

/// The venue's reject codes by meaning (`reject_codes_throttled = [..]`, ...). Absent: the
/// protocol's `default`. Any present: exactly the codes listed (the venue's table replaces keel's).
pub fn read_codes(s: &mut Section<'_>, default: RejectTable) -> Result<RejectTable> {
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
    Ok(if any { table } else { default })
}

/// Writes the reject-code keys (what [`read_codes`] reads back to `table`); the protocol's
/// `default` table is written as a comment naming where its codes are listed.
pub fn write_codes(out: &mut Out, table: &RejectTable, default: &RejectTable, doc: &str) {
    if table == default {
        out.line(format_args!(
            "# reject codes: keel's own table ({doc}); set reject_codes_* from your venue's \
             specification"
        ));
        return;
    }
    // Every class, empty ones too: any key present replaces keel's table, so an empty table
    // must still be written as one.
    for (key, reason) in REJECT_CLASSES {
        let codes: Vec<Value> = table
            .entries()
            .iter()
            .filter(|(_, r)| *r == reason)
            .map(|(code, _)| Value::Integer(i64::from(*code)))
            .collect();
        out.line(format_args!("{key} = {}", Value::Array(codes)));
    }
}
