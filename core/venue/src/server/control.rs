//! The control port: one command per line (at most [`CONTROL_LINE_MAX`] bytes, every number
//! range-checked), answered `ok ...` or `error ...`: faults, the exchange, the feeds, the hostile
//! venue's lies, and queries. [`CONTROL_COMMANDS`] lists them all.

use super::*;

impl<T: Transport> VenueServer<T> {
    /// Answers every whole control line (at most [`CONTROL_LINES_PER_PASS`] per connection per
    /// pass); a line over [`CONTROL_LINE_MAX`] is answered with an error and its connection
    /// closed, and so is a connection idle past `control_idle_timeout_ns`.
    pub(super) fn read_controls(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.controls.len() {
            let Control { conn, last_line_ns } = self.controls[i];
            let over = match self.read_control(now_ns, conn) {
                ControlRead::Lines(0) => {
                    let idle_ns = now_ns.saturating_sub(last_line_ns);
                    (idle_ns > self.config.control_idle_timeout_ns).then(|| {
                        self.stats.control_idle_closed += 1;
                        format!(
                            "error idle for more than {} s: closing\n",
                            self.config.control_idle_timeout_ns / 1_000_000_000
                        )
                    })
                }
                ControlRead::Lines(_) => {
                    self.controls[i].last_line_ns = now_ns;
                    None
                }
                ControlRead::TooLong(len) => {
                    self.stats.control_lines_too_long += 1;
                    self.stats.control_errors += 1;
                    Some(format!(
                        "error line of {len} bytes or more is over the limit of {CONTROL_LINE_MAX} bytes: closing\n"
                    ))
                }
            };
            match over {
                Some(reply) => {
                    let _ = self.reactor.send(conn, reply.as_bytes());
                    self.controls.swap_remove(i);
                    self.close_after_flush(conn, true);
                }
                None => i += 1,
            }
        }
    }

    pub(super) fn read_control(&mut self, now_ns: u64, conn: ConnId) -> ControlRead {
        let mut lines = 0;
        while lines < CONTROL_LINES_PER_PASS {
            let buf = self.reactor.received(conn);
            let window = &buf[..buf.len().min(CONTROL_LINE_MAX + 1)];
            let Some(end) = window.iter().position(|&b| b == b'\n') else {
                if buf.len() > CONTROL_LINE_MAX {
                    return ControlRead::TooLong(buf.len());
                }
                break;
            };
            let line = String::from_utf8_lossy(&buf[..end]).trim().to_string();
            self.reactor.consume(conn, end + 1);
            lines += 1;
            let reply = match self.apply_control(now_ns, &line) {
                Ok(_) if line == "help" => control_help(),
                Ok(extra) if extra.is_empty() => format!("ok {line}\n"),
                Ok(extra) => format!("ok {line} {extra}\n"),
                Err(e) => {
                    self.stats.control_errors += 1;
                    format!("error {e}\n")
                }
            };
            let _ = self.reactor.send(conn, reply.as_bytes());
        }
        ControlRead::Lines(lines)
    }

    /// Applies one control command. Commands (times in milliseconds, every number checked
    /// against its range, printed in the error):
    /// `latency MS [JITTER_MS]`, `delay-reports MS`, `delay-final MS`, `stall MS` (each
    /// 0..=[`FAULT_DELAY_MAX_MS`]), `accept-limit N` (0..=sessions_max), `refuse on|off`,
    /// `drop`, `restart`, `reject-burst N` (a u32), `rate-limit N [WINDOW_MS]` (each account
    /// may send N order messages per window, 0 for no limit; the window 1..=
    /// [`FAULT_DELAY_MAX_MS`], unchanged if not given; beyond it: throttle rejects), `flow N` (events per second,
    /// 0..=[`EVENTS_PER_SEC_MAX`]), `replay-all` (the next login is replayed from sequence 1:
    /// duplicates), `clock-jump SECONDS` (signed, at most [`CLOCK_JUMP_MAX_S`] either way: the
    /// wall clock behind the message timestamps jumps), `saturate N MS` | `saturate off` (more
    /// than N connects, 1..=65535, in a window of MS, 1..=[`FAULT_DELAY_MAX_MS`], all fail),
    /// `md-faults DROP DUP SWAP CROSS` (every n-th book delta to every market-data client
    /// dropped, sent twice, swapped with the next, replaced by one that crosses the book; each
    /// a u32, 0: never), `rest-limit SECOND [MINUTE]` (the REST API's weight per client and second, and per
    /// minute, each 1..=4,294,967,295), `rest-latency MS` (each REST answer waits MS,
    /// 0..=[`FAULT_DELAY_MAX_MS`], from the moment its request is read),
    /// `status`, `help` (the caller answers it with [`control_help`]).
    ///
    /// Hostile-venue commands (docs/operations.md, "A hostile venue"): `lie unknown-fill` |
    /// `lie overfill` | `lie fill-after-close` | `lie zero-fill` (every account is sent an Order
    /// Executed that contradicts what it sent and was told: for UserRefNum 4294967295, never
    /// entered; one share beyond its newest open order's whole quantity; one share of its newest
    /// closed order; zero shares of its newest open order; `lie off-limit-fill`: one share of
    /// it through its limit; answered with the `account:user_ref` pairs lied about), `gap N` (the next login
    /// answer skips N reports, 0..=[`LOGIN_GAP_MAX`]), `login-seq S` (the next Login Accepted
    /// announces sequence S, any u64), `debug-packet N` (a Debug packet with N bytes of text,
    /// 0..=[`DEBUG_TEXT_MAX`], to every logged-in session), `oversize N` (a packet announcing
    /// length N, 1..=65535, whole, to every logged-in session).
    ///
    /// Changing the latency, and `restart`, re-time the messages already held back: none
    /// waits longer than the latency now set (plus its jitter), so one message due far in the
    /// future can never hold order entry up after the fault is lifted.
    ///
    /// Three commands read state instead of changing it: `open-orders` answers the ClOrdIDs of
    /// every account order open at the venue (`N id id ...`), `stats` the exchange counters
    /// (`accepted=.. rejected=.. canceled=.. matches=.. duplicate_ids=..`), `sessions` the
    /// order-entry slots (`logged_in=.. prelogin=.. prelogin_max=.. logins=..
    /// login_timeouts=.. prelogin_evicted=.. sessions_full=..`).
    pub fn apply_control(&mut self, now_ns: u64, line: &str) -> Result<String, String> {
        let mut words = line.split_whitespace();
        let cmd = words.next().unwrap_or("");
        let mut args = ControlArgs { cmd, args: words };
        match cmd {
            "latency" | "delay-reports" | "delay-final" | "accept-limit" | "refuse" | "stall"
            | "saturate" => self.control_fault(now_ns, &mut args),
            "rate-limit" | "reject-burst" | "replay-all" | "clock-jump" | "flow" => {
                self.control_exchange(now_ns, &mut args)
            }
            "md-faults" | "rest-limit" | "rest-latency" => self.control_feeds(now_ns, &mut args),
            "lie" | "gap" | "login-seq" | "debug-packet" | "oversize" | "fix-lose" => {
                self.control_hostile(now_ns, &mut args)
            }
            "drop" | "restart" | "status" | "help" | "open-orders" | "sessions" | "tls"
            | "stats" | "fix" | "positions" | "top" => self.control_query(now_ns, &mut args),
            other => Err(format!(
                "unknown command '{other}' (send help for the list of commands)"
            )),
        }
    }

    /// A fault of the session layer (latency, delays, accepts, stall, saturation).
    pub(super) fn control_fault(
        &mut self,
        now_ns: u64,
        args: &mut Args<'_>,
    ) -> Result<String, String> {
        const MS: u64 = 1_000_000;
        let delay_max = FAULT_DELAY_MAX_MS;
        let sessions_max = u64::from(self.config.sessions_max);
        let f = &mut self.config.faults;
        match args.cmd {
            "latency" => {
                let latency = args.num("milliseconds", 0, delay_max)?;
                let jitter = args.optional("jitter", 0, delay_max)?.unwrap_or(0);
                args.end()?;
                f.latency_ns = latency * MS;
                f.jitter_ns = jitter * MS;
                self.retime_delayed(now_ns);
            }
            "delay-reports" => {
                f.report_delay_ns = args.num("milliseconds", 0, delay_max)? * MS;
                args.end()?;
            }
            "delay-final" => {
                f.final_report_delay_ns = args.num("milliseconds", 0, delay_max)? * MS;
                args.end()?;
            }
            "accept-limit" => {
                f.accept_limit = args.num("sessions", 0, sessions_max)? as u32;
                args.end()?;
            }
            "refuse" => {
                match args.args.next() {
                    Some("on") => f.refuse_connects = true,
                    Some("off") => f.refuse_connects = false,
                    other => {
                        let got = other.unwrap_or("nothing");
                        return Err(format!("refuse: expected on|off, got '{got}'"));
                    }
                }
                args.end()?;
            }
            "stall" => {
                let ms = args.num("milliseconds", 0, delay_max)?;
                args.end()?;
                f.stalled_until_ns = now_ns + ms * MS;
            }
            "saturate" => {
                // `saturate N MS` or `saturate off`.
                if args.args.clone().next() == Some("off") {
                    args.args.next();
                    args.end()?;
                    f.saturate_attempts_max = 0;
                } else {
                    let attempts = args.num("attempts", 1, 65_535)? as u32;
                    let window_ms = args.num("milliseconds", 1, delay_max)?;
                    args.end()?;
                    f.saturate_attempts_max = attempts;
                    f.saturate_window_ns = window_ms * MS;
                }
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// A change to the exchange: its rate limit, rejects, replay, clock and flow.
    pub(super) fn control_exchange(
        &mut self,
        _now_ns: u64,
        args: &mut Args<'_>,
    ) -> Result<String, String> {
        const MS: u64 = 1_000_000;
        let delay_max = FAULT_DELAY_MAX_MS;
        match args.cmd {
            "rate-limit" => {
                // Messages per window (0: no limit), and the window in ms (default: as is).
                let messages = args.num("messages", 0, u64::from(u32::MAX))? as u32;
                let (_, window_ns) = self.exchange.rate_limit();
                let window_ms = args
                    .optional("window milliseconds", 1, delay_max)?
                    .unwrap_or(window_ns / MS);
                args.end()?;
                self.exchange
                    .set_rate_limit(messages, window_ms.max(1) * MS);
            }
            "reject-burst" => {
                let n = args.num("orders", 0, u64::from(u32::MAX))? as u32;
                args.end()?;
                self.exchange.reject_burst_remaining = n;
            }
            "replay-all" => {
                args.end()?;
                self.exchange.replay_from_start_once = true;
            }
            "clock-jump" => {
                // Seconds, signed: the venue's wall clock jumps; its monotonic clock does not.
                let w = args.args.next().unwrap_or("");
                let max = CLOCK_JUMP_MAX_S as i64;
                let secs = w
                    .parse::<i64>()
                    .ok()
                    .filter(|s| (-max..=max).contains(s))
                    .ok_or_else(|| {
                        format!("clock-jump: seconds '{w}' is not a whole number in -{max}..={max}")
                    })?;
                args.end()?;
                let delta = secs * 1_000_000_000;
                let offset = &mut self.exchange.wall_offset_ns;
                *offset = offset.wrapping_add(delta as u64);
            }
            "flow" => {
                let rate = args.num("events per second", 0, u64::from(EVENTS_PER_SEC_MAX))?;
                args.end()?;
                self.flow.set_rate(rate).map_err(|e| format!("flow: {e}"))?;
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// A fault of the market-data server or the REST API.
    pub(super) fn control_feeds(
        &mut self,
        _now_ns: u64,
        args: &mut Args<'_>,
    ) -> Result<String, String> {
        const MS: u64 = 1_000_000;
        let delay_max = FAULT_DELAY_MAX_MS;
        let cmd = args.cmd;
        match args.cmd {
            "md-faults" => {
                // Every n-th book delta to every client dropped, doubled, swapped with the
                // next, replaced by a crossing copy (0: never).
                let mut every = [0u32; 4];
                for (n, name) in every.iter_mut().zip(["drop", "duplicate", "swap", "cross"]) {
                    *n = args.num(name, 0, u64::from(u32::MAX))? as u32;
                }
                args.end()?;
                let Some(md) = self.md.as_mut() else {
                    return Err(
                        "md-faults: no market data (the venue runs with --no-market-data)".into(),
                    );
                };
                md.set_faults(crate::md_server::MdFaults {
                    drop_every: every[0],
                    duplicate_every: every[1],
                    swap_every: every[2],
                    cross_every: every[3],
                });
            }
            "rest-limit" | "rest-latency" => {
                let Some(rest) = self.rest.as_mut() else {
                    return Err(format!(
                        "{cmd}: no REST API (start the venue with --rest-listen)"
                    ));
                };
                if cmd == "rest-limit" {
                    // Weight per client and second, and per minute (unchanged if not given).
                    let second = args.num("weight per second", 1, u64::from(u32::MAX))? as u32;
                    let minute = args.optional("weight per minute", 1, u64::from(u32::MAX))?;
                    args.end()?;
                    let limits = rest.limits_mut();
                    limits.second_weight = second;
                    if let Some(minute) = minute {
                        limits.minute_weight = minute as u32;
                    }
                } else {
                    let ms = args.num("milliseconds", 0, delay_max)?;
                    args.end()?;
                    rest.set_latency_ns(ms * MS);
                }
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// A hostile-venue command (docs/operations.md, "A hostile venue").
    pub(super) fn control_hostile(
        &mut self,
        now_ns: u64,
        args: &mut Args<'_>,
    ) -> Result<String, String> {
        match args.cmd {
            "lie" => {
                let word = args.args.next().unwrap_or("");
                if word == "position" {
                    let shares = args.num("shares", 1, POSITION_LIE_MAX)?;
                    args.end()?;
                    let told = self.exchange.lie_position(shares);
                    if told.is_empty() {
                        return Err("lie position: no account to lie to".into());
                    }
                    let told: Vec<String> = told.iter().map(u32::to_string).collect();
                    return Ok(told.join(" "));
                }
                let lie = match word {
                    "unknown-fill" => Lie::UnknownFill,
                    "overfill" => Lie::Overfill,
                    "fill-after-close" => Lie::FillAfterClose,
                    "zero-fill" => Lie::ZeroFill,
                    "off-limit-fill" => Lie::OffLimitFill,
                    other => {
                        return Err(format!(
                            "lie: expected unknown-fill|overfill|fill-after-close|zero-fill|\
                             off-limit-fill|position, got '{other}'"
                        ))
                    }
                };
                args.end()?;
                let told = self.exchange.lie(now_ns, lie);
                if told.is_empty() {
                    return Err(format!("lie {word}: no account has an order to lie about"));
                }
                let told: Vec<String> = told.iter().map(|(a, u)| format!("{a}:{u}")).collect();
                return Ok(told.join(" "));
            }
            "gap" => {
                let reports = args.num("reports", 0, LOGIN_GAP_MAX)?;
                args.end()?;
                self.exchange.login_gap_once = reports;
            }
            "login-seq" => {
                let sequence = args.num("sequence", 0, u64::MAX)?;
                args.end()?;
                self.login_seq_once = Some(sequence);
            }
            "debug-packet" => {
                let text = args.num("bytes", 0, DEBUG_TEXT_MAX)?;
                args.end()?;
                let sessions = self.send_long_packet(text as u16 + 1);
                return Ok(format!("sessions={sessions}"));
            }
            "fix-lose" => {
                let n = args.num("messages", 0, FIX_LOSE_MAX)?;
                args.end()?;
                let fix = self
                    .fix
                    .as_mut()
                    .ok_or("fix-lose: FIX order entry is not served (--fix-listen)")?;
                return Ok(format!("sessions={}", fix.lose_next(n)));
            }
            "oversize" => {
                let len = args.num("length", 1, u64::from(u16::MAX))?;
                args.end()?;
                let sessions = self.send_long_packet(len as u16);
                return Ok(format!("sessions={sessions}"));
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// The connections (`drop`, `restart`) and the commands that only read state.
    pub(super) fn control_query(
        &mut self,
        now_ns: u64,
        args: &mut Args<'_>,
    ) -> Result<String, String> {
        match args.cmd {
            "drop" => {
                args.end()?;
                self.drop_all();
            }
            "restart" => {
                args.end()?;
                self.drop_all();
                self.retime_delayed(now_ns);
            }
            "status" => args.end()?,
            // Answered by the caller (`control_help`: several lines, then `ok help`).
            "help" => args.end()?,
            "open-orders" => {
                args.end()?;
                let ids: Vec<String> = self
                    .exchange
                    .open_account_orders()
                    .map(|o| {
                        String::from_utf8_lossy(&o.fields.cl_ord_id)
                            .trim()
                            .to_string()
                    })
                    .collect();
                return Ok(format!("{} {}", ids.len(), ids.join(" "))
                    .trim_end()
                    .to_string());
            }
            "sessions" => {
                args.end()?;
                return Ok(self.sessions_line());
            }
            "tls" => {
                args.end()?;
                let md = self.md.as_ref().map(|m| m.tls_stats()).unwrap_or_default();
                return Ok(format!(
                    "rest {}; md {}",
                    tls_line(&self.tls_stats()),
                    tls_line(&md)
                ));
            }
            "fix" => {
                args.end()?;
                let fix = self
                    .fix
                    .as_ref()
                    .ok_or("fix: FIX order entry is not served (--fix-listen)")?;
                return Ok(format!(
                    "logged_on={} {}",
                    fix.logged_on(),
                    fix.stats().line()
                ));
            }
            "positions" => {
                args.end()?;
                let (mut bought, mut sold) = (0u64, 0u64);
                for a in self.exchange.accounts() {
                    for symbol in 0..usize::from(self.exchange.symbol_count()) {
                        let (b, s) = a.position(symbol);
                        bought = bought.saturating_add(b);
                        sold = sold.saturating_add(s);
                    }
                }
                return Ok(format!("bought={bought} sold={sold}"));
            }
            "top" => return self.top_line(args),
            "stats" => {
                args.end()?;
                let s = self.exchange.stats();
                return Ok(format!(
                    "accepted={} rejected={} canceled={} matches={} duplicate_ids={} \
                     price_rejects={} lies={} stream_full_drops={}",
                    s.accepted,
                    s.rejected,
                    s.canceled,
                    s.matches,
                    s.duplicate_ids,
                    s.price_rejects,
                    s.lies,
                    s.stream_full_drops
                ));
            }
            other => unreachable!("`{other}` is routed elsewhere by apply_control"),
        }
        Ok(String::new())
    }

    /// The `top SYMBOL` answer: the market-data book's sequence and its best five levels a
    /// side, `price:qty` best first (`-` for an empty side).
    fn top_line(&self, args: &mut Args<'_>) -> Result<String, String> {
        let name = args.word("SYMBOL")?;
        args.end()?;
        let symbols = &self.config.exchange.symbols;
        let symbol = symbols.iter().position(|s| s == name).ok_or_else(|| {
            format!(
                "top: no symbol '{}' (listed: {})",
                name.escape_debug(),
                symbols.join(" ")
            )
        })?;
        let md = self
            .md
            .as_ref()
            .ok_or("top: market data is not served (--no-market-data)")?;
        let book = md.book(symbol as u16);
        let side = |levels: &[(i64, u64)]| {
            let shown: Vec<String> = levels
                .iter()
                .take(5)
                .map(|(p, q)| format!("{p}:{q}"))
                .collect();
            if shown.is_empty() {
                "-".to_string()
            } else {
                shown.join(",")
            }
        };
        Ok(format!(
            "seq={} bids={} asks={}",
            book.seq,
            side(&book.bids),
            side(&book.asks)
        ))
    }

    /// The `sessions` answer: order-entry slots in use and what closed or refused them.
    pub(super) fn sessions_line(&self) -> String {
        let (prelogin, _) = self.prelogin();
        let drops = |r| self.stats.drops.get(&r).copied().unwrap_or(0);
        format!(
            "logged_in={} prelogin={prelogin} prelogin_max={} logins={} login_timeouts={} \
             prelogin_evicted={} sessions_full={}",
            self.sessions.len() as u32 - prelogin,
            self.config.prelogin_max,
            self.stats.logins,
            drops(DropReason::LoginTimeout),
            drops(DropReason::PreLoginEvicted),
            drops(DropReason::SessionsFull)
        )
    }

    /// No held-back message waits past the latency now set: one due far in the future (under
    /// an earlier, longer latency) would otherwise hold every later one behind it. Due times
    /// stay in arrival order (capping a non-decreasing sequence keeps it non-decreasing).
    pub(super) fn retime_delayed(&mut self, now_ns: u64) {
        let f = self.config.faults;
        let latest_ns = now_ns + f.latency_ns + f.jitter_ns;
        for d in &mut self.delayed {
            d.due_ns = d.due_ns.min(latest_ns);
        }
    }
}

/// Every control command: its syntax and what it does, as `help` answers them (one line each,
/// then `ok help`). A command added to [`VenueServer::apply_control`] gets its line here (the
/// test `control_help_lists_every_command` sends each one).
pub const CONTROL_COMMANDS: [(&str, &str); 37] = [
    (
        "fix-lose N",
        "FIX: each logged-on session's next N messages are kept for resend, never written",
    ),
    (
        "fix",
        "FIX order entry: sessions logged on and the endpoint's counters",
    ),
    (
        "md-faults DROP DUP SWAP CROSS",
        "market data: every n-th book delta dropped, doubled, swapped, crossed (0: never)",
    ),
    (
        "rate-limit N [WINDOW_MS]",
        "each account: N order messages per window (0: none), then throttle rejects",
    ),
    (
        "rest-limit SECOND [MINUTE]",
        "REST API: weight per client and second (and minute), then 429, then 418",
    ),
    (
        "rest-latency MS",
        "REST API: every answer waits MS from its request (0..=60000)",
    ),
    (
        "latency MS [JITTER_MS]",
        "added ack/fill latency, with uniform jitter (0..=60000 ms)",
    ),
    (
        "delay-reports MS",
        "hold every outbound report this long (0..=60000)",
    ),
    (
        "delay-final MS",
        "hold each order's final report, last fill or cancel (0..=60000)",
    ),
    (
        "accept-limit N",
        "most order-entry sessions at once (0: no limit)",
    ),
    ("refuse on|off", "close every new connection at once"),
    ("stall MS", "stop reading from clients for MS (0..=60000)"),
    (
        "drop",
        "drop every order-entry connection now (market data stays)",
    ),
    (
        "restart",
        "drop every order-entry connection; books and sequences are kept",
    ),
    (
        "reject-burst N",
        "reject the next N orders (venue system problem, code 6)",
    ),
    (
        "replay-all",
        "replay the next login from sequence 1 (duplicate reports)",
    ),
    (
        "clock-jump SECONDS",
        "the venue's wall clock (its timestamps) jumps, signed",
    ),
    (
        "saturate N MS | saturate off",
        "more than N connects in an MS window all fail",
    ),
    ("flow N", "synthetic events per second (0 stops the flow)"),
    (
        "lie unknown-fill",
        "an execution for UserRefNum 4294967295, never entered",
    ),
    (
        "lie overfill",
        "an execution 1 share beyond the newest open order's quantity",
    ),
    (
        "lie fill-after-close",
        "an execution of 1 share for the newest closed order",
    ),
    (
        "lie zero-fill",
        "an execution of 0 shares for the newest open order",
    ),
    (
        "lie off-limit-fill",
        "an execution of the newest open order through its limit",
    ),
    (
        "lie position N",
        "N shares bought in the first symbol booked, never reported (1..=1000000000)",
    ),
    (
        "gap N",
        "the next login answer skips N reports (0..=4294967295)",
    ),
    (
        "login-seq S",
        "the next login answer announces sequence S (any u64)",
    ),
    (
        "debug-packet N",
        "a Debug packet with N bytes of text (0..=65534)",
    ),
    (
        "oversize N",
        "a whole packet announcing length N (1..=65535)",
    ),
    (
        "open-orders",
        "the ClOrdIDs of every account order open at the venue",
    ),
    (
        "stats",
        "the exchange's counters (accepted=.. rejected=.. ...)",
    ),
    (
        "positions",
        "shares bought and sold by every account together (bought=.. sold=..)",
    ),
    (
        "top SYMBOL",
        "the market-data book: seq=.. bids=price:qty,.. asks=.. (best five a side)",
    ),
    (
        "sessions",
        "order-entry slots: logged_in=.. prelogin=.. login_timeouts=.. prelogin_evicted=.. ...",
    ),
    (
        "tls",
        "the TLS counters of the REST and market-data listeners (rest handshakes=.. ...; md ...)",
    ),
    ("status", "answer ok (liveness check)"),
    ("help", "this list, one line per command, then ok help"),
];

/// One listener's TLS counters, as the `tls` command says them.
pub(super) fn tls_line(s: &TlsStats) -> String {
    format!(
        "handshakes={} handshake_failures={} alerts_received={} protocol_errors={} \
         handshake_timeouts={} closed_in_handshake={}",
        s.server_handshakes,
        s.handshake_failures,
        s.alerts_received,
        s.protocol_errors,
        s.handshake_timeouts,
        s.closed_in_handshake
    )
}

/// The answer to `help`: one line per command (syntax, then what it does), then `ok help`, the
/// line every command's answer ends with. No listed line starts `ok ` or `error `.
pub fn control_help() -> String {
    let mut text = String::new();
    for (syntax, meaning) in CONTROL_COMMANDS {
        text.push_str(&format!("{syntax:<30} {meaning}\n"));
    }
    text.push_str("ok help\n");
    text
}

/// What one pass over a control connection found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ControlRead {
    /// This many lines answered.
    Lines(u32),
    /// A line of at least this many bytes with no end within [`CONTROL_LINE_MAX`].
    TooLong(usize),
}

/// A control command's arguments, as [`VenueServer::apply_control`] splits its line.
pub(super) type Args<'a> = ControlArgs<'a, std::str::SplitWhitespace<'a>>;

/// The arguments of one control command, read in order, each checked against its range.
pub(super) struct ControlArgs<'a, I: Iterator<Item = &'a str>> {
    cmd: &'a str,
    args: I,
}

impl<'a, I: Iterator<Item = &'a str>> ControlArgs<'a, I> {
    /// The next argument: a whole number in `min..=max`.
    pub(super) fn num(&mut self, name: &str, min: u64, max: u64) -> Result<u64, String> {
        let cmd = self.cmd;
        self.optional(name, min, max)?
            .ok_or_else(|| format!("{cmd}: missing {name} ({min}..={max})"))
    }

    /// The next argument if there is one: a whole number in `min..=max`.
    pub(super) fn optional(
        &mut self,
        name: &str,
        min: u64,
        max: u64,
    ) -> Result<Option<u64>, String> {
        let Some(w) = self.args.next() else {
            return Ok(None);
        };
        match w.parse::<u64>() {
            Ok(v) if (min..=max).contains(&v) => Ok(Some(v)),
            Ok(_) => Err(format!(
                "{}: {name} {w} is out of range {min}..={max}",
                self.cmd
            )),
            Err(_) => Err(format!(
                "{}: {name} '{w}' is not a whole number in {min}..={max}",
                self.cmd
            )),
        }
    }

    /// The next argument as it is (`name` says what was missing).
    pub(super) fn word(&mut self, name: &str) -> Result<&'a str, String> {
        let cmd = self.cmd;
        self.args
            .next()
            .ok_or_else(|| format!("{cmd}: missing {name}"))
    }

    /// No argument is left.
    pub(super) fn end(&mut self) -> Result<(), String> {
        match self.args.next() {
            None => Ok(()),
            Some(w) => Err(format!("{}: unexpected argument '{w}'", self.cmd)),
        }
    }
}
