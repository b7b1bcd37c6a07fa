//! Round trips across a veth pair between two network namespaces: keel's AF_XDP transport
//! against keel's io_uring and epoll transports and a raw busy-polled kernel socket, twice:
//! an order round trip (Enter Order out, Order Accepted back, through keel's OUCH session
//! client, against keel's venue at the other end, busy-polling on kernel TCP), and a 64-byte
//! ping-pong against a busy-polled kernel echo server (the transports alone).
//!
//! What it says and what it does not: veth runs AF_XDP in copy mode (the kernel copies each
//! frame into the UMEM and out of it, and every send is a `sendto`), and a veth "wire" is a
//! function call inside one kernel. So this measures keel's userspace TCP/IP stack and the
//! AF_XDP rings against the kernel's TCP on the same path, not what a zero-copy NIC gives
//! (docs/tuning.md, "AF_XDP on a real NIC").
//!
//! Contenders, in interleaved rounds, in each block (the order block first, then the ping-pong:
//! one AF_XDP transport per interface at a time):
//! - floor: a raw non-blocking `std::net` socket spinning on `read` (through keel's codecs for
//!   the orders);
//! - keel io_uring, busy-polling with spin reads;
//! - keel epoll, busy-polling with spin reads;
//! - keel AF_XDP, busy-polling (native XDP on the veth, copy mode).
//!
//! Needs root (namespaces, XDP); the server thread is pinned to core 0, the clients to core 1.
//!
//! Usage: cargo run -p keel-bench --release --bin xdp_rtt -- [--round-trips=N] [--smoke]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::net::xdp::netns::Pair;
use keel::net::{
    ConnId, EpollReactor, NetEvent, Reactor, ReactorConfig, SocketTransport, WaitMode, XdpReactor,
};
use keel_bench::ouch::{Keel as OuchKeel, StdBlocking, ORDERS_MAX};
use keel_bench::{
    connected_with, histogram, measure, pin_or_warn, print_header, print_row, round_trips, summary,
    Contender,
};
use keel_venue::server::{VenueConfig, VenueServer};

const MESSAGE_BYTES: usize = 64;

/// The floor: a raw non-blocking kernel socket.
struct Raw(TcpStream);

impl Contender for Raw {
    fn round_trip(&mut self) -> bool {
        let out = [7u8; MESSAGE_BYTES];
        self.0.write_all(&out).unwrap();
        let mut buf = [0u8; MESSAGE_BYTES];
        let mut got = 0;
        while got < MESSAGE_BYTES {
            match self.0.read(&mut buf[got..]) {
                Ok(0) => return false,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("{e}"),
            }
        }
        buf == out
    }
}

/// A keel transport, busy-polling, one connection.
struct PingPong<T> {
    t: T,
    conn: ConnId,
    events: Vec<NetEvent>,
}

impl<T: SocketTransport> PingPong<T> {
    fn connect(echo: SocketAddr, config: ReactorConfig) -> Self {
        let (t, conn) = connected_with::<T>(echo, config);
        Self {
            t,
            conn,
            events: Vec::with_capacity(64),
        }
    }
}

impl<T: SocketTransport> Contender for PingPong<T> {
    fn round_trip(&mut self) -> bool {
        let out = [9u8; MESSAGE_BYTES];
        self.t.send(self.conn, &out).unwrap();
        self.t.flush().unwrap();
        loop {
            self.events.clear();
            self.t.poll(0, 0, &mut self.events).unwrap();
            let got = self.t.received(self.conn);
            if got.len() >= MESSAGE_BYTES {
                let ok = got[..MESSAGE_BYTES] == out;
                self.t.consume(self.conn, MESSAGE_BYTES);
                return ok;
            }
        }
    }
}

/// What the server thread serves: nothing (stop), keel's venue, or the echo.
const STOP: u8 = 0;
const VENUE: u8 = 1;
const ECHO: u8 = 2;

/// The server core, in the peer's namespace: keel's venue (busy-polling on kernel TCP, no
/// synthetic flow: every order rests) or a kernel echo server (every connection's bytes sent
/// straight back), one at a time as `mode` says, on one pinned thread that spins. Returns
/// the venue's order-entry address and the echo's.
fn server(
    pair_b: String,
    peer: std::net::Ipv4Addr,
    mode: Arc<AtomicU8>,
) -> (SocketAddr, SocketAddr) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        Pair::within(&pair_b, || {
            pin_or_warn(0);
            let mut venue = VenueServer::new(VenueConfig {
                listen: SocketAddr::from((peer, 0)),
                wait: WaitMode::BusyPoll,
                flow: keel_venue::flow::FlowConfig {
                    events_per_sec: 0,
                    ..keel_venue::flow::FlowConfig::default()
                },
                ..VenueConfig::default()
            })
            .unwrap();
            let listener = TcpListener::bind((peer, 0)).unwrap();
            listener.set_nonblocking(true).unwrap();
            tx.send((venue.local_addr(), listener.local_addr().unwrap()))
                .unwrap();
            let clock = TscClock::new();
            let mut conns: Vec<TcpStream> = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match mode.load(Ordering::Relaxed) {
                    STOP => return,
                    VENUE => venue.step(clock.now_ns(), 0).unwrap(),
                    _ => {
                        if let Ok((s, _)) = listener.accept() {
                            s.set_nodelay(true).unwrap();
                            s.set_nonblocking(true).unwrap();
                            conns.push(s);
                        }
                        for s in &mut conns {
                            if let Ok(n) = s.read(&mut buf) {
                                if n > 0 {
                                    s.write_all(&buf[..n]).unwrap();
                                }
                            }
                        }
                    }
                }
            }
        });
    });
    rx.recv().unwrap()
}

/// `rounds` interleaved rounds of `per_round` round trips of each contender (after a warm-up
/// round that is not recorded), into `hists`.
fn run_block(
    mut contenders: Vec<Box<dyn Contender>>,
    hists: &mut [Histogram<u64>],
    rounds: u64,
    per_round: u64,
    clock: &TscClock,
) {
    for round in 0..=rounds {
        let n = if round == 0 {
            500.min(per_round)
        } else {
            per_round
        };
        for (c, h) in contenders.iter_mut().zip(hists.iter_mut()) {
            let mut scratch = histogram();
            measure(
                c.as_mut(),
                n,
                clock,
                if round == 0 { &mut scratch } else { h },
            );
        }
    }
}

fn busy() -> ReactorConfig {
    ReactorConfig {
        conns_max: 2,
        wait: WaitMode::BusyPoll,
        spin_reads: true,
        ..ReactorConfig::default()
    }
}

fn main() {
    let (total, rounds, per_round) = round_trips(50_000);
    let Some(pair) = Pair::create("xdp_rtt") else {
        eprintln!("xdp_rtt: needs root and iproute2 (network namespaces, XDP)");
        std::process::exit(2);
    };
    // The kernel sockets of keel's namespace need an address of the kernel's own there.
    let kernel_a = std::net::Ipv4Addr::new(
        pair.keel_ip.octets()[0],
        pair.keel_ip.octets()[1],
        pair.keel_ip.octets()[2],
        4,
    );
    let status = std::process::Command::new("ip")
        .args([
            "-n",
            &pair.a,
            "addr",
            "add",
            &format!("{kernel_a}/24"),
            "dev",
            &pair.a_if,
        ])
        .status()
        .unwrap();
    assert!(status.success(), "ip addr add");
    ORDERS_MAX.store(
        u32::try_from(total + 4_000)
            .expect("round trips fit u32")
            .next_power_of_two(),
        Ordering::Relaxed,
    );
    let mode = Arc::new(AtomicU8::new(VENUE));
    let (venue, echo) = server(pair.b.clone(), pair.peer_ip, Arc::clone(&mode));
    let clock = TscClock::new();
    let names = [
        "raw busy-polled kernel socket",
        "keel io_uring, busy-poll",
        "keel epoll, busy-poll",
        "keel AF_XDP (copy mode), busy-poll",
    ];
    // Orders first (names[i] through keel's venue), then the ping-pongs (names[i] to the echo).
    let mut hists: Vec<Histogram<u64>> = (0..2 * names.len()).map(|_| histogram()).collect();
    Pair::within(&pair.a, || {
        pin_or_warn(1);
        let xdp = || ReactorConfig {
            xdp: pair.xdp_a(),
            ..busy()
        };
        // One AF_XDP transport per interface at a time: the blocks run one after the other,
        // each contender of a block interleaved with the others.
        mode.store(VENUE, Ordering::Relaxed);
        let orders: Vec<Box<dyn Contender>> = vec![
            Box::new(StdBlocking::connect(venue, "raw", true)),
            Box::new(OuchKeel::<Reactor>::connect_with(venue, busy(), "uring")),
            Box::new(OuchKeel::<EpollReactor>::connect_with(
                venue,
                busy(),
                "epoll",
            )),
            Box::new(OuchKeel::<XdpReactor>::connect_with(venue, xdp(), "xdp")),
        ];
        run_block(orders, &mut hists[..4], rounds, per_round, &clock);
        mode.store(ECHO, Ordering::Relaxed);
        let raw = TcpStream::connect(echo).unwrap();
        raw.set_nodelay(true).unwrap();
        raw.set_nonblocking(true).unwrap();
        let pongs: Vec<Box<dyn Contender>> = vec![
            Box::new(Raw(raw)),
            Box::new(PingPong::<Reactor>::connect(echo, busy())),
            Box::new(PingPong::<EpollReactor>::connect(echo, busy())),
            Box::new(PingPong::<XdpReactor>::connect(echo, xdp())),
        ];
        run_block(pongs, &mut hists[4..], rounds, per_round, &clock);
    });
    mode.store(STOP, Ordering::Relaxed);
    println!("xdp_rtt: round trips across a veth pair, {total} each, {rounds} interleaved rounds");
    for (block, what) in [(0, "order"), (1, "64-byte ping-pong")] {
        let hists = &hists[block * names.len()..(block + 1) * names.len()];
        print_header(what, "raw");
        let floor = summary(&hists[0]).p50_ns;
        let mut p50 = Vec::new();
        for (name, h) in names.iter().zip(hists) {
            let s = summary(h);
            print_row(name, &s, floor);
            p50.push(s.p50_ns);
        }
        let tag = if block == 0 { "order" } else { "ping_pong" };
        println!("{tag}_xdp_vs_raw_ratio: {:.2}", p50[3] / p50[0]);
        println!("{tag}_xdp_vs_io_uring_ratio: {:.2}", p50[3] / p50[1]);
        println!("{tag}_xdp_vs_epoll_ratio: {:.2}", p50[3] / p50[2]);
    }
}
