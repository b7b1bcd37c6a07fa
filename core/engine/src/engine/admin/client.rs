//! `keel ctl`'s side: one request line to a running engine's admin socket, its answer
//! back, with bounded waits.

use super::*;

/// Why `keel ctl` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Nothing accepted the connection: the request was not delivered.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// Connected, but sending the request or reading the whole answer failed (timed out):
    /// the engine may have carried the command out.
    #[error("{0}")]
    Answer(std::io::Error),
}

/// `keel ctl`: sends one request line to the admin socket at `path` and returns the answer.
pub fn request(path: &Path, line: &str) -> Result<String, RequestError> {
    let mut stream = UnixStream::connect(path).map_err(RequestError::Connect)?;
    stream
        .set_read_timeout(Some(ANSWER_WAIT + READ_WAIT + WRITE_WAIT))
        .map_err(RequestError::Answer)?;
    // A refusal may come before the request is read (too many connections waiting): read
    // the answer even if sending failed.
    let sent = stream
        .write_all(line.as_bytes())
        .and_then(|()| stream.write_all(b"\n"));
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    // A one-line refusal that arrived whole before the connection broke is the answer.
    let refusal = answer.starts_with(b"error: ") && answer.ends_with(b"\n");
    if !refusal {
        sent.map_err(RequestError::Answer)?;
        read.map_err(RequestError::Answer)?;
    }
    String::from_utf8(answer).map_err(|_| {
        RequestError::Answer(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the answer is not UTF-8",
        ))
    })
}
