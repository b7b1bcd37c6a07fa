//! The `keel` command. See `keel --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    keel::cli::run(std::env::args_os())
}
