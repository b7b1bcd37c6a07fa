//! The `keel` command line. Subcommands arrive with the issues that build them; until then
//! the command says plainly what exists and what does not, and exits non-zero for the latter.

use std::process::ExitCode;

use crate::dispatch::DispatcherConfig;

const HELP: &str = "\
keel — a low-latency order execution core

USAGE:
    keel <COMMAND>

COMMANDS:
    defaults    Print the dispatcher's default bounds (see docs/config.md)
    demo        The main job: simulated venue, engine, cancel storm (not built yet)
    venue       The simulated exchange (not built yet)
    help        Print this help

OPTIONS:
    -h, --help       Print this help
    -V, --version    Print the version

What exists today: the library (order model, guard chain, dispatcher) and its tests
(scripts/test) and benchmarks (scripts/bench). See README.md.
";

/// Runs the command line; returns the process exit code.
pub fn run(args: &[String]) -> ExitCode {
    match args.first().map(String::as_str) {
        None | Some("help" | "-h" | "--help") => {
            print!("{HELP}");
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("keel {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("defaults") => {
            println!("{:#?}", DispatcherConfig::default());
            ExitCode::SUCCESS
        }
        Some(cmd @ ("demo" | "venue")) => {
            eprintln!(
                "keel {cmd}: not built yet. The engine's parts (guard chain, dispatcher) exist \
                 and are tested; the venue, sessions and demo are the next issues. See README.md."
            );
            ExitCode::from(2)
        }
        Some(other) => {
            eprintln!("keel: unknown command '{other}'\n\n{HELP}");
            ExitCode::from(64)
        }
    }
}
