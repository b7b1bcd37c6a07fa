//! HTTP/1.1 for keel's REST clients (issue 14; docs/rest.md): requests encoded into the
//! caller's buffer, responses read incrementally from a transport's receive buffer with every
//! size bounded and every malformed message a typed error naming what was wrong.
//!
//! Framing follows RFC 9112 §6, strictly, as a client that must never misread where one
//! response ends and the next begins on a kept-alive connection:
//!
//! | the response | its body |
//! | --- | --- |
//! | 1xx (not 101) | none: an interim answer, skipped; the final one follows |
//! | 204, 304, or the answer to a HEAD | none |
//! | `Transfer-Encoding` whose last coding is `chunked`, no `Content-Length` | chunked (extensions ignored, trailers read and dropped) |
//! | `Transfer-Encoding` and `Content-Length` both | refused (`ConflictingFraming`): a smuggling shape |
//! | any other `Transfer-Encoding` | refused (`UnsupportedTransferEncoding`) |
//! | `Content-Length` (several only if all equal, digits only) | that many bytes |
//! | neither | until the connection closes (the connection is not reused) |
//!
//! Nothing here allocates after [`ResponseReader::new`]: the head is kept in a buffer sized at
//! start, the body is written into the caller's buffer.

use std::fmt;

pub mod client;
pub mod gate;
pub mod session;

/// Bounds on what a response may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest status line plus headers, bytes.
    pub head_max: usize,
    /// Most header lines.
    pub headers_max: usize,
    /// Longest body, bytes (the caller's body buffer may be smaller: then it bounds).
    pub body_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            head_max: 16 * 1024,
            headers_max: 64,
            body_max: 4 * 1024 * 1024,
        }
    }
}

/// A request method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// DELETE.
    Delete,
}

impl Method {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

    /// Whether sending it twice is the same as once (RFC 9110 §9.2.2): only these may be
    /// retried after a timeout; a timed-out POST is unknown, never blindly resent.
    pub fn idempotent(self) -> bool {
        !matches!(self, Method::Post)
    }
}

/// A request to encode.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The method.
    pub method: Method,
    /// The target: an absolute path with its query (`/api/v3/depth?symbol=BTCUSDT`).
    pub target: &'a str,
    /// The `Host` header.
    pub host: &'a str,
    /// Further headers.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body (a `Content-Length` is sent with any body, and with every POST and PUT).
    pub body: &'a [u8],
}

/// What went wrong, with the offending value where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The request does not fit the buffer.
    #[error("request needs {need} bytes, the buffer holds {room}")]
    RequestTooLarge {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        room: usize,
    },
    /// A request field that cannot go on the wire as given (control characters, spaces in the
    /// target, a header name that is not a token): never sent, so nothing can be injected.
    #[error("request {field} {value:?} is not allowed on the wire")]
    BadRequestField {
        /// Which field.
        field: &'static str,
        /// The value (cut to 64 bytes).
        value: String,
    },
    /// The status line and headers are longer than the limit.
    #[error("response head longer than {max} bytes")]
    HeadTooLarge {
        /// The limit.
        max: usize,
    },
    /// The head is not HTTP/1.x as RFC 9112 defines it.
    #[error("malformed response head: {0}")]
    Malformed(String),
    /// A `Content-Length` that is not a number, or several that differ.
    #[error("bad Content-Length {0:?}")]
    BadContentLength(String),
    /// `Transfer-Encoding` and `Content-Length` together.
    #[error("response has both Transfer-Encoding and Content-Length")]
    ConflictingFraming,
    /// A transfer coding other than chunked last.
    #[error("unsupported Transfer-Encoding {0:?}")]
    UnsupportedTransferEncoding(String),
    /// A chunk-size line that is not one.
    #[error("bad chunk: {0}")]
    BadChunk(&'static str),
    /// The body is longer than the limit (or the caller's buffer).
    #[error("response body longer than {max} bytes")]
    BodyTooLarge {
        /// The limit.
        max: usize,
    },
    /// The connection closed before the response was complete.
    #[error("connection closed after {got} bytes of the response")]
    Truncated {
        /// Bytes of the response read (head and body).
        got: usize,
    },
}

fn cut(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned()
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_field_value(s: &str) -> bool {
    s.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

/// Whether `target` may go on the wire as a request target: an absolute path (and query) of
/// visible ASCII, no fragment (`#` is the client's own, never sent).
pub fn valid_target(target: &str) -> bool {
    target.starts_with('/')
        && target
            .bytes()
            .all(|b| (0x21..0x7f).contains(&b) && b != b'#')
}

/// Appends `value` to `out` percent-encoded for a query (every byte but `A-Z a-z 0-9 - . _ ~`
/// as `%XX`), so that a name from a venue or a file can never add a parameter, a fragment or a
/// path. Allocates nothing when `out` has room (three bytes per byte of `value`).
pub fn push_query_value(out: &mut String, value: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

/// Writes `req` into `out`; returns the bytes written. Refuses (and writes nothing usable)
/// a request that does not fit or carries a field the wire cannot take as given.
pub fn encode_request(req: &Request<'_>, out: &mut [u8]) -> Result<usize, HttpError> {
    let bad = |field: &'static str, value: &str| HttpError::BadRequestField {
        field,
        value: cut(value.as_bytes()),
    };
    if !valid_target(req.target) {
        return Err(bad("target", req.target));
    }
    if req.host.is_empty() || !req.host.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(bad("host", req.host));
    }
    for (name, value) in req.headers {
        if !is_token(name) {
            return Err(bad("header name", name));
        }
        if !is_field_value(value) {
            return Err(bad("header value", value));
        }
        let framing = name.eq_ignore_ascii_case("content-length")
            || name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("host");
        if framing {
            // keel frames its own requests: a caller's would contradict them.
            return Err(bad("header name", name));
        }
    }
    let mut w = Writer {
        out,
        at: 0,
        need: 0,
    };
    w.put(req.method.as_str().as_bytes());
    w.put(b" ");
    w.put(req.target.as_bytes());
    w.put(b" HTTP/1.1\r\nHost: ");
    w.put(req.host.as_bytes());
    w.put(b"\r\n");
    for (name, value) in req.headers {
        w.put(name.as_bytes());
        w.put(b": ");
        w.put(value.as_bytes());
        w.put(b"\r\n");
    }
    if !req.body.is_empty() || matches!(req.method, Method::Post | Method::Put) {
        let mut digits = [0u8; 20];
        w.put(b"Content-Length: ");
        w.put(decimal(req.body.len() as u64, &mut digits));
        w.put(b"\r\n");
    }
    w.put(b"\r\n");
    w.put(req.body);
    if w.need > w.out.len() {
        return Err(HttpError::RequestTooLarge {
            need: w.need,
            room: w.out.len(),
        });
    }
    Ok(w.at)
}

struct Writer<'o> {
    out: &'o mut [u8],
    at: usize,
    need: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.need += bytes.len();
        if let Some(room) = self.out.get_mut(self.at..self.at + bytes.len()) {
            room.copy_from_slice(bytes);
            self.at += bytes.len();
        } else {
            self.at = self.out.len();
        }
    }
}

fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// How the body of the response being read is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked.
    Chunked,
    /// Until the connection closes.
    UntilClose,
}

/// The head of the response read: status, framing, and every header (offsets into a copy of
/// the head kept by the reader).
#[derive(Debug, Clone)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// HTTP/1.0 (`0`) or HTTP/1.1 (`1`).
    pub minor_version: u8,
    /// The body's framing.
    pub framing: Framing,
    /// Whether the connection may carry the next request after this response.
    pub keep_alive: bool,
    raw: Vec<u8>,
    /// (name start, name end, value start, value end) into `raw`.
    fields: Vec<(u16, u16, u16, u16)>,
}

impl Head {
    fn new(limits: &Limits) -> Self {
        Self {
            status: 0,
            minor_version: 1,
            framing: Framing::None,
            keep_alive: true,
            raw: Vec::with_capacity(limits.head_max),
            fields: Vec::with_capacity(limits.headers_max),
        }
    }

    /// The first header called `name` (any case), its value trimmed.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
    }

    /// Every header, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields.iter().map(|&(a, b, c, d)| {
            (
                &self.raw[usize::from(a)..usize::from(b)],
                &self.raw[usize::from(c)..usize::from(d)],
            )
        })
    }

    /// `Retry-After` in seconds, when given as a number (an HTTP date is not read: `None`).
    pub fn retry_after_s(&self) -> Option<u64> {
        let v = self.header("retry-after")?;
        std::str::from_utf8(v).ok()?.trim().parse().ok()
    }

    /// A header as a number (e.g. a venue's used-weight count), if it is one.
    pub fn header_u64(&self, name: &str) -> Option<u64> {
        std::str::from_utf8(self.header(name)?)
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HTTP/1.{} {} ({:?})",
            self.minor_version, self.status, self.framing
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body { left: u64 },
    ChunkSize,
    ChunkData { left: u64 },
    ChunkEnd,
    Trailers,
    UntilClose,
    Done,
}

/// Reads one response at a time from a byte stream (see the module docs for the framing).
#[derive(Debug)]
pub struct ResponseReader {
    limits: Limits,
    head_request: bool,
    state: State,
    head: Head,
    body_len: usize,
    /// Bytes of this response read so far (head and framing included).
    read: usize,
}

/// The most header lines a head may have at all (the reader's stack array).
const HEADERS_CAP: usize = 128;

impl ResponseReader {
    /// A reader for responses within `limits` (buffers sized here, once).
    pub fn new(limits: Limits) -> Self {
        let limits = Limits {
            headers_max: limits.headers_max.min(HEADERS_CAP),
            head_max: limits.head_max.min(usize::from(u16::MAX)),
            ..limits
        };
        Self {
            head: Head::new(&limits),
            limits,
            head_request: false,
            state: State::Done,
            body_len: 0,
            read: 0,
        }
    }

    /// Starts reading the response to a request with `method`.
    pub fn start(&mut self, method: Method) {
        self.head_request = method == Method::Head;
        self.state = State::Head;
        self.body_len = 0;
        self.read = 0;
        self.head.raw.clear();
        self.head.fields.clear();
    }

    /// The head, once read.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// Body bytes written into the caller's buffer so far.
    pub fn body_len(&self) -> usize {
        self.body_len
    }

    /// Whether the response is complete.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Reads from `input` (the connection's received bytes, from the start of this response's
    /// unread part), writing body bytes into `body` after those already there. Returns the
    /// bytes consumed (the caller drops them from its buffer) and whether the response is
    /// complete. Never reads past the end of the response: what follows is the next one's.
    pub fn feed(&mut self, input: &[u8], body: &mut [u8]) -> Result<(usize, bool), HttpError> {
        let mut at = 0;
        loop {
            let rest = &input[at..];
            let used = match self.state {
                State::Done => return Ok((at, true)),
                State::Head => match self.read_head(rest)? {
                    Some(n) => n,
                    None => return Ok((at, false)),
                },
                State::Body { left } => {
                    let n = (left.min(rest.len() as u64)) as usize;
                    self.take_body(&rest[..n], body)?;
                    self.state = if left == n as u64 {
                        State::Done
                    } else {
                        State::Body {
                            left: left - n as u64,
                        }
                    };
                    if n == 0 {
                        return Ok((at, false));
                    }
                    n
                }
                State::UntilClose => {
                    self.take_body(rest, body)?;
                    at += rest.len();
                    self.read += rest.len();
                    return Ok((at, false));
                }
                State::ChunkSize => match self.read_chunk_size(rest)? {
                    Some(n) => n,
                    None => return Ok((at, false)),
                },
                State::ChunkData { left } => {
                    let n = (left.min(rest.len() as u64)) as usize;
                    self.take_body(&rest[..n], body)?;
                    self.state = if left == n as u64 {
                        State::ChunkEnd
                    } else {
                        State::ChunkData {
                            left: left - n as u64,
                        }
                    };
                    if n == 0 {
                        return Ok((at, false));
                    }
                    n
                }
                State::ChunkEnd => {
                    if rest.len() < 2 {
                        return Ok((at, false));
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(HttpError::BadChunk("chunk data not followed by CRLF"));
                    }
                    self.state = State::ChunkSize;
                    2
                }
                State::Trailers => match self.read_trailer_line(rest)? {
                    Some(n) => n,
                    None => return Ok((at, false)),
                },
            };
            at += used;
            self.read += used;
        }
    }

    /// The connection closed: completes a response read until close; anything else not
    /// complete is `Truncated`.
    pub fn on_close(&mut self) -> Result<(), HttpError> {
        match self.state {
            State::Done => Ok(()),
            State::UntilClose => {
                self.state = State::Done;
                Ok(())
            }
            _ => Err(HttpError::Truncated { got: self.read }),
        }
    }

    fn take_body(&mut self, bytes: &[u8], body: &mut [u8]) -> Result<(), HttpError> {
        let max = self.limits.body_max.min(body.len());
        let end = self.body_len + bytes.len();
        if end > max {
            return Err(HttpError::BodyTooLarge { max });
        }
        body[self.body_len..end].copy_from_slice(bytes);
        self.body_len = end;
        Ok(())
    }

    /// The head, if all of it is in `input`: returns its length.
    fn read_head(&mut self, input: &[u8]) -> Result<Option<usize>, HttpError> {
        let window = &input[..input.len().min(self.limits.head_max)];
        let mut headers = [httparse::EMPTY_HEADER; HEADERS_CAP];
        let mut response = httparse::Response::new(&mut headers[..self.limits.headers_max]);
        let len = match response.parse(window) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => {
                if input.len() >= self.limits.head_max {
                    return Err(HttpError::HeadTooLarge {
                        max: self.limits.head_max,
                    });
                }
                return Ok(None);
            }
            Err(httparse::Error::TooManyHeaders) => {
                return Err(HttpError::Malformed(format!(
                    "more than {} header lines",
                    self.limits.headers_max
                )))
            }
            Err(e) => return Err(HttpError::Malformed(e.to_string())),
        };
        let status = response.code.unwrap_or(0);
        let minor = response.version.unwrap_or(1);
        let base = window.as_ptr() as usize;
        self.head.raw.clear();
        self.head.raw.extend_from_slice(&window[..len]);
        self.head.fields.clear();
        let mut length: Option<u64> = None;
        let mut transfer: Option<&[u8]> = None;
        let mut close = minor == 0;
        for h in response.headers.iter() {
            let value = h.value.trim_ascii();
            let name_at = h.name.as_ptr() as usize - base;
            let value_at = value.as_ptr() as usize - base;
            self.head.fields.push((
                name_at as u16,
                (name_at + h.name.len()) as u16,
                value_at as u16,
                (value_at + value.len()) as u16,
            ));
            if h.name.eq_ignore_ascii_case("content-length") {
                let bad = || HttpError::BadContentLength(cut(value));
                if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                    return Err(bad());
                }
                let n: u64 = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(bad)?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad());
                }
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                if transfer.is_some() {
                    // Codings over several lines: the last one counts; keep it simple and
                    // strict: one line.
                    return Err(HttpError::UnsupportedTransferEncoding(cut(value)));
                }
                transfer = Some(value);
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in value.split(|&b| b == b',') {
                    let t = token.trim_ascii();
                    if t.eq_ignore_ascii_case(b"close") {
                        close = true;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") && minor == 0 {
                        close = false;
                    }
                }
            }
        }
        self.head.status = status;
        self.head.minor_version = minor;
        if (100..200).contains(&status) && status != 101 {
            // An interim answer: skipped, the final one follows.
            self.head.raw.clear();
            self.head.fields.clear();
            return Ok(Some(len));
        }
        let no_body = self.head_request || status == 204 || status == 304 || status == 101;
        let framing = match (transfer, length) {
            _ if no_body => Framing::None,
            (Some(_), Some(_)) => return Err(HttpError::ConflictingFraming),
            (Some(te), None) => {
                let last = te.rsplit(|&b| b == b',').next().unwrap_or(b"").trim_ascii();
                if !last.eq_ignore_ascii_case(b"chunked") || te.split(|&b| b == b',').count() > 1 {
                    return Err(HttpError::UnsupportedTransferEncoding(cut(te)));
                }
                Framing::Chunked
            }
            (None, Some(n)) => {
                if n > self.limits.body_max as u64 {
                    return Err(HttpError::BodyTooLarge {
                        max: self.limits.body_max,
                    });
                }
                Framing::Length(n)
            }
            (None, None) => {
                close = true;
                Framing::UntilClose
            }
        };
        self.head.framing = framing;
        self.head.keep_alive = !close;
        self.state = match framing {
            Framing::None | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Body { left: n },
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        Ok(Some(len))
    }

    fn read_chunk_size(&mut self, input: &[u8]) -> Result<Option<usize>, HttpError> {
        match httparse::parse_chunk_size(input) {
            Ok(httparse::Status::Complete((used, size))) => {
                if size == 0 {
                    self.state = State::Trailers;
                } else {
                    // Saturating: a hostile size of up to 2^64 - 1 must be refused, never wrap.
                    if (self.body_len as u64).saturating_add(size) > self.limits.body_max as u64 {
                        return Err(HttpError::BodyTooLarge {
                            max: self.limits.body_max,
                        });
                    }
                    self.state = State::ChunkData { left: size };
                }
                Ok(Some(used))
            }
            Ok(httparse::Status::Partial) => {
                // A size line is short: hex digits, extensions, CRLF.
                if input.len() > 1024 {
                    return Err(HttpError::BadChunk(
                        "chunk-size line longer than 1024 bytes",
                    ));
                }
                Ok(None)
            }
            Err(_) => Err(HttpError::BadChunk("not a chunk-size line")),
        }
    }

    fn read_trailer_line(&mut self, input: &[u8]) -> Result<Option<usize>, HttpError> {
        let Some(end) = input.windows(2).position(|w| w == b"\r\n") else {
            if input.len() > self.limits.head_max {
                return Err(HttpError::HeadTooLarge {
                    max: self.limits.head_max,
                });
            }
            return Ok(None);
        };
        if end == 0 {
            self.state = State::Done;
        }
        Ok(Some(end + 2))
    }
}

#[cfg(test)]
mod tests;
