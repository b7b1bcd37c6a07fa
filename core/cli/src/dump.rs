//! `keel journal dump` and `keel log dump`: the order journal and the wire log as text.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use keel::journal::{JournalRecord, RecordSource};
use keel::order::{NewOrder, Side, TimeInForce};

#[derive(Debug, Args)]
pub struct JournalArgs {
    #[command(subcommand)]
    command: JournalCommand,
}

#[derive(Debug, Subcommand)]
enum JournalCommand {
    /// Print every record of the journal in DIR, one per line (read only: nothing is
    /// repaired or removed). Exit 0, 65 with the file and offset of a corrupt record, 66
    /// when DIR is not a directory or holds no journal.
    Dump {
        /// The journal directory (`[journal] dir`).
        dir: PathBuf,
        /// Name venues and symbols as this configuration does (else indices).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub struct LogArgs {
    #[command(subcommand)]
    command: LogCommand,
}

#[derive(Debug, Subcommand)]
enum LogCommand {
    /// Print the wire log (`[wire_log] dir`/wire.log): one line per message with its UTC
    /// time, venue, direction, length, SoupBinTCP and OUCH types and its bytes in hex, then a
    /// summary line. Exit 0, or 65 for a file that is not a wire log (or not a regular
    /// file). Read as a stream: memory stays at one record.
    Dump {
        /// The file (`wire.log` or `wire.log.1`).
        file: PathBuf,
    },
}

struct Names {
    venues: Vec<String>,
    symbols: Vec<String>,
}

impl Names {
    fn venue(&self, v: u16) -> String {
        self.venues
            .get(usize::from(v))
            .cloned()
            .unwrap_or_else(|| v.to_string())
    }

    fn symbol(&self, s: u16) -> String {
        self.symbols
            .get(usize::from(s))
            .cloned()
            .unwrap_or_else(|| s.to_string())
    }

    fn order(&self, o: &NewOrder) -> String {
        format!(
            "id={} strategy={} seq={} venue={} symbol={} side={} price={} qty={} tif={}",
            o.id.0,
            o.id.strategy().0,
            o.id.sequence(),
            self.venue(o.venue.0),
            self.symbol(o.symbol.0),
            match o.side {
                Side::Buy => "buy",
                Side::Sell => "sell",
            },
            keel::engine::admin::price_text(o.price.0),
            o.qty,
            match o.tif {
                TimeInForce::Day => "day",
                TimeInForce::ImmediateOrCancel => "ioc",
            }
        )
    }

    fn record(&self, r: &JournalRecord) -> String {
        match r {
            JournalRecord::Intent { order, wire_ref } => {
                format!("intent {} wire_ref={wire_ref}", self.order(order))
            }
            JournalRecord::Accepted { id, venue_seq } => {
                format!("accepted id={} venue_seq={venue_seq}", id.0)
            }
            JournalRecord::Fill {
                id,
                qty,
                price,
                venue_seq,
            } => format!(
                "fill id={} qty={qty} price={} venue_seq={venue_seq}",
                id.0,
                keel::engine::admin::price_text(price.0)
            ),
            JournalRecord::Closed { id, venue_seq } => {
                format!("closed id={} venue_seq={venue_seq}", id.0)
            }
            JournalRecord::SessionSeq {
                venue,
                applied_through,
            } => format!(
                "session-seq venue={} applied_through={applied_through}",
                self.venue(venue.0)
            ),
            JournalRecord::IdHighWater {
                strategy,
                high_water_mark,
            } => format!(
                "id-high-water strategy={} high_water_mark={high_water_mark}",
                strategy.0
            ),
            JournalRecord::OpenOrder {
                order,
                wire_ref,
                accepted,
                filled,
            } => format!(
                "open-order {} wire_ref={wire_ref} accepted={accepted} filled={filled}",
                self.order(order)
            ),
            JournalRecord::WireRefFloor {
                venue,
                next_wire_ref,
            } => format!(
                "wire-ref-floor venue={} next_wire_ref={next_wire_ref}",
                self.venue(venue.0)
            ),
            JournalRecord::ProtocolState { venue, state } => format!(
                "protocol-state venue={} protocol={} version={} {}",
                self.venue(venue.0),
                state.protocol,
                state.version,
                keel::session::registry::describe_state(state)
            ),
            JournalRecord::Position {
                venue,
                symbol,
                position,
            } => format!(
                "position venue={} symbol={} bought={} sold={}",
                self.venue(venue.0),
                self.symbol(symbol.0),
                position.bought,
                position.sold
            ),
        }
    }
}

pub fn journal(args: JournalArgs) -> ExitCode {
    let JournalCommand::Dump { dir, config } = args.command;
    let names = match config.as_deref().map(read_names).transpose() {
        Ok(n) => n.unwrap_or(Names {
            venues: Vec::new(),
            symbols: Vec::new(),
        }),
        Err(e) => {
            keel::warn_line!("keel journal dump: {e}");
            return ExitCode::from(65);
        }
    };
    if !dir.is_dir() {
        keel::warn_line!("keel journal dump: {}: not a directory", dir.display());
        return ExitCode::from(66);
    }
    let mut out = std::io::stdout().lock();
    let result = keel::journal::Journal::read(&dir, |source, r| {
        let at = match source {
            RecordSource::Checkpoint(c) => format!("checkpoint-{c}"),
            RecordSource::File { file, index } => format!("journal-{file} #{index}"),
        };
        let _ = writeln!(out, "{at} {}", names.record(r));
    });
    match result {
        // An empty or mistyped directory is not an empty journal: a running or stopped
        // engine's journal always has its first file.
        Ok(report) if report.files == 0 && report.checkpoint_records == 0 => {
            keel::warn_line!(
                "keel journal dump: {}: no journal here (no journal file, no checkpoint)",
                dir.display()
            );
            ExitCode::from(66)
        }
        Ok(report) => {
            let _ = writeln!(
                out,
                "# {} records ({} from checkpoint {}), {} files, torn tail {} bytes",
                report.records,
                report.checkpoint_records,
                report.checkpoint,
                report.files,
                report.torn_tail_bytes
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            keel::warn_line!("keel journal dump: {e}");
            ExitCode::from(65)
        }
    }
}

fn read_names(file: &std::path::Path) -> Result<Names, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let config = keel::config::EngineConfig::from_toml(&text)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Names {
        venues: config.venues.iter().map(|v| v.name.clone()).collect(),
        symbols: config
            .symbols
            .iter()
            .map(|s| String::from_utf8_lossy(s).trim_end().to_string())
            .collect(),
    })
}

pub fn log(args: LogArgs) -> ExitCode {
    let LogCommand::Dump { file } = args.command;
    let mut out = std::io::stdout().lock();
    match keel::wirelog::dump(&file, &mut out) {
        Ok(s) => {
            let _ = writeln!(
                out,
                "# {} messages: {} in, {} out; {} dropped by the links; torn tail {} bytes",
                s.messages_in + s.messages_out,
                s.messages_in,
                s.messages_out,
                s.dropped,
                s.torn_tail_bytes
            );
            ExitCode::SUCCESS
        }
        Err(e @ keel::wirelog::WireLogError::Io { .. }) => {
            keel::warn_line!("keel log dump: {e}");
            ExitCode::from(66)
        }
        Err(e) => {
            keel::warn_line!("keel log dump: {e}");
            ExitCode::from(65)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: a directory that holds no journal (a typo, the wrong mount) is said so, never
    // printed as an empty journal with success.
    #[test]
    fn a_directory_without_a_journal_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let code = journal(JournalArgs {
            command: JournalCommand::Dump {
                dir: dir.path().to_path_buf(),
                config: None,
            },
        });
        assert_eq!(code, ExitCode::from(66));
    }
}
