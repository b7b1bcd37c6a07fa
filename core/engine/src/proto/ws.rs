//! WebSocket (RFC 6455), sans-IO: the opening handshake and a streaming frame decoder and
//! encoder, for both roles. No extensions (a frame with a reserved bit set is a protocol
//! error), no subprotocols.
//!
//! The decoder takes whatever bytes have arrived, consumes what it can and returns at most one
//! message or control frame per call; payloads are unmasked into buffers sized at start (the
//! largest message and 125 bytes for control frames), so a message may arrive in any number of
//! reads and frames. Every violation is a [`WsError`] that names what was wrong and carries
//! the close code to send (1002 protocol error, 1007 invalid UTF-8, 1009 too big): the caller
//! sends that close frame and closes the connection. Text is checked as it arrives, so an
//! invalid byte fails the connection at once, not at the end of a long message.

use base64::Engine as _;
use sha1::{Digest, Sha1};

/// The GUID of RFC 6455 section 1.3.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Close codes keel sends.
pub mod close_code {
    /// Normal closure.
    pub const NORMAL: u16 = 1000;
    /// Going away (server shutting down).
    pub const GOING_AWAY: u16 = 1001;
    /// Protocol error.
    pub const PROTOCOL: u16 = 1002;
    /// Invalid payload data (text that is not UTF-8).
    pub const INVALID_DATA: u16 = 1007;
    /// Policy violation (e.g. a request the server does not accept).
    pub const POLICY: u16 = 1008;
    /// Message too big.
    pub const TOO_BIG: u16 = 1009;
    /// Slow consumer: the connection's trades backlog overflowed (keel's application code).
    pub const SLOW_CONSUMER: u16 = 4001;
    /// The connection stopped answering pings (keel's application code).
    pub const SILENT: u16 = 4002;
}

/// Which end this is: a server requires masked frames from the client and sends unmasked ones;
/// a client the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Accepts connections.
    Server,
    /// Opens connections.
    Client,
}

/// Frame opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// Continuation of a fragmented message.
    Continuation = 0,
    /// UTF-8 text.
    Text = 1,
    /// Binary data.
    Binary = 2,
    /// Close.
    Close = 8,
    /// Ping.
    Ping = 9,
    /// Pong.
    Pong = 10,
}

impl Opcode {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Continuation,
            1 => Self::Text,
            2 => Self::Binary,
            8 => Self::Close,
            9 => Self::Ping,
            10 => Self::Pong,
            _ => return None,
        })
    }

    fn is_control(self) -> bool {
        (self as u8) & 0x8 != 0
    }
}

/// A protocol violation, with the close code to answer it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WsError {
    /// The peer broke the framing rules; `what` says which.
    #[error("protocol error: {what}")]
    Protocol {
        /// The broken rule, with the value where it helps.
        what: &'static str,
        /// The offending byte or length, if any.
        value: u64,
    },
    /// Text (a message or a close reason) that is not UTF-8.
    #[error("invalid UTF-8 in text")]
    InvalidUtf8,
    /// A frame or message over the configured limit.
    #[error("message of {len} bytes over the limit of {limit}")]
    TooBig {
        /// Bytes announced so far.
        len: u64,
        /// The limit.
        limit: u64,
    },
}

impl WsError {
    /// The close code that answers this error.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::Protocol { .. } => close_code::PROTOCOL,
            Self::InvalidUtf8 => close_code::INVALID_DATA,
            Self::TooBig { .. } => close_code::TOO_BIG,
        }
    }
}

fn protocol(what: &'static str, value: u64) -> WsError {
    WsError::Protocol { what, value }
}

/// One decoded message or control frame, borrowed from the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsMessage<'a> {
    /// A whole text message (checked UTF-8).
    Text(&'a str),
    /// A whole binary message.
    Binary(&'a [u8]),
    /// A ping; answer with a pong carrying the same payload.
    Ping(&'a [u8]),
    /// A pong.
    Pong(&'a [u8]),
    /// The peer closes: its code (None if it sent none) and reason.
    Close {
        /// Status code.
        code: Option<u16>,
        /// Reason text.
        reason: &'a str,
    },
}

#[derive(Debug, Clone, Copy)]
enum State {
    Header,
    Payload {
        opcode: Opcode,
        fin: bool,
        remaining: u64,
        mask: Option<[u8; 4]>,
        mask_at: usize,
    },
}

/// The streaming decoder. See the module docs.
#[derive(Debug)]
pub struct Decoder {
    role: Role,
    max_message: usize,
    state: State,
    /// Opcode of the fragmented message in progress.
    message_opcode: Option<Opcode>,
    message: Vec<u8>,
    /// Bytes of `message` already checked as UTF-8 (text only).
    utf8_checked: usize,
    control: [u8; 125],
    control_len: usize,
}

/// Whether a close code may appear on the wire (RFC 6455 section 7.4 and the IANA registry).
pub fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

impl Decoder {
    /// Forgets everything of the current connection (a frame or message half read, a
    /// failed frame) and keeps its buffer: ready for the next connection, no allocation.
    pub fn reset(&mut self) {
        self.state = State::Header;
        self.message_opcode = None;
        self.message.clear();
        self.utf8_checked = 0;
        self.control_len = 0;
    }

    /// A decoder for `role` accepting messages up to `max_message` bytes (allocated now).
    pub fn new(role: Role, max_message: usize) -> Self {
        Self {
            role,
            max_message,
            state: State::Header,
            message_opcode: None,
            message: Vec::with_capacity(max_message),
            utf8_checked: 0,
            control: [0; 125],
            control_len: 0,
        }
    }

    /// Decodes from `input`: returns how many bytes were consumed and the message or control
    /// frame completed, if any. Call again with the rest while it consumes or returns one.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Option<WsMessage<'_>>), WsError> {
        let mut used = 0;
        loop {
            match self.state {
                State::Header => {
                    let Some((header_len, state)) = self.header(&input[used..])? else {
                        return Ok((used, None));
                    };
                    used += header_len;
                    self.state = state;
                    if let State::Payload { remaining: 0, .. } = state {
                        // An empty payload completes at once.
                        if let Some(done) = self.finish_frame()? {
                            return Ok((used, Some(self.message_view(done)?)));
                        }
                    }
                }
                State::Payload {
                    opcode,
                    fin,
                    remaining,
                    mask,
                    mask_at,
                } => {
                    let rest = &input[used..];
                    if opcode.is_control() {
                        // Control payloads are short: wait for all of it.
                        if (rest.len() as u64) < remaining {
                            return Ok((used, None));
                        }
                        let n = remaining as usize;
                        self.control[..n].copy_from_slice(&rest[..n]);
                        if let Some(m) = mask {
                            unmask(&mut self.control[..n], m, 0);
                        }
                        self.control_len = n;
                        used += n;
                        self.state = State::Payload {
                            opcode,
                            fin,
                            remaining: 0,
                            mask,
                            mask_at,
                        };
                    } else {
                        if rest.is_empty() {
                            return Ok((used, None));
                        }
                        let n = (remaining.min(rest.len() as u64)) as usize;
                        let start = self.message.len();
                        self.message.extend_from_slice(&rest[..n]);
                        if let Some(m) = mask {
                            unmask(&mut self.message[start..], m, mask_at);
                        }
                        used += n;
                        self.state = State::Payload {
                            opcode,
                            fin,
                            remaining: remaining - n as u64,
                            mask,
                            mask_at: mask_at + n,
                        };
                        if self.message_opcode == Some(Opcode::Text) {
                            self.check_utf8(false)?;
                        }
                        if remaining > n as u64 {
                            return Ok((used, None));
                        }
                    }
                    if let Some(done) = self.finish_frame()? {
                        return Ok((used, Some(self.message_view(done)?)));
                    }
                }
            }
        }
    }

    /// Parses and checks a frame header; `None` until all of it has arrived.
    fn header(&mut self, b: &[u8]) -> Result<Option<(usize, State)>, WsError> {
        if b.len() < 2 {
            return Ok(None);
        }
        let fin = b[0] & 0x80 != 0;
        if b[0] & 0x70 != 0 {
            return Err(protocol(
                "reserved bits set without an extension",
                u64::from(b[0]),
            ));
        }
        let opcode = Opcode::from_u8(b[0] & 0x0F)
            .ok_or_else(|| protocol("unknown opcode", u64::from(b[0] & 0x0F)))?;
        let masked = b[1] & 0x80 != 0;
        match (self.role, masked) {
            (Role::Server, false) => return Err(protocol("client frame not masked", 0)),
            (Role::Client, true) => return Err(protocol("server frame masked", 0)),
            _ => {}
        }
        let (len, mut at) = match b[1] & 0x7F {
            126 => {
                if b.len() < 4 {
                    return Ok(None);
                }
                (u64::from(u16::from_be_bytes([b[2], b[3]])), 4)
            }
            127 => {
                if b.len() < 10 {
                    return Ok(None);
                }
                let len = u64::from_be_bytes(b[2..10].try_into().expect("8"));
                if len >> 63 != 0 {
                    return Err(protocol("64-bit length with its top bit set", len));
                }
                (len, 10)
            }
            n => (u64::from(n), 2),
        };
        let mask = if masked {
            if b.len() < at + 4 {
                return Ok(None);
            }
            let m = [b[at], b[at + 1], b[at + 2], b[at + 3]];
            at += 4;
            Some(m)
        } else {
            None
        };
        if opcode.is_control() {
            if !fin {
                return Err(protocol("fragmented control frame", opcode as u64));
            }
            if len > 125 {
                return Err(protocol("control frame longer than 125 bytes", len));
            }
            // An empty payload completes without the copy that sets the length: without this
            // an empty ping or close would carry the previous control frame's payload.
            self.control_len = 0;
        } else {
            match (opcode, self.message_opcode) {
                (Opcode::Continuation, None) => {
                    return Err(protocol("continuation without a message to continue", 0))
                }
                (Opcode::Text | Opcode::Binary, Some(_)) => {
                    return Err(protocol(
                        "new message while a fragmented one is in progress",
                        opcode as u64,
                    ))
                }
                _ => {}
            }
            // The limit is per message: a new message starts from zero, whatever the
            // previous one (still in `message` until cleared below) held.
            let so_far = if opcode == Opcode::Continuation {
                self.message.len() as u64
            } else {
                0
            };
            let total = so_far.saturating_add(len);
            if total > self.max_message as u64 {
                return Err(WsError::TooBig {
                    len: total,
                    limit: self.max_message as u64,
                });
            }
            if opcode != Opcode::Continuation {
                self.message_opcode = Some(opcode);
                self.message.clear();
                self.utf8_checked = 0;
            }
        }
        Ok(Some((
            at,
            State::Payload {
                opcode,
                fin,
                remaining: len,
                mask,
                mask_at: 0,
            },
        )))
    }

    /// A frame's payload is complete: returns what it completed, if anything.
    fn finish_frame(&mut self) -> Result<Option<Opcode>, WsError> {
        let State::Payload { opcode, fin, .. } = self.state else {
            return Ok(None);
        };
        self.state = State::Header;
        if opcode.is_control() {
            return Ok(Some(opcode));
        }
        if !fin {
            return Ok(None);
        }
        let whole = self.message_opcode.take().unwrap_or(opcode);
        if whole == Opcode::Text {
            self.check_utf8(true)?;
        }
        Ok(Some(whole))
    }

    fn check_utf8(&mut self, complete: bool) -> Result<(), WsError> {
        match std::str::from_utf8(&self.message[self.utf8_checked..]) {
            Ok(_) => self.utf8_checked = self.message.len(),
            Err(e) => {
                // An incomplete sequence at the end may still be completed by the next bytes.
                if e.error_len().is_some() || complete {
                    return Err(WsError::InvalidUtf8);
                }
                self.utf8_checked += e.valid_up_to();
            }
        }
        Ok(())
    }

    fn message_view(&self, what: Opcode) -> Result<WsMessage<'_>, WsError> {
        Ok(match what {
            Opcode::Text => WsMessage::Text(
                std::str::from_utf8(&self.message).map_err(|_| WsError::InvalidUtf8)?,
            ),
            Opcode::Binary | Opcode::Continuation => WsMessage::Binary(&self.message),
            Opcode::Ping => WsMessage::Ping(&self.control[..self.control_len]),
            Opcode::Pong => WsMessage::Pong(&self.control[..self.control_len]),
            Opcode::Close => {
                let p = &self.control[..self.control_len];
                match p.len() {
                    0 => WsMessage::Close {
                        code: None,
                        reason: "",
                    },
                    1 => return Err(protocol("close payload of 1 byte", 1)),
                    _ => {
                        let code = u16::from_be_bytes([p[0], p[1]]);
                        if !valid_close_code(code) {
                            return Err(protocol("invalid close code", u64::from(code)));
                        }
                        let reason =
                            std::str::from_utf8(&p[2..]).map_err(|_| WsError::InvalidUtf8)?;
                        WsMessage::Close {
                            code: Some(code),
                            reason,
                        }
                    }
                }
            }
        })
    }
}

fn unmask(bytes: &mut [u8], mask: [u8; 4], offset: usize) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b ^= mask[(offset + i) & 3];
    }
}

/// Bytes of the header of a frame carrying `len` payload bytes.
pub fn header_len(len: usize, masked: bool) -> usize {
    let base = match len {
        0..=125 => 2,
        126..=65_535 => 4,
        _ => 10,
    };
    base + if masked { 4 } else { 0 }
}

/// Writes one frame into `out` (which must hold `header_len + payload`); `mask` for client
/// frames. Returns the bytes written.
pub fn encode_frame(
    out: &mut [u8],
    fin: bool,
    opcode: Opcode,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> usize {
    let len = payload.len();
    out[0] = (if fin { 0x80 } else { 0 }) | opcode as u8;
    let m = if mask.is_some() { 0x80 } else { 0 };
    let mut at = match len {
        0..=125 => {
            out[1] = m | len as u8;
            2
        }
        126..=65_535 => {
            out[1] = m | 126;
            out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            4
        }
        _ => {
            out[1] = m | 127;
            out[2..10].copy_from_slice(&(len as u64).to_be_bytes());
            10
        }
    };
    if let Some(key) = mask {
        out[at..at + 4].copy_from_slice(&key);
        at += 4;
    }
    out[at..at + len].copy_from_slice(payload);
    if let Some(key) = mask {
        unmask(&mut out[at..at + len], key, 0);
    }
    at + len
}

/// Writes a close frame with `code` and `reason` (truncated to fit 125 bytes).
pub fn encode_close(out: &mut [u8], code: u16, reason: &str, mask: Option<[u8; 4]>) -> usize {
    let mut payload = [0u8; 125];
    payload[..2].copy_from_slice(&code.to_be_bytes());
    let mut r = reason.len().min(123);
    while !reason.is_char_boundary(r) {
        r -= 1;
    }
    payload[2..2 + r].copy_from_slice(&reason.as_bytes()[..r]);
    encode_frame(out, true, Opcode::Close, &payload[..2 + r], mask)
}

// ----- the opening handshake ----------------------------------------------------------------

/// Why an opening handshake failed; `status` is the HTTP status a server answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The request or response is malformed or misses a required header.
    #[error("bad handshake: {0}")]
    Bad(String),
    /// The client asked for another protocol version.
    #[error("unsupported WebSocket version {0} (this server speaks 13)")]
    Version(String),
    /// The head is over the size limit.
    #[error("handshake head over {0} bytes")]
    TooLong(usize),
}

impl HandshakeError {
    /// The HTTP response a server sends before closing.
    pub fn response(&self) -> &'static str {
        match self {
            Self::Version(_) => {
                "HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
            }
            Self::Bad(_) | Self::TooLong(_) => {
                "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
            }
        }
    }
}

/// A client's upgrade request, as the server needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeRequest {
    /// The request target, e.g. `/md`.
    pub path: String,
    /// `Sec-WebSocket-Key`.
    pub key: String,
}

/// The largest handshake head accepted.
pub const HANDSHAKE_MAX: usize = 8_192;

/// The HTTP head (up to the blank line) and its length; `None` until it has all arrived.
fn http_head(bytes: &[u8]) -> Result<Option<(&str, usize)>, HandshakeError> {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4);
    let Some(end) = end else {
        if bytes.len() > HANDSHAKE_MAX {
            return Err(HandshakeError::TooLong(HANDSHAKE_MAX));
        }
        return Ok(None);
    };
    if end > HANDSHAKE_MAX {
        // The whole head arrived in one read, but it is over the limit all the same.
        return Err(HandshakeError::TooLong(HANDSHAKE_MAX));
    }
    let text = std::str::from_utf8(&bytes[..end])
        .map_err(|_| HandshakeError::Bad("head is not UTF-8".into()))?;
    Ok(Some((text, end)))
}

fn headers(head: &str) -> impl Iterator<Item = (String, &str)> {
    head.split("\r\n").skip(1).filter_map(|line| {
        let (name, value) = line.split_once(':')?;
        Some((name.trim().to_ascii_lowercase(), value.trim()))
    })
}

fn has_token(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Server: parses an upgrade request; `Ok(None)` until the whole head has arrived. Returns the
/// request and the head's length.
pub fn parse_request(bytes: &[u8]) -> Result<Option<(UpgradeRequest, usize)>, HandshakeError> {
    let Some((head, end)) = http_head(bytes)? else {
        return Ok(None);
    };
    let mut parts = head.split("\r\n").next().unwrap_or("").split(' ');
    let (method, path, version) = (parts.next(), parts.next(), parts.next());
    if method != Some("GET") || !version.is_some_and(|v| v.starts_with("HTTP/1.1")) {
        return Err(HandshakeError::Bad(format!(
            "request line {:?}",
            head.split("\r\n").next().unwrap_or("")
        )));
    }
    let (mut upgrade, mut connection, mut key, mut ws_version) = (false, false, None, None);
    for (name, value) in headers(head) {
        match name.as_str() {
            "upgrade" => upgrade = has_token(value, "websocket"),
            "connection" => connection = has_token(value, "upgrade"),
            "sec-websocket-key" => key = Some(value.to_string()),
            "sec-websocket-version" => ws_version = Some(value.to_string()),
            _ => {}
        }
    }
    if !upgrade || !connection {
        return Err(HandshakeError::Bad(
            "missing `Upgrade: websocket` or `Connection: Upgrade`".into(),
        ));
    }
    match ws_version.as_deref() {
        Some("13") => {}
        Some(v) => return Err(HandshakeError::Version(v.to_string())),
        None => return Err(HandshakeError::Bad("missing Sec-WebSocket-Version".into())),
    }
    let key = key.ok_or_else(|| HandshakeError::Bad("missing Sec-WebSocket-Key".into()))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&key)
        .map_err(|_| HandshakeError::Bad(format!("Sec-WebSocket-Key {key:?} is not base64")))?;
    if decoded.len() != 16 {
        return Err(HandshakeError::Bad(format!(
            "Sec-WebSocket-Key decodes to {} bytes, not 16",
            decoded.len()
        )));
    }
    Ok(Some((
        UpgradeRequest {
            path: path.unwrap_or("/").to_string(),
            key,
        },
        end,
    )))
}

/// `Sec-WebSocket-Accept` for a client's key.
pub fn accept_key(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Server: the 101 response accepting `key`.
pub fn response(key: &str) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(key)
    )
}

/// Client: an upgrade request for `path` on `host` with a 16-byte `nonce`; returns it and the
/// key to check the answer against.
pub fn request(host: &str, path: &str, nonce: [u8; 16]) -> (String, String) {
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    (
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ),
        key,
    )
}

/// Client: checks the server's answer to `key`; `Ok(None)` until the head has arrived, then the
/// head's length.
pub fn parse_response(bytes: &[u8], key: &str) -> Result<Option<usize>, HandshakeError> {
    let Some((head, end)) = http_head(bytes)? else {
        return Ok(None);
    };
    let status = head.split("\r\n").next().unwrap_or("");
    if !status.starts_with("HTTP/1.1 101") {
        return Err(HandshakeError::Bad(format!("status line {status:?}")));
    }
    let want = accept_key(key);
    let accepted = headers(head).any(|(n, v)| n == "sec-websocket-accept" && v == want);
    if !accepted {
        return Err(HandshakeError::Bad(
            "Sec-WebSocket-Accept does not match".into(),
        ));
    }
    Ok(Some(end))
}

#[cfg(test)]
mod tests;
