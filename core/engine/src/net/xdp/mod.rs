//! The AF_XDP transport ([`XdpReactor`], `transport = "af_xdp"`): kernel bypass for the venue
//! links. keel's XDP program ([`bpf`]) sends the frames addressed to keel's own IPv4 address
//! on one queue of one interface into an AF_XDP socket ([`sys`]); smoltcp, a userspace TCP/IP
//! stack, runs ARP, IPv4 and TCP over it; this module gives its connections the same
//! [`Transport`](super::Transport) behaviour as the io_uring and epoll transports (slots and
//! generations, a receive buffer per slot, all-or-nothing sends, the same events).
//!
//! keel's address is its own, not the kernel's: the kernel keeps the interface and every
//! frame not addressed to keel (its own address, SSH, other processes), and keel answers ARP
//! and ICMP echo for its address. A busy-polling pass that finds nothing makes no system call
//! (the rings are shared memory); sending makes one `sendto` per pass in copy mode (the
//! kernel's cue to send), none in zero-copy mode unless the driver asks.
//!
//! What it does not do: IPv6, IP fragments, more than one queue per process, TLS (market data
//! over TLS needs a socket transport). Its TCP is smoltcp's (docs/architecture.md, "The AF_XDP
//! transport"): Nagle off and no delayed ACK on every connection, a retransmission timeout
//! between 10 ms and 10 s (initially about 700 ms), no SACK.
//!
//! Nothing is allocated after [`XdpReactor::new`]: the UMEM, the socket table, every socket's
//! buffers, the slot buffers and the event queues are sized there.

#![allow(unsafe_code)]

mod bpf;
pub(crate) mod config;
pub mod netns;
mod sys;
#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use smoltcp::iface::{Config as IfaceConfig, Interface, SocketHandle, SocketSet, SocketStorage};
use smoltcp::phy::{Checksum, Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};

use super::{
    CloseReason, ConnId, ListenerId, NetError, NetEvent, NetStats, ReactorConfig, WaitMode,
    CONNS_MAX,
};
pub use config::{IfName, XdpAttach, XdpConfig, XdpCopy, XdpError};
pub use sys::XskKernelStats;

/// Listeners per reactor (the venue side's tests; an engine's links only connect).
pub const LISTENERS_MAX: u32 = 4;
/// Free slots one listener keeps listening at once: the handshakes it can take at the same
/// moment (a kernel's listen backlog). A connect takes a listening slot when no other is free.
pub const LISTEN_BACKLOG: u32 = 64;
/// How long a locally closed connection may take to finish its FIN exchange before its
/// socket is aborted and its slot reused.
const DRAIN_MAX_MS: i64 = 2_000;
/// How long a connect may wait for the peer's SYN-ACK before it fails with ETIMEDOUT (the
/// kernel tries for minutes; a venue link would rather reconnect with its own backoff).
pub const CONNECT_TIMEOUT_MS: i64 = 5_000;
/// How long a listening slot may sit in SYN-RECEIVED (a handshake whose last ACK never
/// comes: a SYN flood) before it listens again.
const HANDSHAKE_TIMEOUT: smoltcp::time::Duration = smoltcp::time::Duration::from_secs(3);
/// Transmit frames kept for the stack's own segments: replies made while receiving (ACKs,
/// RSTs, ARP and ICMP answers) may not take the last of them, so a flood of segments that
/// each ask for a reply cannot starve keel's data.
const TX_RESERVE_DIVISOR: usize = 8;

impl From<XdpError> for NetError {
    fn from(e: XdpError) -> Self {
        NetError::Xdp(e)
    }
}

/// AF_XDP counters beyond [`NetStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames taken from the receive ring.
    pub rx_frames: u64,
    /// Frames put on the transmit ring.
    pub tx_frames: u64,
    /// Frames the stack wrote when no transmit frame was free: dropped, sent again by TCP.
    pub tx_dropped: u64,
    /// The kernel's own counters for the socket.
    pub kernel: XskKernelStats,
}

/// The AF_XDP socket as smoltcp's device: received frames go back to the fill ring once read;
/// transmitted frames come back through the completion ring.
struct Link {
    xsk: sys::Xsk,
    /// Frames this pass may still take from the receive ring.
    budget: u32,
    caps: DeviceCapabilities,
    /// Where a reply is written when no transmit frame is free (then dropped, counted).
    scratch: Box<[u8]>,
}

struct LinkRx<'a> {
    rx: &'a mut sys::RxHalf,
    desc: sys::Desc,
}

struct LinkTx<'a> {
    tx: &'a mut sys::TxHalf,
    scratch: &'a mut [u8],
    /// Free frames this token may not take (the reserve, for a reply made while receiving).
    reserve: usize,
}

impl RxToken for LinkRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(self.rx.bytes(self.desc));
        self.rx.recycle(self.desc);
        r
    }
}

impl TxToken for LinkTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        self.tx.send(len, f, self.scratch, self.reserve)
    }
}

impl Device for Link {
    type RxToken<'a> = LinkRx<'a>;
    type TxToken<'a> = LinkTx<'a>;

    fn receive(
        &mut self,
        _now: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.budget == 0 {
            return None;
        }
        let desc = self.xsk.rx.next()?;
        self.budget -= 1;
        self.xsk.reclaim();
        let sys::Xsk { rx, tx, .. } = &mut self.xsk;
        Some((
            LinkRx { rx, desc },
            LinkTx {
                reserve: tx.frames_total() / TX_RESERVE_DIVISOR,
                tx,
                scratch: &mut self.scratch,
            },
        ))
    }

    fn transmit(&mut self, _now: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        if self.xsk.tx.free_frames() == 0 {
            self.xsk.reclaim();
            if self.xsk.tx.free_frames() == 0 {
                return None; // the stack keeps the segment and tries again next pass
            }
        }
        Some(LinkTx {
            tx: &mut self.xsk.tx,
            scratch: &mut self.scratch,
            reserve: 0,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// Where a slot is (a table in [`XdpReactor::scan_slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    /// SYN sent at `since_ms`.
    Connecting {
        since_ms: i64,
    },
    /// Established; its owner reads and writes.
    Open,
    /// Free, its socket listening for listener `listener` (a handshake lands here directly).
    Listening {
        listener: u32,
    },
    /// Closed for its owner (the id is stale), the socket finishing its FIN exchange.
    Draining {
        since_ms: i64,
    },
}

#[derive(Debug)]
struct Slot {
    handle: SocketHandle,
    generation: u32,
    state: SlotState,
    /// Unconsumed received bytes are `start..end` of the slot's receive buffer.
    start: u32,
    end: u32,
}

/// A listening port: the free slots it arms (`SlotState::Listening`) and a reserve socket of
/// its own that takes handshakes when no slot is free, to reset them and count the refusal.
#[derive(Debug)]
struct Listener {
    port: u16,
    reserve: SocketHandle,
}

/// The AF_XDP transport: one AF_XDP socket on one queue, keel's XDP program on the interface,
/// smoltcp's TCP over it. See the module's documentation.
pub struct XdpReactor {
    link: Link,
    iface: Interface,
    sockets: SocketSet<'static>,
    slots: Box<[Slot]>,
    free: Vec<u32>,
    /// Receive buffers, `recv_buffer_bytes` per slot.
    buffers: Box<[u8]>,
    listeners: Vec<Listener>,
    /// Reserve sockets for listeners not yet created.
    spares: Vec<SocketHandle>,
    /// Events of calls made between polls (a local close, a connect refused at once).
    pending: Vec<NetEvent>,
    config: ReactorConfig,
    address: Ipv4Addr,
    next_port: u16,
    stats: NetStats,
    origin: std::time::Instant,
    /// Dropped last: the link's descriptor; closing it detaches the program.
    _attached: bpf::Attached,
}

impl std::fmt::Debug for XdpReactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpReactor")
            .field("xsk", &self.link.xsk)
            .field("address", &self.address)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The checked settings.
struct Checked {
    interface: IfName,
    address: Ipv4Addr,
    prefix: u8,
}

fn check(config: &ReactorConfig) -> Result<Checked, NetError> {
    if config.conns_max > CONNS_MAX {
        return Err(NetError::TooManyConnections {
            conns_max: config.conns_max,
            limit: CONNS_MAX,
        });
    }
    let x = &config.xdp;
    x.validate()?;
    let interface = x
        .interface
        .ok_or(XdpError::NotConfigured { key: "interface" })?;
    let (address, prefix) = x
        .address
        .ok_or(XdpError::NotConfigured { key: "address" })?;
    Ok(Checked {
        interface,
        address,
        prefix,
    })
}

impl XdpReactor {
    /// Opens the transport: checks the settings, looks the interface up, opens the AF_XDP
    /// socket and its UMEM, loads and attaches the XDP program, and sizes every socket and
    /// buffer. Each refusal is a typed error naming the cause (docs/config.md,
    /// "[engine.af_xdp]").
    pub fn new(config: ReactorConfig) -> Result<Self, NetError> {
        let c = check(&config)?;
        let x = config.xdp;
        let buffers = super::socket::slot_buffers(&config)?;
        let facts = sys::interface(c.interface.as_str())?;
        if sys::kernel_has_address(c.interface.as_str(), c.address) {
            return Err(NetError::Xdp(XdpError::KernelsAddress {
                address: c.address,
                interface: c.interface.as_str().to_string(),
            }));
        }
        // The kernel keeps XDP_PACKET_HEADROOM (256 bytes) at the start of every frame it
        // receives into: a frame holds at most frame_bytes - 256 bytes of packet.
        if facts.mtu + 14 + 256 > x.frame_bytes {
            return Err(NetError::Xdp(XdpError::BadConfig {
                key: "frame_bytes",
                value: x.frame_bytes.to_string(),
                why: "smaller than the interface's MTU plus its 14-byte Ethernet header plus the \
                      kernel's 256-byte headroom (2048 holds an MTU of 1778, 4096 one of 3826)",
            }));
        }
        // The program first: an interface that has one already (another keel) is refused
        // with that cause before any socket is bound. Until the socket is registered below,
        // the program passes keel's frames to the kernel, which drops them.
        let attached = bpf::attach(
            c.interface.as_str(),
            facts.index,
            x.queue,
            c.address,
            x.attach,
        )?;
        let xsk = sys::Xsk::open(sys::XskParams {
            ifindex: facts.index,
            queue: x.queue,
            frames: x.frames,
            frame_bytes: x.frame_bytes,
            ring_entries: x.ring_entries,
            copy: x.copy,
        })?;
        attached.register(x.queue, xsk.fd())?;
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = (facts.mtu as usize + 14).min(x.frame_bytes as usize);
        if !x.verify_checksums {
            caps.checksum.ipv4 = Checksum::Tx;
            caps.checksum.tcp = Checksum::Tx;
            caps.checksum.icmpv4 = Checksum::Tx;
        }
        let mut link = Link {
            xsk,
            budget: 0,
            caps,
            scratch: vec![0u8; x.frame_bytes as usize].into_boxed_slice(),
        };
        #[allow(clippy::disallowed_methods)] // the stack's own clock: a driver's edge
        let origin = std::time::Instant::now();
        let mac = x.mac.unwrap_or(facts.mac);
        let mut iface_config = IfaceConfig::new(HardwareAddress::Ethernet(EthernetAddress(mac)));
        iface_config.random_seed = seed();
        let mut iface = Interface::new(iface_config, &mut link, smoltcp::time::Instant::ZERO);
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(c.address), c.prefix));
        });
        if let Some(gateway) = x.gateway {
            let _ = iface.routes_mut().add_default_ipv4_route(gateway);
        }
        let (sockets, handles) = Self::sockets(&config);
        let (slot_handles, spares) = handles.split_at(config.conns_max as usize);
        Ok(Self {
            link,
            iface,
            sockets,
            slots: slot_handles
                .iter()
                .map(|&handle| Slot {
                    handle,
                    generation: 0,
                    state: SlotState::Free,
                    start: 0,
                    end: 0,
                })
                .collect(),
            free: (0..config.conns_max).rev().collect(),
            buffers,
            listeners: Vec::with_capacity(LISTENERS_MAX as usize),
            spares: spares.to_vec(),
            pending: Vec::with_capacity((config.conns_max + LISTENERS_MAX) as usize),
            address: c.address,
            // A different first port on every start: a restart does not reuse the tuples the
            // venue may still hold for the connections of the run before.
            next_port: x.local_ports.0
                + (seed() % (u64::from(x.local_ports.1 - x.local_ports.0) + 1)) as u16,
            stats: NetStats::default(),
            origin,
            config,
            _attached: attached,
        })
    }

    /// Every socket the transport will ever use: one per slot and a reserve per listener,
    /// each with its buffers (slots first: the stack offers a SYN to the first socket
    /// listening on its port, so a free slot takes it before a reserve does).
    fn sockets(config: &ReactorConfig) -> (SocketSet<'static>, Vec<SocketHandle>) {
        let n = (config.conns_max + LISTENERS_MAX) as usize;
        let mut set = SocketSet::new((0..n).map(|_| SocketStorage::EMPTY).collect::<Vec<_>>());
        let handles = (0..n)
            .map(|_| {
                let rx = tcp::SocketBuffer::new(vec![0u8; config.recv_buffer_bytes as usize]);
                let tx = tcp::SocketBuffer::new(vec![0u8; config.send_buffer_bytes as usize]);
                let mut s = tcp::Socket::new(rx, tx);
                s.set_nagle_enabled(false);
                s.set_ack_delay(None);
                set.add(s)
            })
            .collect();
        (set, handles)
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// AF_XDP counters, the kernel's included (one `getsockopt`: not for every pass).
    pub fn xdp_stats(&self) -> XdpStats {
        XdpStats {
            rx_frames: self.link.xsk.rx.frames,
            tx_frames: self.link.xsk.tx.frames,
            tx_dropped: self.link.xsk.tx.dropped,
            kernel: self.link.xsk.kernel_stats(),
        }
    }

    /// keel's address on the link.
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    fn now(&self) -> smoltcp::time::Instant {
        smoltcp::time::Instant::from_micros(self.origin.elapsed().as_micros() as i64)
    }

    fn now_ms(&self) -> i64 {
        self.origin.elapsed().as_millis() as i64
    }

    fn tcp(&mut self, handle: SocketHandle) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(handle)
    }

    /// The slot of a live id, or `None` for a stale one.
    fn slot_of(&self, conn: ConnId) -> Option<usize> {
        let i = conn.slot as usize;
        let s = self.slots.get(i)?;
        (s.generation == conn.generation
            && matches!(s.state, SlotState::Connecting { .. } | SlotState::Open))
        .then_some(i)
    }

    fn id(&self, slot: usize) -> ConnId {
        ConnId::new(slot as u32, self.slots[slot].generation)
    }

    /// Takes a free slot for a new connection (a new generation). With none free, a slot
    /// whose closed connection is still finishing its FIN exchange is taken (its socket reset):
    /// its owner was told `Closed` already, and a new connection matters more than the
    /// politeness of an old one's ending.
    fn take_slot(&mut self) -> Option<usize> {
        if self.free.is_empty() {
            // A listening slot first (its listener arms another later), then a draining one.
            let spare = self
                .slots
                .iter()
                .position(|s| matches!(s.state, SlotState::Listening { .. }))
                .or_else(|| {
                    self.slots
                        .iter()
                        .position(|s| matches!(s.state, SlotState::Draining { .. }))
                })?;
            let handle = self.slots[spare].handle;
            self.tcp(handle).abort();
            self.free_slot(spare);
        }
        let i = self.free.pop()? as usize;
        let s = &mut self.slots[i];
        s.generation = s.generation.wrapping_add(1);
        s.start = 0;
        s.end = 0;
        Some(i)
    }

    fn free_slot(&mut self, i: usize) {
        self.slots[i].state = SlotState::Free;
        self.slots[i].start = 0;
        self.slots[i].end = 0;
        self.free.push(i as u32);
    }

    /// A local port no connection or listener of this transport holds.
    fn local_port(&mut self) -> Option<u16> {
        let (first, last) = self.config.xdp.local_ports;
        let span = u32::from(last - first) + 1;
        for _ in 0..span {
            let port = self.next_port;
            self.next_port = if port >= last { first } else { port + 1 };
            if !self.port_in_use(port) {
                return Some(port);
            }
        }
        None // every port taken (more connections than ports)
    }

    /// Whether `ip` is in keel's prefix (reachable without a gateway).
    fn on_link(&self, ip: Ipv4Addr) -> bool {
        let (address, prefix) = self.config.xdp.address.unwrap_or((self.address, 32));
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        u32::from(ip) & mask == u32::from(address) & mask
    }

    fn port_in_use(&self, port: u16) -> bool {
        self.listeners.iter().any(|l| l.port == port)
            || self.slots.iter().any(|s| {
                s.state != SlotState::Free
                    && self
                        .sockets
                        .get::<tcp::Socket>(s.handle)
                        .local_endpoint()
                        .is_some_and(|e| e.port == port)
            })
    }

    /// Listens on `addr` (keel's address or 0.0.0.0; port 0 takes one from `local_ports`).
    pub fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
        let SocketAddr::V4(v4) = addr else {
            return Err(NetError::NotIpv4(addr));
        };
        let refused = |errno| NetError::Listen {
            addr,
            source: std::io::Error::from_raw_os_error(errno),
        };
        if !(v4.ip().is_unspecified() || *v4.ip() == self.address) {
            return Err(refused(libc::EADDRNOTAVAIL));
        }
        let Some(reserve) = self.spares.pop() else {
            return Err(refused(libc::EMFILE));
        };
        let port = match v4.port() {
            0 => match self.local_port() {
                Some(p) => p,
                None => {
                    self.spares.push(reserve);
                    return Err(refused(libc::EADDRINUSE));
                }
            },
            p if self.port_in_use(p) => {
                self.spares.push(reserve);
                return Err(refused(libc::EADDRINUSE));
            }
            p => p,
        };
        self.tcp(reserve).set_timeout(Some(HANDSHAKE_TIMEOUT));
        let _ = self.tcp(reserve).listen(port);
        self.listeners.push(Listener { port, reserve });
        self.arm(self.listeners.len() - 1);
        let id = ListenerId(self.listeners.len() as u32 - 1);
        Ok((id, SocketAddr::V4(SocketAddrV4::new(self.address, port))))
    }

    /// Starts connecting; `Connected` or `ConnectFailed` follows from `poll`.
    pub fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError> {
        let SocketAddr::V4(v4) = addr else {
            return Err(NetError::NotIpv4(addr));
        };
        let Some(i) = self.take_slot() else {
            return Err(NetError::NoFreeSlot {
                conns_max: self.config.conns_max,
            });
        };
        let conn = self.id(i);
        let ip = *v4.ip();
        let unreachable = ip.is_broadcast()
            || ip.is_multicast()
            || ip.is_unspecified()
            || v4.port() == 0
            || (self.config.xdp.gateway.is_none() && !self.on_link(ip));
        let port = if unreachable { None } else { self.local_port() };
        let Some(port) = port else {
            // Refused before a packet leaves (ENETUNREACH: no route from keel's address;
            // EADDRNOTAVAIL: every local port in use), said by the next poll. The queue of
            // such events is bounded by the slots: one more is refused now.
            self.free_slot(i);
            if self.pending.len() == self.pending.capacity() {
                return Err(NetError::NoFreeSlot {
                    conns_max: self.config.conns_max,
                });
            }
            let errno = if unreachable {
                libc::ENETUNREACH
            } else {
                libc::EADDRNOTAVAIL
            };
            self.pending.push(NetEvent::ConnectFailed { conn, errno });
            return Ok(conn);
        };
        let handle = self.slots[i].handle;
        let Self { iface, sockets, .. } = self;
        let socket = sockets.get_mut::<tcp::Socket>(handle);
        socket.abort();
        socket.set_timeout(None); // the connect's own deadline applies (CONNECT_TIMEOUT_MS)
        match socket.connect(
            iface.context(),
            IpEndpoint::new(IpAddress::Ipv4(ip), v4.port()),
            port,
        ) {
            Ok(()) => {
                self.slots[i].state = SlotState::Connecting {
                    since_ms: self.now_ms(),
                }
            }
            Err(_) => {
                // No source address for it (not reached with the checks above).
                self.free_slot(i);
                if self.pending.len() == self.pending.capacity() {
                    return Err(NetError::NoFreeSlot {
                        conns_max: self.config.conns_max,
                    });
                }
                self.pending.push(NetEvent::ConnectFailed {
                    conn,
                    errno: libc::ENETUNREACH,
                });
            }
        }
        Ok(conn)
    }

    /// Queues bytes, all or nothing.
    pub fn send(&mut self, conn: ConnId, bytes: &[u8]) -> Result<(), NetError> {
        let Some(i) = self
            .slot_of(conn)
            .filter(|&i| self.slots[i].state == SlotState::Open)
        else {
            return Err(NetError::NotOpen);
        };
        let handle = self.slots[i].handle;
        let socket = self.tcp(handle);
        if !socket.may_send() {
            return Err(NetError::NotOpen);
        }
        let free = socket.send_capacity() - socket.send_queue();
        if bytes.len() > free {
            return Err(NetError::SendBufferFull {
                len: bytes.len().min(u32::MAX as usize) as u32,
                free: free as u32,
            });
        }
        let n = socket.send_slice(bytes).unwrap_or(0);
        debug_assert_eq!(n, bytes.len(), "room checked above");
        self.stats.bytes_sent += n as u64;
        Ok(())
    }

    /// Bytes received and not yet consumed.
    pub fn received(&self, conn: ConnId) -> &[u8] {
        let Some(i) = self.slot_of(conn) else {
            return &[];
        };
        let s = &self.slots[i];
        let base = i * self.config.recv_buffer_bytes as usize;
        &self.buffers[base + s.start as usize..base + s.end as usize]
    }

    /// Drops the first `n` received bytes.
    pub fn consume(&mut self, conn: ConnId, n: usize) {
        let Some(i) = self.slot_of(conn) else {
            return;
        };
        let s = &mut self.slots[i];
        s.start = (s.start as usize).saturating_add(n).min(s.end as usize) as u32;
        if s.start == s.end {
            s.start = 0;
            s.end = 0;
        }
    }

    /// Closes a connection: `Closed { Local }` follows from the next poll. An open one sends
    /// its queued bytes and a FIN first.
    pub fn close(&mut self, conn: ConnId) {
        let Some(i) = self.slot_of(conn) else {
            return;
        };
        let handle = self.slots[i].handle;
        self.pending.push(NetEvent::Closed {
            conn,
            reason: CloseReason::Local,
        });
        match self.slots[i].state {
            SlotState::Connecting { .. } => {
                self.tcp(handle).abort();
                self.free_slot(i);
            }
            _ => {
                self.tcp(handle).close();
                self.slots[i].generation = self.slots[i].generation.wrapping_add(1);
                self.slots[i].state = SlotState::Draining {
                    since_ms: self.now_ms(),
                };
            }
        }
    }

    /// Bytes queued for `conn` and not yet acknowledged by the peer.
    pub fn send_pending(&self, conn: ConnId) -> u32 {
        match self.slot_of(conn) {
            Some(i) => self
                .sockets
                .get::<tcp::Socket>(self.slots[i].handle)
                .send_queue() as u32,
            None => 0,
        }
    }

    /// Runs the stack: frames in, segments out, the kernel told; then reports what changed.
    /// With `Blocking` and nothing to report, waits on the socket up to `timeout_ns` (or the
    /// stack's next timer) and runs once more.
    pub fn poll(
        &mut self,
        _now_ns: u64,
        timeout_ns: u64,
        events: &mut Vec<NetEvent>,
    ) -> Result<(), NetError> {
        let before = events.len();
        self.pass(events)?;
        if events.len() == before && self.config.wait == WaitMode::Blocking && timeout_ns > 0 {
            self.wait(timeout_ns);
            self.pass(events)?;
        }
        Ok(())
    }

    /// Hands queued bytes to the network now.
    pub fn flush(&mut self) -> Result<(), NetError> {
        let now = self.now();
        self.iface
            .poll_egress(now, &mut self.link, &mut self.sockets);
        self.kick()
    }

    fn kick(&mut self) -> Result<(), NetError> {
        self.stats.kernel_entries += u64::from(self.link.xsk.kick()?);
        if self.link.xsk.wake_fill() {
            self.stats.kernel_entries += 1;
        }
        Ok(())
    }

    fn pass(&mut self, events: &mut Vec<NetEvent>) -> Result<(), NetError> {
        self.link.xsk.reclaim();
        self.link.budget = self.config.xdp.rx_batch;
        let now = self.now();
        self.iface.poll(now, &mut self.link, &mut self.sockets);
        // Every event of the pass is reported even when the kernel refused the send cue; the
        // error is returned after them.
        let kicked = self.kick();
        events.append(&mut self.pending);
        let now_ms = self.now_ms();
        for i in 0..self.slots.len() {
            self.scan_slot(i, now_ms, events);
        }
        for l in 0..self.listeners.len() {
            self.scan_listener(l, events);
        }
        kicked
    }

    /// Sleeps until a frame arrives, the timeout, or the stack's next timer.
    fn wait(&mut self, timeout_ns: u64) {
        if self.link.xsk.rx_ready() || self.link.xsk.tx.queued > 0 {
            return; // work waiting: no sleep
        }
        let now = self.now();
        let timer_ms = self
            .iface
            .poll_delay(now, &self.sockets)
            .map_or(u64::MAX, |d| d.total_millis());
        let ms = (timeout_ns.div_ceil(1_000_000))
            .min(timer_ms)
            .min(i32::MAX as u64) as i32;
        let mut fd = libc::pollfd {
            fd: self.link.xsk.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        self.stats.kernel_entries += 1;
        // SAFETY: poll(2) on one live pollfd.
        unsafe { libc::poll(&mut fd, 1, ms) };
    }

    /// One slot's row of the table: what its socket's state means for its owner.
    fn scan_slot(&mut self, i: usize, now_ms: i64, events: &mut Vec<NetEvent>) {
        let handle = self.slots[i].handle;
        let state = self.tcp(handle).state();
        use tcp::State as T;
        match (self.slots[i].state, state) {
            (SlotState::Free, _) => {}
            (SlotState::Listening { .. }, T::Listen | T::SynReceived) => {}
            (SlotState::Listening { listener }, T::Closed) => {
                // A handshake reset half-way: listen again.
                let port = self.listeners[listener as usize].port;
                let _ = self.tcp(handle).listen(port);
            }
            (SlotState::Listening { listener }, _) => {
                // A handshake finished on this slot: it is the new connection.
                self.tcp(handle).set_timeout(None);
                let s = &mut self.slots[i];
                s.generation = s.generation.wrapping_add(1);
                s.state = SlotState::Open;
                s.start = 0;
                s.end = 0;
                self.stats.accepted += 1;
                events.push(NetEvent::Accepted {
                    listener: ListenerId(listener),
                    conn: self.id(i),
                });
                self.read(i, events);
            }
            (SlotState::Connecting { since_ms }, T::SynSent | T::SynReceived)
                if now_ms - since_ms >= CONNECT_TIMEOUT_MS =>
            {
                // No answer (a host that is down, no ARP reply, every SYN lost): given up, as
                // the kernel gives up, but sooner.
                self.tcp(handle).abort();
                events.push(NetEvent::ConnectFailed {
                    conn: self.id(i),
                    errno: libc::ETIMEDOUT,
                });
                self.free_slot(i);
            }
            (SlotState::Connecting { .. }, T::SynSent | T::SynReceived) => {}
            (SlotState::Connecting { .. }, T::Closed) => {
                // Refused (RST) or given up by the stack.
                events.push(NetEvent::ConnectFailed {
                    conn: self.id(i),
                    errno: libc::ECONNREFUSED,
                });
                self.free_slot(i);
            }
            (SlotState::Connecting { .. }, _) => {
                self.slots[i].state = SlotState::Open;
                events.push(NetEvent::Connected { conn: self.id(i) });
                self.read(i, events);
            }
            (SlotState::Open, _) => {
                let read = self.read(i, events);
                let socket = self.tcp(handle);
                // The peer's FIN or RST, once every byte before it was read (and announced
                // in an earlier pass, so the owner could consume it).
                if read == 0 && !socket.may_recv() && socket.recv_queue() == 0 {
                    let reason = if state == T::Closed {
                        CloseReason::Reset
                    } else {
                        CloseReason::PeerClosed
                    };
                    if reason == CloseReason::Reset {
                        self.stats.resets += 1;
                    }
                    events.push(NetEvent::Closed {
                        conn: self.id(i),
                        reason,
                    });
                    self.tcp(handle).close();
                    self.slots[i].generation = self.slots[i].generation.wrapping_add(1);
                    self.slots[i].state = SlotState::Draining { since_ms: now_ms };
                }
            }
            (SlotState::Draining { .. }, T::Closed | T::TimeWait) => {
                self.tcp(handle).abort();
                self.free_slot(i);
            }
            (SlotState::Draining { since_ms }, _) if now_ms - since_ms > DRAIN_MAX_MS => {
                // The peer never finished the close: reset it.
                self.tcp(handle).abort();
                self.free_slot(i);
            }
            (SlotState::Draining { .. }, _) => {}
        }
    }

    /// Moves what the stack received into the slot's buffer, while it has room; announces
    /// new bytes once. Returns the bytes moved.
    fn read(&mut self, i: usize, events: &mut Vec<NetEvent>) -> usize {
        let cap = self.config.recv_buffer_bytes as usize;
        let base = i * cap;
        let (start, end) = (self.slots[i].start as usize, self.slots[i].end as usize);
        let (start, end) = if start > 0 && end == cap {
            self.buffers.copy_within(base + start..base + end, base);
            (0, end - start)
        } else {
            (start, end)
        };
        let handle = self.slots[i].handle;
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        let mut n = 0;
        while end + n < cap && socket.can_recv() {
            match socket.recv_slice(&mut self.buffers[base + end + n..base + cap]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        self.slots[i].start = start as u32;
        self.slots[i].end = (end + n) as u32;
        if n > 0 {
            self.stats.bytes_received += n as u64;
            events.push(NetEvent::Readable { conn: self.id(i) });
        }
        n
    }

    /// A listener's row: a handshake its reserve socket took (no slot was listening) moves
    /// into a slot a closed connection is still draining (the reserve takes that slot's
    /// socket), or is reset and counted when every slot is in use; free slots are armed up to
    /// the backlog.
    fn scan_listener(&mut self, l: usize, events: &mut Vec<NetEvent>) {
        let Listener { port, reserve } = self.listeners[l];
        use tcp::State as T;
        match self.tcp(reserve).state() {
            T::Listen | T::SynReceived => {}
            // Listening again once the reset below has left (a pass later).
            T::Closed => {
                let _ = self.tcp(reserve).listen(port);
            }
            _ => match self.take_slot() {
                Some(i) => {
                    self.tcp(reserve).set_timeout(None);
                    self.listeners[l].reserve = self.slots[i].handle;
                    self.tcp(self.slots[i].handle)
                        .set_timeout(Some(HANDSHAKE_TIMEOUT));
                    self.slots[i].handle = reserve;
                    self.slots[i].state = SlotState::Open;
                    self.stats.accepted += 1;
                    events.push(NetEvent::Accepted {
                        listener: ListenerId(l as u32),
                        conn: self.id(i),
                    });
                    self.read(i, events);
                }
                None => {
                    self.tcp(reserve).abort();
                    self.stats.accept_refused += 1;
                }
            },
        }
        self.arm(l);
    }

    /// Puts free slots to listen for listener `l`, up to the backlog.
    fn arm(&mut self, l: usize) {
        let port = self.listeners[l].port;
        let armed = self
            .slots
            .iter()
            .filter(|s| s.state == SlotState::Listening { listener: l as u32 })
            .count();
        for _ in armed..LISTEN_BACKLOG as usize {
            let Some(i) = self.free.pop() else {
                return;
            };
            let handle = self.slots[i as usize].handle;
            let socket = self.tcp(handle);
            socket.set_timeout(Some(HANDSHAKE_TIMEOUT));
            let _ = socket.listen(port);
            self.slots[i as usize].state = SlotState::Listening { listener: l as u32 };
        }
    }
}

/// A seed for the stack's initial sequence numbers and ports: the clock's nanoseconds and the
/// process id (not secret; different on every start).
#[allow(clippy::disallowed_methods)] // the start-up seed, not loop time
fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}
