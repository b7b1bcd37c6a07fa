//! SoupBinTCP 4.0: framing and session packets.
//!
//! Every packet is a two-byte big-endian length (counting the type byte and payload), a type
//! byte, and the payload. Server-to-client sequenced data carries no explicit sequence
//! number: both sides count, starting at 1 for each session, and a client that logs in again
//! asks for the next sequence it expects, which is how it resumes after a disconnect.
//!
//! Alpha fields are space padded (decoded with spaces trimmed on both sides, since peers
//! differ on justification; encoded left-justified). Numeric fields are ASCII decimal,
//! right-justified and space padded. A login request may carry the optional trailing
//! requested-heartbeat-timeout field (5 ASCII digits, milliseconds); keel accepts both forms
//! and sends the short one.

use super::wire::{
    check_alpha, parse_numeric, trim_spaces, write_numeric, DecodeError, EncodeError, Reader,
    Writer,
};

/// Bytes of the length prefix.
pub const LENGTH_PREFIX: usize = 2;
/// Username field width.
pub const USERNAME_LEN: usize = 6;
/// Password field width.
pub const PASSWORD_LEN: usize = 10;
/// Session field width.
pub const SESSION_LEN: usize = 10;
/// Sequence number field width.
pub const SEQUENCE_LEN: usize = 20;
const LOGIN_PAYLOAD: usize = USERNAME_LEN + PASSWORD_LEN + SESSION_LEN + SEQUENCE_LEN;
const HEARTBEAT_TIMEOUT_LEN: usize = 5;

/// Why a server refused a login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginRejectReason {
    /// 'A': bad username or password.
    NotAuthorized,
    /// 'S': the requested session is not available.
    SessionNotAvailable,
}

impl LoginRejectReason {
    fn code(self) -> u8 {
        match self {
            Self::NotAuthorized => b'A',
            Self::SessionNotAvailable => b'S',
        }
    }
}

/// A login request ('L').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginRequest {
    /// Username, space padded.
    pub username: [u8; USERNAME_LEN],
    /// Password, space padded.
    pub password: [u8; PASSWORD_LEN],
    /// Requested session; all spaces for the current one.
    pub session: [u8; SESSION_LEN],
    /// Next sequence number the client expects (1 for a fresh start; 0 for "the newest").
    pub sequence: u64,
    /// Optional requested heartbeat timeout in milliseconds (the extended login form).
    pub heartbeat_timeout_ms: Option<u32>,
}

/// Packets a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientPacket<'a> {
    /// '+': free-form text.
    Debug(&'a [u8]),
    /// 'L'.
    LoginRequest(LoginRequest),
    /// 'U': a higher-level message (an OUCH order message).
    Unsequenced(&'a [u8]),
    /// 'R'.
    Heartbeat,
    /// 'O'.
    LogoutRequest,
}

/// Packets a server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerPacket<'a> {
    /// '+': free-form text.
    Debug(&'a [u8]),
    /// 'A': the session and the sequence number of the next sequenced message.
    LoginAccepted {
        /// Session name, space padded.
        session: [u8; SESSION_LEN],
        /// Sequence number of the next sequenced packet to be sent.
        sequence: u64,
    },
    /// 'J'.
    LoginRejected(LoginRejectReason),
    /// 'S': a higher-level message (an OUCH response), implicitly numbered.
    Sequenced(&'a [u8]),
    /// 'H'.
    Heartbeat,
    /// 'Z': the session is over; no more sequenced messages will come.
    EndOfSession,
}

/// One whole packet found at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The packet type byte.
    pub packet_type: u8,
    /// The payload after the type byte.
    pub payload: &'a [u8],
    /// Bytes the packet occupies, length prefix included.
    pub len: usize,
}

/// Finds one whole packet at the start of `buf`: `Ok(Some(frame))`, `Ok(None)` when more
/// bytes are needed, or an error for a length that cannot be valid.
pub fn frame(buf: &[u8], max_packet_len: u16) -> Result<Option<Frame<'_>>, DecodeError> {
    if buf.len() < LENGTH_PREFIX {
        return Ok(None);
    }
    let len = usize::from(u16::from_be_bytes([buf[0], buf[1]]));
    if len == 0 {
        return Err(DecodeError::EmptyPacket);
    }
    if len > usize::from(max_packet_len) {
        return Err(DecodeError::Oversize {
            len: len as u32,
            max: u32::from(max_packet_len),
        });
    }
    if buf.len() < LENGTH_PREFIX + len {
        return Ok(None);
    }
    let packet = &buf[LENGTH_PREFIX..LENGTH_PREFIX + len];
    Ok(Some(Frame {
        packet_type: packet[0],
        payload: &packet[1..],
        len: LENGTH_PREFIX + len,
    }))
}

/// Decodes a client packet from its type byte and payload (as split by [`frame`]).
pub fn decode_client(packet_type: u8, payload: &[u8]) -> Result<ClientPacket<'_>, DecodeError> {
    match packet_type {
        b'+' => Ok(ClientPacket::Debug(payload)),
        b'L' => decode_login(payload).map(ClientPacket::LoginRequest),
        b'U' => Ok(ClientPacket::Unsequenced(payload)),
        b'R' => empty(packet_type, payload).map(|()| ClientPacket::Heartbeat),
        b'O' => empty(packet_type, payload).map(|()| ClientPacket::LogoutRequest),
        byte => Err(DecodeError::UnknownType {
            protocol: "SoupBinTCP",
            byte,
        }),
    }
}

/// Decodes a server packet from its type byte and payload (as split by [`frame`]).
pub fn decode_server(packet_type: u8, payload: &[u8]) -> Result<ServerPacket<'_>, DecodeError> {
    match packet_type {
        b'+' => Ok(ServerPacket::Debug(payload)),
        b'A' => {
            let mut r = Reader::exact(payload, packet_type, SESSION_LEN + SEQUENCE_LEN)?;
            let session: [u8; SESSION_LEN] = r.array();
            check_alpha("Session", &session)?;
            let sequence = parse_numeric("Sequence Number", r.slice(SEQUENCE_LEN))?;
            Ok(ServerPacket::LoginAccepted { session, sequence })
        }
        b'J' => {
            let mut r = Reader::exact(payload, packet_type, 1)?;
            match r.u8() {
                b'A' => Ok(ServerPacket::LoginRejected(
                    LoginRejectReason::NotAuthorized,
                )),
                b'S' => Ok(ServerPacket::LoginRejected(
                    LoginRejectReason::SessionNotAvailable,
                )),
                other => Err(DecodeError::BadField {
                    field: "Reject Reason Code",
                    value: u64::from(other),
                }),
            }
        }
        b'S' => Ok(ServerPacket::Sequenced(payload)),
        b'H' => empty(packet_type, payload).map(|()| ServerPacket::Heartbeat),
        b'Z' => empty(packet_type, payload).map(|()| ServerPacket::EndOfSession),
        byte => Err(DecodeError::UnknownType {
            protocol: "SoupBinTCP",
            byte,
        }),
    }
}

fn empty(packet_type: u8, payload: &[u8]) -> Result<(), DecodeError> {
    Reader::exact(payload, packet_type, 0).map(|_| ())
}

fn decode_login(payload: &[u8]) -> Result<LoginRequest, DecodeError> {
    let long = LOGIN_PAYLOAD + HEARTBEAT_TIMEOUT_LEN;
    if payload.len() != LOGIN_PAYLOAD && payload.len() != long {
        return Err(DecodeError::Length {
            msg_type: b'L',
            expected: LOGIN_PAYLOAD as u32,
            got: payload.len() as u32,
        });
    }
    let mut r = Reader::new(payload, b'L', LOGIN_PAYLOAD)?;
    let username: [u8; USERNAME_LEN] = r.array();
    let password: [u8; PASSWORD_LEN] = r.array();
    let session: [u8; SESSION_LEN] = r.array();
    check_alpha("Username", &username)?;
    check_alpha("Password", &password)?;
    check_alpha("Requested Session", &session)?;
    let sequence = parse_numeric("Requested Sequence Number", r.slice(SEQUENCE_LEN))?;
    let heartbeat_timeout_ms = match r.rest() {
        [] => None,
        rest => Some(parse_numeric("Requested Heartbeat Timeout", rest)? as u32),
    };
    Ok(LoginRequest {
        username: normalize(username),
        password: normalize(password),
        session: normalize(session),
        sequence,
        heartbeat_timeout_ms,
    })
}

/// Re-pads an alpha field left-justified, whichever way the peer justified it.
fn normalize<const N: usize>(field: [u8; N]) -> [u8; N] {
    let mut out = [b' '; N];
    let trimmed = trim_spaces(&field);
    out[..trimmed.len()].copy_from_slice(trimmed);
    out
}

/// An alpha field of width `N` from `text` (left-justified, space padded, truncated).
pub fn alpha<const N: usize>(text: &str) -> [u8; N] {
    let mut out = [b' '; N];
    let n = text.len().min(N);
    out[..n].copy_from_slice(&text.as_bytes()[..n]);
    out
}

fn header(w: &mut Writer<'_>, payload_len: usize, packet_type: u8) {
    w.u16((payload_len + 1) as u16).u8(packet_type);
}

fn packet_with(out: &mut [u8], packet_type: u8, payload: &[u8]) -> Result<usize, EncodeError> {
    if payload.len() + 1 > usize::from(u16::MAX) {
        return Err(EncodeError::Unrepresentable {
            field: "Packet Length",
            value: payload.len() as u64,
        });
    }
    let mut w = Writer::new(out, LENGTH_PREFIX + 1 + payload.len())?;
    header(&mut w, payload.len(), packet_type);
    w.bytes(payload);
    Ok(w.written())
}

/// Encodes a client packet into `out`; returns the bytes written.
pub fn encode_client(out: &mut [u8], packet: &ClientPacket<'_>) -> Result<usize, EncodeError> {
    match packet {
        ClientPacket::Debug(text) => packet_with(out, b'+', text),
        ClientPacket::Unsequenced(msg) => packet_with(out, b'U', msg),
        ClientPacket::Heartbeat => packet_with(out, b'R', &[]),
        ClientPacket::LogoutRequest => packet_with(out, b'O', &[]),
        ClientPacket::LoginRequest(login) => {
            let mut w = Writer::new(out, LENGTH_PREFIX + 1 + LOGIN_PAYLOAD)?;
            header(&mut w, LOGIN_PAYLOAD, b'L');
            w.bytes(&login.username)
                .bytes(&login.password)
                .bytes(&login.session);
            write_numeric(
                &mut w,
                "Requested Sequence Number",
                login.sequence,
                SEQUENCE_LEN,
            )?;
            Ok(w.written())
        }
    }
}

/// Encodes a server packet into `out`; returns the bytes written.
pub fn encode_server(out: &mut [u8], packet: &ServerPacket<'_>) -> Result<usize, EncodeError> {
    match packet {
        ServerPacket::Debug(text) => packet_with(out, b'+', text),
        ServerPacket::Sequenced(msg) => packet_with(out, b'S', msg),
        ServerPacket::Heartbeat => packet_with(out, b'H', &[]),
        ServerPacket::EndOfSession => packet_with(out, b'Z', &[]),
        ServerPacket::LoginRejected(reason) => packet_with(out, b'J', &[reason.code()]),
        ServerPacket::LoginAccepted { session, sequence } => {
            let mut w = Writer::new(out, LENGTH_PREFIX + 1 + SESSION_LEN + SEQUENCE_LEN)?;
            header(&mut w, SESSION_LEN + SEQUENCE_LEN, b'A');
            w.bytes(session);
            write_numeric(&mut w, "Sequence Number", *sequence, SEQUENCE_LEN)?;
            Ok(w.written())
        }
    }
}

#[cfg(test)]
mod tests;
