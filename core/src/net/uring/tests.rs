//! Loopback tests through real io_uring sockets: many sessions, partial reads and writes under
//! back-pressure, peer close and reset, refused connects, slot exhaustion, timers.

use super::*;
use std::io::{Read, Write};
use std::net::TcpStream;

fn reactor(conns_max: u32, buffer: u32) -> Reactor {
    Reactor::new(ReactorConfig {
        conns_max,
        recv_buffer_bytes: buffer,
        send_buffer_bytes: buffer,
        wait: WaitMode::Blocking,
        ..ReactorConfig::default()
    })
    .expect("io_uring available on the test host")
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Polls until `done` says so, with a bound on the number of polls (never hangs).
/// A std client connected to the reactor listening at `addr`, and its connection there.
fn accept_one(
    r: &mut Reactor,
    addr: std::net::SocketAddr,
    events: &mut Vec<NetEvent>,
) -> (TcpStream, ConnId) {
    let peer = TcpStream::connect(addr).unwrap();
    let mut conn = None;
    poll_until(r, events, |_, e| {
        conn = conn.or(e.iter().find_map(|e| match e {
            NetEvent::Accepted { conn, .. } => Some(*conn),
            _ => None,
        }));
        conn.is_some()
    });
    (peer, conn.unwrap())
}

fn poll_until(
    r: &mut Reactor,
    events: &mut Vec<NetEvent>,
    mut done: impl FnMut(&mut Reactor, &[NetEvent]) -> bool,
) {
    for _ in 0..20_000 {
        r.poll(0, 1_000_000, events).unwrap();
        if done(r, events) {
            return;
        }
    }
    panic!("condition not reached; events: {events:?}");
}

// Goal: 40 client connections through one reactor to a server in another, each echoing a
// distinct message stream; every byte comes back, in order, on the right connection.
#[test]
fn many_sessions_echo() {
    let mut server = reactor(64, 4096);
    let mut client = reactor(64, 4096);
    let (_, addr) = server.listen(loopback()).unwrap();
    let conns: Vec<ConnId> = (0..40).map(|_| client.connect(addr).unwrap()).collect();
    let (mut sev, mut cev) = (Vec::new(), Vec::new());
    let mut connected = 0;
    let mut accepted = Vec::new();
    for _ in 0..10_000 {
        server.poll(0, 0, &mut sev).unwrap();
        client.poll(0, 0, &mut cev).unwrap();
        for e in sev.drain(..) {
            match e {
                NetEvent::Accepted { conn, .. } => accepted.push(conn),
                NetEvent::Readable { conn } => {
                    let data = server.received(conn).to_vec();
                    server.send(conn, &data).unwrap();
                    server.consume(conn, data.len());
                }
                other => panic!("server: {other:?}"),
            }
        }
        for e in cev.drain(..) {
            if let NetEvent::Connected { conn } = e {
                connected += 1;
                let i = conns.iter().position(|c| *c == conn).unwrap();
                for k in 0..100u32 {
                    client.send(conn, format!("c{i}m{k};").as_bytes()).unwrap();
                }
            }
        }
        let complete = conns.iter().enumerate().all(|(i, c)| {
            client.received(*c).len() == (0..100).map(|k| format!("c{i}m{k};").len()).sum::<usize>()
        });
        if connected == 40 && complete {
            break;
        }
    }
    assert_eq!(accepted.len(), 40);
    for (i, c) in conns.iter().enumerate() {
        let expected: String = (0..100).map(|k| format!("c{i}m{k};")).collect();
        assert_eq!(client.received(*c), expected.as_bytes(), "connection {i}");
    }
    assert_eq!(server.stats().accepted, 40);
}

// Goal: a payload 64 times the buffer size crosses intact while the reader consumes in small
// bites; the sender's buffer fills (back-pressure) and drains with partial writes.
#[test]
fn large_transfer_with_partial_reads_and_writes() {
    let mut server = reactor(4, 4096);
    let mut client = reactor(4, 4096);
    let (_, addr) = server.listen(loopback()).unwrap();
    let conn = client.connect(addr).unwrap();
    let payload: Vec<u8> = (0..64 * 4096u32).map(|i| (i * 31 % 251) as u8).collect();
    let (mut sev, mut cev) = (Vec::new(), Vec::new());
    let (mut sent, mut got, mut open) = (0usize, Vec::new(), false);
    let mut accepted = None;
    let mut refused_for_room = 0;
    for _ in 0..200_000 {
        server.poll(0, 0, &mut sev).unwrap();
        client.poll(0, 0, &mut cev).unwrap();
        open |= cev
            .drain(..)
            .any(|e| matches!(e, NetEvent::Connected { .. }));
        // Offer chunks until the send buffer refuses one: it fills every round.
        while open && sent < payload.len() {
            let chunk = &payload[sent..(sent + 1500).min(payload.len())];
            match client.send(conn, chunk) {
                Ok(()) => sent += chunk.len(),
                Err(NetError::SendBufferFull { .. }) => {
                    refused_for_room += 1;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        for e in sev.drain(..) {
            if let NetEvent::Accepted { conn, .. } = e {
                accepted = Some(conn);
            }
        }
        // Readable is edge-triggered (new bytes arrived); a slow reader drains at its own pace.
        if let Some(conn) = accepted {
            let n = server.received(conn).len().min(700);
            got.extend_from_slice(&server.received(conn)[..n]);
            server.consume(conn, n);
        }
        if got.len() == payload.len() {
            break;
        }
    }
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "bytes differ");
    assert!(
        refused_for_room > 0,
        "the send buffer never filled: back-pressure untested"
    );
}

// Goal: a peer that closes politely is PeerClosed; one that resets is Reset; slots are freed.
#[test]
fn peer_close_and_reset() {
    let mut server = reactor(4, 4096);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let polite = TcpStream::connect(addr).unwrap();
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    drop(polite);
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| {
            matches!(
                e,
                NetEvent::Closed {
                    reason: CloseReason::PeerClosed,
                    ..
                }
            )
        })
    });
    events.clear();
    let rude = TcpStream::connect(addr).unwrap();
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a live socket with a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&rude),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        );
    }
    drop(rude);
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| {
            matches!(
                e,
                NetEvent::Closed {
                    reason: CloseReason::Reset,
                    ..
                }
            )
        })
    });
    assert_eq!(server.stats().resets, 1);
}

// Goal: a connect to a port nobody listens on fails with ECONNREFUSED and frees its slot.
#[test]
fn refused_connect() {
    let port = { TcpListener::bind(loopback()).unwrap().local_addr().unwrap() };
    let mut client = reactor(1, 1024);
    let mut events = Vec::new();
    let conn = client.connect(port).unwrap();
    poll_until(&mut client, &mut events, |_, e| {
        e.contains(&NetEvent::ConnectFailed {
            conn,
            errno: libc::ECONNREFUSED,
        })
    });
    // The single slot is free again.
    assert!(client.connect(port).is_ok());
}

// Goal: with every slot taken, an accepted socket is closed at once and counted.
#[test]
fn accept_beyond_slots_is_refused_and_counted() {
    let mut server = reactor(1, 1024);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let _first = TcpStream::connect(addr).unwrap();
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    let mut second = TcpStream::connect(addr).unwrap();
    poll_until(&mut server, &mut events, |r, _| {
        r.stats().accept_refused == 1
    });
    second
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(
        second.read(&mut buf).unwrap_or(0),
        0,
        "refused socket is closed"
    );
}

// Goal: a local close is reported once and a stale id can no longer send.
#[test]
fn local_close_and_stale_ids() {
    let mut server = reactor(2, 1024);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut peer = TcpStream::connect(addr).unwrap();
    let mut events = Vec::new();
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    let NetEvent::Accepted { conn, .. } = events[0] else {
        unreachable!()
    };
    server.send(conn, b"bye").unwrap();
    poll_until(&mut server, &mut events, |r, _| r.send_pending(conn) == 0);
    server.close(conn);
    poll_until(&mut server, &mut events, |_, e| {
        e.contains(&NetEvent::Closed {
            conn,
            reason: CloseReason::Local,
        })
    });
    assert!(matches!(server.send(conn, b"x"), Err(NetError::NotOpen)));
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"bye");
    peer.write_all(b"late").ok();
}

#[test]
fn timers_fire_in_deadline_order() {
    let mut r = reactor(1, 1024);
    r.set_timer(300, 3).unwrap();
    r.set_timer(100, 1).unwrap();
    r.set_timer(200, 2).unwrap();
    let mut events = Vec::new();
    r.poll(250, 0, &mut events).unwrap();
    assert_eq!(
        events,
        vec![NetEvent::Timer { token: 1 }, NetEvent::Timer { token: 2 }]
    );
    events.clear();
    r.poll(300, 0, &mut events).unwrap();
    assert_eq!(events, vec![NetEvent::Timer { token: 3 }]);
}

// Goal: the optional kernel-side submission polling (SQPOLL) carries data like the default.
#[test]
fn sqpoll_option_works() {
    let config = ReactorConfig {
        conns_max: 2,
        sqpoll_idle_ms: Some(50),
        ..ReactorConfig::default()
    };
    let mut r = Reactor::new(config).expect("SQPOLL ring");
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    peer.write_all(b"ping").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"ping");
    r.send(conn, b"pong").unwrap();
    let mut got = [0u8; 4];
    for _ in 0..1000 {
        r.poll(0, 1_000_000, &mut events).unwrap();
        if r.send_pending(conn) == 0 {
            break;
        }
    }
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"pong");
}

// Goal: spin reads (busy-poll, non-blocking re-reads every pass) deliver the same bytes, and
// the EAGAIN they get on every empty pass is neither an error nor a counted retry.
#[test]
fn spin_reads_carry_data() {
    let config = ReactorConfig {
        conns_max: 2,
        wait: WaitMode::BusyPoll,
        spin_reads: true,
        ..ReactorConfig::default()
    };
    let mut r = Reactor::new(config).unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    for _ in 0..100 {
        r.poll(0, 0, &mut events).unwrap(); // empty passes: EAGAIN each time
    }
    peer.write_all(b"spin").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"spin");
    assert_eq!(r.stats().retries, 0);
    drop(peer);
    poll_until(&mut r, &mut events, |_, e| {
        e.iter().any(|e| {
            matches!(
                e,
                NetEvent::Closed {
                    reason: CloseReason::PeerClosed,
                    ..
                }
            )
        })
    });
}

// Goal: a ring that cannot be set up is a clear error naming the cause and the sysctl.
#[test]
fn setup_failure_names_the_cause() {
    let err = Reactor::new(ReactorConfig {
        ring_entries: 0,
        ..ReactorConfig::default()
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, NetError::Unavailable { .. }), "{err:?}");
    assert!(
        text.contains("io_uring unavailable") && text.contains("kernel.io_uring_disabled"),
        "{text}"
    );
}
