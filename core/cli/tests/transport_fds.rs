//! Every socket a transport opens is closed again: after connects refused for want of a slot,
//! accepts refused for want of a slot, connections closed from either side, and the reactor
//! dropped with connections still open, the process holds exactly the descriptors it held
//! before. One test in its own binary: counting `/proc/self/fd` is only meaningful with no
//! other test opening descriptors at the same time.

// A test driver waits on the wall clock; the core never does.
#![allow(clippy::disallowed_methods)]

use std::net::TcpStream;
use std::time::{Duration, Instant};

use keel::net::{EpollReactor, NetEvent, Reactor, ReactorConfig, SocketTransport, Transport};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn poll_until<T: Transport>(t: &mut T, what: &str, mut done: impl FnMut(&NetEvent) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut events = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        events.clear();
        t.poll(0, 1_000_000, &mut events).unwrap();
        if events.iter().any(&mut done) {
            return;
        }
    }
}

fn cycle<T: SocketTransport>() {
    let mut server = T::open(ReactorConfig {
        conns_max: 2,
        ..ReactorConfig::default()
    })
    .unwrap();
    let (_, addr) = server.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let mut client = T::open(ReactorConfig {
        conns_max: 2,
        ..ReactorConfig::default()
    })
    .unwrap();
    for _ in 0..20 {
        // Two connections fill the client's slots; a third is refused at once.
        let a = client.connect(addr).unwrap();
        let b = client.connect(addr).unwrap();
        assert!(client.connect(addr).is_err(), "no third slot");
        poll_until(
            &mut client,
            "a connection",
            |e| matches!(e, NetEvent::Connected { conn } if *conn == a),
        );
        // The server has two slots: a third peer (a plain socket) is accepted and closed.
        let extra = TcpStream::connect(addr).unwrap();
        poll_until(&mut server, "accepts", |_| true);
        drop(extra);
        client.close(a);
        client.close(b);
        let mut closed = 0;
        poll_until(&mut client, "both closes", |e| {
            closed +=
                u32::from(matches!(e, NetEvent::Closed { conn, .. } if *conn == a || *conn == b));
            closed == 2
        });
    }
    // Dropped with connections open on both sides.
    drop(client);
    drop(server);
}

// Goal: no descriptor outlives its connection or its reactor, on either transport.
#[test]
fn transports_close_every_socket_they_open() {
    // Warm-up: whatever the runtime opens once (the test harness, io_uring's first ring).
    cycle::<Reactor>();
    cycle::<EpollReactor>();
    let before = open_fds();
    cycle::<Reactor>();
    cycle::<EpollReactor>();
    assert_eq!(open_fds(), before, "descriptors leaked");
}
