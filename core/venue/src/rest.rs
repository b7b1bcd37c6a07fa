//! The simulated venue's REST limits (issue 14, in progress; docs/rest.md): what the large
//! venues do to a client of their market-data REST API, as a state machine the venue's HTTP
//! endpoint (not wired yet: `keel venue --rest-listen`) runs per client.
//!
//! - Every endpoint has a weight ([`endpoint_weight`]); a client has a per-second and a
//!   per-minute weight budget in fixed windows (each starts at the client's first request in
//!   it).
//! - A request that would overrun a window is answered **429** with `Retry-After` (whole
//!   seconds to the end of that window) and is not counted; every answer carries the used
//!   weight of both windows (`X-Used-Weight-1s`, `X-Used-Weight-1m`).
//! - A client that keeps sending while told to wait collects strikes; at `ban_after` strikes it
//!   is **banned**: every request answered **418** with `Retry-After` until the ban ends.
//!
//! | client state | request | answer | state after |
//! | --- | --- | --- | --- |
//! | banned, before its end | any | 418, Retry-After to the ban's end | banned |
//! | told to wait (after a 429), before the time given | any | 429 (strike); at `ban_after` strikes 418 | waiting / banned |
//! | free | fits both windows | served, weight counted | free |
//! | free | overruns a window | 429, Retry-After to that window's end | told to wait |

/// A venue's REST limits per client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestLimits {
    /// Weight per second.
    pub second_weight: u32,
    /// Weight per minute.
    pub minute_weight: u32,
    /// Requests sent while told to wait before a ban.
    pub ban_after: u32,
    /// How long a ban lasts.
    pub ban_ns: u64,
}

impl Default for RestLimits {
    fn default() -> Self {
        Self {
            second_weight: 50,
            minute_weight: 1_200,
            ban_after: 5,
            ban_ns: 120_000_000_000,
        }
    }
}

/// The weight of a GET on `path` with `query` (`None`: no such endpoint): ticker 1, depth 2
/// up to 100 levels and 10 beyond, klines 5, exchange information 10.
pub fn endpoint_weight(path: &str, query: &str) -> Option<u32> {
    match path {
        "/api/v3/ticker" => Some(1),
        "/api/v3/depth" => {
            let limit = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("limit="))
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(100);
            Some(if limit <= 100 { 2 } else { 10 })
        }
        "/api/v3/klines" => Some(5),
        "/api/v3/exchangeInfo" => Some(10),
        _ => None,
    }
}

/// A query's parameters, each at most once, and `limit` a whole number in the endpoint's
/// range (depth 1..=5,000, klines 1..=1,000): else why not (answered 400, not weighed).
pub fn check_query(path: &str, query: &str) -> Result<(), String> {
    let mut seen: [&str; 8] = [""; 8];
    for (n, kv) in query.split('&').filter(|kv| !kv.is_empty()).enumerate() {
        let key = kv.split_once('=').map_or(kv, |(k, _)| k);
        if seen[..n.min(seen.len())].contains(&key) {
            return Err(format!("parameter '{key}' given twice"));
        }
        if n == seen.len() {
            return Err(format!("more than {} parameters", seen.len()));
        }
        seen[n] = key;
    }
    let max = match path {
        "/api/v3/depth" => 5_000,
        "/api/v3/klines" => 1_000,
        _ => return Ok(()),
    };
    let limit = query.split('&').find_map(|kv| kv.strip_prefix("limit="));
    match limit {
        None => Ok(()),
        Some(v) => match v.parse::<u32>() {
            Ok(l) if (1..=max).contains(&l) && v.bytes().all(|b| b.is_ascii_digit()) => Ok(()),
            _ => Err(format!(
                "limit '{}' is not a whole number in 1..={max}",
                v.chars().take(32).collect::<String>()
            )),
        },
    }
}

/// What the venue answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Served; the used weight of both windows after it.
    Serve {
        /// Used this second.
        used_1s: u32,
        /// Used this minute.
        used_1m: u32,
    },
    /// 429: wait this many seconds.
    TooMany {
        /// `Retry-After`.
        retry_after_s: u64,
        /// Used this second.
        used_1s: u32,
        /// Used this minute.
        used_1m: u32,
    },
    /// 418: banned for this many more seconds.
    Banned {
        /// `Retry-After`.
        retry_after_s: u64,
    },
}

const SEC: u64 = 1_000_000_000;

/// One client's windows, wait and ban.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientWindows {
    second: (u64, u32),
    minute: (u64, u32),
    wait_until_ns: u64,
    strikes: u32,
    banned_until_ns: u64,
    /// Requests answered 429.
    pub throttled: u64,
    /// Requests answered 418.
    pub banned: u64,
}

impl ClientWindows {
    /// Nothing counted for a minute, and neither banned nor told to wait.
    pub fn idle(&self, now_ns: u64) -> bool {
        now_ns >= self.minute.0.saturating_add(60 * SEC)
            && now_ns >= self.banned_until_ns
            && now_ns >= self.wait_until_ns
    }

    /// Decides a request of `weight` at `now_ns` (see the module's table).
    pub fn admit(&mut self, now_ns: u64, weight: u32, limits: &RestLimits) -> Verdict {
        let secs = |ns: u64| ns.div_ceil(SEC).max(1);
        if now_ns < self.banned_until_ns {
            self.banned += 1;
            return Verdict::Banned {
                retry_after_s: secs(self.banned_until_ns - now_ns),
            };
        }
        for (window, len) in [(&mut self.second, SEC), (&mut self.minute, 60 * SEC)] {
            if now_ns >= window.0.saturating_add(len) || window.0 == 0 && window.1 == 0 {
                *window = (now_ns, 0);
            }
        }
        let (used_1s, used_1m) = (self.second.1, self.minute.1);
        if now_ns < self.wait_until_ns {
            self.strikes += 1;
            if self.strikes >= limits.ban_after {
                self.banned_until_ns = now_ns.saturating_add(limits.ban_ns);
                self.strikes = 0;
                self.banned += 1;
                return Verdict::Banned {
                    retry_after_s: secs(limits.ban_ns),
                };
            }
            self.throttled += 1;
            return Verdict::TooMany {
                retry_after_s: secs(self.wait_until_ns - now_ns),
                used_1s,
                used_1m,
            };
        }
        let over_1s = used_1s.saturating_add(weight) > limits.second_weight;
        let over_1m = used_1m.saturating_add(weight) > limits.minute_weight;
        if over_1s || over_1m {
            let end = if over_1m {
                self.minute.0 + 60 * SEC
            } else {
                self.second.0 + SEC
            };
            self.wait_until_ns = end;
            self.throttled += 1;
            return Verdict::TooMany {
                retry_after_s: secs(end - now_ns),
                used_1s,
                used_1m,
            };
        }
        self.strikes = 0;
        self.second.1 = used_1s + weight;
        self.minute.1 = used_1m + weight;
        Verdict::Serve {
            used_1s: self.second.1,
            used_1m: self.minute.1,
        }
    }
}

/// `keel venue --rest-listen`: where the REST API listens and its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestConfig {
    /// The address.
    pub listen: std::net::SocketAddr,
    /// Per-client limits.
    pub limits: RestLimits,
    /// Connections at once (one more is closed at once).
    pub conns_max: u32,
}

/// Longest request head, bytes (a longer one is answered 431 and closed).
const REQUEST_HEAD_MAX: usize = 8 * 1024;
/// Requests one connection may have answered per pass.
const REQUESTS_PER_PASS: usize = 16;

/// What the REST endpoint counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestStats {
    /// Requests read.
    pub requests: u64,
    /// Answered 200.
    pub served: u64,
    /// Answered 429.
    pub throttled: u64,
    /// Answered 418.
    pub banned: u64,
    /// Refused as malformed, too large, an unknown path or method (4xx, counted, closed or
    /// answered).
    pub bad: u64,
    /// Connections refused (pool full).
    pub refused: u64,
}

/// API keys the endpoint keeps windows for; a further key takes the place of one idle for a
/// minute, or is answered 429 (never merged into another client's budget).
const KEYS_MAX: usize = 64;

/// The venue's REST endpoint. A client is its API key (`X-Api-Key`), each with its own
/// [`ClientWindows`]; requests without one share one budget, as the large venues limit by
/// address (every client of this venue is on loopback: one address). Opening more
/// connections buys nothing.
#[derive(Debug)]
pub struct RestEndpoint {
    /// Its listener.
    pub listener: keel::net::ListenerId,
    /// Its address.
    pub local: std::net::SocketAddr,
    config: RestConfig,
    conns: Vec<keel::net::ConnId>,
    /// Per connection of `conns`: when its waiting request may be answered (the latency
    /// fault; 0 when nothing waits).
    due_ns: Vec<u64>,
    latency_ns: u64,
    /// Connections answered and to be closed once their answer has left (closing at once
    /// would drop it).
    closing: Vec<keel::net::ConnId>,
    anonymous: ClientWindows,
    keyed: Vec<(String, ClientWindows)>,
    stats: RestStats,
    out: Vec<u8>,
}

/// What an endpoint's body builder answers for a served request: the JSON body, or a status
/// (404 for an unknown symbol) and its message.
pub type Built = Result<String, (u16, String)>;

impl RestEndpoint {
    /// An endpoint on `listener`.
    pub fn new(
        listener: keel::net::ListenerId,
        local: std::net::SocketAddr,
        config: RestConfig,
    ) -> Self {
        Self {
            listener,
            local,
            conns: Vec::with_capacity(config.conns_max as usize),
            due_ns: Vec::with_capacity(config.conns_max as usize),
            latency_ns: 0,
            closing: Vec::with_capacity(config.conns_max as usize),
            anonymous: ClientWindows::default(),
            keyed: Vec::with_capacity(KEYS_MAX),
            config,
            stats: RestStats::default(),
            out: Vec::with_capacity(64 * 1024),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> RestStats {
        self.stats
    }

    /// The limits (changed by the control port's `rest-limit`).
    pub fn limits_mut(&mut self) -> &mut RestLimits {
        &mut self.config.limits
    }

    /// Every answer waits this long from the moment its request is read (control
    /// `rest-latency`).
    pub fn set_latency_ns(&mut self, latency_ns: u64) {
        self.latency_ns = latency_ns;
    }

    /// A connection accepted on its listener.
    pub fn accept(&mut self, t: &mut impl keel::net::Transport, conn: keel::net::ConnId) {
        if self.conns.len() + self.closing.len() >= self.config.conns_max as usize {
            self.stats.refused += 1;
            t.close(conn);
            return;
        }
        self.conns.push(conn);
        self.due_ns.push(0);
    }

    /// A connection closed.
    pub fn closed(&mut self, conn: keel::net::ConnId) {
        if let Some(i) = self.conns.iter().position(|c| *c == conn) {
            self.conns.remove(i);
            self.due_ns.remove(i);
        }
        self.closing.retain(|c| *c != conn);
    }

    /// The windows of the client with `key` (none, or past [`KEYS_MAX`]: the anonymous ones).
    fn windows(&mut self, now_ns: u64, key: Option<&str>) -> Option<&mut ClientWindows> {
        let Some(key) = key else {
            return Some(&mut self.anonymous);
        };
        if let Some(i) = self.keyed.iter().position(|(k, _)| k == key) {
            return Some(&mut self.keyed[i].1);
        }
        if self.keyed.len() < KEYS_MAX {
            self.keyed.push((key.to_string(), ClientWindows::default()));
            return self.keyed.last_mut().map(|(_, w)| w);
        }
        // Full: a key idle for a whole minute (no ban, no wait) gives its place up; else the
        // new key is refused — never merged into a budget another client could get banned.
        let i = self.keyed.iter().position(|(_, w)| w.idle(now_ns))?;
        self.keyed[i] = (key.to_string(), ClientWindows::default());
        Some(&mut self.keyed[i].1)
    }

    /// Answers every whole request received (at most [`REQUESTS_PER_PASS`] per connection);
    /// `build(path, query)` makes a served request's body.
    pub fn serve(
        &mut self,
        now_ns: u64,
        t: &mut impl keel::net::Transport,
        build: impl Fn(&str, &str) -> Built,
    ) {
        // Answered connections close once their answer has been written.
        self.closing.retain(|&conn| {
            let sent = t.send_pending(conn) == 0;
            if sent {
                t.close(conn);
            }
            !sent
        });
        let mut i = 0;
        while i < self.conns.len() {
            let conn = self.conns[i];
            let mut close = false;
            for _ in 0..REQUESTS_PER_PASS {
                let buf = t.received(conn);
                if buf.is_empty() {
                    break;
                }
                if self.latency_ns > 0 {
                    if self.due_ns[i] == 0 {
                        self.due_ns[i] = now_ns.saturating_add(self.latency_ns);
                    }
                    if now_ns < self.due_ns[i] {
                        break;
                    }
                    self.due_ns[i] = 0;
                }
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut req = httparse::Request::new(&mut headers);
                let window = &buf[..buf.len().min(REQUEST_HEAD_MAX)];
                let (status, head_len, path, query, key) = match req.parse(window) {
                    Ok(httparse::Status::Complete(n)) => {
                        let key = req
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case("x-api-key"))
                            .and_then(|h| std::str::from_utf8(h.value).ok())
                            .map(|k| k.trim().chars().take(64).collect::<String>());
                        let target = req.path.unwrap_or("");
                        let (path, query) = target.split_once('?').unwrap_or((target, ""));
                        let has_body = req.headers.iter().any(|h| {
                            (h.name.eq_ignore_ascii_case("content-length") && h.value != b"0")
                                || h.name.eq_ignore_ascii_case("transfer-encoding")
                        });
                        let status = if req.method != Some("GET") || has_body {
                            405
                        } else {
                            0
                        };
                        (status, n, path.to_string(), query.to_string(), key)
                    }
                    Ok(httparse::Status::Partial) if buf.len() < REQUEST_HEAD_MAX => break,
                    Ok(httparse::Status::Partial) => {
                        (431, buf.len(), String::new(), String::new(), None)
                    }
                    Err(_) => (400, buf.len(), String::new(), String::new(), None),
                };
                t.consume(conn, head_len);
                self.stats.requests += 1;
                let limits = self.config.limits;
                let (code, body, extra) = if status != 0 {
                    self.stats.bad += 1;
                    // Every refused request closes: a body it carried (a POST, a GET with
                    // Content-Length or chunks) is never read as the next request.
                    close = true;
                    (status, format!("{{\"error\":{status}}}"), None)
                } else if let Err(why) = check_query(&path, &query) {
                    self.stats.bad += 1;
                    (400, serde_json::json!({ "error": why }).to_string(), None)
                } else if let Some(weight) = endpoint_weight(&path, &query) {
                    let verdict = match self.windows(now_ns, key.as_deref()) {
                        Some(w) => w.admit(now_ns, weight, &limits),
                        None => Verdict::TooMany {
                            retry_after_s: 60,
                            used_1s: 0,
                            used_1m: 0,
                        },
                    };
                    match verdict {
                        Verdict::Serve { used_1s, used_1m } => match build(&path, &query) {
                            Ok(body) => {
                                self.stats.served += 1;
                                (200, body, Some((used_1s, used_1m, None)))
                            }
                            Err((code, why)) => {
                                self.stats.bad += 1;
                                let body = serde_json::json!({"error": why}).to_string();
                                (code, body, Some((used_1s, used_1m, None)))
                            }
                        },
                        Verdict::TooMany {
                            retry_after_s,
                            used_1s,
                            used_1m,
                        } => {
                            self.stats.throttled += 1;
                            let body = "{\"error\":\"too many requests\"}".to_string();
                            (429, body, Some((used_1s, used_1m, Some(retry_after_s))))
                        }
                        Verdict::Banned { retry_after_s } => {
                            self.stats.banned += 1;
                            let body = "{\"error\":\"banned\"}".to_string();
                            (418, body, Some((0, 0, Some(retry_after_s))))
                        }
                    }
                } else {
                    self.stats.bad += 1;
                    (404, "{\"error\":\"no such endpoint\"}".to_string(), None)
                };
                self.out.clear();
                let reason = match code {
                    200 => "OK",
                    400 => "Bad Request",
                    404 => "Not Found",
                    405 => "Method Not Allowed",
                    418 => "I'm a teapot",
                    429 => "Too Many Requests",
                    431 => "Request Header Fields Too Large",
                    _ => "Error",
                };
                let mut head = format!(
                    "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n",
                    body.len()
                );
                if let Some((used_1s, used_1m, retry)) = extra {
                    head +=
                        &format!("X-Used-Weight-1s: {used_1s}\r\nX-Used-Weight-1m: {used_1m}\r\n");
                    if let Some(s) = retry {
                        head += &format!("Retry-After: {s}\r\n");
                    }
                }
                if close {
                    head += "Connection: close\r\n";
                }
                head += "\r\n";
                self.out.extend_from_slice(head.as_bytes());
                self.out.extend_from_slice(body.as_bytes());
                if t.send(conn, &self.out).is_err() || close {
                    close = true;
                    break;
                }
            }
            if close {
                self.closing.push(self.conns.remove(i));
                self.due_ns.remove(i);
            } else {
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> RestLimits {
        RestLimits {
            second_weight: 10,
            minute_weight: 30,
            ban_after: 3,
            ban_ns: 10 * SEC,
        }
    }

    #[test]
    fn weights_by_endpoint() {
        assert_eq!(endpoint_weight("/api/v3/ticker", "symbol=AAPL"), Some(1));
        assert_eq!(
            endpoint_weight("/api/v3/depth", "symbol=AAPL&limit=100"),
            Some(2)
        );
        assert_eq!(endpoint_weight("/api/v3/depth", "limit=5000"), Some(10));
        assert_eq!(endpoint_weight("/api/v3/depth", "limit=x"), Some(2));
        assert_eq!(endpoint_weight("/api/v3/klines", ""), Some(5));
        assert_eq!(endpoint_weight("/api/v3/order", ""), None);
    }

    // Goal (found by review): a client inventing keys cannot push others into a shared budget
    // it then gets banned: past the table a new key takes the place of one idle for a minute,
    // else it is refused (`None`: answered 429) and the anonymous budget is untouched.
    #[test]
    fn the_key_table_never_merges_a_new_key_into_another_budget() {
        let config = RestConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            limits: limits(),
            conns_max: 4,
        };
        let mut e = RestEndpoint::new(keel::net::ListenerId(0), config.listen, config);
        let l = limits();
        for k in 0..KEYS_MAX {
            let w = e.windows(SEC, Some(&format!("k{k}"))).unwrap();
            assert!(matches!(w.admit(SEC, 1, &l), Verdict::Serve { .. }));
        }
        assert!(
            e.windows(SEC, Some("newcomer")).is_none(),
            "table full, all busy"
        );
        assert_eq!(
            e.anonymous,
            ClientWindows::default(),
            "the anonymous budget untouched"
        );
        // A minute later every key is idle: the newcomer takes one place, with a fresh budget.
        let later = 62 * SEC;
        let w = e.windows(later, Some("newcomer")).unwrap();
        assert_eq!(*w, ClientWindows::default());
        assert!(e.keyed.iter().any(|(k, _)| k == "newcomer"));
        assert_eq!(e.keyed.len(), KEYS_MAX);
        // A banned key is never evicted (its ban would be lost).
        let banned = ClientWindows {
            banned_until_ns: u64::MAX,
            ..ClientWindows::default()
        };
        assert!(!banned.idle(later));
    }

    #[test]
    fn queries_are_checked_before_they_are_weighed() {
        assert!(check_query("/api/v3/depth", "symbol=A&limit=5000").is_ok());
        assert!(check_query("/api/v3/depth", "symbol=A").is_ok());
        assert!(check_query("/api/v3/klines", "symbol=A&limit=1000").is_ok());
        for (path, q) in [
            ("/api/v3/depth", "symbol=A&limit=5001"),
            ("/api/v3/depth", "limit=0"),
            ("/api/v3/depth", "limit=+1"),
            ("/api/v3/depth", "limit="),
            ("/api/v3/depth", "limit=18446744073709551616"),
            ("/api/v3/klines", "limit=1001"),
            ("/api/v3/ticker", "symbol=A&symbol=B"),
            ("/api/v3/ticker", "a&b&c&d&e&f&g&h&i"),
        ] {
            assert!(check_query(path, q).is_err(), "{path}?{q}");
        }
    }

    // Goal: each row of the module's table.
    #[test]
    fn serve_then_429_then_ban() {
        let l = limits();
        let mut c = ClientWindows::default();
        let t0 = 5 * SEC;
        assert_eq!(
            c.admit(t0, 5, &l),
            Verdict::Serve {
                used_1s: 5,
                used_1m: 5
            }
        );
        assert_eq!(
            c.admit(t0, 5, &l),
            Verdict::Serve {
                used_1s: 10,
                used_1m: 10
            }
        );
        // Over the second: 429 until the second's end, not counted.
        assert_eq!(
            c.admit(t0 + SEC / 2, 1, &l),
            Verdict::TooMany {
                retry_after_s: 1,
                used_1s: 10,
                used_1m: 10
            }
        );
        // Still sending while told to wait: strikes, then the ban.
        assert!(matches!(
            c.admit(t0 + SEC / 2, 1, &l),
            Verdict::TooMany { .. }
        ));
        assert!(matches!(
            c.admit(t0 + SEC / 2, 1, &l),
            Verdict::TooMany { .. }
        ));
        assert_eq!(
            c.admit(t0 + SEC / 2, 1, &l),
            Verdict::Banned { retry_after_s: 10 }
        );
        assert_eq!(
            c.admit(t0 + 5 * SEC, 1, &l),
            Verdict::Banned { retry_after_s: 6 }
        );
        // After the ban: served again, the minute still counting.
        assert_eq!(
            c.admit(t0 + 11 * SEC, 1, &l),
            Verdict::Serve {
                used_1s: 1,
                used_1m: 11
            }
        );
        assert_eq!((c.throttled, c.banned), (3, 2));
    }

    // Goal: a client that waits as told is never banned, and the minute window holds too.
    #[test]
    fn a_client_that_waits_is_never_banned() {
        let l = limits();
        let mut c = ClientWindows::default();
        let mut now = SEC;
        let mut served = 0;
        for _ in 0..200 {
            match c.admit(now, 3, &l) {
                Verdict::Serve { .. } => served += 1,
                Verdict::TooMany { retry_after_s, .. } => now += retry_after_s * SEC,
                Verdict::Banned { .. } => panic!("banned though it waited"),
            }
            now += SEC / 10;
        }
        assert!(served > 0 && c.banned == 0);
    }

    proptest! {
        // Goal: whatever a client sends, the weight served in any one of the client's fixed
        // windows never exceeds its limit.
        #[test]
        fn served_weight_stays_within_the_windows(
            steps in proptest::collection::vec((0u64..400_000_000, 1u32..6), 1..400),
        ) {
            let l = limits();
            let mut c = ClientWindows::default();
            let mut now = SEC;
            let mut served: Vec<(u64, u32)> = Vec::new();
            for (gap, w) in steps {
                now += gap;
                if let Verdict::Serve { used_1s, used_1m } = c.admit(now, w, &l) {
                    prop_assert!(used_1s <= l.second_weight && used_1m <= l.minute_weight);
                    served.push((now, w));
                }
            }
            // A fixed window is at most its length long: any interval of that length holds
            // at most two windows' worth.
            for (len, limit) in [(SEC, l.second_weight), (60 * SEC, l.minute_weight)] {
                for (i, &(start, _)) in served.iter().enumerate() {
                    let sum: u32 = served[i..].iter().take_while(|(t, _)| *t < start + len).map(|(_, w)| *w).sum();
                    prop_assert!(sum <= 2 * limit);
                }
            }
        }
    }
}
