//! Order entry: SoupBinTCP sessions carrying OUCH — slots and pre-login eviction, login,
//! each session's sequenced stream written from where it stands, injected latency and delayed
//! reports, timeouts, and every drop with its counted reason.

use super::*;

impl<T: Transport> VenueServer<T> {
    /// Frees a slot for a new order-entry connection if it needs one: when the pre-login
    /// connections hold `prelogin_max` slots, or every slot is taken, the oldest connection
    /// not logged in is evicted. False when no slot can be had (every one logged in, held or
    /// closing).
    ///
    /// Evicting the oldest, not refusing the newest: with refusal, a flood that keeps
    /// `prelogin_max` idle connections open (reopening each at its login deadline) would
    /// refuse every real client for good; with eviction a real client, which sends its login
    /// at once, loses its slot only if `prelogin_max` newer connections arrive before its
    /// Login Request is read — within one round trip on loopback.
    pub(super) fn make_room(&mut self) -> bool {
        let closing = self.closing.iter().filter(|c| !c.control).count();
        let taken = self.sessions.len() + self.held.len() + closing;
        let (prelogin, oldest) = self.prelogin();
        let full = taken >= self.config.sessions_max as usize;
        if !full && prelogin < self.config.prelogin_max {
            return true;
        }
        let Some(oldest) = oldest else {
            return false;
        };
        // Closed at once, without a Debug packet: lingering to write one would keep the slot
        // this eviction is for.
        self.count_drop(DropReason::PreLoginEvicted);
        self.sessions.remove(&oldest);
        self.reactor.close(oldest);
        true
    }

    /// How many sessions have not logged in, and the oldest of them (the first accepted).
    pub(super) fn prelogin(&self) -> (u32, Option<ConnId>) {
        let waiting = self.sessions.iter().filter(|(_, s)| s.account.is_none());
        let count = waiting.clone().count() as u32;
        let oldest = waiting.min_by_key(|(_, s)| s.arrival).map(|(c, _)| *c);
        (count, oldest)
    }

    /// Ends the saturating gateway's window: all held connections proceed, or all are closed.
    pub(super) fn decide_held(&mut self, now_ns: u64) {
        let f = self.config.faults;
        if self.held.is_empty() || (f.saturate_attempts_max > 0 && now_ns < self.held_until_ns) {
            return;
        }
        let fail = f.saturate_attempts_max > 0 && self.held.len() as u32 > f.saturate_attempts_max;
        let mut held = std::mem::take(&mut self.held);
        for &conn in &held {
            if fail {
                self.count_drop(DropReason::AcceptLimit);
                self.reactor.close(conn);
            } else {
                self.open_session(now_ns, conn);
            }
        }
        held.clear();
        self.held = held;
    }

    pub(super) fn open_session(&mut self, now_ns: u64, conn: ConnId) {
        self.arrivals += 1;
        let session = Session {
            account: None,
            opened_ns: now_ns,
            arrival: self.arrivals,
            next_seq: 1,
            last_rx_ns: now_ns,
            last_tx_ns: now_ns,
        };
        self.sessions.insert(conn, session);
    }

    /// Decodes every whole packet a session has sent.
    pub(super) fn read_session(&mut self, now_ns: u64, conn: ConnId) {
        loop {
            if self.delayed.len() >= DELAYED_MAX {
                return; // the rest waits in the receive buffer until some are released
            }
            let buf = self.reactor.received(conn);
            let f = match frame(buf, self.config.max_packet_len) {
                Ok(Some(f)) => f,
                Ok(None) => return,
                Err(e) => return self.drop_session(conn, DropReason::Malformed(e)),
            };
            let len = f.len;
            let mut packet = [0u8; 1100];
            let payload_len = f.payload.len();
            packet[..payload_len].copy_from_slice(f.payload);
            let packet_type = f.packet_type;
            self.reactor.consume(conn, len);
            self.stats.packets_in += 1;
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.last_rx_ns = now_ns;
            }
            let decoded = decode_client(packet_type, &packet[..payload_len]);
            if let Err(reason) = self.on_packet(now_ns, conn, decoded) {
                return self.drop_session(conn, reason);
            }
            if !self.sessions.contains_key(&conn) {
                return;
            }
        }
    }

    pub(super) fn on_packet(
        &mut self,
        now_ns: u64,
        conn: ConnId,
        packet: Result<ClientPacket<'_>, DecodeError>,
    ) -> Result<(), DropReason> {
        let packet = packet.map_err(DropReason::Malformed)?;
        let account = self.sessions.get(&conn).and_then(|s| s.account);
        match (account, packet) {
            (None, ClientPacket::LoginRequest(login)) => self.login(now_ns, conn, &login),
            (Some(account), ClientPacket::Unsequenced(msg)) => {
                let decoded = decode_inbound(msg, self.config.exchange.dialect)
                    .map_err(DropReason::Malformed)?;
                let f = self.config.faults;
                if f.latency_ns == 0 && f.jitter_ns == 0 && self.delayed.is_empty() {
                    self.stats.messages_in += 1;
                    self.exchange.handle(now_ns, account, &decoded);
                } else {
                    self.schedule(now_ns, conn, account, msg);
                }
                Ok(())
            }
            (_, ClientPacket::Heartbeat | ClientPacket::Debug(_)) => Ok(()),
            (Some(_), ClientPacket::LogoutRequest) => Err(DropReason::Logout),
            _ => Err(DropReason::ProtocolViolation),
        }
    }

    pub(super) fn login(
        &mut self,
        now_ns: u64,
        conn: ConnId,
        login: &LoginRequest,
    ) -> Result<(), DropReason> {
        match self.exchange.login(
            login.username,
            &login.password,
            &login.session,
            login.sequence,
        ) {
            Ok((account, next_seq)) => {
                let session = self.exchange.session();
                // The hostile `login-seq` fault lies in the announcement only.
                let announced = self.login_seq_once.take().unwrap_or(next_seq);
                self.send_packet(
                    conn,
                    &ServerPacket::LoginAccepted {
                        session,
                        sequence: announced,
                    },
                );
                let s = self.sessions.get_mut(&conn).expect("session exists");
                s.account = Some(account);
                s.next_seq = next_seq;
                s.last_tx_ns = now_ns;
                self.stats.logins += 1;
                Ok(())
            }
            // The Login Rejected ('J', 'A' not authorized or 'S' session not available) goes
            // out before the close: `drop_session` lingers until it is written.
            Err(reason) => {
                self.send_packet(conn, &ServerPacket::LoginRejected(reason));
                Err(DropReason::LoginRejected)
            }
        }
    }

    /// Hands a validated OUCH message to the exchange now, or after the injected latency.
    pub(super) fn schedule(&mut self, now_ns: u64, conn: ConnId, account: u32, msg: &[u8]) {
        let f = self.config.faults;
        let delay = f.latency_ns
            + if f.jitter_ns > 0 {
                self.rng.below_inclusive(f.jitter_ns)
            } else {
                0
            };
        if delay == 0 && self.delayed.is_empty() {
            return self.deliver(now_ns, account, msg);
        }
        let mut bytes = [0u8; 256];
        let len = msg.len().min(256);
        bytes[..len].copy_from_slice(&msg[..len]);
        // Keep arrival order: a message never overtakes an earlier one from the same venue.
        let due_ns = self
            .delayed
            .back()
            .map_or(now_ns + delay, |d| d.due_ns.max(now_ns + delay));
        self.delayed.push_back(Delayed {
            due_ns,
            conn,
            account,
            bytes,
            len,
        });
    }

    pub(super) fn release_delayed(&mut self, now_ns: u64) {
        while self.delayed.front().is_some_and(|d| d.due_ns <= now_ns) {
            let d = self.delayed.pop_front().expect("checked");
            let _ = d.conn;
            self.deliver(now_ns, d.account, &d.bytes[..d.len]);
        }
    }

    pub(super) fn deliver(&mut self, now_ns: u64, account: u32, msg: &[u8]) {
        let msg = decode_inbound(msg, self.config.exchange.dialect).expect("validated on arrival");
        self.stats.messages_in += 1;
        self.exchange.handle(now_ns, account, &msg);
    }

    pub(super) fn write_streams(&mut self, now_ns: u64) {
        let hold = self.config.faults.report_delay_ns;
        let final_hold = self.config.faults.final_report_delay_ns.max(hold);
        let mut conns = self.session_list();
        for &conn in &conns {
            let Some(session) = self.sessions.get(&conn) else {
                continue;
            };
            let Some(account) = session.account else {
                continue;
            };
            let stream_len = self.exchange.account(account).stream_len();
            if session.next_seq > stream_len {
                continue; // up to date: the common case costs one lookup
            }
            let produced = self.produced_ns.entry(account).or_default();
            while (produced.len() as u64) < stream_len {
                produced.push(now_ns);
            }
            loop {
                let seq = self.sessions[&conn].next_seq;
                if seq > stream_len {
                    break;
                }
                let account_ref = self.exchange.account(account);
                let wait = if account_ref.is_final(seq) {
                    final_hold
                } else {
                    hold
                };
                if wait > 0 && self.produced_ns[&account][(seq - 1) as usize] + wait > now_ns {
                    break;
                }
                let msg = self.exchange.account(account).message(seq);
                let n = encode_server(&mut self.scratch, &ServerPacket::Sequenced(msg))
                    .expect("scratch fits");
                match self.reactor.send(conn, &self.scratch[..n]) {
                    Ok(()) => {
                        let s = self.sessions.get_mut(&conn).expect("exists");
                        s.next_seq += 1;
                        s.last_tx_ns = now_ns;
                        self.stats.sequenced_sent += 1;
                        self.stats.packets_out += 1;
                    }
                    // A slow client: its stream waits at its position; nothing is lost.
                    Err(_) => break,
                }
            }
        }
        conns.clear();
        self.conn_scratch = conns;
    }

    /// The connected sessions, in the reused scratch list (give it back when done).
    pub(super) fn session_list(&mut self) -> Vec<ConnId> {
        let mut conns = std::mem::take(&mut self.conn_scratch);
        conns.clear();
        conns.extend(self.sessions.keys().copied());
        conns
    }

    pub(super) fn expire_sessions(&mut self, now_ns: u64) {
        let mut expired = self.session_list();
        expired.clear();
        let mut idle = std::mem::take(&mut self.idle_scratch);
        idle.clear();
        for (conn, s) in &self.sessions {
            if self.expiry(now_ns, s).is_some() {
                expired.push(*conn);
            } else if s.account.is_some()
                && now_ns.saturating_sub(s.last_tx_ns) >= self.config.heartbeat_interval_ns
            {
                idle.push(*conn);
            }
        }
        for &conn in &expired {
            let reason = self
                .sessions
                .get(&conn)
                .and_then(|s| self.expiry(now_ns, s));
            if let Some(reason) = reason {
                self.drop_session(conn, reason);
            }
        }
        for &conn in &idle {
            self.send_packet(conn, &ServerPacket::Heartbeat);
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.last_tx_ns = now_ns;
            }
        }
        expired.clear();
        self.conn_scratch = expired;
        self.idle_scratch = idle;
    }

    /// Why a session is over its time, if it is: no login by the login deadline (heartbeats
    /// keep `last_rx_ns` fresh, never this), or silent past the client timeout.
    pub(super) fn expiry(&self, now_ns: u64, s: &Session) -> Option<DropReason> {
        if s.account.is_none() && now_ns.saturating_sub(s.opened_ns) > self.config.login_timeout_ns
        {
            Some(DropReason::LoginTimeout)
        } else if now_ns.saturating_sub(s.last_rx_ns) > self.config.client_timeout_ns {
            Some(DropReason::Timeout)
        } else {
            None
        }
    }

    pub(super) fn send_packet(&mut self, conn: ConnId, packet: &ServerPacket<'_>) {
        let n = encode_server(&mut self.scratch, packet).expect("scratch fits");
        // A full buffer means the client is not reading; the heartbeat or reply is dropped and
        // the client timeout will end the session.
        if self.reactor.send(conn, &self.scratch[..n]).is_ok() {
            self.stats.packets_out += 1;
        }
    }

    /// Closes a session for `reason`: tells the client why in a Debug packet (a Login
    /// Rejected was already queued for bad credentials), then lingers until what was queued is
    /// written. An injected drop is abrupt, as the fault it stands for.
    pub(super) fn drop_session(&mut self, conn: ConnId, reason: DropReason) {
        let why = match reason {
            DropReason::Malformed(e) => Some(format!("closing: {e}")),
            DropReason::ProtocolViolation => {
                Some("closing: message before login, or a second login".to_string())
            }
            DropReason::Timeout => Some(format!(
                "closing: silent for more than {} ms",
                self.config.client_timeout_ns / 1_000_000
            )),
            DropReason::LoginTimeout => Some(format!(
                "closing: no login within {} ms",
                self.config.login_timeout_ns / 1_000_000
            )),
            DropReason::LoginRejected
            | DropReason::PreLoginEvicted
            | DropReason::Logout
            | DropReason::Injected
            | DropReason::AcceptLimit
            | DropReason::SessionsFull => None,
        };
        if let Some(text) = why {
            self.send_packet(conn, &ServerPacket::Debug(text.as_bytes()));
        }
        self.count_drop(reason);
        self.sessions.remove(&conn);
        if reason == DropReason::Injected {
            self.reactor.close(conn);
        } else {
            self.close_after_flush(conn, false);
        }
    }

    /// Closes `conn` once what is queued for it is written (or after [`CLOSE_LINGER_NS`]);
    /// it is not read meanwhile.
    pub(super) fn close_after_flush(&mut self, conn: ConnId, control: bool) {
        self.closing.push(Closing {
            conn,
            deadline_ns: self.now_ns.saturating_add(CLOSE_LINGER_NS),
            control,
        });
    }

    /// Closes the lingering connections whose replies are written or whose time is up.
    pub(super) fn finish_closing(&mut self, now_ns: u64) {
        let mut i = 0;
        while i < self.closing.len() {
            let c = self.closing[i];
            let written = self.reactor.send_pending(c.conn) == 0;
            if written || now_ns >= c.deadline_ns {
                if !written {
                    self.stats.close_linger_expired += 1;
                }
                self.reactor.close(c.conn);
                self.closing.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    pub(super) fn count_drop(&mut self, reason: DropReason) {
        *self.stats.drops.entry(reason).or_default() += 1;
    }

    /// Hostile fault: writes one packet announcing `announced_len` bytes (1..=65,535) to every
    /// logged-in session: a Debug packet (`+`) whose text fills the rest. Legal SoupBinTCP; a
    /// client whose packet maximum is below `announced_len` must refuse it as oversize.
    /// Returns the sessions written to.
    pub fn send_long_packet(&mut self, announced_len: u16) -> usize {
        let len = usize::from(announced_len.max(1));
        let mut packet = Vec::with_capacity(2 + len);
        packet.extend_from_slice(&(len as u16).to_be_bytes());
        packet.push(b'+');
        packet.extend(
            b"keel venue hostile debug packet "
                .iter()
                .cycle()
                .take(len - 1),
        );
        let conns: Vec<ConnId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.account.is_some())
            .map(|(c, _)| *c)
            .collect();
        for &conn in &conns {
            if self.reactor.send(conn, &packet).is_ok() {
                self.stats.packets_out += 1;
            }
            if let Some(s) = self.sessions.get_mut(&conn) {
                s.last_tx_ns = self.now_ns;
            }
        }
        conns.len()
    }

    /// Drops every connection now (fault: disconnect). Books and streams are kept.
    pub fn drop_all(&mut self) {
        let conns: Vec<ConnId> = self.sessions.keys().copied().collect();
        for conn in conns {
            self.drop_session(conn, DropReason::Injected);
        }
        if let Some(mut fix) = self.fix.take() {
            fix.drop_all(self);
            self.fix = Some(fix);
        }
    }
}
