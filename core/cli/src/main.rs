//! The `keel` command. See `keel --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    keel_cli::run(std::env::args_os())
}
