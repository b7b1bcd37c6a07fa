//! A simulated network for deterministic tests: in-memory connections with seeded delays,
//! connection cuts and refused connects, driven by simulated time. Two or more endpoints share
//! one [`SimWorld`]; each implements [`keel::net::Transport`], so the venue link and the venue
//! server run unchanged on it. Bytes within a connection keep their order (as TCP does); a
//! lost or reordered message shows up the way it does on TCP: as a cut connection.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;

use keel::net::{CloseReason, ConnId, ListenerId, NetError, NetEvent, Transport};
use keel::rng::{Rng64, SplitMix64};

/// Fault settings of the simulated network, changeable at any time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimFaults {
    /// Smallest one-way delay of a chunk.
    pub delay_min_ns: u64,
    /// Largest one-way delay of a chunk (delays never reorder a connection's bytes).
    pub delay_max_ns: u64,
    /// Refuse every new connection.
    pub refuse_connects: bool,
    /// A gateway that saturates: connection attempts are decided at the end of each window of
    /// `window_ns`; if more than `attempts_max` arrived in it, every one of them fails (the
    /// handshakes time out together), otherwise all succeed.
    pub overload: Option<Overload>,
}

/// See [`SimFaults::overload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overload {
    /// Most connection attempts one window survives.
    pub attempts_max: u32,
    /// Window length.
    pub window_ns: u64,
}

#[derive(Debug)]
struct Pipe {
    client: usize,
    server: usize,
    /// The server's listener the connection came in on.
    listener: ListenerId,
    /// (deliver at, bytes), in order, towards the server / the client.
    to_server: VecDeque<(u64, Vec<u8>)>,
    to_client: VecDeque<(u64, Vec<u8>)>,
    open: bool,
}

/// The shared state of a simulated network.
#[derive(Debug)]
pub struct SimWorld {
    /// (address, endpoint, that endpoint's listener id).
    listeners: Vec<(SocketAddr, usize, ListenerId)>,
    pipes: Vec<Pipe>,
    /// Events waiting for each endpoint.
    inbox: Vec<VecDeque<NetEvent>>,
    rng: SplitMix64,
    now_ns: u64,
    /// Fault settings.
    pub faults: SimFaults,
    /// Connections cut by fault injection.
    pub cuts: u64,
    /// Connection attempts waiting for their window to end: (window, pipe).
    attempts: Vec<(u64, usize)>,
    /// Attempts that failed because their window was overloaded.
    pub overload_failures: u64,
}

impl SimWorld {
    /// An empty network seeded with `seed`.
    pub fn new(seed: u64) -> Rc<RefCell<Self>> {
        Rc::new(RefCell::new(Self {
            listeners: Vec::new(),
            pipes: Vec::new(),
            inbox: Vec::new(),
            rng: SplitMix64::new(seed),
            now_ns: 0,
            faults: SimFaults::default(),
            cuts: 0,
            attempts: Vec::new(),
            overload_failures: 0,
        }))
    }

    /// A new endpoint on `world`.
    pub fn endpoint(world: &Rc<RefCell<Self>>) -> SimEndpoint {
        let id = {
            let mut w = world.borrow_mut();
            w.inbox.push(VecDeque::new());
            w.inbox.len() - 1
        };
        SimEndpoint {
            world: Rc::clone(world),
            id,
            buffers: Vec::new(),
        }
    }

    /// Cuts every open connection (both ends see a reset): a venue restart, a network blip.
    pub fn cut_all(&mut self) {
        for i in 0..self.pipes.len() {
            self.cut(i);
        }
    }

    /// Cuts one connection.
    pub fn cut(&mut self, pipe: usize) {
        let p = &mut self.pipes[pipe];
        if !p.open {
            return;
        }
        p.open = false;
        p.to_client.clear();
        p.to_server.clear();
        let (c, s) = (p.client, p.server);
        self.cuts += 1;
        let id = ConnId::new(pipe as u32, 0);
        self.inbox[c].push_back(NetEvent::Closed {
            conn: id,
            reason: CloseReason::Reset,
        });
        self.inbox[s].push_back(NetEvent::Closed {
            conn: id,
            reason: CloseReason::Reset,
        });
    }

    /// Decides the connection attempts whose overload window has ended.
    fn decide_attempts(&mut self) {
        let Some(overload) = self.faults.overload else {
            return;
        };
        let current = self.now_ns / overload.window_ns;
        let due: Vec<(u64, usize)> = self
            .attempts
            .iter()
            .copied()
            .filter(|(w, _)| *w < current)
            .collect();
        self.attempts.retain(|(w, _)| *w >= current);
        for &(window, pipe) in &due {
            let in_window = due.iter().filter(|(w, _)| *w == window).count() as u32;
            let id = ConnId::new(pipe as u32, 0);
            let (client, server) = (self.pipes[pipe].client, self.pipes[pipe].server);
            if in_window > overload.attempts_max {
                self.overload_failures += 1;
                self.inbox[client].push_back(NetEvent::ConnectFailed {
                    conn: id,
                    errno: 110,
                });
            } else {
                self.pipes[pipe].open = true;
                let listener = self.pipes[pipe].listener;
                self.inbox[server].push_back(NetEvent::Accepted { listener, conn: id });
                self.inbox[client].push_back(NetEvent::Connected { conn: id });
            }
        }
    }

    /// Open connections.
    pub fn open_connections(&self) -> usize {
        self.pipes.iter().filter(|p| p.open).count()
    }

    fn delay(&mut self) -> u64 {
        let f = self.faults;
        f.delay_min_ns
            + self
                .rng
                .below_inclusive(f.delay_max_ns.saturating_sub(f.delay_min_ns))
    }
}

/// One endpoint (an engine's or a venue's view of the network).
#[derive(Debug)]
pub struct SimEndpoint {
    world: Rc<RefCell<SimWorld>>,
    id: usize,
    /// Received bytes per pipe index.
    buffers: Vec<Vec<u8>>,
}

impl SimEndpoint {
    fn buffer(&mut self, pipe: usize) -> &mut Vec<u8> {
        if self.buffers.len() <= pipe {
            self.buffers.resize_with(pipe + 1, Vec::new);
        }
        &mut self.buffers[pipe]
    }
}

impl Transport for SimEndpoint {
    /// Any address: the simulated network has no ports to run out of (port 0 stays 0).
    fn listen(&mut self, addr: SocketAddr) -> Result<(ListenerId, SocketAddr), NetError> {
        let mut w = self.world.borrow_mut();
        let id = ListenerId(w.listeners.iter().filter(|l| l.1 == self.id).count() as u32);
        w.listeners.push((addr, self.id, id));
        Ok((id, addr))
    }
    fn connect(&mut self, addr: SocketAddr) -> Result<ConnId, NetError> {
        let mut w = self.world.borrow_mut();
        let pipe = w.pipes.len();
        let id = ConnId::new(pipe as u32, 0);
        let server = w
            .listeners
            .iter()
            .find(|(a, _, _)| *a == addr)
            .map(|(_, s, l)| (*s, *l));
        match server {
            Some((server, listener))
                if !w.faults.refuse_connects && w.faults.overload.is_some() =>
            {
                let window = w.now_ns / w.faults.overload.expect("checked").window_ns;
                w.pipes.push(Pipe {
                    client: self.id,
                    server,
                    listener,
                    to_server: VecDeque::new(),
                    to_client: VecDeque::new(),
                    open: false,
                });
                w.attempts.push((window, pipe));
            }
            Some((server, listener)) if !w.faults.refuse_connects => {
                w.pipes.push(Pipe {
                    client: self.id,
                    server,
                    listener,
                    to_server: VecDeque::new(),
                    to_client: VecDeque::new(),
                    open: true,
                });
                w.inbox[server].push_back(NetEvent::Accepted { listener, conn: id });
                w.inbox[self.id].push_back(NetEvent::Connected { conn: id });
            }
            _ => {
                w.pipes.push(Pipe {
                    client: self.id,
                    server: self.id,
                    listener: ListenerId(0),
                    to_server: VecDeque::new(),
                    to_client: VecDeque::new(),
                    open: false,
                });
                w.inbox[self.id].push_back(NetEvent::ConnectFailed {
                    conn: id,
                    errno: 111,
                });
            }
        }
        Ok(id)
    }

    fn send(&mut self, conn: ConnId, bytes: &[u8]) -> Result<(), NetError> {
        let mut w = self.world.borrow_mut();
        let pipe = conn.slot() as usize;
        if !w.pipes.get(pipe).is_some_and(|p| p.open) {
            return Err(NetError::NotOpen);
        }
        let now = w.now_ns;
        let delay = w.delay();
        let me = self.id;
        let p = &mut w.pipes[pipe];
        let queue = if p.client == me {
            &mut p.to_server
        } else {
            &mut p.to_client
        };
        // Never earlier than what is already queued: TCP keeps order.
        let due = queue
            .back()
            .map_or(now + delay, |(last, _)| (*last).max(now + delay));
        queue.push_back((due, bytes.to_vec()));
        Ok(())
    }

    fn received(&self, conn: ConnId) -> &[u8] {
        self.buffers
            .get(conn.slot() as usize)
            .map_or(&[], Vec::as_slice)
    }

    fn consume(&mut self, conn: ConnId, n: usize) {
        self.buffer(conn.slot() as usize).drain(..n);
    }

    fn close(&mut self, conn: ConnId) {
        let mut w = self.world.borrow_mut();
        let pipe = conn.slot() as usize;
        if w.pipes.get(pipe).is_some_and(|p| p.open) {
            let p = &mut w.pipes[pipe];
            p.open = false;
            let other = if p.client == self.id {
                p.server
            } else {
                p.client
            };
            w.inbox[other].push_back(NetEvent::Closed {
                conn,
                reason: CloseReason::PeerClosed,
            });
            w.inbox[self.id].push_back(NetEvent::Closed {
                conn,
                reason: CloseReason::Local,
            });
        }
    }

    fn poll(
        &mut self,
        now_ns: u64,
        _timeout_ns: u64,
        events: &mut Vec<NetEvent>,
    ) -> Result<(), NetError> {
        let mut arrived: Vec<(usize, Vec<u8>)> = Vec::new();
        {
            let mut w = self.world.borrow_mut();
            w.now_ns = w.now_ns.max(now_ns);
            w.decide_attempts();
            let me = self.id;
            for (i, p) in w.pipes.iter_mut().enumerate() {
                let queue = if p.server == me && p.client != me {
                    &mut p.to_server
                } else if p.client == me {
                    &mut p.to_client
                } else {
                    continue;
                };
                while queue.front().is_some_and(|(due, _)| *due <= now_ns) {
                    let (_, bytes) = queue.pop_front().expect("checked");
                    arrived.push((i, bytes));
                }
            }
            events.extend(w.inbox[me].drain(..));
        }
        for (pipe, bytes) in arrived {
            self.buffer(pipe).extend_from_slice(&bytes);
            events.push(NetEvent::Readable {
                conn: ConnId::new(pipe as u32, 0),
            });
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), NetError> {
        Ok(())
    }
}
