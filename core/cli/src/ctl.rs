//! `keel ctl`: one operator command to a running `keel run`, over its admin socket.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The engine's configuration: its admin socket is `[operator] admin_socket`, else
    /// `admin.sock` in its `[ipc]` directory.
    #[arg(long, conflicts_with = "socket")]
    config: Option<PathBuf>,
    /// The admin socket itself.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The command and its arguments (`help` lists them).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

pub fn run(args: CtlArgs) -> ExitCode {
    let socket = match (&args.socket, &args.config) {
        (Some(s), _) => s.clone(),
        (None, Some(file)) => {
            let config = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))
                .and_then(|text| {
                    keel::config::EngineConfig::from_toml(&text)
                        .map_err(|e| format!("{}: {e}", file.display()))
                });
            match config.map(|c| c.admin_socket()) {
                Ok(Some(path)) => path,
                Ok(None) => {
                    keel::warn_line!(
                        "keel ctl: {}: no [operator] admin_socket and no [ipc] directory",
                        file.display()
                    );
                    return ExitCode::from(65);
                }
                Err(e) => {
                    keel::warn_line!("keel ctl: {e}");
                    return ExitCode::from(65);
                }
            }
        }
        (None, None) => {
            keel::warn_line!("keel ctl: give --config FILE or --socket PATH");
            return ExitCode::from(64);
        }
    };
    let line = args.command.join(" ");
    // One request per connection: a line break inside an argument would send a second
    // command the engine ignores.
    if line.contains(['\n', '\r']) {
        keel::warn_line!("keel ctl: a command is one line: {line:?} has a line break");
        return ExitCode::from(64);
    }
    match keel::engine::admin::request(&socket, &line) {
        Ok(answer) => {
            keel::say_line!("{}", answer.trim_end());
            if answer.starts_with("ok") {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(keel::engine::admin::RequestError::Connect(e)) => {
            keel::warn_line!(
                "keel ctl: cannot reach the engine at {}: {e} (is `keel run` running with this \
                 configuration?)",
                socket.display()
            );
            ExitCode::from(69)
        }
        Err(keel::engine::admin::RequestError::Answer(e)) => {
            // Delivered (or part of it): the engine may have carried it out. Never say
            // "cannot reach": an operator would think nothing happened.
            keel::warn_line!(
                "keel ctl: `{line}` was sent to the engine at {} but no whole answer came back \
                 ({e}): it may have been carried out; check `keel ctl status`",
                socket.display()
            );
            ExitCode::from(75)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: `keel ctl` never sends a line break inside a command (the engine would carry out
    // the first line only).
    #[test]
    fn a_command_with_a_line_break_is_refused_before_sending() {
        let dir = tempfile::tempdir().unwrap();
        let code = run(CtlArgs {
            config: None,
            socket: Some(dir.path().join("absent.sock")),
            command: vec!["kill-switch on\ncancel-all all".into()],
        });
        assert_eq!(code, ExitCode::from(64));
    }
}
