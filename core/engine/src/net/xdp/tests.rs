//! The AF_XDP transport against the kernel's TCP: each test makes its own pair of network
//! namespaces joined by a veth pair (`netns::Pair`), opens an [`XdpReactor`] on one end and
//! talks to std sockets in the other namespace. Root is needed (CI runs as root); without it
//! the tests say so on stderr and pass only outside CI (`CI` set: they fail).

#![allow(unsafe_code)] // setsockopt on the tests' own peers

use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use super::netns::Pair;

/// The transport's configuration on keel's end of `pair`.
pub(crate) fn config(pair: &Pair, conns_max: u32, buffer: u32) -> ReactorConfig {
    ReactorConfig {
        conns_max,
        recv_buffer_bytes: buffer,
        send_buffer_bytes: buffer,
        wait: WaitMode::Blocking,
        xdp: pair.xdp_a(),
        ..ReactorConfig::default()
    }
}

fn open(pair: &Pair, conns_max: u32, buffer: u32) -> XdpReactor {
    pair.in_a(|| XdpReactor::new(config(pair, conns_max, buffer)))
        .unwrap_or_else(|e| panic!("AF_XDP transport on {}: {e}", pair.a_if))
}

/// Polls until `done`, at most 20,000 polls of up to 1 ms (never hangs).
fn poll_until(
    r: &mut XdpReactor,
    events: &mut Vec<NetEvent>,
    mut done: impl FnMut(&mut XdpReactor, &[NetEvent]) -> bool,
) {
    for _ in 0..20_000 {
        r.poll(0, 1_000_000, events).unwrap();
        if done(r, events) {
            return;
        }
    }
    panic!(
        "condition not reached; events: {events:?}; stats {:?}",
        r.xdp_stats()
    );
}

fn listener_in_b(pair: &Pair) -> TcpListener {
    pair.in_b(|| TcpListener::bind((pair.peer_ip, 0))).unwrap()
}

/// Connects `r` to a kernel listener in the peer's namespace; returns both ends.
fn connected(pair: &Pair, r: &mut XdpReactor, events: &mut Vec<NetEvent>) -> (ConnId, TcpStream) {
    let listener = listener_in_b(pair);
    let conn = r.connect(listener.local_addr().unwrap()).unwrap();
    poll_until(r, events, |_, e| e.contains(&NetEvent::Connected { conn }));
    let (peer, _) = listener.accept().unwrap();
    peer.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    (conn, peer)
}

// Goal: keel connects out over AF_XDP to a kernel TCP listener and both directions carry
// bytes; the program is on the interface while the transport lives and gone after.
#[test]
fn connects_to_a_kernel_peer_and_echoes() {
    let Some(pair) = Pair::create("connects_to_a_kernel_peer_and_echoes") else {
        return;
    };
    let mut r = open(&pair, 4, 4096);
    assert!(pair.link_a().contains("prog/xdp"), "{}", pair.link_a());
    let mut events = Vec::new();
    let (conn, mut peer) = connected(&pair, &mut r, &mut events);
    r.send(conn, b"hello over af_xdp").unwrap();
    r.flush().unwrap();
    let mut got = [0u8; 17];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello over af_xdp");
    peer.write_all(b"and back").unwrap();
    poll_until(&mut r, &mut events, |r, _| r.received(conn).len() == 8);
    assert_eq!(r.received(conn), b"and back");
    r.consume(conn, 8);
    assert_eq!(r.received(conn), b"");
    let stats = r.stats();
    assert_eq!((stats.bytes_sent, stats.bytes_received), (17, 8));
    drop(r);
    pair.wait_detached();
}

// Goal: a kernel client connects to keel's listener over AF_XDP; several at once, each
// echoed on its own connection.
#[test]
fn accepts_kernel_clients() {
    let Some(pair) = Pair::create("accepts_kernel_clients") else {
        return;
    };
    let mut r = open(&pair, 8, 4096);
    let (listener, addr) = r.listen("0.0.0.0:0".parse().unwrap()).unwrap();
    assert_eq!(addr.ip(), std::net::IpAddr::V4(pair.keel_ip));
    let b = pair.b.clone();
    let clients = std::thread::spawn(move || {
        Pair::within(&b, || {
            (0..3)
                .map(|i| {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                        .unwrap();
                    s.write_all(&[b'a' + i as u8; 5]).unwrap();
                    s
                })
                .collect::<Vec<_>>()
        })
    });
    let mut events = Vec::new();
    let mut conns = Vec::new();
    poll_until(&mut r, &mut events, |r, e| {
        for e in e {
            if let NetEvent::Accepted { listener: l, conn } = *e {
                assert_eq!(l, listener);
                if !conns.contains(&conn) {
                    conns.push(conn);
                }
            }
        }
        conns.len() == 3 && conns.iter().all(|&c| r.received(c).len() == 5)
    });
    for &c in &conns {
        let echo = r.received(c).to_vec();
        r.send(c, &echo).unwrap();
        r.consume(c, 5);
    }
    r.flush().unwrap();
    let mut clients = clients.join().unwrap();
    for (i, s) in clients.iter_mut().enumerate() {
        let mut got = [0u8; 5];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, [b'a' + i as u8; 5]);
    }
    assert_eq!(r.stats().accepted, 3);
}

// Goal: a megabyte each way through buffers of 4 KiB: partial sends refused with the free
// space, partial reads, every byte in order.
#[test]
fn large_transfer_both_ways() {
    let Some(pair) = Pair::create("large_transfer_both_ways") else {
        return;
    };
    transfer(&pair, 1 << 20);
}

/// Sends `total` bytes each way between keel and the kernel peer and checks them.
fn transfer(pair: &Pair, total: usize) -> XdpReactor {
    let mut r = open(pair, 2, 4096);
    let mut events = Vec::new();
    let (conn, peer) = connected(pair, &mut r, &mut events);
    let pattern = |i: usize| (i % 251) as u8;
    let mut writer = peer.try_clone().unwrap();
    let up = std::thread::spawn(move || {
        let data: Vec<u8> = (0..total).map(pattern).collect();
        writer.write_all(&data).unwrap();
    });
    let mut reader = peer;
    let down = std::thread::spawn(move || {
        let mut got = vec![0u8; total];
        let mut at = 0;
        while at < total {
            match reader.read(&mut got[at..]) {
                Ok(0) => panic!("peer: closed at {at}"),
                Ok(n) => at += n,
                Err(e) => panic!("peer: {e} at {at} of {total}"),
            }
        }
        got
    });
    let (mut sent, mut received) = (0usize, 0usize);
    let mut polls = 0u64;
    // Until every byte arrived at both ends (the peer acknowledged all of keel's).
    while sent < total || received < total || r.send_pending(conn) > 0 {
        polls += 1;
        assert!(
            polls < 20_000_000 && !down.is_finished() || sent >= total,
            "stuck at sent {sent} received {received}: {:?} {:?} pending {}",
            r.stats(),
            r.xdp_stats(),
            r.send_pending(conn)
        );
        let chunk: Vec<u8> = (sent..(sent + 1000).min(total)).map(pattern).collect();
        if !chunk.is_empty() && r.send(conn, &chunk).is_ok() {
            sent += chunk.len();
        }
        r.poll(0, 0, &mut events).unwrap();
        events.clear();
        let got = r.received(conn);
        for (k, &byte) in got.iter().enumerate() {
            assert_eq!(byte, pattern(received + k), "byte {}", received + k);
        }
        let n = got.len();
        received += n;
        r.consume(conn, n);
    }
    up.join().unwrap();
    let got = down.join().unwrap();
    assert!(
        got.iter().enumerate().all(|(i, &b)| b == pattern(i)),
        "peer got other bytes"
    );
    r
}

// Goal: the peer's FIN is Closed{PeerClosed} after its last bytes; its RST is
// Closed{Reset}, counted.
#[test]
fn peer_close_and_reset() {
    let Some(pair) = Pair::create("peer_close_and_reset") else {
        return;
    };
    let mut r = open(&pair, 2, 4096);
    let mut events = Vec::new();
    let (conn, mut peer) = connected(&pair, &mut r, &mut events);
    peer.write_all(b"last words").unwrap();
    drop(peer);
    poll_until(&mut r, &mut events, |r, e| {
        if r.received(conn).len() == 10 {
            r.consume(conn, 10);
        }
        e.iter().any(|e| matches!(e, NetEvent::Closed { .. }))
    });
    assert!(events.contains(&NetEvent::Readable { conn }), "{events:?}");
    assert!(
        events.contains(&NetEvent::Closed {
            conn,
            reason: CloseReason::PeerClosed
        }),
        "{events:?}"
    );
    events.clear();
    let (conn, peer) = connected(&pair, &mut r, &mut events);
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on the test's own socket with a linger struct of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&peer),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::addr_of!(linger).cast(),
            std::mem::size_of::<libc::linger>() as u32,
        )
    };
    assert_eq!(rc, 0);
    drop(peer);
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::Closed {
            conn,
            reason: CloseReason::Reset,
        })
    });
    assert_eq!(r.stats().resets, 1);
}

// Goal: a connect to a port nobody listens on fails with ECONNREFUSED, never Closed, and
// frees its slot; a broadcast destination fails at once with ENETUNREACH.
#[test]
fn refused_and_unroutable_connects() {
    let Some(pair) = Pair::create("refused_and_unroutable_connects") else {
        return;
    };
    let mut r = open(&pair, 1, 1024);
    let addr = listener_in_b(&pair).local_addr().unwrap(); // closed again at once
    let mut events = Vec::new();
    let conn = r.connect(addr).unwrap();
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::ConnectFailed {
            conn,
            errno: libc::ECONNREFUSED,
        })
    });
    assert!(
        !events.iter().any(|e| matches!(e, NetEvent::Closed { .. })),
        "{events:?}"
    );
    let conn = r.connect("255.255.255.255:9".parse().unwrap()).unwrap();
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::ConnectFailed {
            conn,
            errno: libc::ENETUNREACH,
        })
    });
    assert!(matches!(r.send(conn, b"x"), Err(NetError::NotOpen)));
    let listener = listener_in_b(&pair);
    let again = r.connect(listener.local_addr().unwrap()).unwrap();
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::Connected { conn: again })
    });
}

// Goal: with every slot taken, a finished handshake is reset and counted; the slot's owner
// is untouched.
#[test]
fn accept_beyond_slots_is_refused_and_counted() {
    let Some(pair) = Pair::create("accept_beyond_slots_is_refused_and_counted") else {
        return;
    };
    let mut r = open(&pair, 1, 1024);
    let (_, addr) = r.listen("0.0.0.0:0".parse().unwrap()).unwrap();
    let b = pair.b.clone();
    let first = std::thread::spawn(move || Pair::within(&b, || TcpStream::connect(addr).unwrap()));
    let mut events = Vec::new();
    poll_until(&mut r, &mut events, |_, e| {
        e.iter().any(|e| matches!(e, NetEvent::Accepted { .. }))
    });
    let _first = first.join().unwrap();
    let b = pair.b.clone();
    let second = std::thread::spawn(move || {
        Pair::within(&b, || {
            let mut s = TcpStream::connect(addr).ok()?;
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut buf = [0u8; 1];
            Some(s.read(&mut buf).unwrap_or(0))
        })
    });
    poll_until(&mut r, &mut events, |r, _| r.stats().accept_refused == 1);
    for _ in 0..10 {
        r.poll(0, 1_000_000, &mut events).unwrap();
    }
    assert_eq!(
        second.join().unwrap().unwrap_or(0),
        0,
        "refused socket is closed"
    );
    assert_eq!(r.stats().accepted, 1);
}

// Goal: a local close is reported once, sends what was queued and a FIN, and the stale id
// can no longer send; misuse gets typed errors with the figures.
#[test]
fn local_close_stale_ids_and_misuse() {
    let Some(pair) = Pair::create("local_close_stale_ids_and_misuse") else {
        return;
    };
    let mut r = open(&pair, 1, 1024);
    let v6: SocketAddr = "[::1]:9".parse().unwrap();
    assert!(matches!(r.connect(v6), Err(NetError::NotIpv4(a)) if a == v6));
    let mut events = Vec::new();
    let (conn, mut peer) = connected(&pair, &mut r, &mut events);
    assert!(matches!(r.connect(v6), Err(NetError::NotIpv4(_))));
    assert!(matches!(
        r.connect(peer.peer_addr().unwrap()),
        Err(NetError::NoFreeSlot { conns_max: 1 })
    ));
    let big = vec![7u8; 1025];
    assert!(matches!(
        r.send(conn, &big),
        Err(NetError::SendBufferFull {
            len: 1025,
            free: 1024
        })
    ));
    r.send(conn, b"bye").unwrap();
    r.close(conn);
    poll_until(&mut r, &mut events, |_, e| {
        e.contains(&NetEvent::Closed {
            conn,
            reason: CloseReason::Local,
        })
    });
    assert!(matches!(r.send(conn, b"x"), Err(NetError::NotOpen)));
    assert_eq!(r.received(conn), b"");
    let mut got = Vec::new();
    peer.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"bye");
    for _ in 0..20 {
        r.poll(0, 1_000_000, &mut events).unwrap();
    }
    let closes = events
        .iter()
        .filter(|e| matches!(e, NetEvent::Closed { .. }))
        .count();
    assert_eq!(closes, 1, "{events:?}");
}

// Goal: 10% of the frames lost each way on the peer's side (nftables, random): both TCP
// stacks send again and every byte arrives once, in order, both ways.
#[test]
fn lossy_link_retransmits_without_duplicates() {
    let Some(pair) = Pair::create("lossy_link_retransmits_without_duplicates") else {
        return;
    };
    pair.lose_percent(10);
    let r = transfer(&pair, 256 * 1024);
    assert!(r.xdp_stats().rx_frames > 0);
    let dropped = pair.frames_lost();
    assert!(dropped > 10, "the loss rules dropped {dropped} packets");
}

// Goal: settings no link can run with are refused with the value and the cause: no such
// interface, zero-copy on veth, frames not a power of two, no address.
#[test]
fn bad_settings_are_refused_with_the_cause() {
    let Some(pair) = Pair::create("bad_settings_are_refused_with_the_cause") else {
        return;
    };
    let base = config(&pair, 1, 1024);
    let with = |f: &dyn Fn(&mut XdpConfig)| {
        let mut c = base;
        f(&mut c.xdp);
        pair.in_a(|| XdpReactor::new(c)).unwrap_err().to_string()
    };
    let e = with(&|x| x.interface = Some(IfName::new("nosuch0").unwrap()));
    assert!(e.contains("no interface 'nosuch0'"), "{e}");
    let e = with(&|x| x.copy = XdpCopy::ZeroCopy);
    assert!(e.contains("zero-copy refused on queue 0"), "{e}");
    let e = with(&|x| x.frames = 1000);
    assert!(e.contains("frames = 1000"), "{e}");
    let e = with(&|x| x.address = None);
    assert!(e.contains("address is not set"), "{e}");
    assert!(IfName::new("a/b").is_err());
    assert!(IfName::new("sixteen-bytes-xx").is_err());
    // Nothing was left attached by the refusals.
    pair.wait_detached();
}
