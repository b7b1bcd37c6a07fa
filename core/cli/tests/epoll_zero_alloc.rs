//! Zero heap allocations in a socket transport after set-up, on every path: connect, accept,
//! send (including a send refused for room), receive, consume, close from either side,
//! reconnect into a reused slot, and a refused connect. Method: a client and a server
//! transport on the test's thread over loopback; a counting allocator armed on this thread
//! counts every allocation during 200 such cycles after one warm-up cycle. The count must be
//! zero. Run against the epoll transport, the io_uring one, and the AF_XDP one (two AF_XDP
//! transports, one at each end of a veth pair between two network namespaces).

mod common;

use std::net::{SocketAddr, TcpListener};

use common::alloc::{CountingAllocator, ALLOCATIONS, ARMED};
use keel::net::xdp::netns::Pair;
use keel::net::{
    CloseReason, EpollReactor, NetError, NetEvent, Reactor, ReactorConfig, SocketTransport,
    UringFeatures, WaitMode, XdpReactor,
};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const CYCLES: u32 = 200;

struct Rig<T> {
    client: T,
    server: T,
    addr: SocketAddr,
    /// A port nobody listens on.
    dead: SocketAddr,
    cev: Vec<NetEvent>,
    sev: Vec<NetEvent>,
    message: [u8; 100],
}

fn config(uring: UringFeatures) -> ReactorConfig {
    ReactorConfig {
        uring,
        conns_max: 2,
        recv_buffer_bytes: 4096,
        send_buffer_bytes: 4096,
        wait: WaitMode::Blocking,
        ..ReactorConfig::default()
    }
}

impl<T: SocketTransport> Rig<T> {
    /// Both ends over loopback.
    fn new(uring: UringFeatures) -> Self {
        let config = config(uring);
        let client = T::open(config).unwrap();
        let server = T::open(config).unwrap();
        let dead = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        Self::with(client, server, "127.0.0.1:0", dead)
    }

    /// `server` listening on `listen`; `dead`: an address nobody listens on.
    fn with(client: T, mut server: T, listen: &str, dead: SocketAddr) -> Self {
        let (_, addr) = server.listen(listen.parse().unwrap()).unwrap();
        Self {
            client,
            server,
            addr,
            dead,
            cev: Vec::with_capacity(64),
            sev: Vec::with_capacity(64),
            message: [b'k'; 100],
        }
    }

    /// Polls both sides until `done` (bounded: never hangs).
    fn poll_until(&mut self, mut done: impl FnMut(&mut Self) -> bool) {
        for _ in 0..20_000 {
            self.cev.clear();
            self.sev.clear();
            self.client.poll(0, 100_000, &mut self.cev).unwrap();
            self.server.poll(0, 100_000, &mut self.sev).unwrap();
            if done(self) {
                return;
            }
        }
        panic!("condition not reached");
    }

    /// One connect → echo → back-pressure → close cycle; `server_closes` picks the side.
    fn cycle(&mut self, server_closes: bool) {
        let conn = self.client.connect(self.addr).unwrap();
        let (mut connected, mut accepted) = (false, None);
        self.poll_until(|r| {
            connected |= r.cev.contains(&NetEvent::Connected { conn });
            accepted = accepted.or(r.sev.iter().find_map(|e| match e {
                NetEvent::Accepted { conn, .. } => Some(*conn),
                _ => None,
            }));
            connected && accepted.is_some()
        });
        let peer = accepted.unwrap();
        self.client.send(conn, &self.message).unwrap();
        self.poll_until(|r| r.server.received(peer).len() == 100);
        let echo: &[u8] = &self.message;
        self.server.send(peer, echo).unwrap();
        self.server.consume(peer, 100);
        self.poll_until(|r| r.client.received(conn).len() == 100);
        self.client.consume(conn, 100);
        // Queue until the client's send buffer refuses (4096 bytes: the 41st message), then
        // let it write.
        let mut refused = false;
        for _ in 0..100 {
            match self.client.send(conn, &self.message) {
                Ok(()) => {}
                Err(NetError::SendBufferFull { .. }) => {
                    refused = true;
                    break;
                }
                Err(_) => panic!("send failed"),
            }
        }
        assert!(refused);
        self.client.flush().unwrap();
        let (closer, other, closer_id, other_id) = if server_closes {
            (true, false, peer, conn)
        } else {
            (false, true, conn, peer)
        };
        self.side(closer).close(closer_id);
        let (mut local, mut remote) = (false, false);
        self.poll_until(|r| {
            local |= events(r, closer).contains(&NetEvent::Closed {
                conn: closer_id,
                reason: CloseReason::Local,
            });
            remote |= events(r, other)
                .iter()
                .any(|e| matches!(e, NetEvent::Closed { conn, .. } if *conn == other_id));
            // The side that did not close reads until its peer's end, consuming as it goes.
            let n = r.side(other).received(other_id).len();
            r.side(other).consume(other_id, n);
            local && remote
        });
        // A refused connect fails and frees its slot.
        let failed = self.client.connect(self.dead).unwrap();
        self.poll_until(|r| {
            r.cev
                .iter()
                .any(|e| matches!(e, NetEvent::ConnectFailed { conn, .. } if *conn == failed))
        });
    }

    fn side(&mut self, server: bool) -> &mut T {
        if server {
            &mut self.server
        } else {
            &mut self.client
        }
    }
}

fn events<T>(r: &Rig<T>, server: bool) -> &[NetEvent] {
    if server {
        &r.sev
    } else {
        &r.cev
    }
}

fn allocations_over_cycles<T: SocketTransport>(uring: UringFeatures) -> u64 {
    count_cycles(Rig::<T>::new(uring))
}

fn count_cycles<T: SocketTransport>(mut rig: Rig<T>) -> u64 {
    rig.cycle(false);
    rig.cycle(true);
    ALLOCATIONS.with(|n| n.set(0));
    ARMED.with(|a| a.set(true));
    for i in 0..CYCLES {
        rig.cycle(i % 2 == 0);
    }
    ARMED.with(|a| a.set(false));
    ALLOCATIONS.with(|n| n.get())
}

#[test]
fn epoll_transport_allocates_nothing_after_setup() {
    assert_eq!(
        allocations_over_cycles::<EpollReactor>(UringFeatures::default()),
        0
    );
}

#[test]
fn io_uring_transport_allocates_nothing_after_setup() {
    assert_eq!(
        allocations_over_cycles::<Reactor>(UringFeatures::default()),
        0
    );
}

// The io_uring shortcuts off, and multishot receive with a pool of four 1 KiB buffers, smaller
// than a receive buffer (held completions, re-arms, buffers given back at close).
#[test]
fn io_uring_transport_allocates_nothing_with_other_shortcuts() {
    let plain = UringFeatures {
        registered_buffers: false,
        fixed_files: false,
        ..UringFeatures::default()
    };
    assert_eq!(allocations_over_cycles::<Reactor>(plain), 0);
    let multishot = UringFeatures {
        multishot_recv: true,
        provided_buffers: 4,
        provided_buffer_bytes: 1024,
        ..UringFeatures::default()
    };
    assert_eq!(allocations_over_cycles::<Reactor>(multishot), 0);
}

// Two AF_XDP transports, one at each end of a veth pair: the UMEM's frames recycled through
// the fill and completion rings, smoltcp's sockets reused by slot and by listener, ARP and
// the RST of a refused connect, all without an allocation.
#[test]
fn af_xdp_transport_allocates_nothing_after_setup() {
    let Some(pair) = Pair::create("af_xdp_transport_allocates_nothing_after_setup") else {
        return;
    };
    let open = |ns: &str, xdp| {
        Pair::within(ns, || {
            XdpReactor::new(ReactorConfig {
                xdp,
                ..config(UringFeatures::default())
            })
        })
        .unwrap()
    };
    let client = open(&pair.a, pair.xdp_a());
    let server = open(&pair.b, pair.xdp_b());
    let dead = SocketAddr::from((pair.keel_ip_b, 9));
    let rig = Rig::with(client, server, "0.0.0.0:0", dead);
    assert_eq!(count_cycles(rig), 0);
}
