//! The `keel` command line (clap). Each subcommand is a thin driver over the engine library
//! (`keel`); with the `simulator` feature, `venue`, `demo` and `gateway` drive the simulated
//! venue (`keel-venue`). See `keel --help`; `src/main.rs` is the binary.

mod ctl;
mod drill;
mod dump;
mod fetch;
pub mod preflight;
mod run;
mod stat;

#[cfg(feature = "simulator")]
use keel_venue::cmd::{gateway, venue};

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// keel — a low-latency order execution core.
///
/// Start with `keel demo`: the simulated venue, the engine and a synthetic strategy through a
/// cancel storm, a venue disconnect and reconciliation, with a report at the end. `keel venue`
/// runs the simulated exchange alone; `keel run --config FILE` runs the engine against the
/// venues in FILE and serves strategies over shared memory (docs/ipc.md);
/// `keel config-check FILE` checks a configuration.
#[derive(Debug, Parser)]
#[command(name = "keel", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the simulated exchange: OUCH 5.0 over SoupBinTCP 4.0, with fault injection.
    ///
    /// Price-time order books per symbol with seeded synthetic makers and takers, sequenced
    /// streams replayed on re-login, server-side rate limits, duplicate-id rejection, keel's
    /// order-status query, and fault injection. Every fault knob below can also be changed
    /// while running: connect to the control port (e.g. `nc 127.0.0.1 15001`) and send one
    /// command per line; each is answered `ok ...` or `error ...`:
    ///
    ///   latency MS [JITTER_MS]   added ack/fill latency, with uniform jitter
    ///   delay-reports MS         hold every outbound report this long
    ///   delay-final MS           hold each order's final report (last fill or cancel)
    ///   accept-limit N           most sessions at once (0: no limit)
    ///   refuse on|off            close every new connection at once
    ///   stall MS                 stop reading from clients for MS
    ///   drop                     drop every connection now
    ///   restart                  drop every connection; books and sequences are kept
    ///   reject-burst N           reject the next N orders (venue system problem, code 6)
    ///   replay-all               replay the next login from sequence 1 (duplicate reports)
    ///   clock-jump SECONDS       the venue's wall clock (its timestamps) jumps, signed
    ///   saturate N MS | off      gateway overload: more than N connects in an MS window all fail
    ///   flow N                   synthetic events per second (0 stops the flow)
    ///   open-orders              ClOrdIDs of every account order open at the venue
    ///   stats                    accepted, rejected, canceled, matches, duplicate ids,
    ///                            price rejects, lies
    ///   status                   answer ok (liveness check)
    ///   help                     every command, one line each, then `ok help`
    ///
    /// A hostile venue, for drills against a client (every logged-in client or account):
    ///
    ///   lie unknown-fill         an execution for UserRefNum 4294967295, never entered
    ///   lie overfill             an execution 1 share beyond the newest open order's quantity
    ///   lie fill-after-close     an execution of 1 share for the newest closed order
    ///   lie zero-fill            an execution of 0 shares for the newest open order
    ///   lie off-limit-fill       an execution of the newest open order through its limit
    ///   gap N                    the next login answer skips N reports (0..=4294967295)
    ///   login-seq S              the next login answer announces sequence S (any u64)
    ///   debug-packet N           a Debug packet with N bytes of text (0..=65534)
    ///   oversize N               a whole packet announcing length N (1..=65535)
    ///
    /// docs/operations.md ("The simulated venue at its edges") has every range.
    #[command(verbatim_doc_comment)]
    #[cfg(feature = "simulator")]
    Venue(Box<venue::VenueArgs>),
    /// The main job: the simulated venue on loopback, the engine and a synthetic strategy in
    /// one loop, through calm trading, a cancel storm (100× the calm rate, 97% cancels), a
    /// venue disconnect, reconnection and reconciliation, and calm again. Prints live
    /// progress, then latency per phase, what was held back, breaker and session figures, and
    /// `invariants: N checked, M violated` (exit 1 if any was violated).
    #[cfg(feature = "simulator")]
    Demo(keel_venue::demo::DemoArgs),
    /// Run the engine against the configured venues, serving strategies over shared memory.
    ///
    /// Restores the order journal first (orders open before a crash come back; orders sent
    /// and never answered are queried, never resent), connects and reconciles every venue, and
    /// serves each configured strategy at `<ipc.dir>/strategy-<id>` (layout: docs/ipc.md;
    /// the strategy SDKs and their examples: docs/strategies.md), with each feed's market data
    /// at `<ipc.dir>/md-<feed>`. Stops on SIGINT/SIGTERM, syncs the
    /// journal and prints its counters and every order still open.
    Run(run::RunArgs),
    /// Act on a running engine (`keel run`) through its admin socket: status, stats,
    /// open-orders, cancel-all, disable/enable a strategy, shed a symbol, kill-switch,
    /// reconnect a venue, force a breaker. `keel ctl --config FILE help` lists the commands;
    /// docs/operations.md ("Operator control") explains each answer. Exit 0 on `ok`, 1 on
    /// `error`, 69 when the engine cannot be reached.
    Ctl(ctl::CtlArgs),
    /// Rehearse a failure on a running engine: a scripted fault through the venue's control
    /// port (link-cut, gateway-restart, reject-burst) and a verdict on each thing
    /// the engine must then do, with the timeline. Exit 0 when every expectation held, 1
    /// naming those that failed, 2 when the drill could not run.
    Drill(drill::DrillArgs),
    /// The start-up burst: a depth snapshot and kline history for many symbols from a venue's
    /// REST API (`keel venue --rest-listen`), shaped by the client-side gate so the venue never
    /// answers 429 (docs/rest.md); `--no-limiter` shows what happens without it. Prints the
    /// gate's figures (acquire wait mean and p99, acquire timeouts, 429 share, 418s); exit 0
    /// when every request brought its data, 1 when any did not.
    Fetch(fetch::FetchArgs),
    /// A stateless market-data gateway: subscribes to a venue's events on a NATS bus (`keel
    /// venue --nats`) and serves the WebSocket protocol of the venue's market-data server to
    /// its own clients; books from snapshots asked on the bus, resynced after any gap
    /// (docs/market-data.md, "Scaling out"). Adding a gateway is adding a subscriber.
    #[cfg(feature = "simulator")]
    Gateway(gateway::GatewayArgs),
    /// A running engine's counters, from another process: a live view of its counters file
    /// (docs/observability.md), `--once`, or `--json` for scripts.
    Stat(stat::StatArgs),
    /// The order journal: `keel journal dump DIR` prints every record as text.
    Journal(dump::JournalArgs),
    /// The wire log: `keel log dump FILE` prints every message to and from the venues.
    Log(dump::LogArgs),
    /// Read the host and the configuration together: loop cores isolated, frequency governor,
    /// C-states, transparent huge pages, swap, interrupts on the loop cores, io_uring allowed,
    /// memory lockable, open files, clock synchronised, invariant TSC. One line per check
    /// (`ok`, `warn`, `?`), what to do for each warning (docs/tuning.md); changes nothing.
    /// `keel run` prints the same warnings at start. Exit 0 (1 with `--strict` and a warning).
    Preflight(preflight::PreflightArgs),
    /// Print a complete configuration file with every key at its default value (one example
    /// venue and feed, to be edited; see docs/config.md).
    Defaults,
    /// Check an engine configuration file (TOML; see docs/keel.example.toml): prints the
    /// effective settings as a configuration file (every key written out, remarks as `#`
    /// comments), or the offending key, its value and what is allowed (exit 65). What will not
    /// work on this machine (a pinned core it lacks, a directory whose parent is missing) is a
    /// warning on stderr.
    ConfigCheck {
        /// The file (`-`: standard input).
        file: std::path::PathBuf,
    },
}

/// Parses `args` (the program name first, as `std::env::args_os` gives them) and runs the
/// command.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    #[cfg(feature = "simulator")]
    let demo = matches!(cli.command, Command::Demo(_));
    #[cfg(not(feature = "simulator"))]
    let demo = false;
    if demo
        || matches!(
            cli.command,
            Command::Defaults
                | Command::ConfigCheck { .. }
                | Command::Ctl(_)
                | Command::Stat(_)
                | Command::Drill(_)
                | Command::Fetch(_)
                | Command::Journal(_)
                | Command::Log(_)
                | Command::Preflight(_)
        )
    {
        // A report to a reader that went away (`keel defaults | head`): end quietly, as
        // Unix filters do, instead of panicking on the write. (`run` and `venue` keep the
        // signal ignored and never fail on a closed output: see `say_line!`.)
        restore_sigpipe();
    }
    match cli.command {
        #[cfg(feature = "simulator")]
        Command::Venue(args) => venue::run(*args),
        Command::Run(args) => run::run(args),
        Command::Ctl(args) => ctl::run(args),
        Command::Stat(args) => stat::run(args),
        Command::Drill(args) => drill::run(args),
        Command::Fetch(args) => fetch::run(args),
        #[cfg(feature = "simulator")]
        Command::Gateway(args) => gateway::run(args),
        Command::Journal(args) => dump::journal(args),
        Command::Log(args) => dump::log(args),
        Command::Preflight(args) => preflight::run(args),
        Command::Defaults => defaults(),
        Command::ConfigCheck { file } => config_check(&file),
        #[cfg(feature = "simulator")]
        Command::Demo(args) => match keel_venue::demo::run(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                keel::warn_line!("keel demo: {e}");
                ExitCode::from(2)
            }
        },
    }
}

fn config_check(file: &std::path::Path) -> ExitCode {
    let from_stdin = file.as_os_str() == "-";
    let read = if from_stdin {
        std::io::read_to_string(std::io::stdin().lock())
    } else {
        std::fs::read_to_string(file)
    };
    let name = if from_stdin {
        "<stdin>".to_string()
    } else {
        file.display().to_string()
    };
    let text = match read {
        Ok(text) => text,
        Err(e) => {
            keel::warn_line!("keel: cannot read {name}: {e}");
            return ExitCode::from(66);
        }
    };
    match keel::config::EngineConfig::from_toml(&text) {
        Ok(config) => {
            for w in config.warnings() {
                keel::warn_line!("keel: warning: {w}");
            }
            let need = config.memory_need();
            // Remarks are TOML comments: the whole output is a file `config-check` accepts.
            keel::say_line!(
                "# {name}: ok. The effective settings follow, every key written out.\n\
                 # memory at start: {} MiB (largest part: {} at {} MiB)",
                need.total_bytes >> 20,
                need.largest_key,
                need.largest_bytes >> 20
            );
            keel::say_line!("{}", keel::config::to_toml(&config));
            ExitCode::SUCCESS
        }
        Err(e) => {
            keel::warn_line!("keel: {name}: {e}");
            ExitCode::from(65)
        }
    }
}

/// `keel defaults`: a complete configuration, every key at its default.
fn defaults() -> ExitCode {
    keel::say_line!(
        "# keel's defaults: every key at its default value (docs/config.md). The [[venue]] and \
         [[feed]]\n# addresses are examples (TEST-NET-1): edit them. Check a file with: keel \
         config-check FILE"
    );
    keel::say_line!(
        "{}",
        keel::config::to_toml(&keel::config::print::example_config())
    );
    ExitCode::SUCCESS
}

/// Default SIGPIPE disposition: a write to a closed pipe ends the process, silently.
fn restore_sigpipe() {
    // SAFETY: sets the disposition of one signal to the default; no handler, no memory.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
