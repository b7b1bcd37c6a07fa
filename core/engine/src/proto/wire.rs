//! Bounds-checked big-endian readers and writers shared by the codecs.
//!
//! A [`Reader`] is created only after the whole fixed part of a message is known to be present,
//! so its reads cannot run past the end; a [`Writer`] likewise checks the whole size first.

/// Why bytes could not be decoded. Every variant names what was wrong and the value found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DecodeError {
    /// A packet announced a length above the configured maximum.
    #[error("packet length {len} exceeds the maximum {max}")]
    Oversize {
        /// Announced length.
        len: u32,
        /// Configured maximum.
        max: u32,
    },
    /// A packet with length zero (no type byte).
    #[error("empty packet (length 0)")]
    EmptyPacket,
    /// A message or packet type this side does not accept.
    #[error("unknown {protocol} type byte {byte:#04x}")]
    UnknownType {
        /// "SoupBinTCP" or "OUCH".
        protocol: &'static str,
        /// The type byte.
        byte: u8,
    },
    /// A message whose length does not match its type.
    #[error("message type {msg_type:#04x}: length {got}, expected {expected}")]
    Length {
        /// The message type byte.
        msg_type: u8,
        /// Length the type requires (the minimum for variable-length messages).
        expected: u32,
        /// Length found.
        got: u32,
    },
    /// A field holding a value its type does not allow.
    #[error("field {field}: bad value {value:#x}")]
    BadField {
        /// The field's name as in the specification.
        field: &'static str,
        /// The offending value (a byte, or a number).
        value: u64,
    },
}

/// Why a message could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The caller's buffer is smaller than the message.
    #[error("buffer of {got} bytes, message needs {needed}")]
    BufferTooSmall {
        /// Bytes the message needs.
        needed: u32,
        /// Bytes available.
        got: u32,
    },
    /// A value that cannot be represented on the wire.
    #[error("field {field}: value {value} cannot be encoded")]
    Unrepresentable {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
}

/// Reads fields from a message whose fixed part is known to be present.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` after checking it holds at least `fixed_len` bytes.
    pub(crate) fn new(buf: &'a [u8], msg_type: u8, fixed_len: usize) -> Result<Self, DecodeError> {
        if buf.len() < fixed_len {
            return Err(DecodeError::Length {
                msg_type,
                expected: fixed_len as u32,
                got: buf.len() as u32,
            });
        }
        Ok(Self { buf, at: 0 })
    }

    /// A reader over a message that must be exactly `len` bytes.
    pub(crate) fn exact(buf: &'a [u8], msg_type: u8, len: usize) -> Result<Self, DecodeError> {
        if buf.len() != len {
            return Err(DecodeError::Length {
                msg_type,
                expected: len as u32,
                got: buf.len() as u32,
            });
        }
        Ok(Self { buf, at: 0 })
    }

    pub(crate) fn skip(&mut self, n: usize) {
        self.at += n;
    }

    pub(crate) fn u8(&mut self) -> u8 {
        let v = self.buf[self.at];
        self.at += 1;
        v
    }

    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.at..self.at + N]);
        self.at += N;
        out
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.array())
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.array())
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.array())
    }

    pub(crate) fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.array())
    }

    pub(crate) fn slice(&mut self, n: usize) -> &'a [u8] {
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        s
    }

    /// Bytes read so far.
    pub(crate) fn consumed(&self) -> usize {
        self.at
    }

    /// Bytes not yet read.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.at..]
    }
}

/// Writes fields into a buffer already checked to be large enough.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(out: &'a mut [u8], needed: usize) -> Result<Self, EncodeError> {
        if out.len() < needed {
            return Err(EncodeError::BufferTooSmall {
                needed: needed as u32,
                got: out.len() as u32,
            });
        }
        Ok(Self { out, at: 0 })
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
        self
    }

    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_be_bytes())
    }

    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        self.bytes(&v.to_be_bytes())
    }

    /// `b` left-justified in `width` bytes, padded with spaces.
    pub(crate) fn alpha(&mut self, b: &[u8], width: usize) -> &mut Self {
        let n = b.len().min(width);
        self.bytes(&b[..n]);
        for _ in n..width {
            self.u8(b' ');
        }
        self
    }

    pub(crate) fn written(&self) -> usize {
        self.at
    }
}

/// Checks that `field` holds only printable ASCII (spaces allowed).
pub(crate) fn check_alpha(field: &'static str, bytes: &[u8]) -> Result<(), DecodeError> {
    match bytes.iter().find(|b| !(b' '..=b'~').contains(*b)) {
        Some(&bad) => Err(DecodeError::BadField {
            field,
            value: u64::from(bad),
        }),
        None => Ok(()),
    }
}

/// Checks a one-byte code against its allowed values.
pub(crate) fn check_code(field: &'static str, byte: u8, allowed: &[u8]) -> Result<u8, DecodeError> {
    if allowed.contains(&byte) {
        Ok(byte)
    } else {
        Err(DecodeError::BadField {
            field,
            value: u64::from(byte),
        })
    }
}

/// Parses a space-padded (either side) ASCII decimal field; all spaces is zero.
pub(crate) fn parse_numeric(field: &'static str, bytes: &[u8]) -> Result<u64, DecodeError> {
    let trimmed = trim_spaces(bytes);
    let mut value: u64 = 0;
    for &b in trimmed {
        if !b.is_ascii_digit() {
            return Err(DecodeError::BadField {
                field,
                value: u64::from(b),
            });
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or(DecodeError::BadField {
                field,
                value: u64::MAX,
            })?;
    }
    Ok(value)
}

/// Writes `value` right-justified in `width` bytes, padded on the left with spaces.
pub(crate) fn write_numeric(
    w: &mut Writer<'_>,
    field: &'static str,
    value: u64,
    width: usize,
) -> Result<(), EncodeError> {
    let mut digits = [b' '; 20];
    let mut v = value;
    let mut n = 0;
    loop {
        digits[19 - n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n > width {
        return Err(EncodeError::Unrepresentable { field, value });
    }
    for _ in n..width {
        w.u8(b' ');
    }
    w.bytes(&digits[20 - n..]);
    Ok(())
}

/// `bytes` without leading and trailing spaces.
pub(crate) fn trim_spaces(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != b' ').unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}
