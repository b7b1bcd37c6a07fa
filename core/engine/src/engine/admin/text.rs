//! The admin socket's language: a request line parsed into a command (names resolved,
//! every value checked), and answers, listings and counters written as text. `HELP` lists
//! every command.

use super::*;

/// The order's state as docs/architecture.md spells it.
pub fn state_name(s: OrderState) -> &'static str {
    match s {
        OrderState::PendingNew => "pending-new",
        OrderState::Live => "live",
        OrderState::PartiallyFilled => "partially-filled",
        OrderState::PendingCancel => "pending-cancel",
        OrderState::PendingReplace => "pending-replace",
        OrderState::Filled => "filled",
        OrderState::Canceled => "canceled",
        OrderState::Replaced => "replaced",
        OrderState::Rejected => "rejected",
        OrderState::Unknown => "unknown",
    }
}

/// A fixed-point price as text (4 decimals).
pub fn price_text(p: i64) -> String {
    let scale = crate::order::Price::SCALE;
    let sign = if p < 0 { "-" } else { "" };
    let a = p.unsigned_abs();
    format!("{sign}{}.{:04}", a / scale as u64, a % scale as u64)
}

pub(super) fn mode_name(m: LinkMode) -> &'static str {
    match m {
        LinkMode::Down => "refused (link down)",
        LinkMode::ReadOnly => "refused (read-only)",
        LinkMode::Trading => "flow",
    }
}

pub(super) fn on_off(b: bool) -> &'static str {
    if b {
        "ON"
    } else {
        "off"
    }
}

pub(super) fn describe(command: AdminCommand, names: &AdminNames) -> String {
    let sym = |s: SymbolId| names.symbols[usize::from(s.0)].clone();
    let ven = |v: VenueId| names.venues[usize::from(v.0)].clone();
    match command {
        AdminCommand::Strategy(s, true) => format!("strategy {} enabled", s.0),
        AdminCommand::Strategy(s, false) => format!(
            "strategy {} disabled: its new orders are refused (strategy disabled), its cancels flow",
            s.0
        ),
        AdminCommand::Shed(s, true) => format!(
            "symbol {} shed: new orders on it are refused (symbol shed), cancels flow",
            sym(s)
        ),
        AdminCommand::Shed(s, false) => format!("symbol {} no longer shed", sym(s)),
        AdminCommand::KillSwitch(true) => {
            "kill switch ON: no new order or replace leaves; cancels and market data flow".into()
        }
        AdminCommand::KillSwitch(false) => "kill switch off: new orders flow again".into(),
        AdminCommand::Breaker(v, true) => format!(
            "breaker of venue {} forced open (new orders refused `breaker open` until it \
             half-opens or `breaker {} close`)",
            ven(v),
            ven(v)
        ),
        AdminCommand::Breaker(v, false) => format!("breaker of venue {} closed", ven(v)),
        AdminCommand::Status | AdminCommand::OpenOrders(_) | AdminCommand::CancelAll(_) => {
            String::new()
        }
    }
}

pub(super) fn write_stats(out: &mut String, d: &DispatchStats) {
    use std::fmt::Write as _;
    let pairs: [(&str, u64); 25] = [
        ("commands", d.commands),
        ("outcomes", d.outcomes),
        ("events", d.events),
        ("events_lost", d.events_lost),
        ("sent_new", d.sent_new),
        ("sent_cancel", d.sent_cancel),
        ("sent_replace", d.sent_replace),
        ("sent_query", d.sent_query),
        ("sent_reconcile", d.sent_reconcile),
        ("sent_reduce_only", d.sent_reduce_only),
        ("contradictions", d.contradictions),
        ("moot_cancels", d.moot_cancels),
        ("duplicate_id_rejects", d.duplicate_id_rejects),
        ("late_cancel_answers", d.late_cancel_answers),
        ("shed", d.shed),
        ("throttled", d.throttled),
        ("breaker_refused", d.breaker_refused),
        ("cancel_lane_full", d.cancel_lane_full),
        ("executor_stalls", d.executor_stalls),
        ("query_lane_full", d.query_lane_full),
        ("not_sent", d.not_sent),
        ("journal_errors", d.journal_errors),
        ("mass_cancel_skipped", d.mass_cancel_skipped),
        ("report_errors", d.report_errors),
        ("polls", d.polls),
    ];
    for (k, v) in pairs {
        let _ = writeln!(out, "{k} {v}");
    }
    for (reason, code) in crate::ipc::codec::REFUSAL_CODES {
        let _ = writeln!(
            out,
            "refused{{reason=\"{}\"}} {}",
            crate::log::refusal_name(reason),
            d.refused[reason as usize]
        );
        let _ = code;
    }
    debug_assert_eq!(crate::ipc::codec::REFUSAL_CODES.len(), REFUSAL_REASONS);
}

/// The commands, as `help` prints them.
pub const HELP: &str = "\
status                                   engine, venues, strategies, shed symbols
stats                                    the dispatcher's counters
open-orders [strategy N] [symbol S] [venue V]
cancel-all all | [strategy N] [symbol S] [venue V]
disable N | enable N                     a strategy's new orders (its cancels flow)
shed SYMBOL on|off                       a symbol's new orders on every venue
kill-switch on|off                       no new order or replace leaves; cancels flow
reconnect VENUE                          a new session for the venue
reconcile VENUE                          READ-ONLY link, account checked: clear its
                                         contradictions, reconcile now (trades if clean)
breaker VENUE open|close                 force the venue's breaker (drills)
control [on|off]                         the adaptive controller: its state, or switch it
help                                     this list
";

pub(super) enum Parsed {
    Help,
    Reconnect(VenueId),
    Reconcile(VenueId),
    /// The adaptive controller: `None` asks its state.
    Control(Option<bool>),
    /// A command for the loop; `true`: print counters (`stats`).
    Loop(AdminCommand, bool),
}

pub(super) fn parse(words: &[&str], names: &AdminNames) -> Result<Parsed, String> {
    let symbol = |w: &str| {
        names
            .symbols
            .iter()
            .position(|s| s == w)
            .map(|i| SymbolId(i as u16))
            .ok_or_else(|| format!("no symbol `{w}` (symbols: {})", names.symbols.join(" ")))
    };
    let venue = |w: &str| {
        names
            .venues
            .iter()
            .position(|v| v == w)
            .map(|i| VenueId(i as u16))
            .ok_or_else(|| format!("no venue `{w}` (venues: {})", names.venues.join(" ")))
    };
    let strategy = |w: &str| match w.parse::<u16>() {
        Ok(s) if s < names.strategies => Ok(StrategyId(s)),
        _ => Err(format!(
            "no strategy `{w}` (strategies are 0 to {})",
            names.strategies.saturating_sub(1)
        )),
    };
    let on = |w: Option<&&str>| match w.copied() {
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        other => Err(format!("expected on or off, got `{}`", other.unwrap_or(""))),
    };
    let scope = |rest: &[&str]| -> Result<OperatorScope, String> {
        let mut scope = OperatorScope::default();
        let mut it = rest.iter();
        while let Some(&key) = it.next() {
            let value = it.next().ok_or_else(|| format!("`{key}` needs a value"))?;
            let twice = || format!("`{key}` given twice (one value per filter)");
            match key {
                "strategy" if scope.strategy.is_some() => return Err(twice()),
                "symbol" if scope.symbol.is_some() => return Err(twice()),
                "venue" if scope.venue.is_some() => return Err(twice()),
                "strategy" => scope.strategy = Some(strategy(value)?),
                "symbol" => scope.symbol = Some(symbol(value)?),
                "venue" => scope.venue = Some(venue(value)?),
                other => {
                    return Err(format!(
                        "unknown filter `{other}` (strategy N, symbol S, venue V)"
                    ))
                }
            }
        }
        Ok(scope)
    };
    let exact = |n: usize, usage: &str| {
        if words.len() == n {
            Ok(())
        } else {
            Err(format!("usage: {usage}"))
        }
    };
    let loop_ = |c| Ok(Parsed::Loop(c, false));
    match words.first().copied() {
        None => Err("empty request (try `help`)".into()),
        Some("help") => Ok(Parsed::Help),
        Some("status") => exact(1, "status").and_then(|()| loop_(AdminCommand::Status)),
        Some("stats") => exact(1, "stats").map(|()| Parsed::Loop(AdminCommand::Status, true)),
        Some("open-orders") => loop_(AdminCommand::OpenOrders(scope(&words[1..])?)),
        Some("cancel-all") => match &words[1..] {
            [] => {
                Err("say what to cancel: cancel-all all | [strategy N] [symbol S] [venue V]".into())
            }
            ["all"] => loop_(AdminCommand::CancelAll(OperatorScope::default())),
            rest => loop_(AdminCommand::CancelAll(scope(rest)?)),
        },
        Some(w @ ("disable" | "enable")) => {
            exact(2, &format!("{w} N"))?;
            loop_(AdminCommand::Strategy(strategy(words[1])?, w == "enable"))
        }
        Some("shed") => {
            exact(3, "shed SYMBOL on|off")?;
            loop_(AdminCommand::Shed(symbol(words[1])?, on(words.get(2))?))
        }
        Some("kill-switch") => {
            exact(2, "kill-switch on|off")?;
            loop_(AdminCommand::KillSwitch(on(words.get(1))?))
        }
        Some("reconnect") => {
            exact(2, "reconnect VENUE")?;
            Ok(Parsed::Reconnect(venue(words[1])?))
        }
        Some("reconcile") => {
            exact(2, "reconcile VENUE")?;
            Ok(Parsed::Reconcile(venue(words[1])?))
        }
        Some("control") => match words.len() {
            1 => Ok(Parsed::Control(None)),
            2 => Ok(Parsed::Control(Some(on(words.get(1))?))),
            _ => Err("usage: control [on|off]".into()),
        },
        Some("breaker") => {
            exact(3, "breaker VENUE open|close")?;
            let open = match words[2] {
                "open" => true,
                "close" => false,
                other => return Err(format!("expected open or close, got `{other}`")),
            };
            loop_(AdminCommand::Breaker(venue(words[1])?, open))
        }
        Some(other) => Err(format!(
            "unknown command `{}` (try `help`)",
            other.chars().take(64).collect::<String>()
        )),
    }
}
