//! The soak: a storm of new orders and cancels from a shared-memory strategy, venue faults on
//! the control port, and kill -9 restarts of `keel run`, all at once, for `KEEL_SOAK_SECS`
//! seconds (default 120; docs/operations.md, "Soak", gives the hour-long command).
//!
//! What it checks at the end:
//! - every command the strategy published got exactly one answer (the rules are on `Book`),
//!   except commands in doubt at a kill -9, which the strategy detects by the epoch change and
//!   resolves by the documented recovery (a probe cancel for a new order, a repeated cancel):
//!   each is resolved, and those lost outright are counted and bounded;
//! - the engine's id floor never claims an id the strategy did not send;
//! - no ClientOrderId reached the venue twice (venue `stats`), nothing was resent;
//! - keel's open orders (its report at stop) are exactly the venue's (`open-orders`);
//! - the engine's heap is flat: its anonymous resident memory after warm-up in the last epoch
//!   and at the end differ by less than `HEAP_GROWTH_MAX_BYTES`.

// A test driver waits on other processes by the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::engine::COMMANDS_PER_PASS_MAX;
use keel::ipc::{Channel, EngineState, IpcEvent};
use keel::order::{
    CancelRejectReason, ClientOrderId, Command, EventKind, NewOrder, Price, RefusalReason, Side,
    StrategyId, SymbolId, TimeInForce, VenueId,
};

mod common;

/// The in-process strategy ring of the engine (`[engine] strategy_ring`, set below): with the
/// commands of one bridge pass, the most a kill -9 can lose of one strategy's commands or
/// answers (read from shared memory but not yet journaled, or answered but not yet written
/// back to shared memory).
const STRATEGY_RING: u64 = 1_024;

/// Anonymous memory (the heap) may grow this much from warm-up to the end of the last epoch.
/// Everything keel sizes is allocated at start; what can still appear after warm-up is pages
/// of those allocations touched for the first time and allocator slack: 0.1–0.3 MiB in every
/// run so far (docs/operations.md, "Soak"). The default run publishes about 88,000 commands
/// between the two samples: one leaked allocation per command (at least 32 bytes with
/// malloc's header) would exceed the bound; the 20-minute run (about 720,000) would catch a
/// leak of 3 bytes per command.
const HEAP_GROWTH_MAX_BYTES: u64 = 2 * 1024 * 1024;

/// The order table and the session's maps: small, so that the storm cycles through every slot
/// within seconds and the warm-up sample of the heap comes after every page of them was used.
const ORDERS_MAX: u32 = 8_192;

/// Live day orders the strategy keeps at most: above it, every command is a cancel.
const LIVE_MAX: usize = 400;

/// An upper bound on the sequenced messages the venue writes to the account per second of
/// soak (acks, fills, cancels, status answers: about 1,200 measured; twice that for margin).
const STREAM_MESSAGES_PER_SEC: u64 = 2_500;

fn soak_secs() -> u64 {
    std::env::var("KEEL_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120)
}

fn config_text(venue: &str, dir: &Path) -> String {
    format!(
        "symbols = [\"AAPL\", \"MSFT\", \"AMZN\", \"NVDA\"]\n\
         [dispatcher]\nstrategies = 1\norders_max = {ORDERS_MAX}\n\
         [dispatcher.risk]\nposition_max = 1_000_000_000\n\
         [dispatcher.bulkhead]\nin_flight_per_symbol_max = 512\nin_flight_per_venue_max = 2048\n\
         [[dispatcher.limiter.window]]\nwindow_ns = 1_000_000_000\nlimit_weight = 5_000\n\
         burst_weight = 1_000\n\
         [engine]\ntopology = \"inline\"\nidle = \"backoff\"\nstrategy_ring = {STRATEGY_RING}\n\
         [operator]\ncancel_on_stop = false\n\
         [journal]\ndir = \"{journal}\"\nfile_bytes = 8_388_608\n\
         [ipc]\ndir = \"{ipc}\"\nstrategy_timeout_ns = 2_000_000_000\n\
         [[venue]]\nname = \"sim\"\naddress = \"{venue}\"\nusername = \"keel\"\npassword = \"keel\"\n\
         orders_max = {ORDERS_MAX}\nack_timeout_ns = 1_000_000_000\nbackoff_base_ns = 20_000_000\nbackoff_cap_ns = 200_000_000\n",
        journal = dir.join("journal").display(),
        ipc = dir.join("ipc").display(),
    )
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One control-port command; the venue's answer line (must start with `ok`).
fn control(addr: &str, command: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("{command}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    assert!(line.starts_with("ok"), "{command}: {line}");
    line.trim_end().to_string()
}

fn stat(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} in {line}"))
        .parse()
        .unwrap()
}

/// (VmRSS, VmHWM, RssAnon) of a process, in bytes.
fn memory(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"), field("RssAnon:"))
}

/// What the strategy knows of one order id.
#[derive(Default, Debug)]
struct Order {
    ioc: bool,
    /// The new order was published and no answer to it has come.
    new_pending: bool,
    /// Cancels published and not answered.
    cancels_pending: u32,
    /// The new order was unanswered at a kill -9 (resolved by its first later event).
    new_in_doubt: bool,
    /// Cancels unanswered at a kill -9 (a later answer resolves one).
    cancels_in_doubt: u32,
    /// An immediate-or-cancel order's close (filled or canceled) was seen.
    closed: bool,
    /// A cancel of this order was answered `CancelRejected { NotApplied }`.
    not_applied: bool,
    /// The strategy was told the order is closed: a terminal event, or a cancel refused
    /// `UnknownOrder` (the engine holds no open order of that id).
    terminal: bool,
    /// ... and only by that refusal: its closing event (canceled, filled) never came.
    closed_silently: bool,
    /// The last 8 events, one byte each: engine epoch (low 4 bits) << 4 | `kind_code`.
    trace: u64,
}

/// The strategy's ledger of commands and answers.
///
/// Answers, per command kind (events carry the order id only):
/// - a **new order** is answered by the first of `Accepted`, `Rejected`, `Refused` (any reason
///   a new order can get), `Shed`, `Throttled`, `BreakerOpen`; or by `Canceled` or `Filled`
///   when no such event came first (an order canceled before it left the engine gets one
///   `Canceled` answering the new order and the cancel); `Unknown` and `PartiallyFilled` are
///   news, not answers;
/// - a **cancel** is answered by `Canceled`, `CancelRejected`, or `Refused` with a cancel's
///   reason (`UnknownOrder`, `AlreadyPending`, `CancelLaneFull`); a `Filled` does not answer
///   it (the engine then owes `CancelRejected { TooLateToCancel }`);
/// - an immediate-or-cancel order's `Canceled` without a pending cancel is its close.
///
/// Any other answer-like event is an extra answer; a command still pending after the final
/// quiet period is unanswered. Both are failures.
#[derive(Default)]
struct Book {
    orders: HashMap<ClientOrderId, Order>,
    kinds: HashMap<&'static str, u64>,
    news: u64,
    cancels: u64,
    extra: Vec<String>,
    /// In doubt at a kill: new orders, cancels.
    in_doubt_new: u64,
    in_doubt_cancel: u64,
    /// New orders in doubt that the engine never knew (the probe cancel was refused
    /// `UnknownOrder` before any other event).
    lost_new_unknown: u64,
    /// New orders in doubt whose probe was answered first, and not `UnknownOrder` (the engine
    /// knows the order: its answer must still come).
    probe_first_known: u64,
    /// New orders in doubt answered after the restart.
    late_new: u64,
    /// In-doubt cancels answered after the restart.
    late_cancel: u64,
    /// Orders canceled after their cancel was answered "not applied" (evidence).
    not_applied_then_canceled: Vec<String>,
}

fn kind_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::Accepted => "accepted",
        EventKind::PartiallyFilled { .. } => "partially_filled",
        EventKind::Filled { .. } => "filled",
        EventKind::Canceled => "canceled",
        EventKind::Replaced { .. } => "replaced",
        EventKind::Rejected { .. } => "rejected",
        EventKind::CancelRejected { .. } => "cancel_rejected",
        EventKind::Unknown => "unknown",
        EventKind::Shed => "shed",
        EventKind::Throttled => "throttled",
        EventKind::BreakerOpen { .. } => "breaker_open",
        EventKind::Refused { .. } => "refused",
    }
}

fn kind_code(kind: &EventKind) -> u64 {
    match kind {
        EventKind::Accepted => 1,
        EventKind::PartiallyFilled { .. } => 2,
        EventKind::Filled { .. } => 3,
        EventKind::Canceled => 4,
        EventKind::Replaced { .. } => 5,
        EventKind::Rejected { .. } => 6,
        EventKind::CancelRejected { .. } => 7,
        EventKind::Unknown => 8,
        EventKind::Shed => 9,
        EventKind::Throttled => 10,
        EventKind::BreakerOpen { .. } => 11,
        EventKind::Refused { .. } => 12,
    }
}

/// Which command an event answers, if any.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answers {
    New,
    Cancel,
    /// `Canceled`: the cancel if one is pending, else the new order, else an IOC's close.
    Close,
    /// `Filled`: the new order if unanswered, else nothing.
    Fill,
    Nothing,
}

fn answers(kind: &EventKind) -> Answers {
    match kind {
        EventKind::Accepted
        | EventKind::Rejected { .. }
        | EventKind::Shed
        | EventKind::Throttled
        | EventKind::BreakerOpen { .. } => Answers::New,
        EventKind::Refused {
            reason:
                RefusalReason::UnknownOrder
                | RefusalReason::AlreadyPending
                | RefusalReason::CancelLaneFull,
        } => Answers::Cancel,
        EventKind::Refused { .. } => Answers::New,
        EventKind::CancelRejected { .. } => Answers::Cancel,
        EventKind::Canceled => Answers::Close,
        EventKind::Filled { .. } => Answers::Fill,
        EventKind::PartiallyFilled { .. } | EventKind::Unknown | EventKind::Replaced { .. } => {
            Answers::Nothing
        }
    }
}

impl Book {
    fn sent_new(&mut self, id: ClientOrderId, ioc: bool) {
        self.news += 1;
        let prev = self.orders.insert(
            id,
            Order {
                ioc,
                new_pending: true,
                ..Order::default()
            },
        );
        assert!(prev.is_none(), "the strategy reused {id}");
    }

    fn sent_cancel(&mut self, id: ClientOrderId) {
        self.cancels += 1;
        self.orders
            .get_mut(&id)
            .expect("cancel of a sent order")
            .cancels_pending += 1;
    }

    /// Applies one event of epoch `epoch`.
    fn on_event(&mut self, epoch: u64, id: ClientOrderId, kind: &EventKind) {
        *self.kinds.entry(kind_name(kind)).or_default() += 1;
        let Some(o) = self.orders.get_mut(&id) else {
            self.extra.push(format!("{kind:?} for {id}, never sent"));
            return;
        };
        o.trace = o.trace << 8 | (epoch & 0xF) << 4 | kind_code(kind);
        let answer = answers(kind);
        let closes = matches!(
            kind,
            EventKind::Filled { .. }
                | EventKind::Canceled
                | EventKind::Rejected { .. }
                | EventKind::Shed
                | EventKind::Throttled
                | EventKind::BreakerOpen { .. }
        ) || (matches!(kind, EventKind::Refused { .. }) && answer == Answers::New);
        if closes {
            o.terminal = true;
        } else if !o.terminal
            && matches!(
                kind,
                EventKind::Refused {
                    reason: RefusalReason::UnknownOrder
                }
            )
        {
            o.terminal = true;
            o.closed_silently = true;
        }
        // A new order in doubt is resolved by its first answer after the kill.
        if o.new_in_doubt && answer != Answers::Nothing {
            o.new_in_doubt = false;
            if answer == Answers::Cancel {
                // The probe cancel answered first: `UnknownOrder` means the engine never knew
                // the order, and no answer will come. Anything else (e.g. `AlreadyPending`:
                // restored in doubt, being queried) means it knows the order: its answer is
                // still owed.
                let never_known = matches!(
                    kind,
                    EventKind::Refused {
                        reason: RefusalReason::UnknownOrder
                    }
                );
                if never_known {
                    self.lost_new_unknown += 1;
                } else {
                    o.new_in_doubt = true;
                    self.probe_first_known += 1;
                }
            } else {
                self.late_new += 1;
                o.new_pending = true;
            }
        }
        let taken = match answer {
            Answers::New => take(&mut o.new_pending),
            Answers::Cancel => {
                if matches!(
                    kind,
                    EventKind::CancelRejected {
                        reason: CancelRejectReason::NotApplied
                    }
                ) {
                    o.not_applied = true;
                }
                take_count(&mut o.cancels_pending)
            }
            // A day order closes as canceled only on a cancel; an immediate-or-cancel order
            // closes so by itself, and answers a cancel with it only when the cancel caught it
            // before it left (then its new order was unanswered too).
            Answers::Close if o.ioc => {
                let new = take(&mut o.new_pending);
                if new {
                    take_count(&mut o.cancels_pending);
                }
                !std::mem::replace(&mut o.closed, true) || new
            }
            Answers::Close => {
                let new = take(&mut o.new_pending);
                take_count(&mut o.cancels_pending) || new
            }
            Answers::Fill => {
                o.closed = true;
                take(&mut o.new_pending);
                true
            }
            Answers::Nothing => true,
        };
        if taken {
            return;
        }
        if o.cancels_in_doubt > 0 && matches!(answer, Answers::Cancel | Answers::Close) {
            o.cancels_in_doubt -= 1;
            self.late_cancel += 1;
            return;
        }
        if o.not_applied && answer == Answers::Close {
            // Known (reported in issue 10): a cancel queued while its order was `Unknown` is
            // answered "not applied" when the order comes back live, but the venue had it and
            // cancels the order afterwards. Counted apart; fails only with KEEL_SOAK_STRICT=1.
            o.not_applied = false;
            self.not_applied_then_canceled
                .push(format!("{id}: trace {:016x}", o.trace));
            return;
        }
        self.extra.push(format!(
            "{kind:?} in epoch {epoch} for {id}: trace {:016x}, {o:?}",
            o.trace
        ));
    }

    /// After an epoch change: every unanswered command is in doubt. Returns the probe cancels
    /// to send (one per unanswered new order, one per order with an unanswered cancel).
    fn epoch_changed(&mut self) -> Vec<ClientOrderId> {
        let mut probes = Vec::new();
        for (id, o) in &mut self.orders {
            let mut probe = false;
            if o.new_pending {
                o.new_pending = false;
                o.new_in_doubt = true;
                self.in_doubt_new += 1;
                probe = true;
            }
            if o.cancels_pending > 0 {
                o.cancels_in_doubt += o.cancels_pending;
                self.in_doubt_cancel += u64::from(o.cancels_pending);
                o.cancels_pending = 0;
                probe = true;
            }
            if probe {
                probes.push(*id);
            }
        }
        probes.sort_unstable();
        probes
    }

    fn pending(&self) -> usize {
        self.orders
            .values()
            .filter(|o| o.new_pending || o.cancels_pending > 0)
            .count()
    }

    /// Cancels in doubt at a kill that never got an answer (the strategy's repeat did).
    fn lost_cancels(&self) -> u64 {
        self.orders
            .values()
            .map(|o| u64::from(o.cancels_in_doubt))
            .sum()
    }

    /// The orders the strategy believes open (no terminal event), by id.
    fn believed_open(&self) -> BTreeSet<String> {
        self.orders
            .iter()
            .filter(|(_, o)| !o.terminal)
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Orders the strategy learnt were closed only from a cancel refused `UnknownOrder`.
    fn closed_silently(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .orders
            .iter()
            .filter(|(_, o)| o.closed_silently)
            .map(|(id, o)| format!("{id}: trace {:016x}", o.trace))
            .collect();
        ids.sort();
        ids
    }

    fn unresolved(&self) -> usize {
        self.orders.values().filter(|o| o.new_in_doubt).count()
    }
}

fn take(flag: &mut bool) -> bool {
    std::mem::replace(flag, false)
}

fn take_count(n: &mut u32) -> bool {
    if *n > 0 {
        *n -= 1;
        true
    } else {
        false
    }
}

struct Strategy {
    channel: Channel,
    book: Book,
    next_seq: u64,
    live: Vec<ClientOrderId>,
    rng: u64,
    cancel_pct: u64,
    ring_full: u64,
}

fn id(seq: u64) -> ClientOrderId {
    ClientOrderId::new(StrategyId(0), seq).unwrap()
}

impl Strategy {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn new_order(&mut self) -> (NewOrder, bool) {
        let ioc = self.rand() % 10 == 0;
        let side = if self.rand() % 2 == 0 {
            Side::Buy
        } else {
            Side::Sell
        };
        let off = if ioc {
            0
        } else {
            1_000 + (self.rand() % 5_000) as i64
        };
        let base = Price::from_units(100, 0).0;
        let order = NewOrder {
            id: id(self.next_seq + 1),
            venue: VenueId(0),
            symbol: SymbolId((self.rand() % 4) as u16),
            side,
            price: Price(match side {
                Side::Buy => base - off,
                Side::Sell => base + off,
            }),
            qty: 1 + (self.rand() % 5) as u32,
            tif: if ioc {
                TimeInForce::ImmediateOrCancel
            } else {
                TimeInForce::Day
            },
            reduce_only: false,
        };
        (order, ioc)
    }

    /// Publishes up to `n` commands (fewer if the ring is full), then reads events.
    fn step(&mut self, n: u32) {
        self.channel.beat_strategy();
        for _ in 0..n {
            let cancel = !self.live.is_empty()
                && (self.live.len() >= LIVE_MAX || self.rand() % 100 < self.cancel_pct);
            if cancel {
                let i = (self.rand() % self.live.len() as u64) as usize;
                let target = self.live[i];
                if !self.channel.push_command(&Command::Cancel { id: target }) {
                    self.ring_full += 1;
                    break;
                }
                self.live.swap_remove(i);
                self.book.sent_cancel(target);
            } else {
                let (order, ioc) = self.new_order();
                if !self.channel.push_command(&Command::New(order)) {
                    self.ring_full += 1;
                    break;
                }
                self.next_seq += 1;
                self.book.sent_new(order.id, ioc);
                if !ioc {
                    self.live.push(order.id);
                }
            }
        }
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(e) = self.channel.pop_event() {
            let IpcEvent::Event(e) = e.expect("well-formed events") else {
                panic!("the engine refused a command record the strategy wrote");
            };
            self.book
                .on_event(self.channel.engine_epoch(), e.id, &e.kind);
            let closes = matches!(
                e.kind,
                EventKind::Filled { .. }
                    | EventKind::Canceled
                    | EventKind::Rejected { .. }
                    | EventKind::Refused { .. }
                    | EventKind::Shed
                    | EventKind::Throttled
                    | EventKind::BreakerOpen { .. }
            );
            if closes {
                if let Some(i) = self.live.iter().position(|x| *x == e.id) {
                    self.live.swap_remove(i);
                }
            }
        }
    }

    /// The recovery docs/ipc.md prescribes after an epoch change: ids above the floor, and a
    /// cancel for every command without an answer.
    fn recover(&mut self) {
        let floor = self.channel.id_floor();
        assert!(
            floor <= self.next_seq,
            "id floor {floor} above the last id sent {}",
            self.next_seq
        );
        self.next_seq = self.next_seq.max(floor);
        for target in self.book.epoch_changed() {
            self.live.retain(|x| *x != target);
            wait_until("room for a probe cancel", Duration::from_secs(30), || {
                self.channel.beat_strategy();
                self.drain();
                self.channel.push_command(&Command::Cancel { id: target })
            });
            self.book.sent_cancel(target);
        }
    }
}

/// Waits for a running engine of a later epoch on `path`, beating the strategy heartbeat on
/// the old mapping meanwhile (a new engine must not declare the strategy lost while it waits).
fn open_channel(path: &Path, epoch_above: u64, old: Option<&Channel>) -> Channel {
    let mut channel = None;
    wait_until("the engine's channel", Duration::from_secs(30), || {
        if let Some(old) = old {
            old.beat_strategy();
        }
        channel = Channel::open(path)
            .ok()
            .filter(|c| c.engine_epoch() > epoch_above && c.engine_state() == EngineState::Running);
        channel.is_some()
    });
    channel.unwrap()
}

/// Venue faults, one every 1–3 s, each undone (where it lasts) within 1.5 s.
#[derive(Default, Debug)]
struct Faults {
    injected: HashMap<&'static str, u64>,
}

fn fault_thread(
    control_addr: String,
    stop: Arc<AtomicBool>,
    faults: Arc<Mutex<Faults>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut rng: u64 = 0x2545_F491_4F6C_DD1D;
        let sleep_while_running = |ms: u64| {
            let until = Instant::now() + Duration::from_millis(ms);
            while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        while !stop.load(Ordering::Relaxed) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            sleep_while_running(1_000 + rng % 2_000);
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let (name, on, off): (&'static str, String, Option<&str>) = match rng % 9 {
                0 => ("drop", "drop".into(), None),
                1 => ("restart", "restart".into(), None),
                2 => ("stall", format!("stall {}", 100 + rng % 400), None),
                // Longer than the ack timeout: orders go Unknown and are queried.
                3 => ("stall-past-ack", "stall 1500".into(), None),
                4 => (
                    "reject-burst",
                    format!("reject-burst {}", 5 + rng % 30),
                    None,
                ),
                5 => ("latency", "latency 30 10".into(), Some("latency 0")),
                6 => (
                    "delay-reports",
                    "delay-reports 40".into(),
                    Some("delay-reports 0"),
                ),
                7 => (
                    "delay-final",
                    "delay-final 60".into(),
                    Some("delay-final 0"),
                ),
                _ => ("refuse", "refuse on".into(), Some("refuse off")),
            };
            control(&control_addr, &on);
            *faults.lock().unwrap().injected.entry(name).or_default() += 1;
            if let Some(off) = off {
                std::thread::sleep(Duration::from_millis(300 + rng % 1_200));
                control(&control_addr, off);
            }
        }
    })
}

fn open_lines(report: &str) -> BTreeSet<String> {
    report
        .lines()
        .filter(|l| !l.starts_with("open orders:"))
        .filter_map(|l| l.strip_prefix("open "))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("clordid="))
                .unwrap()
                .to_string()
        })
        .collect()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// One kill -9 with orders in flight (the venue's answers slowed), the strategy going on
/// while no engine runs, a restart logging to `log`, and the strategy's recovery. Returns the
/// new engine, the killed one's memory and how many commands the kill left in doubt.
fn kill_nine(
    s: &mut Strategy,
    engine: common::peers::Proc,
    venue_control: &str,
    config: &Path,
    log: &Path,
    path: &Path,
) -> (common::peers::Proc, (u64, u64, u64), u64) {
    // Slow the venue's answers so that orders are in flight at the moment of the kill.
    control(venue_control, "latency 40");
    for _ in 0..50 {
        s.step(3);
        std::thread::sleep(Duration::from_millis(1));
    }
    let rss = memory(engine.0.id());
    let epoch = s.channel.engine_epoch();
    drop(engine); // SIGKILL, then reaped
                  // The strategy goes on while no engine runs: its commands wait in the ring.
    for _ in 0..50 {
        s.step(3);
        std::thread::sleep(Duration::from_millis(1));
    }
    let engine = common::peers::keel_run(config, log);
    s.channel = open_channel(path, epoch, Some(&s.channel));
    control(venue_control, "latency 0");
    let before = s.book.in_doubt_new + s.book.in_doubt_cancel;
    s.recover();
    (
        engine,
        rss,
        s.book.in_doubt_new + s.book.in_doubt_cancel - before,
    )
}

/// After the faults: waits (60 s at most) for the link to be SYNCED again, failing with the
/// engine's report, the venue's counters and the engine's warnings if it is not; then lets
/// every answer arrive (60 s at most, 3 s at least). Returns the engine still running.
fn settle(
    s: &mut Strategy,
    engine: common::peers::Proc,
    log: &Path,
    venue_control: &str,
) -> common::peers::Proc {
    let synced_by = Instant::now() + Duration::from_secs(60);
    while !s.channel.venue_synced(VenueId(0)) {
        s.channel.beat_strategy();
        s.drain();
        if Instant::now() > synced_by {
            // Say why before failing: the engine's report (link state, contradictions, the last
            // reconciliation), the venue's counters and the engine's warnings.
            let report = common::peers::stop_keel_run(engine, log);
            let errors = std::fs::read_to_string(log.with_extension("err")).unwrap_or_default();
            let tail: Vec<&str> = errors.lines().rev().take(40).collect();
            panic!(
                "not SYNCED 60 s after the faults stopped\nengine report:\n{report}\nvenue: {}\n\
                 engine stderr (last lines, newest first):\n{}",
                control(venue_control, "stats"),
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(60)
        && (s.book.pending() > 0 || s.book.unresolved() > 0 || quiet.elapsed().as_secs() < 3)
    {
        s.channel.beat_strategy();
        s.drain();
        std::thread::sleep(Duration::from_millis(5));
    }
    engine
}

/// The engine's memory (VmRSS, VmHWM, RssAnon) per epoch at its kill, at the last epoch's
/// warm-up and end, and its RssAnon series sampled `every`.
fn print_memory(
    rss_epochs: &[(u64, u64, u64)],
    rss_warm: (u64, u64, u64),
    rss_end: (u64, u64, u64),
    every: Duration,
    rss_series: &[f64],
) {
    eprintln!(
        "soak: engine memory per epoch at its kill (VmRSS, VmHWM, RssAnon) MiB: {:?}; last \
         epoch warm {:.1}/{:.1}/{:.1}, end {:.1}/{:.1}/{:.1}; RssAnon every {} s from warm-up {:?}",
        rss_epochs
            .iter()
            .map(|(r, h, a)| (mib(*r).round(), mib(*h).round(), mib(*a).round()))
            .collect::<Vec<_>>(),
        mib(rss_warm.0),
        mib(rss_warm.1),
        mib(rss_warm.2),
        mib(rss_end.0),
        mib(rss_end.1),
        mib(rss_end.2),
        every.as_secs(),
        rss_series
    );
}

// Goal: storm + venue faults + kill -9 restarts together, then every command answered exactly
// once (or, in doubt at a kill, resolved by the documented recovery), no duplicate id at the
// venue, keel's open orders equal to the venue's, and a flat heap. Method: `keel venue` and
// `keel run` processes, a Rust strategy on the shared-memory channel in this thread.
#[test]
fn storm_faults_and_kill_nine_restarts_answer_every_command_once() {
    let secs = soak_secs();
    // Kills in the first 60% of the run (at least 3, one per 2 minutes in long runs); the last
    // 40% is one epoch, whose heap is measured from warm-up (a quarter into it) to the end.
    let kills = (secs / 120).max(3);
    let total = Duration::from_secs(secs);
    let kill_at: Vec<Duration> = (1..=kills)
        .map(|k| total.mul_f64(0.6 * k as f64 / kills as f64))
        .collect();
    let warm_at = total.mul_f64(0.7);

    // The venue's account stream keeps every message of the run for replay: about 1,200 a
    // second here (the hour-long run of 2026-11-30 filled the default 4,000,000 after ~55
    // minutes, and the venue stopped sequencing: keel, seeing no answers, never traded again
    // on that link, as it must — but the run could not end SYNCED).
    let stream_max = (secs * STREAM_MESSAGES_PER_SEC).max(4_000_000).to_string();
    let venue = common::peers::venue(&["--flow-rate", "200", "--stream-messages-max", &stream_max]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("keel.toml");
    std::fs::write(&config, config_text(&venue.entry, dir.path())).unwrap();
    let path = dir.path().join("ipc").join("strategy-0");
    let mut epoch_logs = vec![dir.path().join("run0.log")];
    let mut engine = common::peers::keel_run(&config, &epoch_logs[0]);
    let channel = open_channel(&path, 0, None);
    wait_until("SYNCED", Duration::from_secs(30), || {
        channel.beat_strategy();
        channel.venue_synced(VenueId(0))
    });
    let mut s = Strategy {
        channel,
        book: Book::default(),
        next_seq: 0,
        live: Vec::new(),
        rng: 0x9E37_79B9_7F4A_7C15,
        cancel_pct: 45,
        ring_full: 0,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let faults = Arc::new(Mutex::new(Faults::default()));
    let faulter = fault_thread(
        venue.control.clone(),
        Arc::clone(&stop),
        Arc::clone(&faults),
    );

    let started = Instant::now();
    let mut next_kill = 0;
    let mut in_doubt_per_kill = Vec::new();
    let mut rss_warm = None;
    let mut rss_epochs = Vec::new();
    let mut rss_series = Vec::new();
    let mut next_sample = warm_at;
    while started.elapsed() < total {
        s.step(3);
        std::thread::sleep(Duration::from_millis(1));
        if next_kill == kills as usize && started.elapsed() >= warm_at {
            if rss_warm.is_none() {
                rss_warm = Some(memory(engine.0.id()));
            }
            if started.elapsed() >= next_sample {
                next_sample += total / 20;
                rss_series.push(mib(memory(engine.0.id()).2).round());
            }
        }
        if next_kill < kill_at.len() && started.elapsed() >= kill_at[next_kill] {
            next_kill += 1;
            let log = dir.path().join(format!("run{next_kill}.log"));
            let (restarted, rss, in_doubt) =
                kill_nine(&mut s, engine, &venue.control, &config, &log, &path);
            engine = restarted;
            epoch_logs.push(log);
            rss_epochs.push(rss);
            in_doubt_per_kill.push(in_doubt);
        }
    }
    stop.store(true, Ordering::Relaxed);
    faulter.join().unwrap();
    // Undo every lasting fault and stop the venue's own market flow (which trades against
    // resting orders: a fill between keel's stop and the venue's list would differ), then let
    // every answer arrive.
    for undo in [
        "latency 0",
        "delay-reports 0",
        "delay-final 0",
        "refuse off",
        "flow 0",
    ] {
        control(&venue.control, undo);
    }
    s.cancel_pct = 0;
    let engine = settle(&mut s, engine, epoch_logs.last().unwrap(), &venue.control);
    let rss_end = memory(engine.0.id());
    let log = epoch_logs.last().unwrap().clone();
    let report = common::peers::stop_keel_run(engine, &log);
    let stats = control(&venue.control, "stats");
    let venue_open: BTreeSet<String> = control(&venue.control, "open-orders")
        .split_whitespace()
        .skip(3) // "ok open-orders N"
        .map(str::to_string)
        .collect();
    let keel_open = open_lines(&report);
    let b = &s.book;
    let faults = faults.lock().unwrap();
    let rss_warm = rss_warm.expect("a warm-up sample in the last epoch");
    eprintln!(
        "soak: {secs} s, {} commands ({} new, {} cancel), {} kill -9 restarts, faults {:?} \
         ({} in all)",
        b.news + b.cancels,
        b.news,
        b.cancels,
        kills,
        faults.injected,
        faults.injected.values().sum::<u64>()
    );
    eprintln!(
        "soak: events {:?}; in doubt at kills (new, cancel) {:?} = ({}, {}); new orders lost \
         (the engine never knew them) {}, probe answered first {}, answered late {}; cancels \
         answered late {}, lost (answered only by the repeat) {}; ring full {} times; still pending {}, unresolved {}, extra answers {}",
        b.kinds,
        in_doubt_per_kill,
        b.in_doubt_new,
        b.in_doubt_cancel,
        b.lost_new_unknown,
        b.probe_first_known,
        b.late_new,
        b.late_cancel,
        b.lost_cancels(),
        s.ring_full,
        b.pending(),
        b.unresolved(),
        b.extra.len()
    );
    print_memory(&rss_epochs, rss_warm, rss_end, total / 20, &rss_series);
    eprintln!(
        "soak: venue {stats}; open: keel {} venue {}",
        keel_open.len(),
        venue_open.len()
    );
    eprintln!("soak: {}", report.lines().next().unwrap_or(""));

    for id in keel_open.symmetric_difference(&venue_open) {
        let line = report.lines().find(|l| l.contains(id.as_str()));
        eprintln!("soak: open at one side only: {id} keel {line:?}");
    }
    let pending: Vec<_> = b
        .orders
        .iter()
        .filter(|(_, o)| o.new_pending || o.cancels_pending > 0 || o.new_in_doubt)
        .take(10)
        .collect();
    assert!(
        pending.is_empty(),
        "commands without an answer: {pending:?}"
    );
    eprintln!(
        "soak: canceled after \"not applied\": {} {:?}",
        b.not_applied_then_canceled.len(),
        &b.not_applied_then_canceled[..b.not_applied_then_canceled.len().min(10)]
    );
    let believed = b.believed_open();
    let silent = b.closed_silently();
    eprintln!(
        "soak: the strategy believes {} orders open; {} it learnt closed only from a cancel \
         refused `unknown order` (no close event): {:?}",
        believed.len(),
        silent.len(),
        &silent[..silent.len().min(10)]
    );
    for id in believed.symmetric_difference(&venue_open).take(10) {
        eprintln!(
            "soak: strategy and venue differ on {id}: {:016x}",
            b.orders
                .iter()
                .find(|(i, _)| i.to_string() == *id)
                .map_or(0, |(_, o)| o.trace)
        );
    }
    if std::env::var("KEEL_SOAK_STRICT").as_deref() == Ok("1") {
        assert!(b.not_applied_then_canceled.is_empty());
    }
    assert!(
        b.extra.is_empty(),
        "{} answers beyond one, e.g. {:?}",
        b.extra.len(),
        &b.extra[..b.extra.len().min(10)]
    );
    // Lost at a kill: what the engine held between the shared ring and its journal (one
    // bridge pass and the in-process ring), and answers it had not yet written back (the
    // in-process event ring). Everything else in doubt must have been answered late.
    let lost = b.lost_new_unknown + b.lost_cancels();
    assert!(
        lost <= kills * 2 * (STRATEGY_RING + u64::from(COMMANDS_PER_PASS_MAX)),
        "{lost} commands lost in {kills} kills"
    );
    assert_eq!(stat(&stats, "duplicate_ids"), 0, "{stats}");
    assert_eq!(
        stat(&stats, "stream_full_drops"),
        0,
        "the venue's stream filled up: {stats}"
    );
    assert!(
        stat(&stats, "accepted") + stat(&stats, "rejected") <= b.news,
        "the venue saw more orders than the strategy sent: {stats}"
    );
    assert_eq!(keel_open, venue_open, "{report}");
    assert_eq!(
        believed, venue_open,
        "the strategy's view of its open orders is not the venue's"
    );
    let growth = rss_end.2.saturating_sub(rss_warm.2);
    assert!(
        growth <= HEAP_GROWTH_MAX_BYTES,
        "heap grew {growth} bytes from warm-up to the end"
    );
}
