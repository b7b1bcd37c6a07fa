//! `keel drill`: a scripted fault against a running engine and its venue, and a verdict on
//! each thing the engine must then do. The fault goes in through the venue's control port;
//! what the engine did is read from its counters file (sampled every 5 ms, out of band) and,
//! for drills that need orders, from a strategy channel the drill uses as its own (a slot no
//! live strategy holds). Exit 0 when every expectation held, 1 naming each that failed; the
//! timeline of what changed is printed either way.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::clock::{Clock, TscClock};
use crate::ipc::{Channel, IpcEvent};
use crate::metrics::engine::{breaker_text, link_state_text};
use crate::metrics::{CountersReader, Snapshot};
use crate::order::{
    ClientOrderId, Command, EventKind, NewOrder, Price, Side, StrategyId, SymbolId, TimeInForce,
    VenueId,
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
}

#[derive(Debug, Args)]
pub struct DrillArgs {
    /// The fault.
    #[arg(value_enum)]
    fault: Fault,
    /// The engine's configuration (its counters file, ipc directory and venues).
    #[arg(long)]
    config: PathBuf,
    /// The venue's control port (`keel venue --control`), e.g. 127.0.0.1:15001.
    #[arg(long)]
    venue_control: String,
    /// The venue (its name in the configuration; default the first).
    #[arg(long)]
    venue: Option<String>,
    /// A strategy slot no live strategy uses: the drill's orders (reject-burst, venue-stall)
    /// go through its channel.
    #[arg(long, default_value_t = 0)]
    strategy: u16,
    /// How long each expectation may take, seconds (reject-burst adds the breaker's open
    /// duration and probe wait from the configuration).
    #[arg(long, default_value_t = 20)]
    timeout_s: u64,
}

/// One sample of what the drill watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    link: u64,
    breaker: u64,
    connects: u64,
    sent_new: u64,
    unreconciled: u64,
    breaker_refused: u64,
    unknown: u64,
    queries: u64,
    ack_timeouts: u64,
}

fn seen(s: &Snapshot, venue: &str) -> Seen {
    let l = crate::metrics::engine::label("venue", venue);
    Seen {
        link: s.scalar("keel_link_state", &l),
        breaker: s.scalar("keel_breaker_state", &l),
        connects: s.scalar("keel_link_connects_total", &l),
        sent_new: s.scalar("keel_sent_total", "kind=\"new\""),
        unreconciled: s.scalar("keel_link_unreconciled", &l),
        breaker_refused: s.scalar("keel_breaker_refused_total", ""),
        unknown: s.scalar("keel_unknown_orders", ""),
        queries: s.scalar("keel_sent_total", "kind=\"query\""),
        ack_timeouts: s.scalar("keel_link_ack_timeouts_total", &l),
    }
}

const SYNCED: u64 = 4;

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

pub fn run(args: DrillArgs) -> ExitCode {
    match drill(&args) {
        Ok((verdicts, timeline)) => {
            crate::say_line!("keel drill {:?}: timeline", args.fault);
            for l in &timeline {
                crate::say_line!("{l}");
            }
            let failed = verdicts.iter().filter(|v| !v.held).count();
            for v in &verdicts {
                crate::say_line!(
                    "{} {} — {}",
                    if v.held { "PASS" } else { "FAIL" },
                    v.what,
                    v.detail
                );
            }
            crate::say_line!(
                "keel drill: {} expectations, {} failed",
                verdicts.len(),
                failed
            );
            ExitCode::from(u8::from(failed > 0))
        }
        Err(e) => {
            crate::warn_line!("keel drill: {e}");
            ExitCode::from(2)
        }
    }
}

type Outcome = (Vec<Verdict>, Vec<String>);

/// The drill's own strategy channel (slot `strategy`, claimed) and its next order sequence.
fn own_channel(
    config: &crate::config::EngineConfig,
    strategy: u16,
) -> Result<(Channel, u64), String> {
    let ipc = config
        .ipc
        .as_ref()
        .ok_or("the configuration has no [ipc]")?;
    let channel =
        Channel::open(&ipc.channel_path(StrategyId(strategy))).map_err(|e| e.to_string())?;
    channel.claim_strategy();
    let next = channel.id_floor() + 1;
    Ok((channel, next))
}

/// A drill order: one share, resting far from the market (nothing trades).
fn resting(id: ClientOrderId, venue: usize) -> NewOrder {
    NewOrder {
        id,
        venue: VenueId(venue as u16),
        symbol: SymbolId(0),
        side: Side::Buy,
        price: Price::from_units(1, 0),
        qty: 1,
        tif: TimeInForce::Day,
    }
}

/// One drill order every 5 ms: sends the next (`pace`: the last send, the next sequence, the
/// orders sent) when due.
fn paced_order(
    channel: &Channel,
    now: u64,
    strategy: u16,
    venue: usize,
    (last_send, next, ours): (&mut u64, &mut u64, &mut Vec<ClientOrderId>),
) -> Result<(), String> {
    if now - *last_send < 5_000_000 {
        return Ok(());
    }
    *last_send = now;
    let id = ClientOrderId::new(StrategyId(strategy), *next).map_err(|e| e.to_string())?;
    *next += 1;
    if channel.push_command(&Command::New(resting(id, venue))) {
        ours.push(id);
    }
    Ok(())
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
    let text = std::fs::read_to_string(&args.config)
        .map_err(|e| format!("cannot read {}: {e}", args.config.display()))?;
    let config = crate::config::EngineConfig::from_toml(&text)
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
    let timeout_ns = args.timeout_s * 1_000_000_000;
    let before = seen(&reader.snapshot(), &venue);
    if before.link != SYNCED {
        return Err(format!(
            "venue {venue} is {} before the drill: a drill starts from a SYNCED link",
            link_state_text(before.link)
        ));
    }
    t.observe(before);
    let link = &config.venues[venue_index].link;
    let mut verdicts = Vec::new();
    match args.fault {
        Fault::LinkCut | Fault::GatewayRestart => {
            let command = match args.fault {
                Fault::LinkCut => "drop",
                _ => "restart",
            };
            t.note(format!("fault: venue control `{command}`"));
            control(&args.venue_control, command)?;
            // Watch until the link left SYNCED and came back, or the time is up.
            let mut left = None::<u64>;
            let mut back = false;
            let mut sent_while_down = 0u64;
            let mut prev = before;
            let end = t.clock.now_ns() + timeout_ns;
            while t.clock.now_ns() < end {
                let s = seen(&reader.snapshot(), &venue);
                if s.link != SYNCED && left.is_none() {
                    left = Some(t.clock.now_ns());
                }
                // Only whole intervals away from SYNCED count (the samples are 5 ms apart).
                if prev.link != SYNCED && s.link != SYNCED {
                    sent_while_down += s.sent_new - prev.sent_new;
                }
                t.observe(s);
                prev = s;
                if left.is_some() && s.link == SYNCED {
                    back = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let after = prev;
            verdicts.push(Verdict {
                what: "the link left SYNCED",
                held: left.is_some(),
                detail: if left.is_some() {
                    "it did".into()
                } else {
                    format!("still SYNCED after {} s", args.timeout_s)
                },
            });
            verdicts.push(Verdict {
                what: "reconnected with backoff",
                held: after.connects > before.connects,
                detail: format!(
                    "{} connection attempts (backoff base {} ms, equal jitter)",
                    after.connects - before.connects,
                    link.session.backoff.base_ns / 1_000_000
                ),
            });
            verdicts.push(Verdict {
                what: "SYNCED again after reconciling",
                held: back,
                detail: if back {
                    format!(
                        "{:.1} ms after leaving",
                        left.map_or(0.0, |l| (t.clock.now_ns() - l) as f64 / 1e6)
                    )
                } else {
                    format!("not within {} s", args.timeout_s)
                },
            });
            verdicts.push(Verdict {
                what: "nothing unreconciled",
                held: after.unreconciled == 0,
                detail: format!("{} unreconciled", after.unreconciled),
            });
            verdicts.push(Verdict {
                what: "no new order sent while not SYNCED",
                held: sent_while_down == 0,
                detail: format!("{sent_while_down} sent"),
            });
        }
        Fault::VenueStall => {
            let (channel, mut next) = own_channel(&config, args.strategy)?;
            let ack_ns = config.venues[venue_index].ack_timeout_ns;
            let stall_ms = ack_ns / 1_000_000 + 1_000;
            let duplicates_before = duplicate_ids(&args.venue_control)?;
            t.note(format!(
                "fault: venue control `stall {stall_ms}` (the ack timeout is {} ms)",
                ack_ns / 1_000_000
            ));
            control(&args.venue_control, &format!("stall {stall_ms}"))?;
            let stall_end = t.clock.now_ns() + stall_ms * 1_000_000;
            let end = stall_end + timeout_ns;
            let (mut max_unknown, mut refused_in_doubt, mut last_send) = (0u64, 0u64, 0u64);
            let mut ours: Vec<ClientOrderId> = Vec::new();
            let mut answered = std::collections::HashSet::new();
            let mut after = before;
            while t.clock.now_ns() < end {
                channel.beat_strategy();
                let now = t.clock.now_ns();
                // Orders at a steady pace until the stall ends (resting far from the market).
                if now < stall_end {
                    let pace = (&mut last_send, &mut next, &mut ours);
                    paced_order(&channel, now, args.strategy, venue_index, pace)?;
                }
                while let Some(e) = channel.pop_event() {
                    if let Ok(IpcEvent::Event(e)) = e {
                        match e.kind {
                            EventKind::Refused {
                                reason: crate::order::RefusalReason::UnknownOrderOnSymbol,
                            } => refused_in_doubt += 1,
                            EventKind::Accepted => {
                                let _ = channel.push_command(&Command::Cancel { id: e.id });
                            }
                            _ => {}
                        }
                        if e.kind != EventKind::Unknown {
                            answered.insert(e.id);
                        }
                    }
                }
                after = seen(&reader.snapshot(), &venue);
                max_unknown = max_unknown.max(after.unknown);
                t.observe(after);
                if now > stall_end && after.unknown == 0 && answered.len() >= ours.len() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            for id in &ours {
                let _ = channel.push_command(&Command::Cancel { id: *id });
            }
            channel.beat_strategy();
            let duplicates = duplicate_ids(&args.venue_control)? - duplicates_before;
            verdicts.push(Verdict {
                what: "orders past the ack timeout went in doubt",
                held: max_unknown > 0 && after.ack_timeouts > before.ack_timeouts,
                detail: format!(
                    "{} ack timeouts, at most {max_unknown} orders Unknown",
                    after.ack_timeouts - before.ack_timeouts
                ),
            });
            verdicts.push(Verdict {
                what: "queried, never resent",
                held: after.queries > before.queries && duplicates == 0,
                detail: format!(
                    "{} status queries, {duplicates} duplicate ids at the venue",
                    after.queries - before.queries
                ),
            });
            verdicts.push(Verdict {
                what: "new orders on the symbol refused while in doubt",
                held: refused_in_doubt > 0,
                detail: format!("{refused_in_doubt} refused `unknown order on symbol`"),
            });
            verdicts.push(Verdict {
                what: "every doubt resolved once the venue answered",
                held: after.unknown == 0 && answered.len() >= ours.len(),
                detail: format!(
                    "{} Unknown left; {} of the drill's {} orders answered",
                    after.unknown,
                    answered.len().min(ours.len()),
                    ours.len()
                ),
            });
            verdicts.push(Verdict {
                what: "nothing unreconciled",
                held: after.unreconciled == 0,
                detail: format!("{} unreconciled", after.unreconciled),
            });
        }
        Fault::RejectBurst => {
            let (channel, mut next) = own_channel(&config, args.strategy)?;
            // Enough rejects to open the breaker (its calls_min), a few more for a failed
            // probe round: then the venue answers again and the probes must close it.
            let burst = config
                .dispatcher
                .breaker
                .calls_min
                .saturating_add(2)
                .min(10_000);
            t.note(format!("fault: venue control `reject-burst {burst}`"));
            control(&args.venue_control, &format!("reject-burst {burst}"))?;
            let mut refused_to_strategy = 0u64;
            let mut rejected = 0u64;
            let mut opened = false;
            let mut probed = false;
            let mut closed_after = false;
            // The breaker stays open for its open duration before it probes: wait that too.
            let b = &config.dispatcher.breaker;
            let end = t.clock.now_ns()
                + timeout_ns
                + b.open_duration_ns
                    .saturating_mul(u64::from(b.open_duration_multiplier))
                + b.half_open_wait_max_ns;
            let mut last_send = 0;
            let mut ours: Vec<ClientOrderId> = Vec::new();
            while t.clock.now_ns() < end && !closed_after {
                channel.beat_strategy();
                let now = t.clock.now_ns();
                // Orders at a steady pace (resting far from the market: nothing trades).
                let pace = (&mut last_send, &mut next, &mut ours);
                paced_order(&channel, now, args.strategy, venue_index, pace)?;
                while let Some(e) = channel.pop_event() {
                    if let Ok(IpcEvent::Event(e)) = e {
                        match e.kind {
                            EventKind::BreakerOpen { .. } => refused_to_strategy += 1,
                            EventKind::Rejected { .. } => rejected += 1,
                            EventKind::Accepted => {
                                let _ = channel.push_command(&Command::Cancel { id: e.id });
                            }
                            _ => {}
                        }
                    }
                }
                let s = seen(&reader.snapshot(), &venue);
                opened |= s.breaker == 2;
                probed |= opened && s.breaker == 1;
                closed_after = probed && s.breaker == 0;
                t.observe(s);
                std::thread::sleep(Duration::from_millis(1));
            }
            // Leave nothing of ours open.
            for id in ours {
                let _ = channel.push_command(&Command::Cancel { id });
            }
            channel.beat_strategy();
            verdicts.push(Verdict {
                what: "the venue's rejects reached the strategy",
                held: rejected > 0,
                detail: format!("{rejected} rejected"),
            });
            verdicts.push(Verdict {
                what: "the breaker opened",
                held: opened,
                detail: if opened {
                    "it did".into()
                } else {
                    format!("never open within {} s", args.timeout_s)
                },
            });
            verdicts.push(Verdict {
                what: "new orders refused to the strategy while open",
                held: refused_to_strategy > 0,
                detail: format!("{refused_to_strategy} BreakerOpen events"),
            });
            verdicts.push(Verdict {
                what: "probed with real orders (half-open)",
                held: probed,
                detail: if probed {
                    "it did".into()
                } else {
                    "never half-open".into()
                },
            });
            verdicts.push(Verdict {
                what: "closed again after good probes",
                held: closed_after,
                detail: if closed_after {
                    "it did".into()
                } else {
                    "not closed".into()
                },
            });
        }
    }
    Ok((verdicts, t.lines))
}
