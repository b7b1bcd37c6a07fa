//! One venue's REST API as keel uses it: the gate ([`RestGate`]) in front of a few kept-alive
//! connections ([`HttpClient`]), a bounded table of requests, and the retry rules — driven by
//! the owner's loop (`on_event` with the transport's events, `poll` with the TSC clock).
//!
//! A request's life, row by row:
//!
//! | state | event | next | what happens |
//! | --- | --- | --- | --- |
//! | — | `submit` | waiting | weighed by its path; queued at the gate (a full table or queue, a target too long or a weight over the burst: refused at once, typed) |
//! | waiting | the gate grants | ready | its weight is taken from every window |
//! | waiting | its acquire deadline passes | — | `Failed(AcquireTimedOut)` |
//! | ready | a connection is free | in flight | the request is written (or its connection opened) |
//! | in flight | a response, not 429/418/5xx | — | `Done { status, body }`; used-weight headers align the gate |
//! | in flight | 429 or 418 | waiting | the gate pauses (`Retry-After`) and cuts its rate; the request is retried **through the gate** after a backoff (attempts bounded, then `Failed(Status)`) |
//! | in flight | 5xx, connection lost, connect failed | waiting | retried through the gate (idempotent methods only; a POST whose bytes were written is `Failed(Unknown)`) |
//! | in flight | no whole answer in time | waiting / — | a GET is retried through the gate; a POST is `Failed(Unknown)`: a timeout is unknown, never failed, and never blindly resent |
//!
//! Nothing allocates after [`RestSession::new`]: targets are copied into buffers sized at start,
//! the gate's queue, the ready queue and the grant buffer are bounded by the table's size.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::client::{FailReason, HttpClient, HttpClientConfig, Outcome};
use super::gate::{Decision, GateError, RestGate, RestGateConfig, RestGateStats};
use super::{Head, Limits, Method, Request};
use crate::guard::limiter::LimiterConfigError;
use crate::net::{NetEvent, Transport};
use crate::rng::SplitMix64;

/// Settings of one venue's REST API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestSessionConfig {
    /// Where to connect.
    pub addr: SocketAddr,
    /// The `Host` header (the address when empty).
    pub host: String,
    /// Kept-alive connections (requests in flight at once), 1..=64.
    pub connections: usize,
    /// Requests tracked at once (waiting, ready or in flight); more are refused.
    pub requests_max: usize,
    /// Longest request target (path and query), bytes.
    pub target_max: usize,
    /// From writing a request to its whole answer.
    pub timeout_ns: u64,
    /// Largest response body.
    pub body_max: usize,
    /// The gate (windows, endpoint weights, acquire timeout, retries, pauses).
    pub gate: RestGateConfig,
    /// Response headers that carry the venue's used weight, by gate window index (e.g.
    /// `X-Used-Weight-1s` for window 0).
    pub used_weight_headers: Vec<(usize, String)>,
    /// Sent as `X-Api-Key` with every request when set (venues count weight per key).
    pub api_key: Option<String>,
    /// Seed of the retry jitter (default: from the OS, `rng::os_seed`; a feed's REST session
    /// takes it from the feed's seed).
    pub seed: u64,
}

impl RestSessionConfig {
    /// Defaults for `addr`: 4 connections, 256 requests, 512-byte targets, 5 s, 4 MiB bodies.
    pub fn new(addr: SocketAddr, gate: RestGateConfig) -> Self {
        Self {
            addr,
            host: String::new(),
            connections: 4,
            requests_max: 256,
            target_max: 512,
            timeout_ns: 5_000_000_000,
            body_max: 4 << 20,
            gate,
            used_weight_headers: Vec::new(),
            api_key: None,
            seed: crate::rng::os_seed(),
        }
    }
}

/// Why a session could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RestSessionConfigError {
    /// The gate's windows.
    #[error(transparent)]
    Limiter(#[from] LimiterConfigError),
    /// A bound out of range.
    #[error("{what} = {value}: must be within {min}..={max}")]
    Range {
        /// The setting.
        what: &'static str,
        /// Its value.
        value: u64,
        /// Smallest allowed.
        min: u64,
        /// Largest allowed.
        max: u64,
    },
}

/// Why a request was refused or did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestError {
    /// Every slot of the request table is taken.
    #[error("REST request table full ({0} requests)")]
    TableFull(usize),
    /// The target cannot go on the wire (not an absolute path of visible ASCII, or a `#`).
    #[error("request target {0:?} cannot be sent (an absolute path of visible ASCII, no '#')")]
    BadTarget(String),
    /// The target is longer than `target_max`.
    #[error("request target of {len} bytes exceeds target_max {max}")]
    TargetTooLong {
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The gate refused it (queue full, too heavy).
    #[error(transparent)]
    Gate(GateError),
    /// The gate did not grant its weight within the acquire timeout.
    #[error("no weight granted within the acquire timeout")]
    AcquireTimedOut,
    /// Retries spent on 429/418/5xx answers: the last status.
    #[error("HTTP {status} after {attempts} attempts")]
    Status {
        /// The last status.
        status: u16,
        /// Attempts made.
        attempts: u32,
    },
    /// Retries spent on transport failures or timeouts.
    #[error("failed after {attempts} attempts: {why}")]
    Failed {
        /// The last failure.
        why: String,
        /// Attempts made.
        attempts: u32,
    },
    /// A request that changes state (POST) was written and not answered: it may have been
    /// carried out. Never resent: the layer above queries.
    #[error("no answer to a {method} that was written: its outcome is unknown")]
    Unknown {
        /// Its method.
        method: &'static str,
    },
}

/// What became of a request ([`RestSession::poll`], [`RestSession::on_event`]).
#[derive(Debug)]
pub enum RestEvent<'a> {
    /// A response (any status but those retried).
    Done {
        /// The caller's token.
        token: u64,
        /// The status.
        status: u16,
        /// Its head.
        head: &'a Head,
        /// Its body.
        body: &'a [u8],
    },
    /// Refused or given up.
    Failed {
        /// The caller's token.
        token: u64,
        /// Why.
        error: RestError,
    },
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestSessionStats {
    /// Requests submitted (accepted into the table).
    pub submitted: u64,
    /// Requests refused at submit.
    pub refused: u64,
    /// Responses handed back.
    pub done: u64,
    /// Requests given up (acquire timeouts, retries spent, unknown).
    pub failed: u64,
    /// Requests written to the venue (first attempts and retries).
    pub sent: u64,
    /// Retries put back through the gate.
    pub retried: u64,
    /// Non-idempotent requests left unknown.
    pub unknown: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Free,
    Waiting,
    Ready,
    InFlight,
}

#[derive(Debug)]
struct Slot {
    phase: Phase,
    token: u64,
    method: Method,
    target: Vec<u8>,
    weight: u32,
    attempt: u32,
}

/// One venue's REST API. See the module docs.
#[derive(Debug)]
pub struct RestSession {
    config: RestSessionConfig,
    gate: RestGate,
    clients: Vec<HttpClient>,
    /// Per client: the request it carries.
    carrying: Vec<Option<usize>>,
    slots: Vec<Slot>,
    /// Granted requests waiting for a free connection.
    ready: VecDeque<usize>,
    /// The gate's decisions of one poll.
    decisions: Vec<Decision>,
    used: Vec<(usize, u32)>,
    rng: SplitMix64,
    stats: RestSessionStats,
}

impl RestSession {
    /// A session; connections open on the first requests.
    pub fn new(mut config: RestSessionConfig, now_ns: u64) -> Result<Self, RestSessionConfigError> {
        let range = |what, value: usize, min: u64, max: u64| {
            let value = value as u64;
            if value < min || value > max {
                return Err(RestSessionConfigError::Range {
                    what,
                    value,
                    min,
                    max,
                });
            }
            Ok(())
        };
        range("connections", config.connections, 1, 64)?;
        range("requests_max", config.requests_max, 1, 65_536)?;
        range("target_max", config.target_max, 1, 8_192)?;
        range("body_max", config.body_max, 1, 64 << 20)?;
        config.gate.queue_max = config.requests_max;
        let gate = RestGate::new(config.gate.clone(), now_ns)?;
        let host = if config.host.is_empty() {
            config.addr.to_string()
        } else {
            config.host.clone()
        };
        let client = HttpClientConfig {
            host,
            limits: Limits {
                body_max: config.body_max,
                ..Limits::default()
            },
            request_max: config.target_max + 1_024,
            timeout_ns: config.timeout_ns,
            ..HttpClientConfig::new(config.addr)
        };
        Ok(Self {
            gate,
            clients: (0..config.connections)
                .map(|_| HttpClient::new(client.clone()))
                .collect(),
            carrying: vec![None; config.connections],
            slots: (0..config.requests_max)
                .map(|_| Slot {
                    phase: Phase::Free,
                    token: 0,
                    method: Method::Get,
                    target: Vec::with_capacity(config.target_max),
                    weight: 0,
                    attempt: 0,
                })
                .collect(),
            ready: VecDeque::with_capacity(config.requests_max),
            decisions: Vec::with_capacity(config.requests_max),
            used: Vec::with_capacity(config.used_weight_headers.len()),
            rng: SplitMix64::new(config.seed),
            stats: RestSessionStats::default(),
            config,
        })
    }

    /// Counters.
    pub fn stats(&self) -> RestSessionStats {
        self.stats
    }

    /// The gate's figures (acquire wait, timeouts, 429s, 418s, retries).
    pub fn gate_stats(&self) -> &RestGateStats {
        self.gate.stats()
    }

    /// The gate's current refill rate, per mille of the configured rate.
    pub fn rate_permille(&mut self, now_ns: u64) -> u64 {
        self.gate.rate_permille(now_ns)
    }

    /// Requests tracked (waiting, ready or in flight).
    pub fn outstanding(&self) -> usize {
        self.slots.iter().filter(|s| s.phase != Phase::Free).count()
    }

    /// Requests that may still be submitted now (free slots in the table).
    pub fn room(&self) -> usize {
        self.slots.len() - self.outstanding()
    }

    /// Takes a request: weighed by its target's path (or `weight` when the caller knows
    /// better, e.g. a depth snapshot whose weight depends on its `limit`) and queued at the
    /// gate. `token` comes back with its outcome.
    pub fn submit(
        &mut self,
        now_ns: u64,
        token: u64,
        method: Method,
        target: &str,
        weight: Option<u32>,
    ) -> Result<(), RestError> {
        let refused = |stats: &mut RestSessionStats, e| {
            stats.refused += 1;
            Err(e)
        };
        if target.len() > self.config.target_max {
            let e = RestError::TargetTooLong {
                len: target.len(),
                max: self.config.target_max,
            };
            return refused(&mut self.stats, e);
        }
        if !super::valid_target(target) {
            let shown = target.chars().take(64).collect();
            return refused(&mut self.stats, RestError::BadTarget(shown));
        }
        let Some(i) = self.slots.iter().position(|s| s.phase == Phase::Free) else {
            return refused(&mut self.stats, RestError::TableFull(self.slots.len()));
        };
        let weight = weight.unwrap_or_else(|| self.gate.weight_of(target));
        if let Err(e) = self.gate.acquire(now_ns, i as u64, weight) {
            return refused(&mut self.stats, RestError::Gate(e));
        }
        let slot = &mut self.slots[i];
        slot.phase = Phase::Waiting;
        slot.token = token;
        slot.method = method;
        slot.target.clear();
        slot.target.extend_from_slice(target.as_bytes());
        slot.weight = weight;
        slot.attempt = 1;
        self.stats.submitted += 1;
        Ok(())
    }

    /// Timers and grants: requests past their deadline fail, the gate grants what the windows
    /// allow, granted requests go out on free connections.
    pub fn poll(
        &mut self,
        now_ns: u64,
        t: &mut impl Transport,
        mut emit: impl FnMut(RestEvent<'_>),
    ) {
        for c in 0..self.clients.len() {
            if let Some(outcome) = self.clients[c].poll(t, now_ns) {
                self.outcome(now_ns, c, outcome, &mut emit);
            }
        }
        let mut decisions = std::mem::take(&mut self.decisions);
        decisions.clear();
        let free = self.carrying.iter().filter(|c| c.is_none()).count();
        let grants = free.saturating_sub(self.ready.len());
        self.gate
            .poll_at_most(now_ns, grants, |d| decisions.push(d));
        for d in decisions.drain(..) {
            match d {
                Decision::Granted { token, .. } => {
                    self.slots[token as usize].phase = Phase::Ready;
                    self.ready.push_back(token as usize);
                }
                Decision::TimedOut { token } => {
                    self.fail(token as usize, RestError::AcquireTimedOut, &mut emit);
                }
            }
        }
        self.decisions = decisions;
        self.dispatch(now_ns, t, &mut emit);
    }

    /// Hands a transport event to the connection it is for.
    pub fn on_event(
        &mut self,
        now_ns: u64,
        t: &mut impl Transport,
        event: &NetEvent,
        mut emit: impl FnMut(RestEvent<'_>),
    ) {
        for c in 0..self.clients.len() {
            if let Some(outcome) = self.clients[c].on_event(t, event) {
                self.outcome(now_ns, c, outcome, &mut emit);
                self.dispatch(now_ns, t, &mut emit);
                return;
            }
        }
    }

    fn dispatch(
        &mut self,
        now_ns: u64,
        t: &mut impl Transport,
        emit: &mut impl FnMut(RestEvent<'_>),
    ) {
        while let Some(&i) = self.ready.front() {
            let Some(c) = (0..self.clients.len()).find(|&c| self.carrying[c].is_none()) else {
                return;
            };
            self.ready.pop_front();
            let slot = &self.slots[i];
            // The target was a `&str` when submitted.
            let target = std::str::from_utf8(&slot.target).unwrap_or("/");
            let key = [("X-Api-Key", self.config.api_key.as_deref().unwrap_or(""))];
            let req = Request {
                method: slot.method,
                target,
                host: "",
                headers: if self.config.api_key.is_some() {
                    &key
                } else {
                    &[]
                },
                body: &[],
            };
            match self.clients[c].send(t, now_ns, &req) {
                Ok(()) => {
                    self.stats.sent += 1;
                    self.slots[i].phase = Phase::InFlight;
                    self.carrying[c] = Some(i);
                }
                Err(super::client::SendError::Request(e)) => {
                    // The request itself cannot be written: no retry can change that.
                    let attempts = self.slots[i].attempt;
                    self.fail(
                        i,
                        RestError::Failed {
                            why: e.to_string(),
                            attempts,
                        },
                        emit,
                    );
                }
                Err(e) => {
                    // Nothing written: safe to retry whatever the method.
                    let attempts = self.slots[i].attempt;
                    self.retry_or_fail(now_ns, i, emit, || RestError::Failed {
                        why: e.to_string(),
                        attempts,
                    });
                }
            }
        }
    }

    fn outcome(
        &mut self,
        now_ns: u64,
        c: usize,
        outcome: Outcome,
        emit: &mut impl FnMut(RestEvent<'_>),
    ) {
        let Some(i) = self.carrying[c].take() else {
            return;
        };
        let attempts = self.slots[i].attempt;
        match outcome {
            Outcome::Response { status } => {
                let head = self.clients[c].head();
                self.used.clear();
                for (window, name) in &self.config.used_weight_headers {
                    if let Some(v) = head.header_u64(name) {
                        self.used.push((*window, v.min(u64::from(u32::MAX)) as u32));
                    }
                }
                self.gate
                    .on_response(now_ns, status, head.retry_after_s(), &self.used);
                let retried = status == 429
                    || status == 418
                    || ((500..=599).contains(&status) && self.slots[i].method.idempotent());
                if retried {
                    self.retry_or_fail(now_ns, i, emit, || RestError::Status { status, attempts });
                    return;
                }
                self.slots[i].phase = Phase::Free;
                self.stats.done += 1;
                emit(RestEvent::Done {
                    token: self.slots[i].token,
                    status,
                    head: self.clients[c].head(),
                    body: self.clients[c].body(),
                });
            }
            Outcome::TimedOut {
                idempotent: false, ..
            }
            | Outcome::Failed {
                idempotent: false,
                written: true,
                ..
            } => {
                self.stats.unknown += 1;
                let method = self.slots[i].method.as_str();
                self.fail(i, RestError::Unknown { method }, emit);
            }
            Outcome::TimedOut { .. } => {
                self.retry_or_fail(now_ns, i, emit, || RestError::Failed {
                    why: "no whole answer within the timeout".into(),
                    attempts,
                });
            }
            Outcome::Failed { why, .. } => {
                self.retry_or_fail(now_ns, i, emit, || RestError::Failed {
                    why: match why {
                        FailReason::Connect(errno) => format!("connect failed (errno {errno})"),
                        FailReason::Closed => "closed before the whole answer".into(),
                        FailReason::Response(e) => e.to_string(),
                        FailReason::Transport(e) => e,
                    },
                    attempts,
                });
            }
        }
    }

    /// Puts request `i` back through the gate after a backoff, or gives up with `error`.
    fn retry_or_fail(
        &mut self,
        now_ns: u64,
        i: usize,
        emit: &mut impl FnMut(RestEvent<'_>),
        error: impl FnOnce() -> RestError,
    ) {
        let next = self.slots[i].attempt + 1;
        match self
            .gate
            .retry(now_ns, i as u64, self.slots[i].weight, next, &mut self.rng)
        {
            Ok(_) => {
                self.slots[i].attempt = next;
                self.slots[i].phase = Phase::Waiting;
                self.stats.retried += 1;
            }
            Err(_) => self.fail(i, error(), emit),
        }
    }

    fn fail(&mut self, i: usize, error: RestError, emit: &mut impl FnMut(RestEvent<'_>)) {
        self.slots[i].phase = Phase::Free;
        self.stats.failed += 1;
        emit(RestEvent::Failed {
            token: self.slots[i].token,
            error,
        });
    }
}
