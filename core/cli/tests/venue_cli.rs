//! `keel venue` at its edges: the control port's `help` over a real TCP connection (one line
//! per command, then `ok help`; every listed command is one the port knows), unknown commands
//! pointing at `help`, and listen addresses already taken refused naming the address.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};

use keel::clock::{Clock, TscClock};
use keel_venue::flow::FlowConfig;
use keel_venue::server::{VenueConfig, VenueServer, CONTROL_COMMANDS};

const KEEL: &str = env!("CARGO_BIN_EXE_keel");

/// A venue with a control port and no synthetic flow.
fn venue() -> VenueServer {
    VenueServer::new(VenueConfig {
        control: Some("127.0.0.1:0".parse().unwrap()),
        flow: FlowConfig {
            events_per_sec: 0,
            ..FlowConfig::default()
        },
        ..VenueConfig::default()
    })
    .unwrap()
}

/// Sends `lines` on `control` and steps the venue until `answers` lines ending `ok ...` or
/// `error ...` came back (at most 10 s); returns everything received.
fn ask(venue: &mut VenueServer, control: &mut TcpStream, lines: &str, answers: usize) -> String {
    control.write_all(lines.as_bytes()).unwrap();
    let clock = TscClock::new();
    let deadline = clock.now_ns() + 10_000_000_000;
    let mut got = Vec::new();
    let done = |got: &[u8]| {
        String::from_utf8_lossy(got)
            .lines()
            .filter(|l| l.starts_with("ok ") || l.starts_with("error "))
            .count()
            >= answers
            && got.ends_with(b"\n")
    };
    while !done(&got) {
        assert!(clock.now_ns() < deadline, "no answer to {lines:?}: {got:?}");
        // Waits up to 1 ms in the kernel when idle: no busy spin.
        venue.step(clock.now_ns(), 1_000_000).unwrap();
        let mut buf = [0u8; 4096];
        match control.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("control connection: {e}"),
        }
    }
    String::from_utf8(got).unwrap()
}

// Goal: `help` answers one line per command with its syntax, then `ok help`; no listed line can
// be mistaken for an answer; and every command listed is one the port knows (each, sent with
// an argument it cannot take, is answered by that command's own error, never "unknown").
#[test]
fn control_help_lists_every_command() {
    let mut venue = venue();
    let mut control = TcpStream::connect(venue.control_addr().unwrap()).unwrap();
    control.set_nonblocking(true).unwrap();
    let text = ask(&mut venue, &mut control, "help\n", 1);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), CONTROL_COMMANDS.len() + 1, "{text}");
    assert_eq!(*lines.last().unwrap(), "ok help");
    for ((syntax, meaning), line) in CONTROL_COMMANDS.iter().zip(&lines) {
        assert!(line.starts_with(syntax), "{line:?} for {syntax:?}");
        assert!(line.ends_with(meaning), "{line:?}");
        assert!(
            !line.starts_with("ok ") && !line.starts_with("error "),
            "{line}"
        );
    }
    let mut words: Vec<&str> = CONTROL_COMMANDS
        .iter()
        .map(|(syntax, _)| syntax.split_whitespace().next().unwrap())
        .collect();
    words.dedup();
    for word in words {
        let answer = ask(&mut venue, &mut control, &format!("{word} ?\n"), 1);
        assert!(
            answer.starts_with(&format!("error {word}")),
            "{word}: {answer:?}"
        );
        assert!(!answer.contains("unknown command"), "{word}: {answer:?}");
    }
    // `help` takes no argument, and an unknown command points at it.
    let answer = ask(&mut venue, &mut control, "help me\nhlep\n", 2);
    assert_eq!(
        answer,
        "error help: unexpected argument 'me'\n\
         error unknown command 'hlep' (send help for the list of commands)\n"
    );
    // The port still works after all of that.
    assert_eq!(ask(&mut venue, &mut control, "status\n", 1), "ok status\n");
}

/// Runs `keel venue ARGS` for at most a second; returns (exit code, stderr).
fn keel_venue(args: &[&str]) -> (i32, String) {
    let out = Command::new(KEEL)
        .arg("venue")
        .args(args)
        .args(["--duration-s", "1", "--flow-rate", "0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).unwrap(),
    )
}

// Goal: an order-entry, control or market-data address already in use is refused at start,
// on either transport, with the address and the OS error — never a bare "bind: ...".
#[test]
fn keel_venue_names_the_address_it_cannot_listen_on() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for transport in ["io_uring", "epoll"] {
        for flag in ["--listen", "--control", "--md-listen"] {
            let mut args = vec![
                "--transport",
                transport,
                "--listen",
                "127.0.0.1:0",
                "--control",
                "127.0.0.1:0",
                "--md-listen",
                "127.0.0.1:0",
            ];
            let at = args.iter().position(|a| *a == flag).unwrap();
            args[at + 1] = &addr;
            let (code, err) = keel_venue(&args);
            assert_eq!(code, 1, "{transport} {flag}: {err}");
            let line = format!("keel venue: cannot listen on {addr}: ");
            assert!(err.contains(&line), "{transport} {flag}: {err}");
            assert!(err.contains("(os error 98)"), "{transport} {flag}: {err}");
        }
    }
}
