//! Round trip across a veth pair between two network namespaces: keel's AF_XDP transport
//! against keel's io_uring and epoll transports and a raw busy-polled kernel socket, all
//! talking to the same busy-polled kernel echo server at the other end.
//!
//! What it says and what it does not: veth runs AF_XDP in copy mode (the kernel copies each
//! frame into the UMEM and out of it, and every send is a `sendto`), and a veth "wire" is a
//! function call inside one kernel. So this measures keel's userspace TCP/IP stack and the
//! AF_XDP rings against the kernel's TCP on the same path, not what a zero-copy NIC gives
//! (docs/tuning.md, "AF_XDP on a real NIC").
//!
//! Contenders, in interleaved rounds, each sending 64 bytes and waiting for them to come back:
//! - floor: a raw non-blocking `std::net` socket spinning on `read`;
//! - keel io_uring, busy-polling with spin reads;
//! - keel epoll, busy-polling with spin reads;
//! - keel AF_XDP, busy-polling (native XDP on the veth, copy mode).
//!
//! Needs root (namespaces, XDP); the server thread is pinned to core 0, the clients to core 1.
//!
//! Usage: cargo run -p keel-bench --release --bin xdp_rtt -- [--round-trips=N] [--smoke]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use keel::clock::TscClock;
use keel::net::xdp::netns::Pair;
use keel::net::{
    ConnId, EpollReactor, NetEvent, Reactor, ReactorConfig, SocketTransport, WaitMode, XdpReactor,
};
use keel_bench::{arg_u64, flag, histogram, pin_or_warn, print_header, print_row, summary};

const MESSAGE_BYTES: usize = 64;

trait Contender {
    fn round_trip(&mut self) -> bool;
}

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
struct Keel<T> {
    t: T,
    conn: ConnId,
    events: Vec<NetEvent>,
}

impl<T: SocketTransport> Keel<T> {
    fn connect(mut t: T, echo: SocketAddr) -> Self {
        let conn = t.connect(echo).unwrap();
        let mut events = Vec::with_capacity(64);
        for _ in 0..10_000_000 {
            t.poll(0, 0, &mut events).unwrap();
            if events.contains(&NetEvent::Connected { conn }) {
                return Self { t, conn, events };
            }
        }
        panic!("{:?}: no connection to {echo}: {events:?}", T::KIND);
    }
}

impl<T: SocketTransport> Contender for Keel<T> {
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

/// The echo server in the peer's namespace: every connection's bytes sent straight back,
/// non-blocking sockets spun on by one thread until `stop`.
fn echo_server(pair_b: String, peer: std::net::Ipv4Addr, stop: Arc<AtomicBool>) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        Pair::within(&pair_b, || {
            pin_or_warn(0);
            let listener = TcpListener::bind((peer, 0)).unwrap();
            listener.set_nonblocking(true).unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let mut conns: Vec<TcpStream> = Vec::new();
            let mut buf = [0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
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
        });
    });
    rx.recv().unwrap()
}

fn busy() -> ReactorConfig {
    ReactorConfig {
        conns_max: 2,
        wait: WaitMode::BusyPoll,
        spin_reads: true,
        ..ReactorConfig::default()
    }
}

fn measure(c: &mut dyn Contender, n: u64, clock: &TscClock, h: &mut Histogram<u64>) {
    for _ in 0..n {
        let t0 = clock.raw();
        assert!(c.round_trip(), "round trip did not complete correctly");
        let t1 = clock.raw();
        h.record(((clock.raw_to_ns(t1) - clock.raw_to_ns(t0)) * 1_000).max(1))
            .unwrap();
    }
}

fn main() {
    let total = if flag("smoke") {
        2_000
    } else {
        arg_u64("round-trips", 50_000)
    };
    let rounds = 5;
    let per_round = total / rounds;
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
    let stop = Arc::new(AtomicBool::new(false));
    let echo = echo_server(pair.b.clone(), pair.peer_ip, Arc::clone(&stop));
    let clock = TscClock::new();
    let names = [
        "raw busy-polled kernel socket",
        "keel io_uring, busy-poll",
        "keel epoll, busy-poll",
        "keel AF_XDP (copy mode), busy-poll",
    ];
    let mut hists: Vec<Histogram<u64>> = (0..names.len()).map(|_| histogram()).collect();
    Pair::within(&pair.a, || {
        pin_or_warn(1);
        let raw = TcpStream::connect(echo).unwrap();
        raw.set_nodelay(true).unwrap();
        raw.set_nonblocking(true).unwrap();
        let mut contenders: Vec<Box<dyn Contender>> = vec![
            Box::new(Raw(raw)),
            Box::new(Keel::connect(Reactor::open(busy()).unwrap(), echo)),
            Box::new(Keel::connect(EpollReactor::open(busy()).unwrap(), echo)),
            Box::new(Keel::connect(
                XdpReactor::open(ReactorConfig {
                    xdp: pair.xdp_a(),
                    ..busy()
                })
                .unwrap(),
                echo,
            )),
        ];
        for round in 0..=rounds {
            // Round 0 warms up and is not recorded.
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
                    &clock,
                    if round == 0 { &mut scratch } else { h },
                );
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    println!(
        "xdp_rtt: {MESSAGE_BYTES}-byte round trips across a veth pair, {total} each, {rounds} \
         interleaved rounds"
    );
    print_header("round trip", "raw");
    let floor = summary(&hists[0]).p50_ns;
    let mut p50 = Vec::new();
    for (name, h) in names.iter().zip(&hists) {
        let s = summary(h);
        print_row(name, &s, floor);
        p50.push(s.p50_ns);
    }
    println!("xdp_vs_raw_ratio: {:.2}", p50[3] / p50[0]);
    println!("xdp_vs_io_uring_ratio: {:.2}", p50[3] / p50[1]);
    println!("xdp_vs_epoll_ratio: {:.2}", p50[3] / p50[2]);
}
