//! FIX 4.4 tag=value framing, sans-IO: [`frame`] finds one whole message at the front of the
//! received bytes and checks its BodyLength and CheckSum, [`FieldTable::parse`] cuts it into
//! borrowed fields (no copy, no allocation: the table is a fixed array the session reuses), and
//! [`Encoder`] writes a message into the caller's buffer with its BodyLength and CheckSum.
//!
//! Repeating groups need no special cut: the table keeps every field in wire order, repeated
//! tags included, and [`Msg::get`] returns a tag's first value; none of the messages keel
//! reads needs a group's later instances (docs/protocol.md, "FIX 4.4"). Data fields (a length
//! field followed by raw bytes that may hold SOH) are not in keel's subset: an SOH inside a
//! value makes the message garbled.
//!
//! Every bound is explicit ([`Limits`], docs/config.md "FIX"): the whole message's length, the
//! number of fields, one value's length. Errors are typed and carry the tag and (a copy of) the
//! offending value; nothing here panics on any input (a property test and a fuzz target check).

use std::fmt;

/// The field separator.
pub const SOH: u8 = 0x01;
/// The only BeginString keel speaks, as its first field.
pub const BEGIN_STRING: &[u8] = b"8=FIX.4.4\x01";
/// Fields a table can hold at most (the configurable `tags_max` is at most this).
pub const TAGS_CAP: usize = 256;
/// Bytes of the trailer `10=nnn<SOH>`.
const TRAILER_LEN: usize = 7;
/// Digits BodyLength may have (a message of at most 999,999 bytes).
const BODY_LENGTH_DIGITS: usize = 6;

/// How large a message, and how many and how long its fields, may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A whole message, header to trailer, in bytes (`message_max`).
    pub message_max: u32,
    /// Fields in one message, header and trailer included (`tags_max`, at most [`TAGS_CAP`]).
    pub tags_max: u16,
    /// Bytes of one value (`field_max`).
    pub field_max: u16,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            message_max: 4096,
            tags_max: 128,
            field_max: 256,
        }
    }
}

/// A copy of the start of an offending value, for errors and logs: at most 24 bytes, bytes
/// that are not printable ASCII shown as `?`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValueText {
    len: u8,
    bytes: [u8; 24],
}

impl ValueText {
    /// The first 24 bytes of `value`.
    pub fn new(value: &[u8]) -> Self {
        let mut bytes = [0; 24];
        let len = value.len().min(bytes.len());
        for (out, &b) in bytes.iter_mut().zip(&value[..len]) {
            *out = if b.is_ascii_graphic() || b == b' ' {
                b
            } else {
                b'?'
            };
        }
        Self {
            len: len as u8,
            bytes,
        }
    }

    /// The copied bytes as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("?")
    }
}

impl fmt::Debug for ValueText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for ValueText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why bytes are not a FIX 4.4 message keel accepts. Each names the tag and the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FixError {
    /// The bytes do not start with `8=FIX.4.4<SOH>`.
    #[error("BeginString: expected 8=FIX.4.4, found {found:?}")]
    BeginString {
        /// What was there.
        found: ValueText,
    },
    /// BodyLength (9) missing, not digits, or longer than six digits.
    #[error("BodyLength (9): bad value {value:?}")]
    BodyLength {
        /// What was there.
        value: ValueText,
    },
    /// The message is longer than `message_max`.
    #[error("message of {len} bytes exceeds message_max {max}")]
    TooLong {
        /// The whole message's length as announced.
        len: u64,
        /// The limit.
        max: u32,
    },
    /// No `10=nnn<SOH>` where BodyLength says the body ends.
    #[error("CheckSum (10) not where BodyLength {body_length} ends the body: found {found:?}")]
    Trailer {
        /// The announced BodyLength.
        body_length: u32,
        /// What was there.
        found: ValueText,
    },
    /// The CheckSum does not match the bytes.
    #[error("CheckSum (10): received {received:?}, computed {computed:03}")]
    CheckSum {
        /// The received value.
        received: ValueText,
        /// The sum of the bytes modulo 256.
        computed: u8,
    },
    /// A field that is not `tag=value<SOH>` (no `=`, a tag not a positive number, an empty
    /// value), at byte `offset` of the message.
    #[error("garbled field at byte {offset}: {found:?}")]
    Garbled {
        /// Where the field starts.
        offset: u32,
        /// Its first bytes.
        found: ValueText,
    },
    /// More fields than `tags_max`.
    #[error("more than tags_max {max} fields")]
    TooManyFields {
        /// The limit.
        max: u16,
    },
    /// A value longer than `field_max`.
    #[error("tag {tag}: value of {len} bytes exceeds field_max {max}")]
    FieldTooLong {
        /// The tag.
        tag: u32,
        /// The value's length.
        len: u32,
        /// The limit.
        max: u16,
    },
    /// The header's first fields are not BeginString, BodyLength, MsgType.
    #[error("tag {found} where the header needs tag {expected}")]
    HeaderOrder {
        /// The tag the header needs there.
        expected: u32,
        /// The tag found.
        found: u32,
    },
    /// A field the message type requires is absent.
    #[error("MsgType {msg_type}: required tag {tag} missing")]
    Missing {
        /// The message's type.
        msg_type: ValueText,
        /// The tag.
        tag: u32,
    },
    /// A value its field's type or keel's subset does not allow.
    #[error("tag {tag}: bad value {value:?} (expected {expected})")]
    Value {
        /// The tag.
        tag: u32,
        /// The value.
        value: ValueText,
        /// What is allowed.
        expected: &'static str,
    },
    /// A tag given twice where it may appear once.
    #[error("tag {tag} appears twice")]
    Duplicate {
        /// The tag.
        tag: u32,
    },
}

impl FixError {
    /// The tag an error is about (the session-level Reject's RefTagID), if one.
    pub fn tag(&self) -> Option<u32> {
        match *self {
            Self::FieldTooLong { tag, .. }
            | Self::Missing { tag, .. }
            | Self::Value { tag, .. }
            | Self::Duplicate { tag } => Some(tag),
            Self::HeaderOrder { found, .. } => Some(found),
            _ => None,
        }
    }
}

/// What [`frame`] found at the front of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// Not a whole message yet.
    Incomplete,
    /// One whole message of `len` bytes whose BodyLength and CheckSum hold.
    Whole {
        /// Its length, header to trailer.
        len: usize,
    },
    /// Bytes that are not one good message — a wrong CheckSum, a trailer not where
    /// BodyLength says, a BodyLength unreadable or past `message_max`, anything but
    /// `8=FIX.4.4` where a message must begin: garbled, ignored (no sequence number is taken)
    /// and counted. `len` runs to the next `8=FIX.4.4<SOH>` after the first byte (the parser
    /// resyncs there), or to the end of the bytes less a tail that may begin one.
    Garbled {
        /// Bytes to discard (at least 1).
        len: usize,
        /// What is wrong.
        error: FixError,
    },
}

/// Finds the first message in `buf`: a whole one, not yet one, or garbled bytes to discard
/// up to where the next message may begin (the session stays up; a number the garbled
/// message carried is asked for again as a gap).
pub fn frame(buf: &[u8], limits: &Limits) -> Frame {
    match cut(buf, limits) {
        Ok(Frame::Garbled { error, .. }) | Err(error) => Frame::Garbled {
            len: resync_len(buf),
            error,
        },
        Ok(whole_or_incomplete) => whole_or_incomplete,
    }
}

/// Bytes to discard from the front of `buf` (not a good message) to reach the next
/// `8=FIX.4.4<SOH>` after its first byte; without one, all but a tail that may begin it.
fn resync_len(buf: &[u8]) -> usize {
    if let Some(at) = buf
        .windows(BEGIN_STRING.len())
        .skip(1)
        .position(|w| w == BEGIN_STRING)
    {
        return at + 1;
    }
    let keep = (1..BEGIN_STRING.len())
        .rev()
        .find(|&k| k < buf.len() && buf.ends_with(&BEGIN_STRING[..k]))
        .unwrap_or(0);
    buf.len() - keep
}

/// The first message in `buf` as its BeginString and BodyLength cut it: an error when they
/// cannot be read, garbled when its trailer or CheckSum is wrong.
fn cut(buf: &[u8], limits: &Limits) -> Result<Frame, FixError> {
    let have = buf.len().min(BEGIN_STRING.len());
    if buf[..have] != BEGIN_STRING[..have] {
        return Err(FixError::BeginString {
            found: ValueText::new(&buf[..have]),
        });
    }
    if have < BEGIN_STRING.len() {
        return Ok(Frame::Incomplete);
    }
    let rest = &buf[BEGIN_STRING.len()..];
    // "9=" then 1 to 6 digits then SOH.
    let field_end = rest
        .iter()
        .take(3 + BODY_LENGTH_DIGITS)
        .position(|&b| b == SOH);
    let Some(soh) = field_end else {
        if rest.len() < 3 + BODY_LENGTH_DIGITS && !rest.contains(&SOH) && prefix_ok(rest) {
            return Ok(Frame::Incomplete);
        }
        return Err(FixError::BodyLength {
            value: ValueText::new(&rest[..rest.len().min(3 + BODY_LENGTH_DIGITS)]),
        });
    };
    let field = &rest[..soh];
    let body_length = match field.strip_prefix(b"9=").and_then(parse_digits) {
        Some(n) => n,
        None => {
            return Err(FixError::BodyLength {
                value: ValueText::new(field),
            })
        }
    };
    let body_start = BEGIN_STRING.len() + soh + 1;
    let total = body_start as u64 + body_length + TRAILER_LEN as u64;
    if total > u64::from(limits.message_max) {
        return Err(FixError::TooLong {
            len: total,
            max: limits.message_max,
        });
    }
    let total = total as usize;
    if buf.len() < total {
        return Ok(Frame::Incomplete);
    }
    let body_end = body_start + body_length as usize;
    let trailer = &buf[body_end..total];
    let digits = trailer
        .strip_prefix(b"10=")
        .and_then(|t| t.strip_suffix(&[SOH]))
        .filter(|d| d.len() == 3 && d.iter().all(u8::is_ascii_digit));
    let Some(digits) = digits else {
        return Ok(Frame::Garbled {
            len: total,
            error: FixError::Trailer {
                body_length: body_length as u32,
                found: ValueText::new(trailer),
            },
        });
    };
    // The body must end with a field's SOH: BodyLength counts through it.
    if body_length == 0 || buf[body_end - 1] != SOH {
        return Ok(Frame::Garbled {
            len: total,
            error: FixError::Trailer {
                body_length: body_length as u32,
                found: ValueText::new(trailer),
            },
        });
    }
    let computed = checksum(&buf[..body_end]);
    let received = digits
        .iter()
        .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
    if received != u32::from(computed) {
        return Ok(Frame::Garbled {
            len: total,
            error: FixError::CheckSum {
                received: ValueText::new(digits),
                computed,
            },
        });
    }
    Ok(Frame::Whole { len: total })
}

/// Whether `rest` can still become `9=<digits>`.
fn prefix_ok(rest: &[u8]) -> bool {
    let want = b"9=";
    let n = rest.len().min(2);
    rest[..n] == want[..n] && rest[n..].iter().all(u8::is_ascii_digit)
}

/// A non-empty run of at most 9 ASCII digits as a number (no sign, leading zeros allowed).
fn parse_digits(d: &[u8]) -> Option<u64> {
    if d.is_empty() || d.len() > 9 || !d.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(d.iter().fold(0u64, |n, b| n * 10 + u64::from(b - b'0')))
}

/// The FIX CheckSum: the sum of the bytes modulo 256.
pub fn checksum(bytes: &[u8]) -> u8 {
    // Summed wide (the compiler vectorizes it) and cut to a byte once: the same value.
    bytes.iter().map(|&b| u32::from(b)).sum::<u32>() as u8
}

/// One field of a parsed message: its tag and where its value lies in the message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    /// The tag.
    pub tag: u32,
    /// The value's first byte in the message.
    pub start: u32,
    /// The value's length.
    pub len: u32,
}

/// The fields of one message, in wire order: a fixed table reused for every message.
#[derive(Debug, Clone)]
pub struct FieldTable {
    spans: [Span; TAGS_CAP],
    count: usize,
}

impl Default for FieldTable {
    fn default() -> Self {
        Self {
            spans: [Span::default(); TAGS_CAP],
            count: 0,
        }
    }
}

impl FieldTable {
    /// Cuts `msg` (one whole message as [`frame`] returned it) into fields. The header must
    /// begin 8, 9, 35 and the trailer is field 10; every field is `tag=value<SOH>` with a
    /// positive tag without leading zeros and a non-empty value of at most `field_max` bytes.
    pub fn parse<'a>(&'a mut self, msg: &'a [u8], limits: &Limits) -> Result<Msg<'a>, FixError> {
        self.count = 0;
        let cap = usize::from(limits.tags_max).min(TAGS_CAP);
        let mut at = 0usize;
        while at < msg.len() {
            if self.count == cap {
                return Err(FixError::TooManyFields {
                    max: limits.tags_max,
                });
            }
            let span = field_at(msg, at, limits)?;
            let required = match self.count {
                0 => Some(8),
                1 => Some(9),
                2 => Some(35),
                _ => None,
            };
            if let Some(expected) = required.filter(|&t| t != span.tag) {
                return Err(FixError::HeaderOrder {
                    expected,
                    found: span.tag,
                });
            }
            self.spans[self.count] = span;
            self.count += 1;
            at = (span.start + span.len) as usize + 1;
        }
        if self.count < 4 || self.spans[self.count - 1].tag != 10 {
            return Err(FixError::Garbled {
                offset: at as u32,
                found: ValueText::new(b"no trailer"),
            });
        }
        Ok(Msg {
            raw: msg,
            fields: &self.spans[..self.count],
        })
    }
}

/// The field starting at `at`: the tag's digits read in the one pass that finds `=`, then the
/// value's end within `field_max` + 1 bytes (values are short: a plain loop beats a vector
/// search's setup).
fn field_at(msg: &[u8], at: usize, limits: &Limits) -> Result<Span, FixError> {
    let garbled = |end: usize| FixError::Garbled {
        offset: at as u32,
        found: ValueText::new(&msg[at..end.min(msg.len())]),
    };
    let rest = &msg[at..];
    let mut tag = 0u32;
    let mut digits = 0;
    loop {
        match rest.get(digits) {
            Some(b'=') if digits > 0 => break,
            // At most 9 digits (a tag below 10^9), no leading zero.
            Some(&b) if b.is_ascii_digit() && digits < 9 && !(digits == 0 && b == b'0') => {
                tag = tag * 10 + u32::from(b - b'0');
                digits += 1;
            }
            _ => return Err(garbled(at + digits + 1)),
        }
    }
    let value = &rest[digits + 1..];
    let limit = usize::from(limits.field_max);
    let Some(len) = soh_in(&value[..value.len().min(limit + 1)]) else {
        return Err(if value.len() > limit {
            FixError::FieldTooLong {
                tag,
                len: soh_in(value).unwrap_or(value.len()) as u32,
                max: limits.field_max,
            }
        } else {
            garbled(msg.len())
        });
    };
    if len == 0 {
        return Err(FixError::Value {
            tag,
            value: ValueText::new(b""),
            expected: "a non-empty value",
        });
    }
    Ok(Span {
        tag,
        start: (at + digits + 1) as u32,
        len: len as u32,
    })
}

/// The first SOH in `bytes`.
#[inline]
fn soh_in(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == SOH {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// One parsed message: its bytes and its fields in wire order.
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    raw: &'a [u8],
    fields: &'a [Span],
}

impl<'a> Msg<'a> {
    /// The whole message.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Every field, in wire order.
    pub fn fields(&self) -> impl Iterator<Item = (u32, &'a [u8])> + '_ {
        self.fields.iter().map(|s| (s.tag, self.value(s)))
    }

    fn value(&self, s: &Span) -> &'a [u8] {
        &self.raw[s.start as usize..(s.start + s.len) as usize]
    }

    /// MsgType (35).
    pub fn msg_type(&self) -> &'a [u8] {
        self.value(&self.fields[2])
    }

    /// The first value of `tag`, if present.
    pub fn get(&self, tag: u32) -> Option<&'a [u8]> {
        self.fields
            .iter()
            .find(|s| s.tag == tag)
            .map(|s| self.value(s))
    }

    /// The value of `tag`, which the message type requires.
    pub fn require(&self, tag: u32) -> Result<&'a [u8], FixError> {
        self.get(tag).ok_or_else(|| FixError::Missing {
            msg_type: ValueText::new(self.msg_type()),
            tag,
        })
    }

    /// `tag` as a non-negative integer, if present.
    pub fn uint(&self, tag: u32) -> Result<Option<u64>, FixError> {
        self.get(tag).map(|v| parse_uint(tag, v)).transpose()
    }

    /// `tag` as a non-negative integer, required.
    pub fn require_uint(&self, tag: u32) -> Result<u64, FixError> {
        parse_uint(tag, self.require(tag)?)
    }

    /// `tag` as a Boolean (`Y` or `N`), absent meaning `N`.
    pub fn flag(&self, tag: u32) -> Result<bool, FixError> {
        match self.get(tag) {
            None | Some(b"N") => Ok(false),
            Some(b"Y") => Ok(true),
            Some(other) => Err(bad(tag, other, "Y or N")),
        }
    }

    /// `tag` as a price or quantity in units of 1/`scale` (a decimal with at most as many
    /// fraction digits as `scale` has zeros), if present.
    pub fn decimal(&self, tag: u32, scale: i64) -> Result<Option<i64>, FixError> {
        self.get(tag)
            .map(|v| parse_decimal(tag, v, scale))
            .transpose()
    }
}

fn bad(tag: u32, value: &[u8], expected: &'static str) -> FixError {
    FixError::Value {
        tag,
        value: ValueText::new(value),
        expected,
    }
}

/// A non-negative integer field: digits only, at most 18 (no sign, no overflow).
pub fn parse_uint(tag: u32, v: &[u8]) -> Result<u64, FixError> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(bad(tag, v, "a non-negative integer of at most 18 digits"));
    }
    Ok(v.iter().fold(0u64, |n, b| n * 10 + u64::from(b - b'0')))
}

/// A decimal field (`-`? digits (`.` digits)?) in units of 1/`scale` (`scale` a power of ten):
/// more fraction digits than `scale` carries, unless zeros, or a value beyond ±10^15 units, is
/// refused rather than rounded.
pub fn parse_decimal(tag: u32, v: &[u8], scale: i64) -> Result<i64, FixError> {
    const EXPECTED: &str = "a decimal of at most 15 integer digits keel's precision carries";
    let (negative, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    let (int, frac) = match digits.iter().position(|&b| b == b'.') {
        Some(dot) => (&digits[..dot], &digits[dot + 1..]),
        None => (digits, &[][..]),
    };
    let digits_ok = |d: &[u8]| d.iter().all(u8::is_ascii_digit);
    if (int.is_empty() && frac.is_empty()) || int.len() > 15 || !digits_ok(int) || !digits_ok(frac)
    {
        return Err(bad(tag, v, EXPECTED));
    }
    let mut units = int.iter().fold(0i64, |n, b| n * 10 + i64::from(b - b'0'));
    let mut place = scale;
    for &d in frac {
        if place > 1 {
            place /= 10;
            units = units
                .checked_mul(10)
                .and_then(|u| u.checked_add(i64::from(d - b'0')))
                .ok_or_else(|| bad(tag, v, EXPECTED))?;
        } else if d != b'0' {
            return Err(bad(tag, v, EXPECTED));
        }
    }
    let units = units
        .checked_mul(place)
        .ok_or_else(|| bad(tag, v, EXPECTED))?;
    Ok(if negative { -units } else { units })
}

/// A decimal field rounded to the nearest 1/`scale` (half away from zero): only for averages
/// (AvgPx), which a venue may carry to any precision; prices that trade are read exactly with
/// [`parse_decimal`].
pub fn parse_decimal_rounded(tag: u32, v: &[u8], scale: i64) -> Result<i64, FixError> {
    let places = scale.max(1).ilog10() as usize;
    let dot = v.iter().position(|&b| b == b'.');
    let Some(dot) = dot.filter(|&d| v.len() - d - 1 > places) else {
        return parse_decimal(tag, v, scale);
    };
    let cut = &v[..dot + 1 + places];
    let units = parse_decimal(tag, cut, scale)?;
    let rest = &v[dot + 1 + places..];
    if !rest.iter().all(u8::is_ascii_digit) {
        return Err(bad(tag, v, "a decimal"));
    }
    let up = rest.first().is_some_and(|&d| d >= b'5');
    Ok(match (up, units < 0 || v.first() == Some(&b'-')) {
        (false, _) => units,
        (true, true) => units - 1,
        (true, false) => units + 1,
    })
}

/// Bytes the header can take before the body (BeginString and a six-digit BodyLength).
const PREFIX_ROOM: usize = BEGIN_STRING.len() + 2 + BODY_LENGTH_DIGITS + 1;

/// Writes one message into a caller buffer: fields after BodyLength go first, at a fixed
/// offset; [`Encoder::finish`] puts BeginString and BodyLength before them, the CheckSum after,
/// and moves the message to the buffer's start.
#[derive(Debug)]
pub struct Encoder<'a> {
    out: &'a mut [u8],
    at: usize,
    overflow: bool,
}

impl<'a> Encoder<'a> {
    /// A message of type `msg_type` (35) into `out`.
    pub fn new(out: &'a mut [u8], msg_type: &[u8]) -> Self {
        let mut e = Self {
            out,
            at: PREFIX_ROOM,
            overflow: false,
        };
        e.bytes(35, msg_type);
        e
    }

    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        if end > self.out.len() {
            self.overflow = true;
            self.at = end;
            return;
        }
        self.out[self.at..end].copy_from_slice(bytes);
        self.at = end;
    }

    fn tag(&mut self, tag: u32) {
        let mut digits = [0u8; 10];
        let n = write_uint(&mut digits, u64::from(tag));
        self.put(&digits[..n]);
        self.put(b"=");
    }

    /// `tag=value` with `value` as given (the caller keeps SOH and `=` out of it; an empty
    /// value is not written).
    pub fn bytes(&mut self, tag: u32, value: &[u8]) -> &mut Self {
        if value.is_empty() {
            return self;
        }
        self.tag(tag);
        self.put(value);
        self.put(&[SOH]);
        self
    }

    /// Fields already encoded (`tag=value<SOH>` each), appended as they are: a message
    /// stored once and sent again (a resend) keeps its bytes.
    pub fn raw(&mut self, fields: &[u8]) -> &mut Self {
        self.put(fields);
        self
    }

    /// `tag=<unsigned integer>`.
    pub fn uint(&mut self, tag: u32, value: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let n = write_uint(&mut digits, value);
        self.bytes(tag, &digits[..n])
    }

    /// `tag=<decimal>` from units of 1/`scale` (`scale` a power of ten), with no trailing
    /// fraction zeros.
    pub fn decimal(&mut self, tag: u32, units: i64, scale: i64) -> &mut Self {
        let mut text = [0u8; 48];
        let n = write_decimal(&mut text, units, scale);
        self.bytes(tag, &text[..n])
    }

    /// `tag=Y` or `tag=N`.
    pub fn flag(&mut self, tag: u32, value: bool) -> &mut Self {
        self.bytes(tag, if value { b"Y" } else { b"N" })
    }

    /// Completes the message: BodyLength, CheckSum, and the message moved to the start of the
    /// buffer. Returns its length.
    pub fn finish(self) -> Result<usize, crate::proto::EncodeError> {
        let body = self.at - PREFIX_ROOM;
        let mut digits = [0u8; 20];
        let n = write_uint(&mut digits, body as u64);
        let prefix = BEGIN_STRING.len() + 2 + n + 1;
        let total = prefix + body + TRAILER_LEN;
        if self.overflow
            || n > BODY_LENGTH_DIGITS
            || PREFIX_ROOM + body + TRAILER_LEN > self.out.len()
        {
            return Err(crate::proto::EncodeError::BufferTooSmall {
                needed: total as u32,
                got: self.out.len() as u32,
            });
        }
        let start = PREFIX_ROOM - prefix;
        let out = self.out;
        out[start..start + BEGIN_STRING.len()].copy_from_slice(BEGIN_STRING);
        let at = start + BEGIN_STRING.len();
        out[at..at + 2].copy_from_slice(b"9=");
        out[at + 2..at + 2 + n].copy_from_slice(&digits[..n]);
        out[at + 2 + n] = SOH;
        out.copy_within(start..PREFIX_ROOM + body, 0);
        let body_end = prefix + body;
        let sum = checksum(&out[..body_end]);
        out[body_end..body_end + 3].copy_from_slice(b"10=");
        out[body_end + 3] = b'0' + sum / 100;
        out[body_end + 4] = b'0' + sum / 10 % 10;
        out[body_end + 5] = b'0' + sum % 10;
        out[body_end + 6] = SOH;
        Ok(total)
    }
}

/// `value` in decimal into `out` (at least 20 bytes); returns the length.
pub fn write_uint(out: &mut [u8], mut value: u64) -> usize {
    let mut tmp = [0u8; 20];
    let mut n = 0;
    loop {
        tmp[n] = b'0' + (value % 10) as u8;
        n += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for i in 0..n {
        out[i] = tmp[n - 1 - i];
    }
    n
}

/// `units` of 1/`scale` as a decimal into `out` (at least 48 bytes); returns the length.
pub fn write_decimal(out: &mut [u8], units: i64, scale: i64) -> usize {
    let mut n = 0;
    if units < 0 {
        out[0] = b'-';
        n = 1;
    }
    let magnitude = units.unsigned_abs();
    let scale = scale.max(1).unsigned_abs();
    n += write_uint(&mut out[n..], magnitude / scale);
    let mut frac = magnitude % scale;
    if frac != 0 {
        out[n] = b'.';
        n += 1;
        let mut place = scale / 10;
        while frac != 0 && place != 0 {
            out[n] = b'0' + (frac / place) as u8;
            n += 1;
            frac %= place;
            place /= 10;
        }
    }
    n
}
