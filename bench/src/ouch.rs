//! keel's OUCH client as the round-trip benchmarks drive it: the session client keel's links
//! use over any of keel's transports ([`Keel`]), a raw `std::net` client through the same
//! codecs ([`StdBlocking`]), and the order they send (`order_rtt`, `xdp_rtt`).

pub use crate::{connected_with, measure, Contender};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;

use keel::net::{NetEvent, ReactorConfig, SocketTransport, WaitMode};
use keel::order::{
    ClientOrderId, NewOrder, OutcomeKind, Price, RequestKind, Side, StrategyId, SymbolId,
    TimeInForce, VenueId, VenueRequest,
};
use keel::proto::ouch::Dialect;
use keel::proto::soupbin::{alpha, frame};
use keel::session::ouch::{ClientConfig, OuchClient};
use keel::session::protocol::SessionNews;

/// An Enter Order's bytes on the wire.
pub const REQUEST_BYTES: usize = 50;
/// An Order Accepted's bytes on the wire.
pub const REPLY_BYTES: usize = 67;

/// Orders each client tracks: every order of the run rests in the venue's book, so the
/// session must keep all of them (a smaller map refuses new orders `SessionFull`).
pub static ORDERS_MAX: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(4_096);

/// keel's OUCH session client, user `name`.
pub fn client(name: &str) -> OuchClient {
    let symbols = vec![alpha("AAPL"), alpha("MSFT"), alpha("AMZN"), alpha("NVDA")];
    OuchClient::new(
        ClientConfig {
            username: name.into(),
            password: "keel".into(),
            dialect: Dialect::SPEC,
            orders_max: ORDERS_MAX.load(Ordering::Relaxed),
            symbols,
            reconcile: Default::default(),
            rejects: Default::default(),
            ack_timeout_ns: 2_000_000_000,
        },
        VenueId(0),
    )
}

/// Encodes the next Enter Order (a fresh id each time, far from any synthetic price).
pub fn next_order(c: &mut OuchClient, seq: &mut u64, out: &mut [u8]) -> usize {
    *seq += 1;
    let order = NewOrder {
        id: ClientOrderId::new(StrategyId(0), *seq).unwrap(),
        venue: VenueId(0),
        symbol: SymbolId((*seq % 4) as u16),
        side: Side::Buy,
        price: Price::from_units(1, 0),
        qty: 100,
        tif: TimeInForce::Day,
        reduce_only: false,
    };
    let n = c
        .encode_request(
            &VenueRequest {
                venue: VenueId(0),
                sent_ns: 0,
                wire_ref: 0,
                kind: RequestKind::New(order),
            },
            out,
        )
        .unwrap();
    assert_eq!(n, REQUEST_BYTES);
    n
}

/// Consumes whole packets from `buf`; true once an Order Accepted was seen.
pub fn take_packets(c: &mut OuchClient, buf: &[u8], used: &mut usize) -> bool {
    let mut accepted = false;
    while let Some(f) = frame(&buf[*used..], 2048).unwrap() {
        let news = c
            .on_packet(0, f.packet_type, f.payload, &mut |o| {
                accepted |= matches!(o.kind, OutcomeKind::Accepted { .. })
            })
            .unwrap();
        assert!(news != SessionNews::LoginRejected);
        *used += f.len;
    }
    accepted
}

/// keel's client over transport `T` (the session client and codecs keel's links use).
#[allow(missing_debug_implementations)] // a benchmark contender
pub struct Keel<T: SocketTransport> {
    reactor: T,
    conn: keel::net::ConnId,
    client: OuchClient,
    seq: u64,
    events: Vec<NetEvent>,
    timeout_ns: u64,
}

impl<T: SocketTransport> Keel<T> {
    /// Connected to the venue at `addr` on a transport of two slots with spin reads, logged in.
    pub fn connect(addr: SocketAddr, wait: WaitMode, name: &str) -> Self {
        Self::connect_with(
            addr,
            ReactorConfig {
                conns_max: 2,
                wait,
                spin_reads: true,
                ..ReactorConfig::default()
            },
            name,
        )
    }

    /// Connected to the venue at `addr` on a transport opened with `config`, logged in.
    pub fn connect_with(addr: SocketAddr, config: ReactorConfig, name: &str) -> Self {
        let wait = config.wait;
        let (mut reactor, conn) = connected_with::<T>(addr, config);
        let client = client(name);
        let mut buf = [0u8; 128];
        let n = client.encode_login(&mut buf).unwrap();
        reactor.send(conn, &buf[..n]).unwrap();
        let mut me = Self {
            reactor,
            conn,
            client,
            seq: 0,
            events: Vec::new(),
            timeout_ns: if wait == WaitMode::Blocking {
                1_000_000_000
            } else {
                0
            },
        };
        me.await_packets(|news, _| matches!(news, SessionNews::LoggedIn { .. }));
        me
    }

    fn await_packets(&mut self, mut done: impl FnMut(SessionNews, bool) -> bool) {
        loop {
            self.events.clear();
            self.reactor
                .poll(0, self.timeout_ns, &mut self.events)
                .unwrap();
            while let Some(f) = frame(self.reactor.received(self.conn), 2048).unwrap() {
                let (t, len) = (f.packet_type, f.len);
                let mut payload = [0u8; 256];
                payload[..f.payload.len()].copy_from_slice(f.payload);
                let plen = f.payload.len();
                self.reactor.consume(self.conn, len);
                let mut accepted = false;
                let news = self
                    .client
                    .on_packet(0, t, &payload[..plen], &mut |o| {
                        accepted |= matches!(o.kind, OutcomeKind::Accepted { .. })
                    })
                    .unwrap();
                if done(news, accepted) {
                    return;
                }
            }
        }
    }
}

impl<T: SocketTransport> Contender for Keel<T> {
    fn round_trip(&mut self) -> bool {
        let mut buf = [0u8; 128];
        let n = next_order(&mut self.client, &mut self.seq, &mut buf);
        self.reactor.send(self.conn, &buf[..n]).unwrap();
        self.await_packets(|_, accepted| accepted);
        true
    }
}

/// A `std::net` client: blocking reads, or (`busy`) non-blocking reads in a spin loop — the
/// raw-socket client, through the same venue.
#[allow(missing_debug_implementations)] // a benchmark contender
pub struct StdBlocking {
    stream: TcpStream,
    client: OuchClient,
    seq: u64,
    buf: Vec<u8>,
    busy: bool,
}

impl StdBlocking {
    /// Connected to the venue at `addr` and logged in as `name`; `busy`: spin on reads.
    pub fn connect(addr: SocketAddr, name: &str, busy: bool) -> Self {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut client = client(name);
        let mut out = [0u8; 128];
        let n = client.encode_login(&mut out).unwrap();
        stream.write_all(&out[..n]).unwrap();
        let mut buf = vec![0u8; 4096];
        let mut len = 0;
        loop {
            len += stream.read(&mut buf[len..]).unwrap();
            if let Some(f) = frame(&buf[..len], 2048).unwrap() {
                client
                    .on_packet(0, f.packet_type, f.payload, &mut |_| {})
                    .unwrap();
                break;
            }
        }
        stream.set_nonblocking(busy).unwrap();
        Self {
            stream,
            client,
            seq: 0,
            buf,
            busy,
        }
    }
}

impl Contender for StdBlocking {
    fn round_trip(&mut self) -> bool {
        let mut out = [0u8; 128];
        let n = next_order(&mut self.client, &mut self.seq, &mut out);
        self.stream.write_all(&out[..n]).unwrap();
        let (mut len, mut used) = (0, 0);
        loop {
            len += match self.stream.read(&mut self.buf[len..]) {
                Ok(n) => n,
                Err(e) if self.busy && e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::hint::spin_loop();
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            if take_packets(&mut self.client, &self.buf[..len], &mut used) {
                return true;
            }
        }
    }
}
