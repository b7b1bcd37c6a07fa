//! What only the io_uring transport has: timers, kernel-side submission polling, and the
//! set-up error when io_uring is unavailable. The behaviour both transports share is tested in
//! `net/tests.rs`, against each.

use super::*;
use crate::net::tests::{accept_one, config, loopback, poll_until};
use std::io::{Read, Write};

#[test]
fn timers_fire_in_deadline_order() {
    let mut r = Reactor::new(config(1, 1024)).expect("io_uring available on the test host");
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

// Goal: a ring that cannot be set up is a clear error naming the cause and the sysctl, and the
// fallback rule sends the process to epoll for it (and for nothing else).
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
    assert_eq!(
        crate::net::TransportKind::IoUring.fallback(&err),
        Some(crate::net::TransportKind::Epoll)
    );
    assert_eq!(crate::net::TransportKind::Epoll.fallback(&err), None);
}

// Goal: a busy-polling loop enters the kernel only when it has work: an idle pass makes no
// system call (completions are read from the shared ring; the kernel is entered to submit or
// when it raises the ring's task-run flag), and a busy loop's entries stay bounded by its
// messages. Method: count the reactor's kernel entries over 100,000 idle passes (none), then
// over 1,000 pings echoed (each one read and one written: one entry to submit the write, and
// at most one each for the read's and the write's completions).
#[test]
fn a_busy_polling_loop_enters_the_kernel_only_with_work() {
    let mut r = Reactor::new(ReactorConfig {
        wait: WaitMode::BusyPoll,
        ..config(2, 4096)
    })
    .expect("io_uring available on the test host");
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    peer.write_all(b"p").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"p");
    r.consume(conn, 1);
    r.poll(0, 0, &mut events).unwrap(); // hands the kernel the receive re-armed by consume

    let idle_from = r.stats().kernel_entries;
    for _ in 0..100_000 {
        r.poll(0, 0, &mut events).unwrap();
    }
    assert_eq!(
        r.stats().kernel_entries,
        idle_from,
        "an idle busy-polling loop entered the kernel"
    );

    const PINGS: usize = 1_000;
    let busy_from = r.stats().kernel_entries;
    let mut echoed = 0;
    let mut got = [0u8; 1];
    for _ in 0..PINGS {
        peer.write_all(b"x").unwrap();
        poll_until(&mut r, &mut events, |r, _| !r.received(conn).is_empty());
        let n = r.received(conn).len();
        r.consume(conn, n);
        r.send(conn, b"y").unwrap();
        r.flush().unwrap();
        peer.read_exact(&mut got).unwrap();
        echoed += n;
    }
    let entries = r.stats().kernel_entries - busy_from;
    assert_eq!(echoed, PINGS);
    assert!(
        entries >= PINGS as u64 && entries <= 3 * PINGS as u64 + 10,
        "{entries} kernel entries for {PINGS} pings echoed"
    );
}

// Goal: multishot receive under back-pressure. A peer streams 256 KiB at a reactor whose owner
// does not consume: the receive buffer fills, the pool's buffers are held (never more than the
// pool), and once the owner consumes every byte arrives once and in order. A connection closed
// while it holds buffers gives them back: the next connection is served from the same pool.
#[test]
fn multishot_receive_holds_at_most_its_pool_and_delivers_in_order() {
    use crate::net::tests::MULTISHOT;
    let mut r = Reactor::new(ReactorConfig {
        uring: MULTISHOT,
        ..config(2, 2048)
    })
    .expect("io_uring available on the test host");
    assert!(
        r.features().multishot_recv,
        "this kernel has provided-buffer rings"
    );
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (peer, conn) = accept_one(&mut r, addr, &mut events);
    let sent: Vec<u8> = (0..256 * 1024u32).map(|i| (i % 251) as u8).collect();
    let to_send = sent.clone();
    let writer = std::thread::spawn(move || {
        let mut peer = peer;
        peer.write_all(&to_send).unwrap();
        peer
    });
    // Not consuming: the receive buffer fills and the pool is held, never more.
    poll_until(&mut r, &mut events, |r, _| {
        r.received(conn).len() == 2048 && r.held_total() > 0
    });
    for _ in 0..200 {
        r.poll(0, 100_000, &mut events).unwrap();
        assert!(r.held_total() <= usize::from(MULTISHOT.provided_buffers));
        assert_eq!(r.received(conn).len(), 2048);
    }
    let mut got = Vec::with_capacity(sent.len());
    poll_until(&mut r, &mut events, |r, _| {
        got.extend_from_slice(r.received(conn));
        let n = r.received(conn).len();
        r.consume(conn, n);
        got.len() == sent.len()
    });
    assert!(got == sent, "bytes lost, doubled or reordered");
    let mut peer = writer.join().unwrap();

    // Closed while holding: the buffers go back to the pool.
    peer.write_all(&sent[..16 * 1024]).unwrap();
    poll_until(&mut r, &mut events, |r, _| r.held_total() > 0);
    r.close(conn);
    poll_until(&mut r, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Closed { .. }))
    });
    assert_eq!(r.held_total(), 0, "a closed connection kept pool buffers");
    events.clear();
    let (mut next, conn) = accept_one(&mut r, addr, &mut events);
    next.write_all(&sent[..8 * 1024]).unwrap();
    let mut got = Vec::new();
    poll_until(&mut r, &mut events, |r, _| {
        got.extend_from_slice(r.received(conn));
        let n = r.received(conn).len();
        r.consume(conn, n);
        got.len() == 8 * 1024
    });
    assert!(
        got == sent[..8 * 1024],
        "the next connection's bytes differ"
    );
}
