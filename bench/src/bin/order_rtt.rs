//! Order round trip on loopback: Enter Order out, Order Accepted back, through keel's venue.
//! The orders rest (day orders at a price nothing trades at), so the venue's books and streams
//! grow through the run as they would through a trading day.
//!
//! Contenders, measured in the same run in interleaved rounds, all encoding and decoding with
//! keel's codecs so only the I/O path differs:
//! - floor: a raw busy-polled TCP ping-pong with the same message sizes (50 bytes out, 67
//!   back) against a trivial echo loop on the server core;
//! - keel's io_uring reactor, and keel's epoll transport, on both ends of the same ping-pong,
//!   no venue logic (each transport's own cost against the floor); and the io_uring client
//!   with each of its shortcuts measured on its own (plain descriptors instead of the fixed
//!   file table, unregistered buffers, no spin reads, multishot receive, spin reads through
//!   an io_uring read per pass instead of a direct `recv(2)`);
//! - a raw busy-polled `std::net` client against keel's venue (what the venue itself costs);
//! - keel's io_uring reactor, busy-polling, against keel's venue;
//! - keel's io_uring reactor, blocking in the kernel until the answer;
//! - keel's epoll transport, busy-polling and blocking in `epoll_wait`, against keel's venue;
//! - a plain `std::net` blocking client;
//! - a tokio (current-thread) client.
//!
//! The server thread (pinned to core 0) runs keel's venue (busy-polling) or the echo loop; the
//! client runs on core 1.
//!
//! Usage: cargo run -p keel-bench --release --bin order_rtt -- [--round-trips=N] [--smoke]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use hdrhistogram::Histogram;
use keel::clock::{Clock, TscClock};
use keel::dispatch::venue_channel;
use keel::net::{
    EpollReactor, NetEvent, Reactor, ReactorConfig, SocketTransport, UringFeatures, WaitMode,
};
use keel::proto::soupbin::frame;
use keel::session::ouch::OuchClient;
use keel_bench::ouch::{
    client, connected_with, measure, next_order, take_packets, Contender, Keel, StdBlocking,
    ORDERS_MAX, REPLY_BYTES, REQUEST_BYTES,
};
use keel_bench::{histogram, pin_or_warn, print_header, print_row, round_trips, summary};
use keel_venue::flow::FlowConfig;
use keel_venue::server::{VenueConfig, VenueServer};

const STOP: u8 = 0;
const VENUE: u8 = 1;
const ECHO: u8 = 2;
const URING_ECHO: u8 = 3;
const EPOLL_ECHO: u8 = 4;

struct Tokio {
    rt: tokio::runtime::Runtime,
    stream: tokio::net::TcpStream,
    client: OuchClient,
    seq: u64,
    buf: Vec<u8>,
}

impl Tokio {
    fn connect(addr: SocketAddr, name: &str) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let mut client = client(name);
        let stream = rt.block_on(async {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.set_nodelay(true).unwrap();
            let mut out = [0u8; 128];
            let n = client.encode_login(&mut out).unwrap();
            s.write_all(&out[..n]).await.unwrap();
            let mut buf = [0u8; 256];
            let mut len = 0;
            loop {
                len += s.read(&mut buf[len..]).await.unwrap();
                if let Some(f) = frame(&buf[..len], 2048).unwrap() {
                    client
                        .on_packet(0, f.packet_type, f.payload, &mut |_| {})
                        .unwrap();
                    break;
                }
            }
            s
        });
        Self {
            rt,
            stream,
            client,
            seq: 0,
            buf: vec![0u8; 4096],
        }
    }
}

impl Contender for Tokio {
    fn round_trip(&mut self) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut out = [0u8; 128];
        let n = next_order(&mut self.client, &mut self.seq, &mut out);
        let Self {
            rt,
            stream,
            client,
            buf,
            ..
        } = self;
        rt.block_on(async {
            stream.write_all(&out[..n]).await.unwrap();
            let (mut len, mut used) = (0, 0);
            loop {
                len += stream.read(&mut buf[len..]).await.unwrap();
                if take_packets(client, &buf[..len], &mut used) {
                    return true;
                }
            }
        })
    }
}

/// keel's transport as a plain ping-pong client against the same transport as an echo server.
struct PingPong<T: SocketTransport> {
    reactor: T,
    conn: keel::net::ConnId,
    events: Vec<NetEvent>,
}

impl<T: SocketTransport> PingPong<T> {
    fn connect(addr: SocketAddr, mode: &AtomicU8, echo_mode: u8) -> Self {
        Self::connect_with(addr, mode, echo_mode, true, UringFeatures::default())
    }

    /// With `spin_reads` and the io_uring shortcuts `uring` (epoll ignores them).
    fn connect_with(
        addr: SocketAddr,
        mode: &AtomicU8,
        echo_mode: u8,
        spin_reads: bool,
        uring: UringFeatures,
    ) -> Self {
        mode.store(echo_mode, Ordering::Relaxed);
        let config = ReactorConfig {
            conns_max: 2,
            wait: WaitMode::BusyPoll,
            spin_reads,
            uring,
            ..ReactorConfig::default()
        };
        let (reactor, conn) = connected_with::<T>(addr, config);
        Self {
            reactor,
            conn,
            events: Vec::new(),
        }
    }
}

impl<T: SocketTransport> Contender for PingPong<T> {
    fn round_trip(&mut self) -> bool {
        self.reactor.send(self.conn, &[7u8; REQUEST_BYTES]).unwrap();
        loop {
            self.events.clear();
            self.reactor.poll(0, 0, &mut self.events).unwrap();
            if self.reactor.received(self.conn).len() >= REPLY_BYTES {
                let ok = self.reactor.received(self.conn)[0] == 9;
                self.reactor.consume(self.conn, REPLY_BYTES);
                return ok;
            }
        }
    }
}

struct Floor {
    stream: TcpStream,
}

impl Contender for Floor {
    fn round_trip(&mut self) -> bool {
        let out = [7u8; REQUEST_BYTES];
        self.stream.write_all(&out).unwrap();
        let mut buf = [0u8; REPLY_BYTES];
        let mut got = 0;
        while got < REPLY_BYTES {
            match self.stream.read(&mut buf[got..]) {
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) => panic!("{e}"),
            }
        }
        buf[0] == 9
    }
}

/// An echo server on keel's transport `T`: answers every request with a reply.
struct Echo<T: SocketTransport> {
    transport: T,
    addr: SocketAddr,
    conns: Vec<keel::net::ConnId>,
    events: Vec<NetEvent>,
}

impl<T: SocketTransport> Echo<T> {
    fn new() -> Self {
        let mut transport = T::open(ReactorConfig {
            conns_max: 8,
            wait: WaitMode::BusyPoll,
            spin_reads: true,
            ..ReactorConfig::default()
        })
        .unwrap();
        let (_, addr) = transport.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        Self {
            transport,
            addr,
            conns: Vec::with_capacity(8),
            events: Vec::new(),
        }
    }

    fn step(&mut self) {
        self.events.clear();
        self.transport.poll(0, 0, &mut self.events).unwrap();
        for e in &self.events {
            if let NetEvent::Accepted { conn, .. } = e {
                self.conns.push(*conn);
            }
        }
        for &c in &self.conns {
            while self.transport.received(c).len() >= REQUEST_BYTES {
                self.transport.consume(c, REQUEST_BYTES);
                self.transport.send(c, &[9u8; REPLY_BYTES]).unwrap();
            }
        }
        self.transport.flush().unwrap();
    }
}

/// Where the server core listens: keel's venue, the io_uring echo, the epoll echo.
struct ServerAddrs {
    venue: SocketAddr,
    uring_echo: SocketAddr,
    epoll_echo: SocketAddr,
}

/// The server core: keel's venue or an echo loop, switched by `mode`.
fn server(mode: Arc<AtomicU8>, addrs: std::sync::mpsc::Sender<ServerAddrs>, echo: TcpListener) {
    pin_or_warn(0);
    let mut uring_echo = Echo::<Reactor>::new();
    let mut epoll_echo = Echo::<EpollReactor>::new();
    let config = VenueConfig {
        flow: FlowConfig {
            events_per_sec: 0,
            ..FlowConfig::default()
        },
        wait: WaitMode::BusyPoll,
        spin_reads: std::env::var("KEEL_VENUE_SPIN").is_ok(),
        client_timeout_ns: 3_600_000_000_000,
        heartbeat_interval_ns: 3_600_000_000_000,
        ..VenueConfig::default()
    };
    let mut venue = VenueServer::new(config).unwrap();
    addrs
        .send(ServerAddrs {
            venue: venue.local_addr(),
            uring_echo: uring_echo.addr,
            epoll_echo: epoll_echo.addr,
        })
        .unwrap();
    let clock = TscClock::new();
    let mut echo_conn: Option<TcpStream> = None;
    let mut pending = 0usize;
    loop {
        match mode.load(Ordering::Relaxed) {
            STOP => return,
            VENUE => venue.step(clock.now_ns(), 0).unwrap(),
            URING_ECHO => uring_echo.step(),
            EPOLL_ECHO => epoll_echo.step(),
            _ => {
                let conn = echo_conn.get_or_insert_with(|| {
                    let (s, _) = echo.accept().unwrap();
                    s.set_nodelay(true).unwrap();
                    s.set_nonblocking(true).unwrap();
                    s
                });
                let mut buf = [0u8; 512];
                match conn.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => pending += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
                while pending >= REQUEST_BYTES {
                    pending -= REQUEST_BYTES;
                    let reply = [9u8; REPLY_BYTES];
                    let mut sent = 0;
                    while sent < REPLY_BYTES {
                        match conn.write(&reply[sent..]) {
                            Ok(n) => sent += n,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }
        }
    }
}

/// The io_uring client ping-pongs of the shortcut block, connected to the io_uring echo at
/// `echo`: the defaults (the block's control), then each shortcut changed on its own.
fn shortcut_ping_pongs(echo: SocketAddr, mode: &AtomicU8) -> Vec<PingPong<Reactor>> {
    // Each io_uring shortcut measured on its own: one off at a time from the default (direct
    // spin reads, registered buffers, fixed files), and multishot receive against the
    // completion-driven receive it replaces.
    let shortcuts = UringFeatures::default();
    // The first is the defaults again, measured beside the others as their control (the row
    // above is measured right after the floor, in another place in each round).
    let uring_variants: [(bool, UringFeatures); 6] = [
        (true, shortcuts),
        (
            true,
            UringFeatures {
                fixed_files: false,
                ..shortcuts
            },
        ),
        (
            true,
            UringFeatures {
                registered_buffers: false,
                ..shortcuts
            },
        ),
        (false, shortcuts),
        (
            false,
            UringFeatures {
                multishot_recv: true,
                ..shortcuts
            },
        ),
        (
            true,
            UringFeatures {
                direct_spin_reads: false,
                ..shortcuts
            },
        ),
    ];
    let pongs: Vec<PingPong<Reactor>> = uring_variants
        .iter()
        .map(|&(spin, features)| {
            PingPong::<Reactor>::connect_with(echo, mode, URING_ECHO, spin, features)
        })
        .collect();
    assert!(
        pongs[4].reactor.features().multishot_recv,
        "this kernel refused multishot receive's buffer ring"
    );
    pongs
}

fn main() {
    let (total, rounds, per_round) = round_trips(50_000);
    let orders = u32::try_from(total + 1_000).expect("round trips fit u32");
    ORDERS_MAX.store(orders.next_power_of_two(), Ordering::Relaxed);
    let mode = Arc::new(AtomicU8::new(VENUE));
    let echo = TcpListener::bind("127.0.0.1:0").unwrap();
    let echo_addr = echo.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let server_mode = Arc::clone(&mode);
    let server = std::thread::spawn(move || server(server_mode, tx, echo));
    let addrs = rx.recv().unwrap();
    let venue_addr = addrs.venue;
    pin_or_warn(1);
    let clock = TscClock::new();
    let _ = venue_channel(1, 1); // the engine's rings exist; the bench drives the wire directly

    let mut busy = Keel::<Reactor>::connect(venue_addr, WaitMode::BusyPoll, "busy");
    let mut blocking = Keel::<Reactor>::connect(venue_addr, WaitMode::Blocking, "block");
    let mut epoll_busy = Keel::<EpollReactor>::connect(venue_addr, WaitMode::BusyPoll, "ebusy");
    let mut epoll_blocking =
        Keel::<EpollReactor>::connect(venue_addr, WaitMode::Blocking, "eblock");
    let mut std_client = StdBlocking::connect(venue_addr, "std", false);
    let mut raw_client = StdBlocking::connect(venue_addr, "raw", true);
    let mut tokio_client = Tokio::connect(venue_addr, "tokio");
    let floor_stream = TcpStream::connect(echo_addr).unwrap();
    floor_stream.set_nodelay(true).unwrap();
    floor_stream.set_nonblocking(true).unwrap();
    let mut floor = Floor {
        stream: floor_stream,
    };
    let mut uring_ping_pong = PingPong::<Reactor>::connect(addrs.uring_echo, &mode, URING_ECHO);
    let mut epoll_ping_pong =
        PingPong::<EpollReactor>::connect(addrs.epoll_echo, &mode, EPOLL_ECHO);
    let mut variant_ping_pongs = shortcut_ping_pongs(addrs.uring_echo, &mode);

    let names = [
        "raw busy-polled TCP ping-pong (floor)",
        "keel io_uring ping-pong, no venue",
        "keel epoll ping-pong, no venue",
        "raw busy-polled client, keel venue",
        "keel io_uring, busy-poll",
        "keel io_uring, blocking wait",
        "keel epoll, busy-poll",
        "keel epoll, blocking wait",
        "std::net blocking client",
        "tokio client (current thread)",
        "io_uring ping-pong: defaults again",
        "io_uring ping-pong: plain fds",
        "io_uring ping-pong: unregistered bufs",
        "io_uring ping-pong: no spin reads",
        "io_uring ping-pong: multishot recv",
        "io_uring ping-pong: ring spin reads",
    ];
    let mut h: Vec<Histogram<u64>> = (0..names.len()).map(|_| histogram()).collect();
    for round in 0..=rounds {
        // Round 0 is warm-up and is not recorded.
        let n = if round == 0 {
            500.min(per_round)
        } else {
            per_round
        };
        let mut scratch = histogram();
        mode.store(ECHO, Ordering::Relaxed);
        measure(
            &mut floor,
            n,
            &clock,
            if round == 0 { &mut scratch } else { &mut h[0] },
        );
        mode.store(URING_ECHO, Ordering::Relaxed);
        measure(
            &mut uring_ping_pong,
            n,
            &clock,
            if round == 0 { &mut scratch } else { &mut h[1] },
        );
        mode.store(EPOLL_ECHO, Ordering::Relaxed);
        measure(
            &mut epoll_ping_pong,
            n,
            &clock,
            if round == 0 { &mut scratch } else { &mut h[2] },
        );
        mode.store(URING_ECHO, Ordering::Relaxed);
        for (i, c) in variant_ping_pongs.iter_mut().enumerate() {
            measure(
                c,
                n,
                &clock,
                if round == 0 {
                    &mut scratch
                } else {
                    &mut h[10 + i]
                },
            );
        }
        mode.store(VENUE, Ordering::Relaxed);
        let contenders: [&mut dyn Contender; 7] = [
            &mut raw_client,
            &mut busy,
            &mut blocking,
            &mut epoll_busy,
            &mut epoll_blocking,
            &mut std_client,
            &mut tokio_client,
        ];
        for (i, c) in contenders.into_iter().enumerate() {
            measure(
                c,
                n,
                &clock,
                if round == 0 {
                    &mut scratch
                } else {
                    &mut h[i + 3]
                },
            );
        }
    }
    mode.store(STOP, Ordering::Relaxed);
    drop(floor);
    server.join().unwrap();
    let s: Vec<_> = h.iter().map(summary).collect();
    println!("order round trip on loopback (Enter Order -> Order Accepted), {total} per contender, {rounds} interleaved rounds");
    print_header("round trip", "floor");
    for (name, summary) in names.iter().zip(&s) {
        print_row(name, summary, s[0].p50_ns);
    }
    let ratio = |a: usize, b: usize| s[a].p50_ns / s[b].p50_ns;
    println!("keel_transport_vs_floor_ratio: {:.2}", ratio(1, 0));
    println!("keel_epoll_transport_vs_floor_ratio: {:.2}", ratio(2, 0));
    println!("keel_busy_poll_vs_floor_ratio: {:.2}", ratio(4, 0));
    println!(
        "keel_busy_poll_vs_raw_client_same_venue_ratio: {:.2}",
        ratio(4, 3)
    );
    println!("keel_busy_poll_vs_tokio_ratio: {:.2}", ratio(4, 9));
    println!("keel_epoll_busy_poll_vs_floor_ratio: {:.2}", ratio(6, 0));
    println!("keel_epoll_vs_io_uring_busy_poll_ratio: {:.2}", ratio(6, 4));
    // Each shortcut against the control measured in the same block.
    println!(
        "uring_plain_descriptors_vs_fixed_files_ratio: {:.2}",
        ratio(11, 10)
    );
    println!(
        "uring_unregistered_vs_registered_buffers_ratio: {:.2}",
        ratio(12, 10)
    );
    println!(
        "uring_multishot_vs_single_receive_ratio: {:.2}",
        ratio(14, 13)
    );
    println!("uring_multishot_vs_spin_reads_ratio: {:.2}", ratio(14, 10));
    println!(
        "uring_direct_vs_ring_spin_reads_ratio: {:.2}",
        ratio(10, 15)
    );
}
