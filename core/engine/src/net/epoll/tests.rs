//! What differs in mechanism on the epoll transport: the io_uring-only settings it ignores,
//! the millisecond wait, the per-poll bounds on accepts and readiness events, a hang-up while a
//! full receive buffer has stopped reading, and a blocked write finished on writability. The behaviour both transports share is
//! tested in `net/tests.rs`, against each.

use super::*;
use crate::net::tests::{accept_one, config, loopback, poll_until};
use std::io::{Read, Write};
use std::net::TcpStream;

// Goal: the io_uring-only settings (ring size, SQPOLL, timers) change nothing here, even at
// values the io_uring transport refuses.
#[test]
fn io_uring_only_settings_are_ignored() {
    let mut r = EpollReactor::new(ReactorConfig {
        ring_entries: 0,
        sqpoll_idle_ms: Some(50),
        timers_max: 0,
        ..config(2, 1024)
    })
    .unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    peer.write_all(b"ping").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"ping");
    r.send(conn, b"pong").unwrap();
    r.flush().unwrap();
    let mut got = [0u8; 4];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"pong");
}

// Goal: a blocking wait in epoll's milliseconds rounds up (never cut short to a spin) and is
// capped below "forever" (-1).
#[test]
fn wait_rounds_up_to_milliseconds_and_is_capped() {
    assert_eq!(wait_ms(0), 0);
    assert_eq!(wait_ms(1), 1);
    assert_eq!(wait_ms(999_999), 1);
    assert_eq!(wait_ms(1_000_000), 1);
    assert_eq!(wait_ms(1_000_001), 2);
    assert_eq!(wait_ms(u64::MAX), i32::MAX);
    assert_eq!(wait_ms(i32::MAX as u64 * 1_000_000 + 1), i32::MAX);
}

// Goal: 300 connections are accepted and read over several polls: no poll accepts more than
// ACCEPTS_PER_PASS per listener or takes more than EVENTS_PER_WAIT readiness events, and
// level-triggered readiness brings back the rest. Clients connect in batches the listen
// backlog holds (128), each batch waiting in it until polled.
#[test]
fn accepts_and_events_are_bounded_per_poll() {
    const CLIENTS: usize = 300;
    const BATCH: usize = 100;
    const _: () = assert!(CLIENTS > EVENTS_PER_WAIT && BATCH > ACCEPTS_PER_PASS as usize);
    let mut r = EpollReactor::new(config(CLIENTS as u32, 64)).unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let count = |events: &[NetEvent], accepted: bool| {
        events
            .iter()
            .filter(|e| match e {
                NetEvent::Accepted { .. } => accepted,
                NetEvent::Readable { .. } => !accepted,
                _ => false,
            })
            .count()
    };
    let mut peers = Vec::with_capacity(CLIENTS);
    let (mut accepted, mut most_accepted) = (0, 0);
    while peers.len() < CLIENTS {
        peers.extend((0..BATCH).map(|_| TcpStream::connect(addr).unwrap()));
        for _ in 0..20_000 {
            if accepted == peers.len() {
                break;
            }
            events.clear();
            r.poll(0, 1_000_000, &mut events).unwrap();
            let a = count(&events, true);
            most_accepted = most_accepted.max(a);
            accepted += a;
        }
    }
    assert_eq!(accepted, CLIENTS);
    assert!(
        most_accepted <= ACCEPTS_PER_PASS as usize,
        "{most_accepted} in one poll"
    );
    for p in &mut peers {
        p.write_all(b"x").unwrap();
    }
    let (mut readable, mut most_read, mut polls) = (0, 0, 0);
    while readable < CLIENTS && polls < 20_000 {
        events.clear();
        r.poll(0, 1_000_000, &mut events).unwrap();
        polls += 1;
        let rd = count(&events, false);
        most_read = most_read.max(rd);
        readable += rd;
    }
    assert_eq!(readable, CLIENTS);
    assert!(
        most_read <= EVENTS_PER_WAIT,
        "{most_read} reads in one poll"
    );
    assert!(polls >= 2, "{polls} polls");
    assert_eq!(r.stats().accepted, CLIENTS as u64);
    assert_eq!(r.stats().bytes_received, CLIENTS as u64);
}

// Goal: a peer that resets while the receive buffer is full (reading stopped, so no read will
// see the error) ends the connection as Reset, instead of a level-triggered hang-up reported
// on every poll forever; the bytes already received stay readable until then.
#[test]
fn reset_while_receive_buffer_is_full_ends_the_connection() {
    let mut r = EpollReactor::new(config(2, 1024)).unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    peer.write_all(&[5u8; 4096]).unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn).len() == 1024);
    assert_eq!(r.received(conn), &[5u8; 1024][..]);
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a live socket with a correctly sized linger struct.
    let rc = unsafe {
        libc::setsockopt(
            peer.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        )
    };
    assert_eq!(rc, 0);
    drop(peer);
    events.clear();
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::Closed {
            conn,
            reason: CloseReason::Reset,
        })
    });
    assert_eq!(r.stats().resets, 1);
    assert_eq!(r.received(conn), b"", "the slot is free");
}

// Goal: a write the kernel cannot take whole is the mechanism of back-pressure here: it is
// counted (a partial write, or an EAGAIN retried), the rest waits for EPOLLOUT without any
// send from the owner, and it leaves in order once the peer reads again.
#[test]
fn blocked_write_waits_for_writability() {
    let mut r = EpollReactor::new(ReactorConfig {
        socket_send_buffer: Some(4096),
        ..config(2, 64 * 1024)
    })
    .unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    let payload: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 239) as u8).collect();
    // Queue 64 KiB at a time while the peer reads nothing, until some stays queued.
    let mut sent = 0;
    for _ in 0..1_000 {
        if r.send(conn, &payload).is_ok() {
            sent += payload.len();
        }
        r.poll(0, 0, &mut events).unwrap();
        if r.send_pending(conn) > 0 {
            break;
        }
    }
    let stats = r.stats();
    assert!(r.send_pending(conn) > 0, "the kernel took everything");
    assert!(stats.partial_sends + stats.retries > 0, "{stats:?}");
    // The peer reads; the transport finishes on writability alone (no more sends).
    peer.set_nonblocking(true).unwrap();
    let mut got = Vec::with_capacity(sent);
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..100_000 {
        r.poll(0, 0, &mut events).unwrap();
        match peer.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        if got.len() == sent {
            break;
        }
    }
    assert_eq!(got.len(), sent);
    assert_eq!(r.send_pending(conn), 0);
    assert!(
        got.chunks(payload.len()).all(|c| c == &payload[..]),
        "bytes differ"
    );
}
