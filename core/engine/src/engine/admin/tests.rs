//! The admin socket's unit tests.

use super::*;
use crate::dispatch::DispatcherConfig;
use crate::ring::{strategy_channel, venue_channel};
use std::os::unix::fs::PermissionsExt;

fn dispatcher() -> Dispatcher {
    let config = DispatcherConfig {
        strategies: 1,
        venues: 1,
        ..DispatcherConfig::default()
    };
    let (_strategy, port) = strategy_channel(64, 64);
    let (_venue, venue_port) = venue_channel(64, 64);
    Dispatcher::new(config, vec![port], vec![venue_port], 1).expect("config")
}

fn names() -> AdminNames {
    AdminNames {
        symbols: vec!["AAPL".into()],
        venues: vec!["sim".into()],
        strategies: 1,
    }
}

fn push(client: &mut AdminClient, command: AdminCommand) -> u64 {
    let id = client.next_id;
    client.next_id += 1;
    client
        .requests
        .push(AdminRequest { id, command })
        .expect("room");
    id
}

// Goal: an operator told "the engine did not answer" must be able to trust that the
// command will not be carried out later, when a stalled loop comes back.
#[test]
fn a_request_given_up_on_is_never_carried_out_later() {
    let (mut port, mut client) = admin_channel();
    let mut d = dispatcher();
    let shared = Shared::new(1);
    let id = push(&mut client, AdminCommand::KillSwitch(true));
    client.abandoned.store(id, Ordering::Release);
    port.serve(10, &mut d, &[], &shared);
    assert!(!d.kill_switch(), "a request given up on was carried out");
    assert!(
        client.replies.pop().is_err(),
        "an abandoned request was answered"
    );
    // A listing given up on part-way stops.
    let id = push(&mut client, AdminCommand::Status);
    port.serve(20, &mut d, &[], &shared);
    client.abandoned.store(id, Ordering::Release);
    while client.replies.pop().is_ok() {}
    port.serve(30, &mut d, &[], &shared);
    assert!(port.listing.is_none());
    // The next request is served.
    let id = push(&mut client, AdminCommand::KillSwitch(true));
    port.serve(40, &mut d, &[], &shared);
    assert!(d.kill_switch());
    let reply = client.replies.pop().expect("answered");
    assert_eq!(reply.id, id);
    assert!(matches!(reply.answer, Answer::Held { .. }));
}

// Goal: while a stop cancels every order, nobody can turn the kill switch off and let new
// orders leave during the shutdown.
#[test]
fn the_kill_switch_stays_on_while_the_engine_stops() {
    let (mut port, mut client) = admin_channel();
    let mut d = dispatcher();
    let shared = Shared::new(1);
    shared.stop_cancel.store(true, Ordering::Release);
    port.serve(10, &mut d, &[], &shared);
    assert!(d.kill_switch(), "cancel-on-stop turns the kill switch on");
    push(&mut client, AdminCommand::KillSwitch(false));
    port.serve(STOP_CANCEL_INTERVAL_NS / 2, &mut d, &[], &shared);
    let reply = client.replies.pop().expect("answered");
    assert!(matches!(
        reply.answer,
        Answer::Refused(OperatorError::Stopping)
    ));
    assert!(d.kill_switch(), "the kill switch went off during a stop");
}

fn bind(path: &Path) -> Result<AdminServer, AdminSocketError> {
    let (_port, client) = admin_channel();
    AdminServer::bind(path, client, names(), Arc::new(Shared::new(1)))
}

// Goal: the admin socket never destroys what is at its path (a file, a directory, a
// live engine's socket) and is owner-only whatever the umask.
#[test]
fn binding_replaces_only_a_dead_socket_and_is_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal-00000001.kj");
    std::fs::write(&file, b"precious").unwrap();
    let e = bind(&file).expect_err("a regular file is not replaced");
    assert!(e.to_string().contains("is not a socket"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"precious");
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    assert!(bind(&sub).is_err());
    assert!(sub.is_dir());

    let path = dir.path().join("admin.sock");
    let live = UnixListener::bind(&path).unwrap();
    let e = bind(&path).expect_err("a live socket is not taken over");
    assert!(
        e.to_string().contains("a live process serves this socket"),
        "{e}"
    );
    drop(live); // the file stays, nothing listens: what a killed engine leaves
    let server = bind(&path).expect("a dead socket is replaced");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");

    // At the end, a path that names another socket by now is left alone.
    std::fs::remove_file(&path).unwrap();
    let other = UnixListener::bind(&path).unwrap();
    server.shared.stop.store(true, Ordering::Release);
    server.run();
    assert!(path.exists(), "the server removed a socket it did not make");
    drop(other);
}

// Goal: clients that connect and send nothing, or a byte at a time, never keep another
// operator's command from being answered; past CONNECTIONS_MAX waiting, a connection is
// refused at once, with a reason.
#[test]
fn silent_and_slow_clients_never_block_another_operator() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.sock");
    let server = bind(&path).unwrap();
    let shared = Arc::clone(&server.shared);
    let thread = std::thread::spawn(move || server.run());
    let mut idle = Vec::new();
    for _ in 0..CONNECTIONS_MAX - 1 {
        idle.push(UnixStream::connect(&path).unwrap());
    }
    let mut slow = UnixStream::connect(&path).unwrap();
    slow.write_all(b"he").unwrap();
    // The 16 waiting connections fill every slot: one more is refused with the reason.
    let answer = loop {
        let a = request(&path, "help").expect("an answer");
        if !a.starts_with("ok") {
            break a;
        }
    };
    assert!(answer.starts_with("error: 16 connections"), "{answer}");
    idle.pop();
    drop(slow);
    // Slots free (closed connections are refused and dropped): served while the other
    // idle clients still hold theirs.
    let answer = loop {
        let a = request(&path, "help").expect("an answer");
        if a.starts_with("ok") {
            break a;
        }
    };
    assert!(answer.starts_with("ok: commands"), "{answer}");
    // Each idle client is answered in the end, with the reason.
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        assert!(
            text.starts_with("error: no complete request line within"),
            "{text}"
        );
    }
    shared.stop.store(true, Ordering::Release);
    thread.join().unwrap();
    assert!(!path.exists());
}

// Goal: a socket file removed while the engine runs (by hand, a tmp cleaner) does not
// leave the engine unreachable for the rest of its run.
#[test]
fn a_removed_socket_file_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.sock");
    let server = bind(&path).unwrap();
    let shared = Arc::clone(&server.shared);
    let thread = std::thread::spawn(move || server.run());
    assert!(request(&path, "help").unwrap().starts_with("ok"));
    std::fs::remove_file(&path).unwrap();
    // Bounded: 30 s of 1-ms naps.
    let mut naps = 0;
    while request(&path, "help").is_err() {
        naps += 1;
        assert!(naps < 30_000, "never made again");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    shared.stop.store(true, Ordering::Release);
    thread.join().unwrap();
    assert!(!path.exists());
}

// Goal: a script piped in whole is refused, not half done; a filter given twice is
// refused, not silently narrowed to its last value.
#[test]
fn a_second_line_or_a_filter_given_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("admin.sock");
    let server = bind(&path).unwrap();
    let shared = Arc::clone(&server.shared);
    let thread = std::thread::spawn(move || server.run());
    let answer = request(&path, "help\nkill-switch off").unwrap();
    assert!(
        answer.starts_with("error: one request line per connection"),
        "{answer}"
    );
    assert!(request(&path, "help  ").unwrap().starts_with("ok"));
    shared.stop.store(true, Ordering::Release);
    thread.join().unwrap();

    let names = AdminNames {
        symbols: vec!["AAPL".into(), "MSFT".into()],
        venues: vec!["sim".into()],
        strategies: 2,
    };
    for line in [
        "cancel-all strategy 0 strategy 1",
        "open-orders symbol AAPL symbol MSFT",
        "cancel-all venue sim venue sim",
    ] {
        let words: Vec<&str> = line.split_whitespace().collect();
        match parse(&words, &names) {
            Err(e) => assert!(e.contains("given twice"), "{line}: {e}"),
            Ok(_) => panic!("{line}: accepted"),
        }
    }
}
