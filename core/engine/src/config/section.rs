//! Reading and writing one TOML table of settings, the pieces every part's configuration uses:
//! [`Section`] reads a table's keys (each at most once; a key left over is refused as unknown,
//! a value of the wrong type or out of range names the key, the value and what is allowed),
//! [`Out`] writes settings back as TOML. A leaf: it knows no part of the engine, so a venue
//! protocol reads its own section with it (`session/<protocol>/config.rs`) without reaching
//! into the whole file's reader.

use std::fmt::Write as _;

use toml::{Table, Value};

use crate::dispatch::ConfigError;
use crate::runtime::IdlePolicy;

/// Why a configuration file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileConfigError {
    /// Not valid TOML.
    #[error("not valid TOML: {0}")]
    Syntax(String),
    /// A key keel does not know (a misspelling must not be ignored).
    #[error("unknown key `{0}`")]
    UnknownKey(String),
    /// A value of the wrong type or form.
    #[error("`{key}` = {value}: expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A value out of its range.
    #[error("`{key}` = {value}: allowed {allowed}")]
    OutOfRange {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// The allowed range.
        allowed: &'static str,
    },
    /// A required key is missing.
    #[error("`{0}` is required")]
    Missing(String),
    /// The configuration would allocate more memory at start than allowed.
    #[error(
        "needs {need_bytes} bytes of memory at start, above the limit of {limit_bytes} \
         (engine.memory_max_bytes, or the machine's memory); the largest part is `{largest_key}` \
         at {largest_bytes} bytes"
    )]
    MemoryNeed {
        /// What the configuration needs.
        need_bytes: u64,
        /// The ceiling.
        limit_bytes: u64,
        /// The key behind the largest part.
        largest_key: &'static str,
        /// Its bytes.
        largest_bytes: u64,
    },
    /// The dispatcher's bounds do not hold together.
    #[error("dispatcher: {0}")]
    Dispatcher(#[from] ConfigError),
}

/// A reader's result.
pub type Result<T> = std::result::Result<T, FileConfigError>;

/// What a duration key accepts (the text of `WrongType::expected`).
const DURATION_FORM: &str = "a duration: an integer of nanoseconds, or a whole number and a unit \
                             in a string: \"250ns\", \"50us\", \"50ms\", \"2s\", \"1m\"";
/// The range of a duration (the text of `OutOfRange::allowed`).
const DURATION_RANGE: &str =
    "0 to 9223372036854775807 ns (about 292 years, a TOML integer's range)";

/// The units a duration string may carry, with their nanoseconds, largest first (the printer
/// picks the largest that divides a value exactly).
pub const DURATION_UNITS: [(&str, u64); 5] = [
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Why a duration string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// Not a whole number followed by a known unit.
    Form,
    /// More than [`DURATION_NS_MAX`] nanoseconds.
    Range,
}

/// Parses `"<digits><unit>"` (unit `ns`, `us` or `µs`, `ms`, `s`, `m`; no sign, no fraction, no
/// space, `_` allowed between digits as in TOML integers) into nanoseconds, at most
/// [`DURATION_NS_MAX`]. A bare number is
/// refused: in a string the unit is what makes it readable (write nanoseconds as an integer).
pub fn parse_duration(text: &str) -> std::result::Result<u64, DurationError> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '_'))
        .ok_or(DurationError::Form)?;
    let (number, unit) = text.split_at(split);
    let unit = if unit == "µs" { "us" } else { unit };
    let per_unit = DURATION_UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, ns)| *ns)
        .ok_or(DurationError::Form)?;
    let well_formed = number.starts_with(|c: char| c.is_ascii_digit())
        && !number.ends_with('_')
        && !number.contains("__");
    if !well_formed {
        return Err(DurationError::Form);
    }
    let mut value: u64 = 0;
    for digit in number.bytes().filter(|b| *b != b'_') {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit - b'0')))
            .ok_or(DurationError::Range)?;
    }
    // The integers' ceiling for strings too: no duration reaches the engine that a TOML
    // integer could not (deadlines are `now_ns + duration`, checked up to this bound).
    value
        .checked_mul(per_unit)
        .filter(|ns| *ns <= DURATION_NS_MAX)
        .ok_or(DurationError::Range)
}

/// The longest duration a file may give, ns (`i64::MAX`, what a TOML integer holds).
pub const DURATION_NS_MAX: u64 = i64::MAX as u64;

/// Reads one table's keys, each at most once; whatever is left at `finish` is unknown.
#[derive(Debug)]
pub struct Section<'a> {
    prefix: String,
    /// The table read.
    pub table: &'a Table,
    used: Vec<&'a str>,
}

impl<'a> Section<'a> {
    pub fn new(prefix: &str, table: &'a Table) -> Self {
        Self {
            prefix: prefix.to_string(),
            table,
            used: Vec::new(),
        }
    }

    pub fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    pub fn get(&mut self, name: &'a str) -> Option<&'a Value> {
        self.used.push(name);
        self.table.get(name)
    }

    pub fn wrong(&self, name: &str, value: &Value, expected: &'static str) -> FileConfigError {
        FileConfigError::WrongType {
            key: self.key(name),
            value: value.to_string(),
            expected,
        }
    }

    /// A duration (every key named `*_ns`): an integer of nanoseconds, or a string of a whole
    /// number and a unit (`"250ns"`, `"50us"`, `"50ms"`, `"2s"`, `"1m"`; see [`parse_duration`]).
    pub fn duration(&mut self, name: &'a str, field: &mut u64) -> Result<()> {
        let Some(value) = self.get(name) else {
            return Ok(());
        };
        *field = match value {
            Value::Integer(i) => u64::try_from(*i).map_err(|_| FileConfigError::OutOfRange {
                key: self.key(name),
                value: i.to_string(),
                allowed: DURATION_RANGE,
            })?,
            Value::String(text) => parse_duration(text).map_err(|e| match e {
                DurationError::Form => self.wrong(name, value, DURATION_FORM),
                DurationError::Range => FileConfigError::OutOfRange {
                    key: self.key(name),
                    value: value.to_string(),
                    allowed: DURATION_RANGE,
                },
            })?,
            other => return Err(self.wrong(name, other, DURATION_FORM)),
        };
        Ok(())
    }

    /// An integer that must fit `T` (and be non-negative unless `T` is signed).
    pub fn int<T: TryFrom<i64>>(&mut self, name: &'a str, field: &mut T) -> Result<()> {
        debug_assert!(
            !name.ends_with("_ns"),
            "`{name}` is a duration: read it with `duration`"
        );
        let Some(value) = self.get(name) else {
            return Ok(());
        };
        let Value::Integer(i) = value else {
            return Err(self.wrong(name, value, "an integer"));
        };
        *field = T::try_from(*i).map_err(|_| FileConfigError::OutOfRange {
            key: self.key(name),
            value: i.to_string(),
            allowed: "the field's integer range (non-negative for counts and durations)",
        })?;
        Ok(())
    }

    pub fn bool(&mut self, name: &'a str, field: &mut bool) -> Result<()> {
        match self.get(name) {
            None => Ok(()),
            Some(Value::Boolean(b)) => {
                *field = *b;
                Ok(())
            }
            Some(v) => Err(self.wrong(name, v, "true or false")),
        }
    }

    pub fn string(&mut self, name: &'a str) -> Result<Option<&'a str>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(name, v, "a string")),
        }
    }

    pub fn required_string(&mut self, name: &'a str) -> Result<&'a str> {
        self.string(name)?
            .ok_or_else(|| FileConfigError::Missing(self.key(name)))
    }

    pub fn subtable(&mut self, name: &'a str) -> Result<Option<&'a Table>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Table(t)) => Ok(Some(t)),
            Some(v) => Err(self.wrong(name, v, "a table")),
        }
    }

    pub fn array(&mut self, name: &'a str) -> Result<&'a [Value]> {
        match self.get(name) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(self.wrong(name, v, "an array")),
        }
    }

    pub fn finish(self) -> Result<()> {
        match self.table.keys().find(|k| !self.used.contains(&k.as_str())) {
            Some(k) => Err(FileConfigError::UnknownKey(self.key(k))),
            None => Ok(()),
        }
    }
}

/// The text being written, a line at a time.
#[derive(Debug, Default)]
pub struct Out {
    /// The text so far.
    pub text: String,
}

impl Out {
    pub fn line(&mut self, args: std::fmt::Arguments<'_>) {
        let _ = self.text.write_fmt(args);
        self.text.push('\n');
    }

    pub fn section(&mut self, header: &str) {
        self.line(format_args!("\n{header}"));
    }

    pub fn comment(&mut self, text: &str) {
        self.line(format_args!("# {text}"));
    }

    /// An integer; one a TOML integer cannot hold (above `i64::MAX`, only from code) is left
    /// out with a comment rather than written as something else.
    pub fn int<T: TryInto<i64> + Copy + std::fmt::Display>(&mut self, key: &str, value: T) {
        match value.try_into() {
            Ok(v) => self.line(format_args!("{key} = {v}")),
            Err(_) => self.line(format_args!("# {key} = {value}: beyond a TOML integer")),
        }
    }

    pub fn bool(&mut self, key: &str, value: bool) {
        self.line(format_args!("{key} = {value}"));
    }

    /// A string, quoted and escaped as TOML wants it.
    pub fn string(&mut self, key: &str, value: &str) {
        self.line(format_args!("{key} = {}", Value::String(value.into())));
    }

    pub fn path(&mut self, key: &str, value: &std::path::Path) {
        self.string(key, &value.to_string_lossy());
    }

    /// A duration in the largest unit that holds it exactly (`"50ms"`, `"2s"`, `"1m"`).
    pub fn duration(&mut self, key: &str, ns: u64) {
        self.string(key, &duration_text(ns));
    }

    pub fn core(&mut self, key: &str, core: Option<usize>) {
        match core {
            Some(core) => self.int(key, core),
            None => self.line(format_args!("{key} = -1")),
        }
    }

    pub fn idle(&mut self, key: &str, idle: IdlePolicy) {
        let name = match idle {
            IdlePolicy::BusySpin => "spin",
            IdlePolicy::SpinThenYield { spins: 1_000 } => "spin-then-yield",
            p if p == IdlePolicy::TEST => "backoff",
            _ => {
                self.comment(&format!(
                    "{key}: a policy built in code; the nearest the file names:"
                ));
                match idle {
                    IdlePolicy::SpinThenYield { .. } => "spin-then-yield",
                    _ => "backoff",
                }
            }
        };
        self.string(key, name);
    }
}

/// `ns` in the largest unit of [`DURATION_UNITS`] that divides it (`0` is `"0s"`).
pub fn duration_text(ns: u64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let (unit, per) = DURATION_UNITS
        .iter()
        .find(|(_, per)| ns % per == 0)
        .copied()
        .unwrap_or(("ns", 1));
    format!("{}{unit}", ns / per)
}
