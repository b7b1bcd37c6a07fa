//! `keel drill`: a scripted fault against a running engine, and a verdict on each thing the
//! engine must then do. Two kinds of drill:
//!
//! - on **any venue**, with keel's own levers only (`reconnect`, `breaker`, `kill-switch`): the
//!   lever is pulled through the engine's admin socket (what `keel ctl` sends), so the drill
//!   runs against a real venue in production as well as against `keel venue`;
//! - on **the simulated venue**, with its richer faults (`link-cut`, `gateway-restart`,
//!   `reject-burst`, `venue-stall`): the fault goes in through `keel venue`'s control port.
//!
//! What the engine did is read from its counters file (sampled every 5 ms, out of band) and,
//! for drills that need orders, from a strategy channel the drill uses as its own (a slot no
//! live strategy holds). Verdicts rest on facts that cannot un-happen (counters that only grow,
//! events to the drill's own orders), never on catching a transient state between two samples.
//! Exit 0 when every expectation held, 1 naming each that failed, 2 when the drill could not
//! run; the timeline of what changed is printed either way (docs/operations.md, "Drills").

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use keel::clock::{Clock, TscClock};
use keel::config::EngineConfig;
use keel::ipc::{Channel, IpcEvent};
use keel::metrics::engine::{breaker_text, label, link_state_text};
use keel::metrics::{CountersReader, Snapshot};
use keel::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, RefusalReason, Side, StrategyId, SymbolId,
    TimeInForce, VenueId,
};

/// Which fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// The venue drops the session (`drop`): the link must reconnect with backoff, replay,
    /// reconcile with nothing unreconciled, and send no new order while not SYNCED.
    LinkCut,
    /// The venue's gateway restarts (`restart`): as a link cut, books and sequences kept.
    GatewayRestart,
    /// The venue rejects the next orders as a system failure (`reject-burst`): with the
    /// drill's own orders, the breaker must open, refuse new orders to the strategy, probe
    /// with real orders, and close again.
    RejectBurst,
    /// The venue stops answering order entry past keel's ack timeout while its session stays
    /// up (`stall`): with the drill's own orders, those in flight must go in doubt (`Unknown`)
    /// and be queried, never resent; new orders on the symbol refused while in doubt; every
    /// doubt resolved once the venue answers again.
    VenueStall,
    /// Any venue: keel cuts its own link (`keel ctl reconnect VENUE`): as a link cut, the
    /// link must reconnect, reconcile with nothing unreconciled and be SYNCED again, with no
    /// new order sent while not SYNCED.
    Reconnect,
    /// Any venue: the operator forces the breaker open (`keel ctl breaker VENUE open`): the
    /// drill's new orders must be refused `breaker open`; closed by the operator, the breaker
    /// must be closed and the drill's orders accepted again.
    Breaker,
    /// Any venue: the kill switch (`keel ctl kill-switch on`): no new order may leave and the
    /// drill's are refused `kill switch`, while a cancel still flows; switched off, new orders
    /// are accepted again.
    KillSwitch,
}

impl Fault {
    /// Whether the drill injects its fault through the simulated venue's control port (the
    /// others pull keel's own levers and run against any venue).
    fn on_simulated_venue(self) -> bool {
        matches!(
            self,
            Fault::LinkCut | Fault::GatewayRestart | Fault::RejectBurst | Fault::VenueStall
        )
    }
}

#[derive(Debug, Args)]
pub struct DrillArgs {
    /// The fault.
    #[arg(value_enum)]
    fault: Fault,
    /// The engine's configuration (its counters file, ipc directory, admin socket and venues).
    #[arg(long)]
    config: PathBuf,
    /// The simulated venue's control port (`keel venue --control`), e.g. 127.0.0.1:15001:
    /// needed by link-cut, gateway-restart, reject-burst and venue-stall only.
    #[arg(long)]
    venue_control: Option<String>,
    /// The venue (its name in the configuration; default the first).
    #[arg(long)]
    venue: Option<String>,
    /// A strategy slot no live strategy uses: the drill's orders (reject-burst, venue-stall,
    /// breaker, kill-switch) go through its channel.
    #[arg(long, default_value_t = 0)]
    strategy: u16,
    /// The symbol of the drill's orders (its name in the configuration; default the first).
    #[arg(long)]
    symbol: Option<String>,
    /// The limit price of the drill's orders (one-share buys, each canceled once accepted),
    /// e.g. 1.0000: below the market so nothing trades, inside the venue's price collar so
    /// they are accepted. Above 0, at most 4 decimals.
    #[arg(long, default_value = "1.0000", value_parser = drill_price)]
    price: Price,
    /// How long each expectation may take, seconds (reject-burst adds the breaker's open
    /// duration and probe wait from the configuration).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    timeout_s: u64,
}

/// `--price`: a positive price in keel's fixed point (4 decimals), refused with the value.
fn drill_price(text: &str) -> Result<Price, String> {
    match keel::feed::handler::parse_price(text) {
        Some(units) if units > 0 => Ok(Price(units)),
        Some(_) => Err(format!("{text}: a drill order's price must be above 0")),
        None => Err(format!(
            "{text}: not a price (digits, at most 4 decimals, at most {})",
            keel::engine::admin::price_text(i64::MAX)
        )),
    }
}

/// One sample of what the drill watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    link: u64,
    breaker: u64,
    connects: u64,
    synced: u64,
    sent_new: u64,
    unreconciled: u64,
    breaker_refused: u64,
    breaker_opened: u64,
    unknown: u64,
    queries: u64,
    ack_timeouts: u64,
    kill_switch: u64,
    kill_refused: u64,
}

fn seen(s: &Snapshot, venue: &str) -> Seen {
    let l = label("venue", venue);
    let kill = label("reason", keel::log::refusal_name(RefusalReason::KillSwitch));
    Seen {
        link: s.scalar("keel_link_state", &l),
        breaker: s.scalar("keel_breaker_state", &l),
        connects: s.scalar("keel_link_connects_total", &l),
        synced: s.scalar("keel_link_synced_total", &l),
        sent_new: s.scalar("keel_sent_total", "kind=\"new\""),
        unreconciled: s.scalar("keel_link_unreconciled", &l),
        breaker_refused: s.scalar("keel_breaker_refused_total", ""),
        breaker_opened: s.scalar("keel_breaker_opened_total", &l),
        unknown: s.scalar("keel_unknown_orders", ""),
        queries: s.scalar("keel_sent_total", "kind=\"query\""),
        ack_timeouts: s.scalar("keel_link_ack_timeouts_total", &l),
        kill_switch: s.scalar("keel_kill_switch", ""),
        kill_refused: s.scalar("keel_refused_total", &kill),
    }
}

const SYNCED: u64 = 4;
/// `keel_breaker_state` values.
const BREAKER_CLOSED: u64 = 0;
const BREAKER_HALF_OPEN: u64 = 1;
const BREAKER_OPEN: u64 = 2;
/// Gap between two samples of the counters file (it is written every 5 ms).
const SAMPLE_GAP: Duration = Duration::from_millis(5);

struct Timeline {
    clock: TscClock,
    start_ns: u64,
    lines: Vec<String>,
    last: Option<Seen>,
}

impl Timeline {
    fn note(&mut self, what: String) {
        let ms = (self.clock.now_ns() - self.start_ns) as f64 / 1e6;
        self.lines.push(format!("{ms:>9.1} ms  {what}"));
    }

    fn observe(&mut self, s: Seen) {
        if let Some(last) = self.last {
            if s.link != last.link {
                self.note(format!(
                    "link {} -> {}",
                    link_state_text(last.link),
                    link_state_text(s.link)
                ));
            } else if s.link == SYNCED && s.synced > last.synced {
                // Down and SYNCED again between two samples: the counters say so even when
                // no sample caught the link away from SYNCED.
                self.note(format!(
                    "link SYNCED -> DISCONNECTED -> SYNCED between two samples ({} re-sync)",
                    s.synced - last.synced
                ));
            }
            if s.breaker != last.breaker {
                self.note(format!(
                    "breaker {} -> {}",
                    breaker_text(last.breaker),
                    breaker_text(s.breaker)
                ));
            }
            if s.connects != last.connects {
                self.note(format!("connection attempt {}", s.connects));
            }
            if s.kill_switch != last.kill_switch {
                let on = |v| if v == 0 { "off" } else { "ON" };
                self.note(format!(
                    "kill switch {} -> {}",
                    on(last.kill_switch),
                    on(s.kill_switch)
                ));
            }
        }
        self.last = Some(s);
    }
}

fn control(addr: &str, command: &str) -> Result<String, String> {
    let mut s =
        std::net::TcpStream::connect(addr).map_err(|e| format!("venue control {addr}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    writeln!(s, "{command}").map_err(|e| format!("venue control {addr}: {e}"))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| format!("venue control {addr}: {e}"))?;
    if line.starts_with("ok") {
        Ok(line.trim_end().to_string())
    } else {
        Err(format!(
            "venue control {addr}: `{command}` answered {}",
            line.trim_end()
        ))
    }
}

/// One expectation's verdict.
struct Verdict {
    what: &'static str,
    held: bool,
    detail: String,
}

impl Verdict {
    /// A verdict whose detail is "it did" when it held, else `otherwise`.
    fn did(what: &'static str, held: bool, otherwise: impl FnOnce() -> String) -> Self {
        let detail = if held { "it did".into() } else { otherwise() };
        Self { what, held, detail }
    }
}

pub fn run(args: DrillArgs) -> ExitCode {
    match drill(&args) {
        Ok((verdicts, timeline)) => {
            keel::say_line!("keel drill {:?}: timeline", args.fault);
            for l in &timeline {
                keel::say_line!("{l}");
            }
            let failed = verdicts.iter().filter(|v| !v.held).count();
            for v in &verdicts {
                keel::say_line!(
                    "{} {} — {}",
                    if v.held { "PASS" } else { "FAIL" },
                    v.what,
                    v.detail
                );
            }
            keel::say_line!(
                "keel drill: {} expectations, {} failed",
                verdicts.len(),
                failed
            );
            ExitCode::from(u8::from(failed > 0))
        }
        Err(e) => {
            keel::warn_line!("keel drill: {e}");
            ExitCode::from(2)
        }
    }
}

type Outcome = (Vec<Verdict>, Vec<String>);

/// A drill under way: the engine's configuration, the venue drilled, the counters it reads and
/// the timeline it writes.
struct Drill<'a> {
    args: &'a DrillArgs,
    config: EngineConfig,
    venue: String,
    venue_index: usize,
    /// The drill's orders' symbol.
    symbol: SymbolId,
    reader: CountersReader,
    t: Timeline,
    timeout_ns: u64,
    /// The sample taken before the fault.
    before: Seen,
}

impl<'a> Drill<'a> {
    /// Reads the configuration and the counters; refuses to start unless the link is SYNCED.
    fn open(args: &'a DrillArgs) -> Result<Self, String> {
        if args.fault.on_simulated_venue() && args.venue_control.is_none() {
            return Err(format!(
                "{:?} injects its fault through the simulated venue: give --venue-control \
                 ADDR (`keel venue --control`); on any other venue drill with keel's own \
                 levers: reconnect, breaker, kill-switch",
                args.fault
            ));
        }
        let text = std::fs::read_to_string(&args.config)
            .map_err(|e| format!("cannot read {}: {e}", args.config.display()))?;
        let config = EngineConfig::from_toml(&text)
            .map_err(|e| format!("{}: {e}", args.config.display()))?;
        let venue = match &args.venue {
            Some(v) => v.clone(),
            None => config
                .venues
                .first()
                .map(|v| v.name.clone())
                .unwrap_or_default(),
        };
        let venue_index = config
            .venues
            .iter()
            .position(|v| v.name == venue)
            .ok_or_else(|| format!("no venue `{venue}` in {}", args.config.display()))?;
        let symbol = symbol_of(&config, args)?;
        let counters = config
            .counters_file()
            .ok_or("the configuration keeps no counters file ([metrics])")?;
        let reader = CountersReader::open(&counters).map_err(|e| e.to_string())?;
        let clock = TscClock::new();
        let mut t = Timeline {
            start_ns: clock.now_ns(),
            clock,
            lines: Vec::new(),
            last: None,
        };
        // The counters file trails the loop by up to one publication, and a drill may be
        // started while the link finishes its login: wait for SYNCED, bounded by the drill's
        // timeout, before refusing.
        let ready_by_ns = t.clock.now_ns() + args.timeout_s * 1_000_000_000;
        let mut before = seen(&reader.snapshot(), &venue);
        while before.link != SYNCED && t.clock.now_ns() < ready_by_ns {
            std::thread::sleep(Duration::from_millis(10));
            before = seen(&reader.snapshot(), &venue);
        }
        if before.link != SYNCED {
            return Err(format!(
                "venue {venue} is {} before the drill: a drill starts from a SYNCED link",
                link_state_text(before.link)
            ));
        }
        t.observe(before);
        Ok(Self {
            args,
            config,
            venue,
            venue_index,
            symbol,
            reader,
            t,
            timeout_ns: args.timeout_s * 1_000_000_000,
            before,
        })
    }

    fn now_ns(&self) -> u64 {
        self.t.clock.now_ns()
    }

    /// A fresh sample of the counters, noted on the timeline.
    fn sample(&mut self) -> Seen {
        let s = seen(&self.reader.snapshot(), &self.venue);
        self.t.observe(s);
        s
    }

    /// Samples until `done` holds for one (returned with true) or the drill's timeout passes.
    fn sample_until(&mut self, done: impl Fn(&Seen) -> bool) -> (Seen, bool) {
        let end = self.now_ns() + self.timeout_ns;
        loop {
            let s = self.sample();
            if done(&s) {
                return (s, true);
            }
            if self.now_ns() >= end {
                return (s, false);
            }
            std::thread::sleep(SAMPLE_GAP);
        }
    }

    /// A fault on the simulated venue, through its control port.
    fn venue_fault(&mut self, command: &str) -> Result<String, String> {
        let addr = self.args.venue_control.as_deref().expect("checked at open");
        self.t.note(format!("fault: venue control `{command}`"));
        control(addr, command)
    }

    /// One of keel's own levers, through the engine's admin socket (what `keel ctl` sends).
    fn lever(&mut self, line: &str) -> Result<String, String> {
        let socket = self
            .config
            .admin_socket()
            .ok_or("the configuration has no admin socket ([operator] admin_socket or [ipc])")?;
        self.t.note(format!("lever: keel ctl {line}"));
        let answer = keel::engine::admin::request(&socket, line)
            .map_err(|e| format!("admin socket {}: {e}", socket.display()))?;
        let first = answer.lines().next().unwrap_or("").to_string();
        if first.starts_with("ok") {
            Ok(first)
        } else {
            Err(format!("`keel ctl {line}` answered {first}"))
        }
    }
}

/// The symbol of the drill's orders: `--symbol` by name, else the configuration's first.
fn symbol_of(config: &EngineConfig, args: &DrillArgs) -> Result<SymbolId, String> {
    let Some(name) = &args.symbol else {
        return Ok(SymbolId(0));
    };
    let names: Vec<String> = config
        .symbols
        .iter()
        .map(|s| String::from_utf8_lossy(s).trim_end().to_string())
        .collect();
    names
        .iter()
        .position(|s| s == name)
        .map(|i| SymbolId(i as u16))
        .ok_or_else(|| {
            format!(
                "--symbol {name}: not in {} (symbols: {})",
                args.config.display(),
                names.join(" ")
            )
        })
}

/// The drill's own strategy channel (slot `strategy`, claimed), its next order sequence and
/// the orders it sent.
struct Own {
    channel: Channel,
    strategy: u16,
    /// What every drill order carries but its id: one share to buy at `--price`.
    template: NewOrder,
    next: u64,
    /// The sequence of the drill's first order.
    first: u64,
    last_send_ns: u64,
    ours: Vec<ClientOrderId>,
}

/// What the drill's own orders met, counted from the events on its channel.
#[derive(Debug, Clone, Copy, Default)]
struct Met {
    accepted: u32,
    rejected: u32,
    canceled: u32,
    breaker_open: u32,
    kill_switch: u32,
    in_doubt_refused: u32,
    /// Refused by keel for any other reason (shed, throttled, a risk limit...).
    refused_other: u32,
}

impl Met {
    /// Orders answered one way or another (a cancel is no answer to a new order).
    fn answers(&self) -> u32 {
        self.accepted
            + self.rejected
            + self.breaker_open
            + self.kill_switch
            + self.in_doubt_refused
            + self.refused_other
    }
}

impl Own {
    fn open(d: &Drill<'_>) -> Result<Self, String> {
        let strategy = d.args.strategy;
        let ipc = d
            .config
            .ipc
            .as_ref()
            .ok_or("the configuration has no [ipc]")?;
        let channel =
            Channel::open(&ipc.channel_path(StrategyId(strategy))).map_err(|e| e.to_string())?;
        // A slot a live strategy holds is refused, never taken over (its commands and events
        // are its own).
        channel.claim_strategy().map_err(|e| {
            format!("{e}: choose a free slot with --strategy (a slot no live strategy holds)")
        })?;
        let next = channel.id_floor() + 1;
        let template = NewOrder {
            id: ClientOrderId::new(StrategyId(strategy), next).map_err(|e| e.to_string())?,
            venue: VenueId(d.venue_index as u16),
            symbol: d.symbol,
            side: Side::Buy,
            price: d.args.price,
            qty: 1,
            tif: TimeInForce::Day,
            reduce_only: false,
        };
        Ok(Self {
            channel,
            strategy,
            template,
            next,
            first: next,
            last_send_ns: 0,
            ours: Vec::new(),
        })
    }

    /// Sends a drill order now; its id.
    fn send(&mut self, now_ns: u64) -> Result<ClientOrderId, String> {
        self.last_send_ns = now_ns;
        let id =
            ClientOrderId::new(StrategyId(self.strategy), self.next).map_err(|e| e.to_string())?;
        self.next += 1;
        let order = NewOrder {
            id,
            ..self.template
        };
        if self.channel.push_command(&Command::New(order)) {
            self.ours.push(id);
        }
        Ok(id)
    }

    /// One drill order every 5 ms: sends the next when due.
    fn pace(&mut self, now_ns: u64) -> Result<(), String> {
        if now_ns - self.last_send_ns >= 5_000_000 {
            self.send(now_ns)?;
        }
        Ok(())
    }

    /// Reads the channel's events into `met`; cancels each accepted order unless it is
    /// `keep`. Returns the ids of the orders answered (anything but `Unknown`).
    fn pump(&mut self, met: &mut Met, keep: Option<ClientOrderId>) -> Vec<ClientOrderId> {
        self.channel.beat_strategy();
        let mut answered = Vec::new();
        while let Some(e) = self.channel.pop_event() {
            let Ok(IpcEvent::Event(e)) = e else { continue };
            // What an earlier drill on this slot left unread is not this drill's to judge.
            if e.id.sequence() < self.first {
                continue;
            }
            match e.kind {
                EventKind::Accepted => {
                    met.accepted += 1;
                    if Some(e.id) != keep {
                        let _ = self.channel.push_command(&Command::Cancel { id: e.id });
                    }
                }
                EventKind::Rejected { .. } => met.rejected += 1,
                EventKind::Canceled => met.canceled += 1,
                EventKind::BreakerOpen { .. } => met.breaker_open += 1,
                EventKind::Refused {
                    reason: RefusalReason::KillSwitch,
                } => met.kill_switch += 1,
                EventKind::Refused {
                    reason: RefusalReason::UnknownOrderOnSymbol,
                } => met.in_doubt_refused += 1,
                EventKind::Refused { .. } | EventKind::Shed | EventKind::Throttled => {
                    met.refused_other += 1
                }
                _ => {}
            }
            if e.kind != EventKind::Unknown {
                answered.push(e.id);
            }
        }
        answered
    }

    /// Orders at a steady pace until `enough` holds for what they met, or `end_ns`.
    fn orders_until(
        &mut self,
        d: &mut Drill<'_>,
        end_ns: u64,
        enough: impl Fn(&Met) -> bool,
    ) -> Result<Met, String> {
        let mut met = Met::default();
        while d.now_ns() < end_ns && !enough(&met) {
            self.pace(d.now_ns())?;
            self.pump(&mut met, None);
            d.sample();
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(met)
    }

    /// Leaves nothing of the drill's open.
    fn cancel_all(&mut self) {
        for id in self.ours.drain(..) {
            let _ = self.channel.push_command(&Command::Cancel { id });
        }
        self.channel.beat_strategy();
    }
}

/// The venue's count of duplicate order ids (its `stats` on the control port).
fn duplicate_ids(addr: &str) -> Result<u64, String> {
    let line = control(addr, "stats")?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("duplicate_ids="))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("venue control {addr}: no duplicate_ids in `{line}`"))
}

fn drill(args: &DrillArgs) -> Result<Outcome, String> {
    let mut d = Drill::open(args)?;
    let verdicts = match args.fault {
        Fault::LinkCut => {
            d.venue_fault("drop")?;
            relinked(&mut d)
        }
        Fault::GatewayRestart => {
            d.venue_fault("restart")?;
            relinked(&mut d)
        }
        Fault::Reconnect => {
            let line = format!("reconnect {}", d.venue);
            d.lever(&line)?;
            relinked(&mut d)
        }
        Fault::VenueStall => venue_stall(&mut d)?,
        Fault::RejectBurst => reject_burst(&mut d)?,
        Fault::Breaker => forced_breaker(&mut d)?,
        Fault::KillSwitch => kill_switch(&mut d)?,
    };
    Ok((verdicts, d.t.lines))
}

/// After a cut link (by the venue or by keel): watches until the link has been SYNCED again
/// (its count of reaching SYNCED grew, and it is SYNCED), or the time is up, and judges.
fn relinked(d: &mut Drill<'_>) -> Vec<Verdict> {
    let before = d.before;
    let start = d.now_ns();
    let end = start + d.timeout_ns;
    let (mut left, mut back, mut sent_while_down) = (None::<u64>, None::<u64>, 0u64);
    let mut prev = before;
    while d.now_ns() < end {
        let s = d.sample();
        // Left SYNCED: seen so, or (faster than a sample) SYNCED once more since.
        if left.is_none() && (s.link != SYNCED || s.synced > before.synced) {
            left = Some(d.now_ns());
        }
        // Only whole intervals away from SYNCED count (the samples are 5 ms apart).
        if prev.link != SYNCED && s.link != SYNCED {
            sent_while_down += s.sent_new - prev.sent_new;
        }
        prev = s;
        if s.synced > before.synced && s.link == SYNCED {
            back = Some(d.now_ns());
            break;
        }
        std::thread::sleep(SAMPLE_GAP);
    }
    let after = prev;
    let link = &d.config.venues[d.venue_index].link;
    let timeout_s = d.args.timeout_s;
    vec![
        Verdict::did("the link left SYNCED", left.is_some(), || {
            format!("still SYNCED after {timeout_s} s")
        }),
        Verdict {
            what: "reconnected with backoff",
            held: after.connects > before.connects,
            detail: format!(
                "{} connection attempts (backoff base {} ms, equal jitter)",
                after.connects - before.connects,
                link.session.backoff.base_ns / 1_000_000
            ),
        },
        Verdict {
            what: "SYNCED again after reconciling",
            held: back.is_some(),
            detail: match back {
                Some(at) => format!("{:.1} ms after the fault", (at - start) as f64 / 1e6),
                None => format!(
                    "not within {timeout_s} s (link {})",
                    link_state_text(after.link)
                ),
            },
        },
        Verdict {
            what: "nothing unreconciled",
            held: after.unreconciled == 0,
            detail: format!("{} unreconciled", after.unreconciled),
        },
        Verdict {
            what: "no new order sent while not SYNCED",
            held: sent_while_down == 0,
            detail: format!("{sent_while_down} sent"),
        },
    ]
}

/// The venue stalls past the ack timeout while the drill's orders flow.
fn venue_stall(d: &mut Drill<'_>) -> Result<Vec<Verdict>, String> {
    let before = d.before;
    let mut own = Own::open(d)?;
    let ack_ns = d.config.venues[d.venue_index].ack_timeout_ns;
    let stall_ms = ack_ns / 1_000_000 + 1_000;
    let addr = d.args.venue_control.clone().expect("checked at open");
    let duplicates_before = duplicate_ids(&addr)?;
    d.t.note(format!("the ack timeout is {} ms", ack_ns / 1_000_000));
    d.venue_fault(&format!("stall {stall_ms}"))?;
    let stall_end = d.now_ns() + stall_ms * 1_000_000;
    let end = stall_end + d.timeout_ns;
    let mut max_unknown = 0u64;
    let mut met = Met::default();
    let mut answered = std::collections::HashSet::new();
    let mut after = before;
    while d.now_ns() < end {
        let now = d.now_ns();
        // Orders at a steady pace until the stall ends (resting far from the market).
        if now < stall_end {
            own.pace(now)?;
        }
        answered.extend(own.pump(&mut met, None));
        after = d.sample();
        max_unknown = max_unknown.max(after.unknown);
        if now > stall_end && after.unknown == 0 && answered.len() >= own.ours.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let sent = own.ours.len();
    own.cancel_all();
    let duplicates = duplicate_ids(&addr)? - duplicates_before;
    Ok(vec![
        Verdict {
            what: "orders past the ack timeout went in doubt",
            held: max_unknown > 0 && after.ack_timeouts > before.ack_timeouts,
            detail: format!(
                "{} ack timeouts, at most {max_unknown} orders Unknown",
                after.ack_timeouts - before.ack_timeouts
            ),
        },
        Verdict {
            what: "queried, never resent",
            held: after.queries > before.queries && duplicates == 0,
            detail: format!(
                "{} status queries, {duplicates} duplicate ids at the venue",
                after.queries - before.queries
            ),
        },
        Verdict {
            what: "new orders on the symbol refused while in doubt",
            held: met.in_doubt_refused > 0,
            detail: format!("{} refused `unknown order on symbol`", met.in_doubt_refused),
        },
        Verdict {
            what: "every doubt resolved once the venue answered",
            held: after.unknown == 0 && answered.len() >= sent,
            detail: format!(
                "{} Unknown left; {} of the drill's {sent} orders answered",
                after.unknown,
                answered.len().min(sent),
            ),
        },
        Verdict {
            what: "nothing unreconciled",
            held: after.unreconciled == 0,
            detail: format!("{} unreconciled", after.unreconciled),
        },
    ])
}

/// The venue rejects a burst of the drill's orders: the breaker's whole cycle.
fn reject_burst(d: &mut Drill<'_>) -> Result<Vec<Verdict>, String> {
    let mut own = Own::open(d)?;
    // Enough rejects to open the breaker (its calls_min), a few more for a failed probe round:
    // then the venue answers again and the probes must close it.
    let b = &d.config.dispatcher.breaker;
    let burst = b.calls_min.saturating_add(2).min(10_000);
    // The breaker stays open for its open duration before it probes: wait that too.
    let breaker_ns = b
        .open_duration_ns
        .saturating_mul(u64::from(b.open_duration_multiplier))
        + b.half_open_wait_max_ns;
    d.venue_fault(&format!("reject-burst {burst}"))?;
    let (mut opened, mut probed, mut closed_after) = (false, false, false);
    let end = d.now_ns() + d.timeout_ns + breaker_ns;
    let mut met = Met::default();
    while d.now_ns() < end && !closed_after {
        // Orders at a steady pace (resting far from the market: nothing trades).
        own.pace(d.now_ns())?;
        own.pump(&mut met, None);
        let s = d.sample();
        opened |= s.breaker == BREAKER_OPEN || s.breaker_opened > d.before.breaker_opened;
        probed |= opened && s.breaker == BREAKER_HALF_OPEN;
        closed_after = probed && s.breaker == BREAKER_CLOSED;
        std::thread::sleep(Duration::from_millis(1));
    }
    own.cancel_all();
    let timeout_s = d.args.timeout_s;
    Ok(vec![
        Verdict {
            what: "the venue's rejects reached the strategy",
            held: met.rejected > 0,
            detail: format!("{} rejected", met.rejected),
        },
        Verdict::did("the breaker opened", opened, || {
            format!("never open within {timeout_s} s")
        }),
        Verdict {
            what: "new orders refused to the strategy while open",
            held: met.breaker_open > 0,
            detail: format!("{} BreakerOpen events", met.breaker_open),
        },
        Verdict::did("probed with real orders (half-open)", probed, || {
            "never half-open".into()
        }),
        Verdict::did("closed again after good probes", closed_after, || {
            "not closed".into()
        }),
    ])
}

/// The operator forces the breaker open, then closes it (keel's levers only).
fn forced_breaker(d: &mut Drill<'_>) -> Result<Vec<Verdict>, String> {
    let mut own = Own::open(d)?;
    let venue = d.venue.clone();
    d.lever(&format!("breaker {venue} open"))?;
    let end = d.now_ns() + d.timeout_ns;
    let refused = own.orders_until(d, end, |m| m.breaker_open > 0);
    // The opening counted (a fact, whatever the breaker did since), before it is closed: a
    // sample showing it closed is then one taken after the close.
    let before = d.before;
    let (after_open, _) = d.sample_until(|s| s.breaker_opened > before.breaker_opened);
    // Closed whatever happened: a drill never leaves the breaker forced open.
    let closed = d.lever(&format!("breaker {venue} close"));
    let (refused, _) = (refused?, closed?);
    let (_, closed) = d.sample_until(|s| s.breaker == BREAKER_CLOSED);
    let end = d.now_ns() + d.timeout_ns;
    let flowing = own.orders_until(d, end, |m| m.accepted > 0)?;
    own.cancel_all();
    let timeout_s = d.args.timeout_s;
    Ok(vec![
        Verdict {
            what: "the breaker opened on command",
            held: after_open.breaker_opened > d.before.breaker_opened,
            detail: format!(
                "opened {} times (keel_breaker_opened_total)",
                after_open.breaker_opened - d.before.breaker_opened
            ),
        },
        Verdict {
            what: "new orders refused to the strategy while open",
            held: refused.breaker_open > 0,
            detail: format!(
                "{} BreakerOpen events, {} accepted",
                refused.breaker_open, refused.accepted
            ),
        },
        Verdict::did("closed on command", closed, || {
            format!("not closed within {timeout_s} s")
        }),
        Verdict {
            what: "new orders accepted again after closing",
            held: flowing.accepted > 0,
            detail: format!(
                "{} accepted, {} rejected, {} refused breaker open",
                flowing.accepted, flowing.rejected, flowing.breaker_open
            ),
        },
    ])
}

/// The kill switch on with one of the drill's orders resting, then off (keel's levers only).
fn kill_switch(d: &mut Drill<'_>) -> Result<Vec<Verdict>, String> {
    let mut own = Own::open(d)?;
    let end = d.now_ns() + d.timeout_ns;
    let rest = own.send(d.now_ns())?;
    let mut met = Met::default();
    while d.now_ns() < end && met.answers() == 0 {
        own.pump(&mut met, Some(rest));
        std::thread::sleep(Duration::from_millis(1));
    }
    if met.accepted == 0 {
        own.cancel_all();
        return Err(format!(
            "the drill's resting order (1 to buy at --price {}) was not accepted ({met:?}): \
             nothing to drill on; choose a --price the venue accepts",
            keel::engine::admin::price_text(d.args.price.0)
        ));
    }
    d.lever("kill-switch on")?;
    let outcome = while_killed(d, &mut own, rest);
    // Off whatever happened: a drill never leaves the kill switch on.
    let off = d.lever("kill-switch off");
    let (verdicts, _) = (outcome?, off?);
    let end = d.now_ns() + d.timeout_ns;
    let flowing = own.orders_until(d, end, |m| m.accepted > 0)?;
    own.cancel_all();
    let mut verdicts = verdicts;
    verdicts.push(Verdict {
        what: "new orders accepted again once off",
        held: flowing.accepted > 0,
        detail: format!(
            "{} accepted, {} refused kill switch",
            flowing.accepted, flowing.kill_switch
        ),
    });
    Ok(verdicts)
}

/// With the kill switch on: the drill's new orders, the cancel of its resting order `rest`,
/// and what left for the venue meanwhile.
fn while_killed(
    d: &mut Drill<'_>,
    own: &mut Own,
    rest: ClientOrderId,
) -> Result<Vec<Verdict>, String> {
    // From the first sample that shows the switch on, nothing new may leave.
    let (on, shown) = d.sample_until(|s| s.kill_switch == 1);
    let end = d.now_ns() + d.timeout_ns;
    let refused = own.orders_until(d, end, |m| m.kill_switch > 0)?;
    let _ = own.channel.push_command(&Command::Cancel { id: rest });
    let mut met = Met::default();
    while d.now_ns() < end && met.canceled == 0 {
        own.pump(&mut met, None);
        std::thread::sleep(Duration::from_millis(1));
    }
    let after = d.sample();
    let sent = after.sent_new - on.sent_new;
    let counted = after.kill_refused - d.before.kill_refused;
    let timeout_s = d.args.timeout_s;
    Ok(vec![
        Verdict::did("the kill switch is on (keel_kill_switch)", shown, || {
            format!("not shown on within {timeout_s} s")
        }),
        Verdict {
            what: "new orders refused `kill switch`, none accepted",
            held: refused.kill_switch > 0 && refused.accepted == 0,
            detail: format!(
                "{} refused, {} accepted; keel_refused_total{{reason=\"kill switch\"}} +{counted}",
                refused.kill_switch, refused.accepted
            ),
        },
        Verdict {
            what: "no new order left for the venue while on",
            held: shown && sent == 0,
            detail: format!("{sent} sent (keel_sent_total{{kind=\"new\"}})"),
        },
        Verdict::did(
            "a cancel still flows with the switch on",
            met.canceled > 0,
            || format!("the resting order was not canceled within {timeout_s} s"),
        ),
    ])
}
