//! The behaviour every transport shares, tested once and run against each (`on_uring::*`
//! on the io_uring [`Reactor`], `on_epoll::*` on the [`EpollReactor`], `on_af_xdp::*` on the
//! [`XdpReactor`] across a veth pair between two network namespaces: the first transport a test
//! opens at one end, a second at the other, the test's own std peers in the second namespace
//! on the kernel's TCP): real sockets,
//! many sessions, partial reads and writes under back-pressure, peer close and reset, refused
//! and unroutable connects, slot exhaustion, stale ids, spin reads, configuration refused with
//! its figures.

#![allow(unsafe_code)] // setsockopt on the test's own peers

use super::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};

/// Runs each generic test below once per transport, and on io_uring once more per set of
/// shortcuts (plain descriptors, unregistered buffers and spin reads through the ring;
/// multishot receive).
macro_rules! on_both_transports {
    ($($name:ident),* $(,)?) => {
        mod on_uring {
            $(#[test]
            fn $name() {
                super::$name::<crate::net::Reactor>();
            })*
        }
        mod on_uring_plain {
            $(#[test]
            fn $name() {
                super::URING.set(super::UringFeatures {
                    registered_buffers: false,
                    fixed_files: false,
                    direct_spin_reads: false,
                    ..super::UringFeatures::default()
                });
                super::$name::<crate::net::Reactor>();
            })*
        }
        mod on_uring_multishot {
            $(#[test]
            fn $name() {
                super::URING.set(super::MULTISHOT);
                super::$name::<crate::net::Reactor>();
            })*
        }
        mod on_epoll {
            $(#[test]
            fn $name() {
                super::$name::<crate::net::EpollReactor>();
            })*
        }
        mod on_af_xdp {
            $(#[test]
            fn $name() {
                let Some(pair) = crate::net::xdp::netns::Pair::create(stringify!($name)) else {
                    return;
                };
                super::across_veth(pair, super::$name::<crate::net::XdpReactor>);
            })*
        }
    };
}

on_both_transports!(
    many_sessions_echo,
    large_transfer_with_partial_reads_and_writes,
    peer_close_and_reset,
    refused_connect,
    accept_beyond_slots_is_refused_and_counted,
    local_close_and_stale_ids,
    spin_reads_carry_data,
    busy_poll_without_spin_reads_carries_data,
    readable_is_announced_once_per_arrival,
    full_receive_buffer_stops_reading_until_consumed,
    blocked_peer_then_resumes,
    stale_id_never_touches_the_next_occupant,
    unroutable_connect_fails_and_frees_its_slot,
    close_while_connecting_is_local_and_frees_the_slot,
    misuse_is_refused_with_the_figures,
    impossible_buffers_are_refused,
);

std::thread_local! {
    /// The io_uring shortcuts this test thread's transports take (set by the test's module).
    static URING: std::cell::Cell<UringFeatures> = std::cell::Cell::new(UringFeatures::default());
}

/// Multishot receive with a pool small enough that the tests exhaust it.
pub(crate) const MULTISHOT: UringFeatures = UringFeatures {
    registered_buffers: true,
    fixed_files: true,
    multishot_recv: true,
    direct_spin_reads: false,
    provided_buffers: 8,
    provided_buffer_bytes: 1024,
};

std::thread_local! {
    /// With `on_af_xdp`: the veth pair this test thread runs across, and how many transports
    /// it has opened (the first at keel's end, the second at the peer's).
    static XDP: std::cell::RefCell<Option<crate::net::xdp::netns::Pair>> =
        const { std::cell::RefCell::new(None) };
    static OPENED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Runs `case` with this thread in `pair`'s peer namespace (its std sockets there), the
/// transports it opens at either end of the veth pair.
fn across_veth(pair: crate::net::xdp::netns::Pair, case: fn()) {
    let peer_ns = pair.b.clone();
    XDP.with(|x| *x.borrow_mut() = Some(pair));
    OPENED.set(0);
    crate::net::xdp::netns::Pair::within(&peer_ns, case);
    XDP.with(|x| x.borrow_mut().take());
}

/// Opens transport `T` with `config`: on this thread's veth pair with `on_af_xdp` (the first
/// at keel's end, the next at the peer's), else here.
fn open<T: SocketTransport>(config: ReactorConfig) -> Result<T, NetError> {
    let side = XDP.with(|x| {
        x.borrow().as_ref().map(|pair| match OPENED.get() {
            0 => (pair.a.clone(), pair.xdp_a()),
            _ => (pair.b.clone(), pair.xdp_b()),
        })
    });
    let Some((ns, xdp)) = side else {
        return T::open(config);
    };
    let opened =
        crate::net::xdp::netns::Pair::within(&ns, || T::open(ReactorConfig { xdp, ..config }));
    if opened.is_ok() {
        OPENED.set(OPENED.get() + 1);
    }
    opened
}

/// The defaults, with this test thread's io_uring shortcuts.
fn base() -> ReactorConfig {
    ReactorConfig {
        uring: URING.get(),
        ..ReactorConfig::default()
    }
}

pub(crate) fn config(conns_max: u32, buffer: u32) -> ReactorConfig {
    ReactorConfig {
        conns_max,
        recv_buffer_bytes: buffer,
        send_buffer_bytes: buffer,
        wait: WaitMode::Blocking,
        ..base()
    }
}

fn transport<T: SocketTransport>(conns_max: u32, buffer: u32) -> T {
    open(config(conns_max, buffer)).expect("transport available on the test host")
}

/// Where a transport listens: loopback, or any address (keel's own) across a veth pair.
pub(crate) fn loopback() -> SocketAddr {
    if XDP.with(|x| x.borrow().is_some()) {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "127.0.0.1:0".parse().unwrap()
    }
}

/// A std listener where the transport can reach it: loopback, or the peer kernel's address
/// across a veth pair.
fn peer_listener() -> TcpListener {
    let addr: SocketAddr = XDP.with(|x| match x.borrow().as_ref() {
        Some(pair) => SocketAddr::from((pair.peer_ip, 0)),
        None => "127.0.0.1:0".parse().unwrap(),
    });
    TcpListener::bind(addr).unwrap()
}

/// A std client connecting to `addr` without waiting for the handshake (a userspace stack
/// answers it only when the test polls its transport); reads and writes block as usual.
pub(crate) fn peer_connect(addr: SocketAddr) -> TcpStream {
    let SocketAddr::V4(v4) = addr else {
        panic!("{addr}: IPv4 only")
    };
    // SAFETY: a new socket, owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd was just created and is owned by nothing else.
    let stream = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    stream.set_nonblocking(true).unwrap();
    let sa = super::socket::sockaddr(v4);
    // SAFETY: connect(2) with a sockaddr_in of the stated size.
    let rc = unsafe {
        libc::connect(
            fd,
            std::ptr::addr_of!(sa).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as u32,
        )
    };
    let e = std::io::Error::last_os_error();
    assert!(
        rc == 0 || e.raw_os_error() == Some(libc::EINPROGRESS),
        "connect {addr}: {e}"
    );
    stream.set_nonblocking(false).unwrap();
    // A bound on every blocking read: a test that waits for bytes that never come fails.
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    stream
}

/// A std client connected to the transport listening at `addr`, and its connection there.
pub(crate) fn accept_one<T: Transport>(
    r: &mut T,
    addr: SocketAddr,
    events: &mut Vec<NetEvent>,
) -> (TcpStream, ConnId) {
    let peer = peer_connect(addr);
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

/// Polls until `done` says so, with a bound on the number of polls (never hangs).
pub(crate) fn poll_until<T: Transport>(
    r: &mut T,
    events: &mut Vec<NetEvent>,
    mut done: impl FnMut(&mut T, &[NetEvent]) -> bool,
) {
    for _ in 0..20_000 {
        r.poll(0, 1_000_000, events).unwrap();
        if done(r, events) {
            return;
        }
    }
    panic!("condition not reached; events: {events:?}");
}

/// Runs `blocking` (a std peer's read or accept) on a thread of its own while `t` is polled
/// until it returns: a userspace stack (AF_XDP) sends what it queued, and answers, only when
/// its transport is polled. Bounded: a minute, then the peer's own read timeout decides.
#[allow(clippy::disallowed_methods)] // a bound on a test's wait, not a timing
pub(crate) fn while_polling<T: Transport, R: Send + 'static>(
    t: &mut T,
    events: &mut Vec<NetEvent>,
    blocking: impl FnOnce() -> R + Send + 'static,
) -> R {
    let peer = std::thread::spawn(blocking);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !peer.is_finished() && std::time::Instant::now() < deadline {
        t.poll(0, 100_000, events).unwrap();
    }
    peer.join().expect("the peer's call")
}

fn closed_with(events: &[NetEvent], reason: CloseReason) -> bool {
    events
        .iter()
        .any(|e| matches!(e, NetEvent::Closed { reason: r, .. } if *r == reason))
}

fn readable_count(events: &[NetEvent], conn: ConnId) -> usize {
    events
        .iter()
        .filter(|e| **e == NetEvent::Readable { conn })
        .count()
}

// Goal: 40 client connections through one transport to a server in another, each echoing a
// distinct message stream; every byte comes back, in order, on the right connection.
fn many_sessions_echo<T: SocketTransport>() {
    let mut server = transport::<T>(64, 4096);
    let mut client = transport::<T>(64, 4096);
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
fn large_transfer_with_partial_reads_and_writes<T: SocketTransport>() {
    let mut server = transport::<T>(4, 4096);
    let mut client = transport::<T>(4, 4096);
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
fn peer_close_and_reset<T: SocketTransport>() {
    let mut server = transport::<T>(4, 4096);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let polite = peer_connect(addr);
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    drop(polite);
    poll_until(&mut server, &mut events, |_, e| {
        closed_with(e, CloseReason::PeerClosed)
    });
    events.clear();
    let rude = peer_connect(addr);
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    reset_on_drop(&rude);
    drop(rude);
    poll_until(&mut server, &mut events, |_, e| {
        closed_with(e, CloseReason::Reset)
    });
    assert_eq!(server.stats().resets, 1);
}

/// Makes dropping `stream` send a reset instead of a FIN (SO_LINGER with a zero timeout).
fn reset_on_drop(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a live socket with a correctly sized linger struct.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(stream),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER");
}

// Goal: a connect to a port nobody listens on fails with ECONNREFUSED and frees its slot.
fn refused_connect<T: SocketTransport>() {
    let port = { peer_listener().local_addr().unwrap() };
    let mut client = transport::<T>(1, 1024);
    let mut events = Vec::new();
    let conn = client.connect(port).unwrap();
    poll_until(&mut client, &mut events, |_, e| {
        e.contains(&NetEvent::ConnectFailed {
            conn,
            errno: libc::ECONNREFUSED,
        })
    });
    // No Closed for a connection that never opened.
    assert!(
        !events.iter().any(|e| matches!(e, NetEvent::Closed { .. })),
        "{events:?}"
    );
    // The single slot is free again.
    assert!(client.connect(port).is_ok());
}

// Goal: with every slot taken, an accepted socket is closed at once and counted.
fn accept_beyond_slots_is_refused_and_counted<T: SocketTransport>() {
    let mut server = transport::<T>(1, 1024);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let _first = peer_connect(addr);
    poll_until(&mut server, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    let mut second = peer_connect(addr);
    poll_until(&mut server, &mut events, |r, _| {
        r.stats().accept_refused == 1
    });
    // The server goes on (a userspace stack sends the reset on its next passes).
    for _ in 0..200 {
        server.poll(0, 0, &mut events).unwrap();
    }
    second
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 1];
    match second.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("the refused socket should be closed or reset: {other:?}"),
    }
    assert_eq!(server.stats().accepted, 1);
}

// Goal: a local close is reported once and a stale id can no longer send.
fn local_close_and_stale_ids<T: SocketTransport>() {
    let mut server = transport::<T>(2, 1024);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut peer = peer_connect(addr);
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
    events.clear();
    poll_until(&mut server, &mut events, |_, e| {
        e.contains(&NetEvent::Closed {
            conn,
            reason: CloseReason::Local,
        })
    });
    assert!(matches!(server.send(conn, b"x"), Err(NetError::NotOpen)));
    let mut reader = peer.try_clone().unwrap();
    let got = while_polling(&mut server, &mut events, move || {
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        got
    });
    assert_eq!(got, b"bye");
    peer.write_all(b"late").ok();
    // Reported once.
    for _ in 0..10 {
        server.poll(0, 0, &mut events).unwrap();
    }
    let closes = events
        .iter()
        .filter(|e| matches!(e, NetEvent::Closed { .. }))
        .count();
    assert_eq!(closes, 1, "{events:?}");
}

// Goal: spin reads (busy-poll, non-blocking re-reads every pass) deliver the same bytes, and
// the EAGAIN they get on every empty pass is neither an error nor a counted retry.
fn spin_reads_carry_data<T: SocketTransport>() {
    let config = ReactorConfig {
        conns_max: 2,
        wait: WaitMode::BusyPoll,
        spin_reads: true,
        ..base()
    };
    let mut r = open::<T>(config).unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    for _ in 0..100 {
        r.poll(0, 0, &mut events).unwrap(); // empty passes: EAGAIN each time
    }
    peer.write_all(b"spin").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"spin");
    assert_eq!(r.stats().retries, 0);
    // Writes work the same while spinning.
    r.send(conn, b"back").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.send_pending(conn) == 0);
    let mut got = [0u8; 4];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"back");
    drop(peer);
    poll_until(&mut r, &mut events, |_, e| {
        closed_with(e, CloseReason::PeerClosed)
    });
}

// Goal: busy-poll without spin reads (readiness, never a wait) carries a round trip and a
// peer close like the blocking mode.
fn busy_poll_without_spin_reads_carries_data<T: SocketTransport>() {
    let config = ReactorConfig {
        conns_max: 2,
        wait: WaitMode::BusyPoll,
        ..base()
    };
    let mut r = open::<T>(config).unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    peer.write_all(b"ping").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"ping");
    r.consume(conn, 4);
    r.send(conn, b"pong").unwrap();
    r.flush().unwrap();
    let mut reader = peer.try_clone().unwrap();
    let got = while_polling(&mut r, &mut events, move || {
        let mut got = [0u8; 4];
        reader.read_exact(&mut got).unwrap();
        got
    });
    assert_eq!(&got, b"pong");
    drop(peer);
    poll_until(&mut r, &mut events, |_, e| {
        closed_with(e, CloseReason::PeerClosed)
    });
}

// Goal: Readable means "new bytes arrived": bytes left unconsumed are not announced again,
// the next arrival is, and it lands behind them.
fn readable_is_announced_once_per_arrival<T: SocketTransport>() {
    let mut r = transport::<T>(2, 4096);
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    events.clear();
    peer.write_all(b"abc").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"abc");
    assert_eq!(readable_count(&events, conn), 1, "{events:?}");
    events.clear();
    for _ in 0..50 {
        r.poll(0, 0, &mut events).unwrap();
    }
    assert_eq!(readable_count(&events, conn), 0, "re-announced: {events:?}");
    peer.write_all(b"def").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn) == b"abcdef");
    assert!(readable_count(&events, conn) >= 1, "{events:?}");
    r.consume(conn, 2);
    assert_eq!(r.received(conn), b"cdef");
}

// Goal: a full receive buffer stops reading (the transport holds at most its buffer; the rest
// waits in TCP, and the peer's writes stall), and consuming restarts it: 1 MiB through a
// 1 KiB buffer arrives whole and in order.
fn full_receive_buffer_stops_reading_until_consumed<T: SocketTransport>() {
    let mut r = transport::<T>(2, 1024);
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    // A small kernel send buffer on the peer (it would otherwise autotune to megabytes), and
    // far more bytes than the kernel buffers on both sides then hold while nobody reads (about
    // 80 KB on a stock loopback).
    socket::set_send_buffer(std::os::fd::AsRawFd::as_raw_fd(&peer), 4096);
    let payload: Vec<u8> = (0..1024 * 1024u32).map(|i| (i * 7 % 253) as u8).collect();
    peer.set_nonblocking(true).unwrap();
    let mut written = 0;
    let mut peer_stalled = false;
    // The peer writes while nothing is consumed: the buffer fills, then the kernel's.
    for _ in 0..20_000 {
        match peer.write(&payload[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                peer_stalled = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
        r.poll(0, 0, &mut events).unwrap();
        assert!(r.received(conn).len() <= 1024);
    }
    assert!(
        peer_stalled,
        "the peer never stalled: back-pressure untested ({written} bytes written)"
    );
    poll_until(&mut r, &mut events, |r, _| r.received(conn).len() == 1024);
    events.clear();
    for _ in 0..50 {
        r.poll(0, 0, &mut events).unwrap();
    }
    assert_eq!(r.received(conn).len(), 1024, "read past a full buffer");
    assert_eq!(readable_count(&events, conn), 0, "{events:?}");
    let mut got = Vec::new();
    for _ in 0..1_000_000 {
        if written < payload.len() {
            match peer.write(&payload[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        let n = r.received(conn).len();
        got.extend_from_slice(r.received(conn));
        r.consume(conn, n);
        if got.len() == payload.len() {
            break;
        }
        r.poll(0, 1_000_000, &mut events).unwrap();
    }
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "bytes differ");
}

// Goal: a peer that stops reading blocks the writer (kernel buffers full: the rest stays
// queued, send_pending says how much, a send that does not fit is refused with the figures);
// once the peer reads again every byte arrives, in order. (Whether the kernel cuts a write
// short or refuses it whole is its choice: partial writes are exercised by
// large_transfer_with_partial_reads_and_writes and counted, not required, here.)
fn blocked_peer_then_resumes<T: SocketTransport>() {
    let config = ReactorConfig {
        socket_send_buffer: Some(4096),
        ..config(2, 16 * 1024)
    };
    let mut r = open::<T>(config).unwrap();
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut peer, conn) = accept_one(&mut r, addr, &mut events);
    let payload: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| (i * 13 % 241) as u8)
        .collect();
    let mut sent = 0;
    let mut refusal = None;
    // The peer reads nothing: offer until the transport refuses for room and its queue stops
    // draining.
    let mut still = 0;
    for _ in 0..100_000 {
        let before = r.send_pending(conn);
        let chunk = &payload[sent..(sent + 3000).min(payload.len())];
        match r.send(conn, chunk) {
            Ok(()) => sent += chunk.len(),
            Err(NetError::SendBufferFull { len, free }) => refusal = Some((len, free)),
            Err(e) => panic!("{e}"),
        }
        r.poll(0, 0, &mut events).unwrap();
        still = if refusal.is_some() && r.send_pending(conn) == before {
            still + 1
        } else {
            0
        };
        if still == 200 {
            break;
        }
    }
    let (len, free) = refusal.expect("the send buffer never filled");
    assert_eq!(len, 3000);
    assert!(free < 3000, "refused with room: {free}");
    assert!(r.send_pending(conn) > 0, "nothing left queued");
    assert!(
        sent < payload.len(),
        "the kernel took everything: peer never blocked us"
    );
    // The peer resumes; the writer finishes what it offered and then the rest.
    peer.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    for _ in 0..200_000 {
        if sent < payload.len() {
            let chunk = &payload[sent..(sent + 3000).min(payload.len())];
            if r.send(conn, chunk).is_ok() {
                sent += chunk.len();
            }
        }
        r.poll(0, 0, &mut events).unwrap();
        match peer.read(&mut buf) {
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        if got.len() == payload.len() {
            break;
        }
    }
    assert_eq!(got.len(), payload.len());
    assert!(got == payload, "bytes differ");
    // Every byte was read, so the queue empties (on AF_XDP, once the peer's last
    // acknowledgement is in: unacknowledged bytes count as pending there).
    poll_until(&mut r, &mut events, |r, _| r.send_pending(conn) == 0);
    assert_eq!(r.stats().bytes_sent, payload.len() as u64);
}

// Goal: once a connection is closed and its slot taken by the next one, the old id reads
// nothing, sends nothing, and its consume and close leave the new occupant alone.
fn stale_id_never_touches_the_next_occupant<T: SocketTransport>() {
    let mut r = transport::<T>(1, 1024);
    let (_, addr) = r.listen(loopback()).unwrap();
    let mut events = Vec::new();
    let (mut first, old) = accept_one(&mut r, addr, &mut events);
    first.write_all(b"old").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(old) == b"old");
    r.close(old);
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::Closed {
            conn: old,
            reason: CloseReason::Local,
        })
    });
    events.clear();
    let (mut second, new) = accept_one(&mut r, addr, &mut events);
    assert_eq!(new.slot(), old.slot(), "one slot: reused");
    assert_ne!(new, old);
    second.write_all(b"new").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(new) == b"new");
    assert_eq!(r.received(old), b"");
    assert!(matches!(r.send(old, b"x"), Err(NetError::NotOpen)));
    assert_eq!(r.send_pending(old), 0);
    r.consume(old, 0);
    r.close(old);
    events.clear();
    for _ in 0..20 {
        r.poll(0, 0, &mut events).unwrap();
    }
    assert!(
        !events.iter().any(|e| matches!(e, NetEvent::Closed { .. })),
        "a stale close reached the new occupant: {events:?}"
    );
    assert_eq!(r.received(new), b"new");
    r.send(new, b"still here").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.send_pending(new) == 0);
    let mut got = [0u8; 10];
    second.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still here");
}

// Goal: a connect the kernel refuses before any packet leaves (a broadcast address: no TCP
// there) is a ConnectFailed from the next poll with the errno, its slot free again.
fn unroutable_connect_fails_and_frees_its_slot<T: SocketTransport>() {
    let mut r = transport::<T>(1, 1024);
    let mut events = Vec::new();
    let conn = r.connect("255.255.255.255:9".parse().unwrap()).unwrap();
    poll_until(&mut r, &mut events, |_, e| {
        e.iter()
            .any(|e| matches!(e, NetEvent::ConnectFailed { conn: c, .. } if *c == conn))
    });
    let errno = events.iter().find_map(|e| match e {
        NetEvent::ConnectFailed { errno, .. } => Some(*errno),
        _ => None,
    });
    assert!(
        matches!(errno, Some(libc::ENETUNREACH | libc::EACCES)),
        "{errno:?}"
    );
    assert_eq!(r.received(conn), b"");
    assert!(matches!(r.send(conn, b"x"), Err(NetError::NotOpen)));
    let listener = peer_listener();
    let again = r.connect(listener.local_addr().unwrap()).unwrap();
    assert_ne!(again, conn);
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::Connected { conn: again })
    });
}

// Goal: closing a connection that is still connecting ends it as Closed{Local} (never
// Connected), and its slot serves the next connect.
fn close_while_connecting_is_local_and_frees_the_slot<T: SocketTransport>() {
    let mut server = transport::<T>(2, 1024);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut r = transport::<T>(1, 1024);
    let mut events = Vec::new();
    let conn = r.connect(addr).unwrap();
    r.close(conn);
    poll_until(&mut r, &mut events, |_, e| {
        e.iter()
            .any(|e| matches!(e, NetEvent::Closed { conn: c, .. } if *c == conn))
    });
    assert!(
        events.contains(&NetEvent::Closed {
            conn,
            reason: CloseReason::Local
        }),
        "{events:?}"
    );
    assert!(
        !events.contains(&NetEvent::Connected { conn }),
        "{events:?}"
    );
    let again = r.connect(addr).unwrap();
    // The server is polled too: a userspace stack (AF_XDP) answers a SYN only when polled.
    let mut sev = Vec::new();
    poll_until(&mut r, &mut events, |_, e| {
        server.poll(0, 0, &mut sev).unwrap();
        e.contains(&NetEvent::Connected { conn: again })
    });
}

// Goal: misuse gets a typed error with the figures: no free slot, an IPv6 address, a send on a
// connection that is not open yet, a send larger than the buffer.
fn misuse_is_refused_with_the_figures<T: SocketTransport>() {
    let mut server = transport::<T>(1, 1024);
    let (_, addr) = server.listen(loopback()).unwrap();
    let mut r = transport::<T>(1, 1024);
    let v6: SocketAddr = "[::1]:9".parse().unwrap();
    assert!(matches!(r.connect(v6), Err(NetError::NotIpv4(a)) if a == v6));
    let conn = r.connect(addr).unwrap();
    assert!(matches!(r.send(conn, b"early"), Err(NetError::NotOpen)));
    assert!(matches!(
        r.connect(addr),
        Err(NetError::NoFreeSlot { conns_max: 1 })
    ));
    let mut events = Vec::new();
    let mut sev = Vec::new();
    poll_until(&mut r, &mut events, |_, e| {
        server.poll(0, 0, &mut sev).unwrap();
        e.contains(&NetEvent::Connected { conn })
    });
    let big = vec![7u8; 1025];
    assert!(matches!(
        r.send(conn, &big),
        Err(NetError::SendBufferFull {
            len: 1025,
            free: 1024
        })
    ));
    r.send(conn, &big[..1000]).unwrap();
    assert!(matches!(
        r.send(conn, &big[..25]),
        Err(NetError::SendBufferFull { len: 25, free: 24 })
    ));
    assert_eq!(r.send_pending(conn), 1000);
}

// Goal: buffer sizes no transport can work with (zero, or more than memory) are refused at
// set-up with the figures, never an overflow, a panic or an abort; too many slots likewise.
fn impossible_buffers_are_refused<T: SocketTransport>() {
    for (recv, send) in [(0, 1024), (1024, 0)] {
        let err = open::<T>(ReactorConfig {
            recv_buffer_bytes: recv,
            send_buffer_bytes: send,
            ..config(1, 1)
        })
        .unwrap_err();
        assert!(
            matches!(err, NetError::BufferSizes { recv_buffer_bytes: r, send_buffer_bytes: s, .. }
                if r == recv && s == send),
            "{err:?}"
        );
    }
    let err = open::<T>(config(CONNS_MAX, u32::MAX)).unwrap_err();
    assert!(
        matches!(
            err,
            NetError::BufferSizes {
                conns_max: CONNS_MAX,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("4294967295"), "{err}");
    let err = open::<T>(config(CONNS_MAX + 1, 1024)).unwrap_err();
    assert!(
        matches!(err, NetError::TooManyConnections { conns_max, limit }
            if conns_max == CONNS_MAX + 1 && limit == CONNS_MAX),
        "{err:?}"
    );
}

// Goal: transport names read and print as operators write them; anything else is refused with
// the offending name; io_uring is the default.
#[test]
fn transport_kind_names() {
    for &kind in TransportKind::ALL {
        assert_eq!(kind.to_string().parse::<TransportKind>(), Ok(kind));
    }
    assert_eq!("io_uring".parse(), Ok(TransportKind::IoUring));
    assert_eq!("epoll".parse(), Ok(TransportKind::Epoll));
    assert_eq!(TransportKind::default(), TransportKind::IoUring);
    for bad in ["", "EPOLL", "io-uring", "uring", "epoll ", "\u{0}"] {
        let err = bad.parse::<TransportKind>().unwrap_err();
        assert_eq!(err, UnknownTransport(bad.to_string()));
        assert!(
            err.to_string().contains("expected one of: io_uring epoll"),
            "{err}"
        );
    }
    assert_eq!(Reactor::KIND, TransportKind::IoUring);
    assert_eq!(EpollReactor::KIND, TransportKind::Epoll);
}

// Goal: only io_uring being unavailable falls back (to epoll); other set-up errors do not.
#[test]
fn fallback_rule() {
    let other = NetError::TooManyConnections {
        conns_max: 9_999,
        limit: CONNS_MAX,
    };
    assert_eq!(TransportKind::IoUring.fallback(&other), None);
    assert_eq!(TransportKind::Epoll.fallback(&other), None);
    let unavailable = NetError::Unavailable {
        source: std::io::Error::from_raw_os_error(libc::EPERM),
        disabled: "2".into(),
    };
    assert_eq!(
        TransportKind::IoUring.fallback(&unavailable),
        Some(TransportKind::Epoll)
    );
    assert_eq!(TransportKind::Epoll.fallback(&unavailable), None);
}
